"""Memory-bound kernels of one training layer's forward on one micro-batch, on one GPU.

Norms, residual adds (DeepSeek-V4's hyper-connections: n streams), activation functions,
an MoE layer's token permutation and combine, a Mamba-2 mixer's conv and gated norm, and
gated attention's output gate move bytes at HBM speed: bytes / (HBM x hbm_eff). Those over
the hidden state are replicated over TP ranks unless sequence parallelism splits them;
those over the FFN, the attention heads and the mixer's channels are split. Eager PyTorch
(no fused norm, RoPE or SwiGLU kernels) adds the bytes its extra ops move
(``Workload.elementwise``). :mod:`gpuscale.perf.step` runs them three times a layer
(forward, and backward at twice the forward) and once more for a recomputed forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscale.catalog import Model
from gpuscale.perf.attn_kinds import kind_mean
from gpuscale.perf.plan import FloatArrayT
from gpuscale.perf.step_comm import StageMicroBatch
from gpuscale.perf.step_gemms import mamba_widths
from gpuscale.perf.transformer import mean_attn_dims

FloatArray = FloatArrayT

MOE_PERMUTE_PASSES = 6.0
"""Reads + writes of the routed tokens' hidden states per MoE layer forward: permute
(2), unpermute (2) and the gate-weighted combine (2), as in Megatron-Core's token dispatcher."""
EAGER_NORM_BYTES = 32.0
"""Extra HBM bytes per element of one RMSNorm run op by op in eager PyTorch, over a fused
kernel (read 2, write 2): upcast to fp32 (read 2, write 4), square (4 + 4), mean (read 4),
scale by rsqrt (4 + 4), cast back (4 + 2), multiply by the weight (2 + 2): 36 - 4 bytes."""
EAGER_ROPE_BYTES = 16.0
"""The same per query/key element of rotary embedding as complex multiplication in fp32
(torchtitan's ``apply_rotary_emb``): upcast (2 + 4), complex multiply (4 + 4), cast back
(4 + 2) = 20 bytes against a fused kernel's 4."""
EAGER_GLU_BYTES = 4.0
"""The same per FFN element of a gated activation, silu(a) * b as two kernels: silu
(2 + 2), multiply (4 + 2) = 10 bytes against a fused kernel's 6."""


def hyper_connection_bytes(m: Model) -> float:
    """HBM bytes per token and layer, forward, that hyper-connections (mHC, n streams, two
    a layer) move beyond a plain residual add's 3 h elements: each reads the streams three
    times (the weights' projection, the collapse, the mix), writes them once, writes the
    collapsed block input and reads the block's output, (4 n + 2) h elements, 16-bit
    (0 for the plain residual)."""
    n = m.residual_streams
    if n == 1:
        return 0.0
    return 2.0 * (4.0 * n + 2.0 - 3.0) * m.hidden * 2.0


def act_rw(m: Model) -> float:
    """Reads + writes of each FFN element by the activation function: a gated one (SwiGLU)
    reads its two inputs and writes the product (3), a plain one reads and writes (2)."""
    return 3.0 if m.gated_mlp else 2.0


def moe_ffn_width(m: Model) -> int:
    """A token's FFN width in an MoE layer: its top-k routed experts' and the shared
    experts'."""
    f_moe: int = m.ffn_hidden * m.top_k + m.shared_ffn_hidden
    return f_moe


@dataclass(frozen=True)
class MemoryBound:
    """HBM-bound kernels of one average layer's forward on one micro-batch, per plan."""

    fwd_s: FloatArray
    """All of them, seconds."""
    moe_permute_bytes: FloatArray
    """Of their bytes, an MoE layer's token permutation, unpermutation and combine,
    weighed by the MoE layers' share."""
    mamba_bytes: FloatArray
    """Of their bytes, a hybrid mixer's conv and gated norm, weighed by its share."""


def residual_bytes(c: StageMicroBatch) -> FloatArray:
    """HBM bytes of the kernels over the hidden state, per layer forward: the norms,
    residual adds and dropouts (``elementwise_bytes_per_token_layer`` per hidden element
    and half-layer, 16-bit), eager PyTorch's op-by-op norms (two per layer, one per hybrid
    block) and hyper-connections' streams; replicated over TP ranks unless sequence
    parallelism splits them."""
    m, cal, tokens = c.w.model, c.cal, c.tokens
    h = float(m.hidden)
    h_bytes = c.sub * cal.elementwise_bytes_per_token_layer * h * tokens * 2.0
    if c.w.elementwise == "eager":
        h_bytes = h_bytes + c.sub * 2.0 * EAGER_NORM_BYTES * h * tokens
    h_bytes = h_bytes + hyper_connection_bytes(m) * tokens
    out: FloatArray = np.where(c.p.sp, h_bytes / c.tp, h_bytes)
    return out


def memory_bound(c: StageMicroBatch, hbm_Bps: float) -> MemoryBound:
    """One average layer's memory-bound kernels, forward, at ``hbm_Bps``: those over the
    hidden state (:func:`residual_bytes`), the FFN's activation function (eager PyTorch's
    rotary embedding and gated activation op by op), an MoE layer's token permutation, a
    hybrid mixer's conv and gated norm, and gated attention's output gate, each block kind
    weighed by its share of the layers."""
    w, m, tp, tokens = c.w, c.w.model, c.tp, c.tokens
    # Q and K/V widths, averaged over the attention layers' kinds (Step 3.5's windowed ones
    # have more query heads); a head-wise gate's heads the same way
    q, kv = mean_attn_dims(m)
    gate_heads = kind_mean(m, lambda v: v.heads) if m.head_gate else 0.0
    f_act = c.mlp_frac * m.dense_ffn_hidden + c.moe_frac * moe_ffn_width(m)
    f_bytes = act_rw(m) * f_act * tokens * 2.0 / tp
    if w.elementwise == "eager":
        rope = c.a_frac * EAGER_ROPE_BYTES * (q + kv) if m.position == "rope" else 0.0
        glu = EAGER_GLU_BYTES * f_act if m.gated_mlp else 0.0
        f_bytes = f_bytes + (rope + glu) * tokens / tp
    # MoE token permutation before and unpermutation after the experts, and the weighted
    # combine: each reads and writes the top-k copies of the hidden state
    mw = float(m.moe_width)  # LatentMoE's routed experts work in a narrower width
    moe_bytes = c.moe_frac * MOE_PERMUTE_PASSES * m.top_k * mw * tokens / tp * 2.0
    # Mamba-2: depthwise causal conv over x, B, C (read + write) and the gated RMSNorm of the
    # scan's output (read y and z, write); a Gated DeltaNet's conv over v, k, q and gated norm
    # the same (the L2 norms of q and k run inside its scan kernel; its per-head decay and
    # beta are a few values a token)
    d_in, _, conv_c = mamba_widths(m)
    mamba_bytes = c.mamba_frac * (2.0 * conv_c + 3.0 * d_in) * 2.0 * tokens / tp
    # gated attention: the sigmoid gate times the attention output (read both, write); a
    # head-wise gate reads one value a head
    gate_bytes = c.a_frac * 3.0 * (q if m.attn_gate else 0.0) * 2.0 * tokens / tp
    if m.head_gate:
        gate_bytes = gate_bytes + c.a_frac * (2.0 * q + gate_heads) * 2.0 * tokens / tp
    all_bytes = residual_bytes(c) + f_bytes + moe_bytes + mamba_bytes + gate_bytes
    return MemoryBound(
        fwd_s=all_bytes / hbm_Bps, moe_permute_bytes=moe_bytes, mamba_bytes=mamba_bytes
    )
