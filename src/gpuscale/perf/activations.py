"""Activation bytes one training layer stores for one micro-batch on one GPU, for the
backward.

Per layer and micro-batch (Korthikanti et al. 2022, arXiv 2205.05198, Table 2,
generalised to GQA and gated MLPs), s = sequence per GPU, b = micro-batch, t = TP:
  replicated across TP unless sequence parallel: 10 s b h (2 norms' inputs 4, attention and
  MLP inputs 4, two dropout masks 2);
  split across TP: s b (4 q + 4 kv) (Q, K, V, output-projection input) and the MLP's
  4 f (6 f when gated) (activation input and output);
  attention scores 5 a s^2 b / t without flash attention and without selective recompute;
  full recompute keeps only each layer's input, 2 s b h (/t with SP).
GPT with f = 4h and MHA gives 34 s b h + 5 a s^2 b, the paper's figure. With FP8 GEMMs
(Transformer Engine) the GEMM inputs saved for backward take 1 byte instead of 2.
Selective recomputation of Megatron-Core modules drops what those modules alone keep;
torchtitan's per-op checkpointing keeps the outputs of the ops it saves
(:func:`_op_sac_bytes`). :mod:`gpuscale.perf.memory` multiplies the figure by the layers
and micro-batches a pipeline stage holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscale.catalog import Model
from gpuscale.perf.attn_kinds import kind_mean
from gpuscale.perf.plan import FloatArrayT, Plans, Workload
from gpuscale.perf.recompute import op_sac_gemms
from gpuscale.perf.stage_kinds import AVERAGE, StageMix
from gpuscale.perf.transformer import (
    compressor_width,
    indexer_layers,
    kv_width_per_rank,
    mean_attn_dims,
    sparse_layers,
)

FloatArray = FloatArrayT


@dataclass(frozen=True)
class LayerWidths:
    """One micro-batch on a GPU and the widths of a layer's stored tensors, per plan: what
    the layer's activation bytes depend on."""

    s: FloatArray
    """Sequence a context-parallel rank holds."""
    b: FloatArray
    """Micro-batch, sequences."""
    h: float
    t: FloatArray
    """Tensor-parallel degree."""
    q: float
    """Query width, averaged over the attention layers' kinds (MLA: its heads' q/k width)."""
    kv: float
    """K and V width (MLA: half its heads' k and v widths)."""
    heads: float
    """Attention heads, averaged over the attention layers' kinds."""
    kv_split: FloatArray | float
    """K/V width summed over the TP ranks: under more ranks than KV heads each rank keeps
    a whole K and V head (GQA)."""
    mlp_mult: float
    """Bytes an MLP keeps per FFN element: 4 (activation input and output), 6 when gated."""
    a_frac: FloatArray | float
    """Share of each block type per layer (of the stage's mix): attention, dense MLP, MoE,
    Mamba-2."""
    mlp_frac: FloatArray | float
    moe_frac: FloatArray | float
    mamba_frac: FloatArray | float
    sub: float
    """Norms, residuals and TP reductions per layer, / 2."""
    f_dense: float
    """A dense MLP's FFN width."""
    f_moe: float
    """A token's FFN width in an MoE layer: its top-k experts' and the shared experts'."""
    moe: float
    """Bytes an MoE layer keeps per token: its experts' MLPs and the routed copies."""
    mamba: float
    """Bytes a Mamba-2 (or Gated DeltaNet) mixer keeps per token."""
    fp8_cut: float
    """Bytes saved on each GEMM input kept in FP8 (1 with FP8 or FP4 GEMMs, else 0)."""
    d_mamba: float
    """A Mamba-2 mixer's inner width (out_proj's input); 0 without one."""


def activation_bytes_per_layer(
    w: Workload, p: Plans, seq_len: float | None = None, mix: StageMix | None = None
) -> FloatArray:
    """Activation bytes one layer stores for one micro-batch on one GPU (16-bit): the
    model's average layer, or the average of a stage whose layers' kinds ``mix`` gives."""
    mix = AVERAGE if mix is None else mix
    m = w.model
    c = _layer_widths(w, p, seq_len, mix)
    s, b, h, t = c.s, c.b, c.h, c.t
    replicated, split = _stored_bytes(w, c)
    mods = set(w.recompute_modules)
    saved_rep, saved_split = _selective_saved_bytes(m, mods, c)
    sel = p.recompute == 1
    replicated = np.where(sel, replicated - saved_rep, replicated)
    split = np.where(sel, np.maximum(split - saved_split, 0.0), split)
    # unfused attention keeps the softmax output (2 bytes per score) and, with dropout, its
    # mask (1) and output (2): Korthikanti et al.'s 5as^2b, or 2as^2b without dropout
    scores = c.a_frac * (5.0 if m.dropout else 2.0) * c.heads * s * s * b
    no_scores = (p.recompute >= 2) | (sel & ("core_attn" in mods))
    if w.flash_attention:
        no_scores = np.ones_like(no_scores)
    act = np.where(p.sp, (replicated + split) / t, replicated + split / t)
    act = act + np.where(no_scores, 0.0, scores / t)
    act = _with_model_extras(m, p, c, act)
    if "ops" in mods:
        act = np.where(sel, _op_sac_bytes(w, p, s, b), act)
    # full recomputation keeps each layer's input: the n residual streams of hyper-connections
    kept_input = 2.0 * s * b * h * m.residual_streams
    full = np.where(p.sp, kept_input / t, kept_input)
    return np.where(p.recompute >= 2, full, act)


def _layer_widths(w: Workload, p: Plans, seq_len: float | None, mix: StageMix) -> LayerWidths:
    """The micro-batch's shape and the layer's widths for :func:`activation_bytes_per_layer`
    (``seq_len``: the workload's unless given)."""
    m = w.model
    s = (w.seq_len if seq_len is None else seq_len) / p.cp
    b = p.mbs.astype(np.float64)
    h = float(m.hidden)
    t = p.tp.astype(np.float64)
    # Q and K/V widths and heads averaged over the attention layers' kinds (Step 3.5)
    q, kv = mean_attn_dims(m)
    heads = kind_mean(m, lambda v: v.heads)
    if m.mla is not None:
        q = m.heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim)
        kv = m.heads * (m.mla.qk_nope_head_dim + m.mla.v_head_dim) // 2
    # GQA under more TP ranks than key/value heads: each rank keeps a whole K and V head
    kv_split = kind_mean(m, lambda v: kv_width_per_rank(v, t) * t) if m.mla is None else kv
    mlp_mult = 6.0 if m.gated_mlp else 4.0
    f_moe = float(m.top_k * m.ffn_hidden + m.shared_ffn_hidden)
    # Mamba-2 (and a Gated DeltaNet) keeps in_proj's output (z, x, B, C, dt), the conv
    # output (x, B, C), the scan output y and out_proj's input, 2 bytes each
    mamba = 0.0
    if m.mamba is not None:
        mx = m.mamba
        mamba = 2.0 * (mx.in_proj_width + mx.conv_channels + 2 * mx.inner)
    return LayerWidths(
        s=s,
        b=b,
        h=h,
        t=t,
        q=q,
        kv=kv,
        heads=heads,
        kv_split=kv_split,
        mlp_mult=mlp_mult,
        a_frac=m.attn_layers / m.layers * mix.attn,
        mlp_frac=m.mlp_layers / m.layers * mix.mlp,
        moe_frac=m.moe_layers / m.layers * mix.moe,
        mamba_frac=m.mamba_layers / m.layers * mix.mamba,
        sub=m.sublayers_per_layer / 2.0,
        f_dense=float(m.dense_ffn_hidden),
        f_moe=f_moe,
        moe=mlp_mult * f_moe + 2 * m.top_k * m.moe_width,
        mamba=mamba,
        # Transformer Engine saves GEMM inputs for backward in FP8 (1 byte; NVFP4 is costed
        # the same, its 0.56-byte copies plus column-wise ones for the weight gradient)
        fp8_cut=1.0 if w.precision in ("fp8", "fp4") else 0.0,
        d_mamba=float(m.mamba.inner) if m.mamba is not None else 0.0,
    )


def _stored_bytes(w: Workload, c: LayerWidths) -> tuple[FloatArray, FloatArray]:
    """(replicated across TP unless sequence parallel, split across TP) bytes the layer
    keeps without recomputation, attention scores apart."""
    m = w.model
    s, b, h, q, sub, fp8_cut = c.s, c.b, c.h, c.q, c.sub, c.fp8_cut
    a_frac, mlp_frac, moe_frac, mamba_frac = c.a_frac, c.mlp_frac, c.moe_frac, c.mamba_frac
    # Korthikanti et al.'s 10sbh: both norms' inputs, the QKV and MLP inputs (2sbh each) and,
    # with dropout, its two 1-byte masks (after attention, after the MLP)
    replicated = sub * (10.0 if m.dropout else 8.0) * s * b * h
    split = (
        s
        * b
        * (
            # gated attention also keeps the gate and the ungated output (2 x 2 q bytes)
            a_frac * ((8.0 if m.attn_gate else 4.0) * q + 4.0 * c.kv_split)
            + mlp_frac * c.mlp_mult * c.f_dense
            + moe_frac * c.moe
            + mamba_frac * c.mamba
        )
    )
    if m.head_gate:  # a head-wise gate's gates and the ungated output, 2 (q + heads) bytes
        split = split + s * b * a_frac * 2.0 * (q + c.heads)
    # GEMM inputs kept in FP8, 1 byte less each: the QKV and fc1 inputs (2 x 2 s b h), the
    # output-projection input (2 s b q), fc2's (2 s b f); a hybrid block has one of each
    # pair (in_proj's, out_proj's for Mamba)
    replicated = replicated - fp8_cut * sub * 2.0 * s * b * h
    split = split - fp8_cut * s * b * (
        a_frac * q + mlp_frac * c.f_dense + moe_frac * c.f_moe + mamba_frac * c.d_mamba
    )
    return replicated, split


def _selective_saved_bytes(
    m: Model, mods: set[str], c: LayerWidths
) -> tuple[FloatArray | float, FloatArray | float]:
    """(replicated, split) bytes that selective recomputation of the Megatron-Core modules
    ``mods`` saves the layer.

    They drop what the modules alone keep: the outputs of the norms that are modules of
    their own (an MoE layer's pre-norm, MLA's input norm; Transformer Engine fuses the
    others into the next GEMM), the experts' activation output (fc2's input), a dense
    MLP's, a whole MoE layer's, the shared experts' or a Mamba mixer's activations, each as
    :func:`_stored_bytes` stores it (a GEMM input kept in FP8 is 1 byte); MLA's
    up-projection outputs are not counted (its time is)."""
    s, b, h, fp8_cut, mlp_mult = c.s, c.b, c.h, c.fp8_cut, c.mlp_mult
    a_frac, mlp_frac, moe_frac, mamba_frac = c.a_frac, c.mlp_frac, c.moe_frac, c.mamba_frac
    f_moe, f_dense, moe, mamba = c.f_moe, c.f_dense, c.moe, c.mamba
    keep_moe = "moe" not in mods
    norms = moe_frac * 2.0 + (a_frac * (2.0 - fp8_cut) if m.mla is not None else 0.0)
    saved_rep = norms * s * b * h if "layernorm" in mods else 0.0
    shared = float(m.shared_ffn_hidden)
    saved_split = (
        s
        * b
        * (
            (moe_frac * f_moe * (2.0 - fp8_cut) if "moe_act" in mods and keep_moe else 0.0)
            + (mlp_frac * (mlp_mult - fp8_cut) * f_dense if "mlp" in mods else 0.0)
            + (moe_frac * (moe - fp8_cut * f_moe) if "moe" in mods else 0.0)
            + (
                moe_frac * (mlp_mult - fp8_cut) * shared
                if "shared_experts" in mods and keep_moe
                else 0.0
            )
            + (mamba_frac * (mamba - fp8_cut * c.d_mamba) if "mamba" in mods else 0.0)
        )
    )
    return saved_rep, saved_split


def _with_model_extras(m: Model, p: Plans, c: LayerWidths, act: FloatArray) -> FloatArray:
    """``act`` and what some models' layers keep besides: DeepSeek-V4's latents and
    compressor outputs, hyper-connections' extra residual streams, a DeepSeek Sparse
    Attention layer's selection and indexer."""
    s, b, h, t = c.s, c.b, c.h, c.t
    if m.compressed is not None:
        # DeepSeek-V4 also keeps its query latent, o_a's output (the grouped projection's
        # g x r_o) and its compressors' kv and gate outputs, 16-bit; the two
        # hyper-connections keep their n-stream inputs (n - 1 more hidden widths each)
        x = m.compressed
        kept = 2.0 * (x.q_lora_rank + compressor_width(m)) + 2.0 * x.o_groups * x.o_lora_rank / t
        act = act + s * b * kept
    if m.residual_streams > 1:
        streams = 2.0 * 2.0 * (m.residual_streams - 1) * h
        act = act + np.where(p.sp, s * b * streams / t, s * b * streams)
    if m.sparse is not None:
        # a DSA layer keeps its selection for the sparse attention's backward (the top-k
        # key indices, int32) and an indexer's queries, key (16-bit) and head weights (fp32)
        # for its own loss's backward, whole on every TP rank
        d = m.sparse
        own = (
            2.0 * d.heads * d.head_dim
            + 2.0 * d.head_dim
            + (4.0 * d.heads if d.head_weights else 0.0)
        )
        per_token = (sparse_layers(m) * 4.0 * d.topk + indexer_layers(m) * own) / m.layers
        act = act + s * b * per_token
    return act


def _op_sac_bytes(w: Workload, p: Plans, s: FloatArray, b: FloatArray) -> FloatArray:
    """Bytes one layer keeps for one micro-batch under torchtitan's per-op checkpointing
    (:func:`gpuscale.perf.recompute.op_sac_gemms`), 16-bit: the layer's input (the
    checkpoint's), the odd matmuls' outputs, the attention kernel's output and its fp32
    log-sum-exp. For Llama (gated MLP): Q, V, w1 and w2, so 2 s b (2 h + 2 q + kv + f) +
    4 s b a; a GEMM input kept in FP8 does not apply, the outputs are 16-bit. Under TP each
    rank keeps its share; with sequence parallelism the input and the two reduce-scattered
    block outputs (saved collectives) are sequence shards, and w2's output is the
    full-sequence partial sum before its reduction: at TP8 that full-width copy can make the
    policy keep more than no checkpointing does (which keeps no block output)."""
    m = w.model
    h, t = float(m.hidden), p.tp.astype(np.float64)
    q, _ = mean_attn_dims(m)
    kept, _ = op_sac_gemms(m, t)
    # a rank's share of each kept output (the row-parallel ones whole-width partial sums)
    widths = sum((n_cols for _name, n_cols, _k in kept), np.zeros_like(t))
    block_outputs = np.where(p.sp, 2.0 * h / t, 0.0)  # reduce-scatter outputs (saved)
    layer_input = np.where(p.sp, h / t, h)
    lse = 2.0 * kind_mean(m, lambda v: v.heads) / t  # fp32: 4 bytes = 2 x 2
    out: FloatArray = 2.0 * s * b * (layer_input + widths + q / t + block_outputs + lse)
    return out
