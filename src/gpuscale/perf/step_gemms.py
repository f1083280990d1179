"""Forward GEMMs of one layer of each block kind, one micro-batch, on one GPU.

The block kinds are attention (QKV, MLA's or DeepSeek-V4's projections, output
projection; windowed layers with a shape of their own weighted by their share), dense
MLP, MoE (routed experts as a grouped GEMM over the local experts, shared experts,
LatentMoE's projections, the 16-bit router) and Mamba-2 (in_proj, out_proj); tensor
parallelism shrinks their per-GPU widths. Each comes with the elements of its inputs that
a low precision quantises. :mod:`gpuscale.perf.step` weighs them by the model's blocks and
composes the step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.catalog import Model
from gpuscale.perf.attn_kinds import attn_kinds
from gpuscale.perf.kernels import gemm_s
from gpuscale.perf.plan import FloatArrayT, Plans, Workload
from gpuscale.perf.transformer import (
    attn_dims,
    compressor_width,
    indexer_layers,
    kv_projections,
    kv_width_per_rank,
    layer_shapes,
    mla_kv_width,
)

FloatArray = FloatArrayT
Elems = tuple[FloatArray, FloatArray]  # the X and dY elements a low precision quantises


@dataclass(frozen=True)
class Gemms:
    """GEMMs on one GPU's micro-batch of ``tokens`` (per plan) at the rate ``peak``."""

    tokens: FloatArray
    peak: float
    sms: int
    cal: Calibration

    def __call__(self, *shapes: tuple[FloatArray | float, ...]) -> tuple[FloatArray, Elems]:
        """Forward seconds of GEMMs given as (M, N, K[, count]), and the elements of their
        inputs that a low precision quantises: the activations X (M x K), in forward, and
        the output gradients dY (M x N), in backward."""
        t = x_el = dy_el = np.zeros_like(self.tokens)
        for m_rows, n_cols, k_red, *count in shapes:
            c = count[0] if count else 1.0
            t = t + gemm_s(m_rows, n_cols, k_red, c, self.peak, self.sms, self.cal)
            x_el = x_el + c * np.asarray(m_rows) * np.asarray(k_red)
            dy_el = dy_el + c * np.asarray(m_rows) * np.asarray(n_cols)
        return t, (x_el, dy_el)


@dataclass(frozen=True)
class LayerGemms:
    """Forward seconds of one layer's GEMMs by block kind, per plan, and the elements each
    block's low precision quantises (``*_el``)."""

    attn: FloatArray
    attn_el: Elems
    dense_mlp: FloatArray
    dense_mlp_el: Elems
    moe: FloatArray
    """Routed and shared experts, LatentMoE's projections and the router."""
    moe_el: Elems
    shared: FloatArray
    """Of ``moe``, the shared experts."""
    mamba: FloatArray
    mamba_el: Elems
    kv_rank: FloatArray
    """The K (and the V) width a TP rank holds."""


def mamba_widths(m: Model) -> tuple[float, float, float]:
    """A Mamba-2 mixer's inner width, in_proj output width and conv channels (zeros for a
    model without Mamba-2 blocks)."""
    if m.mamba is None:
        return 0.0, 0.0, 0.0
    x = m.mamba
    return float(x.inner), float(x.in_proj_width), float(x.conv_channels)


def _gqa(m: Model, gemms: Gemms, tp: FloatArray) -> tuple[FloatArray, Elems, FloatArray]:
    """A GQA layer's QKV and output projections and the K (and V) width a TP rank holds:
    under more TP ranks than key/value heads each rank keeps one whole head; gated
    attention's Q projection also yields the output gate (q wide), a head-wise gate one
    value a head (Megatron-Bridge folds Step 3.5's into the QKV projection)."""
    q, _ = attn_dims(m)
    h = float(m.hidden)
    kv_rank = kv_width_per_rank(m, tp)
    qkv_n = (2.0 if m.attn_gate else 1.0) * q / tp + float(kv_projections(m)) * kv_rank
    if m.head_gate:
        qkv_n = qkv_n + m.heads / tp
    t, c = gemms((gemms.tokens, qkv_n, h), (gemms.tokens, h, q / tp))
    return t, c, kv_rank


def layer_gemms(w: Workload, p: Plans, gemms: Gemms, tp: FloatArray, mm16: float) -> LayerGemms:
    """The forward GEMMs of one layer of each block kind; ``mm16`` is the 16-bit GEMM rate
    (the router's)."""
    m = w.model
    sh = layer_shapes(m)
    tokens = gemms.tokens
    h = float(m.hidden)
    q, _ = attn_dims(m)
    gate = 2.0 if m.gated_mlp else 1.0
    # attention projections: QKV (or MLA's), then the output projection; the per-GPU
    # widths shrink with TP. kv_rank: the K (and the V) width a TP rank holds, as the QKV
    # GEMM writes it and the context-parallel ring passes it
    if m.compressed is not None:
        # DeepSeek-V4: from the hidden state the query latent, the K = V head and the
        # compressors' kv and gate projections (one KV head: whole on every TP rank), the
        # queries from the latent, the grouped o_a (its g groups split over TP) and o_b
        c, d = m.compressed, float(m.head_dim)
        kv_rank = np.full_like(tp, d)
        attn_t, attn_c = gemms(
            (tokens, c.q_lora_rank + d + compressor_width(m), h),
            (tokens, q / tp, float(c.q_lora_rank)),
            (tokens, float(c.o_lora_rank), q / c.o_groups, c.o_groups / tp),
            (tokens, h, c.o_groups * c.o_lora_rank / tp),
        )
    elif m.mla is None:
        # each kind of attention layer (Step 3.5's full and windowed ones), by its share
        kinds = [(n / max(m.attn_layers, 1), _gqa(v, gemms, tp)) for n, v in attn_kinds(m)]
        attn_t, attn_c, kv_rank = kinds[0][1]
        if len(kinds) > 1:
            zero = np.zeros_like(tokens)
            attn_t = sum((f * t for f, (t, _, _) in kinds), zero)
            x_el = sum((f * c[0] for f, (_, c, _) in kinds), zero)
            attn_c = (x_el, sum((f * c[1] for f, (_, c, _) in kinds), zero))
            kv_rank = sum((f * k for f, (_, _, k) in kinds), np.zeros_like(tp))
    else:
        # MLA's low-rank projections are costed as one QKV-shaped GEMM; its attention gets
        # up-projected per-head K and V (Megatron-Core hands Transformer Engine full heads)
        kv_rank = mla_kv_width(m) / 2.0 / tp
        # the output projection takes the heads' values: heads x v_head_dim wide
        o = float(m.heads * m.mla.v_head_dim)
        qkv_n = (sh.attn / h - o) / tp
        attn_t, attn_c = gemms((tokens, qkv_n, h), (tokens, h, o / tp))
    if m.sparse is not None:
        # a DSA indexer's projections (queries from MLA's query latent, its key, the head
        # weights) as one GEMM, whole on every TP rank, in the layers that run one
        share = indexer_layers(m) / m.attn_layers
        idx_t, idx_c = gemms((tokens, share * sh.indexer / h, h))
        attn_t, attn_c = attn_t + idx_t, (attn_c[0] + idx_c[0], attn_c[1] + idx_c[1])
    f_d = float(m.dense_ffn_hidden)
    dense_mlp_t, dense_mlp_c = gemms((tokens, gate * f_d / tp, h), (tokens, h, f_d / tp))
    mw = float(m.moe_width)  # LatentMoE's routed experts work in a narrower width
    if m.is_moe:
        # grouped GEMM over the E / EP local experts; tokens follow their experts
        f_e = float(m.ffn_hidden)
        local = m.num_experts / p.ep
        tok_e = tokens / tp * m.top_k * p.ep / m.num_experts
        f_s = float(m.shared_ffn_hidden)
        moe_t, moe_c = gemms(
            (tok_e, gate * f_e, mw, local),
            (tok_e, mw, f_e, local),
            *(((tokens, mw / tp, h), (tokens, h, mw / tp)) if m.moe_latent else ()),
        )
        shared_t, shared_c = gemms(
            *(((tokens, gate * f_s / tp, h), (tokens, h, f_s / tp)) if f_s else ())
        )
        moe_c = (moe_c[0] + shared_c[0], moe_c[1] + shared_c[1])
        # the router stays in 16-bit precision (a plain linear layer outside the TE modules)
        # on the sequence-parallel shard
        router_rows = np.where(p.sp, tokens / tp, tokens)
        router_t = gemm_s(router_rows, float(m.num_experts), h, 1.0, mm16, gemms.sms, gemms.cal)
        moe_t = moe_t + shared_t + router_t
    else:
        moe_t = shared_t = np.zeros_like(tokens)
        moe_c = (moe_t, moe_t)
    if m.mamba is not None:
        # Mamba-2 in_proj (z, x, B, C, dt; a Gated DeltaNet's beta too; heads and groups
        # split over TP) and out_proj
        d_in, in_w, _ = mamba_widths(m)
        mamba_t, mamba_c = gemms((tokens, in_w / tp, h), (tokens, h, d_in / tp))
    else:
        mamba_t = np.zeros_like(tokens)
        mamba_c = (mamba_t, mamba_t)
    return LayerGemms(
        attn=attn_t,
        attn_el=attn_c,
        dense_mlp=dense_mlp_t,
        dense_mlp_el=dense_mlp_c,
        moe=moe_t,
        moe_el=moe_c,
        shared=shared_t,
        mamba=mamba_t,
        mamba_el=mamba_c,
        kv_rank=kv_rank,
    )
