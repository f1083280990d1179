"""Training step time of a plan, term by term (the breakdown explains the total).

Per micro-batch, on the slowest pipeline stage (ceil(L / pp) layers, plus the output layer
on the last stage):
  GEMMs       FLOPs / (peak x eff), eff = gemm_eff_max x d / (d + gemm_half_dim) for the
              smallest per-GPU GEMM dimension d (tensor parallelism shrinks N or K);
              FP8 GEMMs run fp8_gemm_speedup x faster than BF16.
  attention   flash attention at attn_eff of the BF16 peak; backward = 2.5 x forward
              (FlashAttention-2, Dao 2023), causal masking halves the work.
  memory-bound  norms, residuals, dropout, activation functions: bytes / (HBM x hbm_eff);
              replicated over TP ranks unless sequence parallelism splits them; plus a
              fixed layer_overhead_s per layer (kernel launches and small kernels).
  recompute   full: the whole forward again; selective: the attention core again.
  TP comm     4 all-reduces (or all-gather + reduce-scatter pairs with SP) of s b h 16-bit
              values per layer, 6 with full recompute; tp_overlap of it hidden when overlap on.
  CP comm     ring attention passes K/V chunks; exposed where it exceeds attention compute.
  EP comm     2 all-to-alls forward and 2 backward per MoE layer (dispatch, combine).
  PP comm     one activation send forward and one gradient send backward per chunk.
The iteration is m x (per-micro-batch stage time) + bubble (p - 1)/v x that time
+ exposed data-parallel communication + optimizer step + fixed overhead.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.perf.comm import Fabric, collective_time_s
from gpuscale.perf.memory import params_per_gpu
from gpuscale.perf.plan import FloatArrayT, Plans, Workload
from gpuscale.perf.transformer import attn_core_dims, attn_dims, layer_shapes

FloatArray = FloatArrayT

FLASH_BWD_FACTOR = 2.5
"""Backward / forward FLOPs of flash attention (FlashAttention-2, arXiv 2307.08691, sec. 3)."""
MOE_PERMUTE_PASSES = 6.0
"""Reads + writes of the routed tokens' hidden states per MoE layer forward: permute
(2), unpermute (2) and the gate-weighted combine (2), as in Megatron-Core's token dispatcher."""
ADAM_BYTES_PER_PARAM = 30.0
"""HBM traffic of one fused Adam update per parameter: read fp32 param, grad, m, v (16 B),
write param, m, v (12 B) and the 16-bit model copy (2 B)."""


@dataclass(frozen=True)
class StepBreakdown:
    """Seconds per iteration, by term, one array element per plan. ``step_s`` is the sum."""

    compute_s: FloatArray
    """GEMMs and attention, forward and backward, over all micro-batches."""
    recompute_s: FloatArray
    memory_bound_s: FloatArray
    tp_comm_s: FloatArray
    cp_comm_s: FloatArray
    ep_comm_s: FloatArray
    pp_comm_s: FloatArray
    bubble_s: FloatArray
    dp_comm_s: FloatArray
    optimizer_s: FloatArray
    overhead_s: FloatArray

    @property
    def step_s(self) -> FloatArray:
        total: FloatArray = np.sum([getattr(self, f.name) for f in fields(self)], axis=0)
        return total

    def terms(self) -> dict[str, FloatArray]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _collective(
    op: str,
    size: FloatArray,
    n: FloatArray | float,
    k: FloatArray | float,
    f: Fabric,
    cal: Calibration,
) -> FloatArray:
    """``collective_time_s`` evaluated once per distinct (size, group, placement).

    Plans that differ only in switches (recompute, sharding, overlap) share their
    collectives, so de-duplicating first makes a search several times faster.
    """
    size_a, n_a, k_a = np.broadcast_arrays(
        np.asarray(size, dtype=np.float64),
        np.asarray(n, dtype=np.float64),
        np.asarray(k, dtype=np.float64),
    )
    if size_a.size < 64:
        return collective_time_s(op, size_a, n_a, f, cal, members_per_domain=k_a)
    # one complex key per point: size in the real part, (group, placement) in the imaginary
    keys = size_a.ravel() + 1j * (n_a.ravel() * 65536.0 + k_a.ravel())
    uniq, inv = np.unique(keys, return_inverse=True)
    n_u = np.floor(uniq.imag / 65536.0)
    t = collective_time_s(op, uniq.real, n_u, f, cal, members_per_domain=uniq.imag - n_u * 65536.0)
    return t[inv.ravel()].reshape(size_a.shape)


def _gemm_eff(dim: FloatArray, cal: Calibration) -> FloatArray:
    return cal.gemm_eff_max * dim / (dim + cal.gemm_half_dim)


def step_breakdown(w: Workload, p: Plans, cal: Calibration) -> StepBreakdown:
    m, f = w.model, w.fabric
    sh = layer_shapes(m)
    tp = p.tp.astype(np.float64)
    cp = p.cp.astype(np.float64)
    s_loc = w.seq_len / cp
    tokens = p.mbs * s_loc  # tokens per GPU per micro-batch
    h = float(m.hidden)
    q, kv = attn_dims(m)
    moe_frac = m.moe_layers / m.layers
    layers_stage = np.ceil(m.layers / (p.pp * p.vpp)) * p.vpp
    mb = p.microbatches(w).astype(np.float64)

    peak16 = w.gpu.peak_flops("bf16" if "bf16" in w.gpu.peak_tflops else "fp16")
    peak16 *= w.gpu.clock_fraction  # a power-capped part sustains a lower clock
    gemm_peak = peak16 * (cal.fp8_gemm_speedup if w.precision == "fp8" else 1.0)

    # --- GEMMs, forward, one layer, one micro-batch (per GPU) -------------------------
    ffn_loc = m.dense_ffn_hidden / tp
    attn_min = np.minimum(np.minimum(tokens, h), np.maximum(q / tp, 1.0))
    mlp_min = np.minimum(np.minimum(tokens, h), ffn_loc)
    attn_t = 2.0 * tokens * sh.attn / tp / (gemm_peak * _gemm_eff(attn_min, cal))
    dense_mlp_t = 2.0 * tokens * sh.mlp_dense / tp / (gemm_peak * _gemm_eff(mlp_min, cal))
    if m.is_moe:
        # tokens reaching each local expert (EP spreads experts, tokens follow them)
        tok_e = tokens / tp * m.top_k * p.ep / m.num_experts
        e_min = np.minimum(np.minimum(tok_e, h), float(m.ffn_hidden))
        moe_t = 2.0 * tokens * (m.top_k * sh.expert) / tp / (gemm_peak * _gemm_eff(e_min, cal))
        moe_t = moe_t + 2.0 * tokens * (sh.shared / tp + sh.router) / (
            gemm_peak * _gemm_eff(mlp_min, cal)
        )
    else:
        moe_t = np.zeros_like(tokens)
    gemm_fwd = attn_t + (1 - moe_frac) * dense_mlp_t + moe_frac * moe_t

    qk_w, v_w = attn_core_dims(m)
    causal = 0.5
    core_flops = 2.0 * p.mbs * s_loc * w.seq_len * (qk_w + v_w) / tp * causal
    core_fwd = core_flops / (peak16 * cal.attn_eff)
    layer_fwd = gemm_fwd + core_fwd

    # --- memory-bound kernels -----------------------------------------------------------
    bw = w.gpu.hbm_bw_Bps * cal.hbm_eff
    f_act = (1 - moe_frac) * m.dense_ffn_hidden + moe_frac * m.ffn_hidden * (
        m.top_k + m.shared_experts
    )
    gate = 3.0 if m.gated_mlp else 2.0
    h_bytes = cal.elementwise_bytes_per_token_layer * h * tokens * 2.0
    h_bytes = np.where(p.sp, h_bytes / tp, h_bytes)
    f_bytes = gate * f_act * tokens * 2.0 / tp
    # MoE token permutation before and unpermutation after the experts, and the weighted
    # combine: each reads and writes the top-k copies of the hidden state
    moe_bytes = moe_frac * MOE_PERMUTE_PASSES * m.top_k * h * tokens / tp * 2.0 if m.is_moe else 0.0
    mem_fwd = (h_bytes + f_bytes + moe_bytes) / bw

    # --- output layer (last stage): logits GEMM + fp32 softmax/loss ---------------------
    logit_dim = np.minimum(np.minimum(tokens, h), m.vocab / tp)
    logits_fwd = 2.0 * tokens * h * m.vocab / tp / (gemm_peak * _gemm_eff(logit_dim, cal))
    logits_mem = 3.0 * 4.0 * tokens * m.vocab / tp / bw

    overlap_slow = np.where(p.tp_overlap, 1.0 + cal.tp_overlap_slowdown, 1.0)
    compute_mb = (
        layers_stage * (gemm_fwd * 3.0 + core_fwd * (1.0 + FLASH_BWD_FACTOR)) + 3.0 * logits_fwd
    ) * overlap_slow
    mem_mb = layers_stage * (mem_fwd + cal.layer_overhead_s) * 3.0 + 3.0 * logits_mem
    recompute_mb = np.select(
        [p.recompute == 2, p.recompute == 1],
        [
            layers_stage * (layer_fwd * overlap_slow + mem_fwd + cal.layer_overhead_s),
            layers_stage * core_fwd,
        ],
        0.0,
    )

    # --- tensor-parallel communication ---------------------------------------------------
    act_bytes = tokens * h * 2.0
    tp_k = np.minimum(tp, float(f.domain_gpus))
    tp_one = _collective("all_reduce", act_bytes, tp, tp_k, f, cal)
    n_tp = np.where(p.recompute == 2, 6.0, 4.0)
    tp_hidden = np.where(p.tp_overlap, cal.tp_overlap, 0.0)
    tp_mb = layers_stage * n_tp * tp_one * (1.0 - tp_hidden)
    tp_mb = tp_mb + np.where(p.tp > 1, 2.0 * tp_one, 0.0)  # embedding/output-layer reductions

    # --- context parallel (ring attention K/V exchange) --------------------------------
    kv_chunk = 2.0 * p.mbs * s_loc * (kv if m.mla is None else m.mla.kv_lora_rank * 4) / tp * 2.0
    cp_k = np.clip(f.domain_gpus / tp, 1.0, cp)
    cp_fwd = _collective("all_gather", kv_chunk * cp, cp, cp_k, f, cal)
    cp_exposed = np.maximum(cp_fwd - core_fwd, 0.0) + np.maximum(
        2.0 * cp_fwd - FLASH_BWD_FACTOR * core_fwd, 0.0
    )
    cp_mb = layers_stage * np.where(p.cp > 1, cp_exposed, 0.0)

    # --- expert parallel all-to-all ----------------------------------------------------
    if m.is_moe:
        a2a_bytes = tokens / tp * m.top_k * h * 2.0  # sequence-parallel shards dispatch
        ep_k = np.clip(float(f.domain_gpus), 1.0, p.ep)
        a2a = _collective("all_to_all", a2a_bytes, p.ep.astype(np.float64), ep_k, f, cal)
        n_a2a = np.where(p.recompute == 2, 6.0, 4.0)
        ep_mb = layers_stage * moe_frac * n_a2a * np.where(p.ep > 1, a2a, 0.0)
    else:
        ep_mb = np.zeros_like(tokens)

    # --- pipeline point-to-point -----------------------------------------------------------
    p2p_bytes = np.where(p.sp, act_bytes / tp, act_bytes)
    pp_cross = (tp * cp * p.dp) < f.domain_gpus
    p2p = _collective("send_recv", p2p_bytes, 2.0, np.where(pp_cross, 2.0, 1.0), f, cal)
    pp_mb = np.where(p.pp > 1, 2.0 * p.vpp * p2p * (1.0 - cal.pp_overlap), 0.0)

    t_mb = (
        compute_mb
        + mem_mb
        + recompute_mb
        + tp_mb
        + cp_mb
        + ep_mb
        + pp_mb
        + cal.microbatch_overhead_s
    )
    bubble = (p.pp - 1) / p.vpp * t_mb

    # --- data-parallel gradient / parameter communication ------------------------------
    dense, expert, _ = params_per_gpu(w, p)
    d = (p.dp * p.cp).astype(np.float64)
    d_exp = np.maximum(d * tp / p.ep, 1.0)
    dp_k = np.clip(f.domain_gpus / tp, 1.0, d)
    grad_b = np.select([p.sharding <= 1, p.sharding == 4], [4.0, 4.0], 2.0)

    def dp_time(
        op: str, nbytes_per_param: FloatArray | float, pieces: FloatArray | float = 1.0
    ) -> FloatArray:
        """DP collective over the stage's parameters, issued as ``pieces`` equal calls."""
        t_dense = _collective(op, dense * nbytes_per_param / pieces, d, dp_k, f, cal)
        t_exp = (
            _collective(
                op, expert * nbytes_per_param / pieces, d_exp, np.minimum(dp_k, d_exp), f, cal
            )
            if w.model.is_moe
            else np.zeros_like(d)
        )
        return pieces * (np.where(d > 1, t_dense, 0.0) + np.where(d_exp > 1, t_exp, 0.0))

    grads = np.where(
        p.sharding == 0, dp_time("all_reduce", grad_b), dp_time("reduce_scatter", grad_b)
    )
    gather = dp_time("all_gather", 2.0)
    # bwd of the last micro-batch (grads) and fwd of the first (param all-gather) hide it
    window = (compute_mb + mem_mb) * (2.0 / 3.0) * 1.0
    per_step = grads + np.where(p.sharding >= 1, gather, 0.0)
    exposed_step = np.maximum(per_step * (1.0 - cal.dp_overlap), per_step - window)
    # ZeRO-3/FSDP: gather each layer's weights in forward and in backward and reduce-scatter
    # its gradients, layer by layer, every micro-batch (one collective per layer each)
    per_mb_z3 = dp_time("reduce_scatter", grad_b, layers_stage) + 2.0 * dp_time(
        "all_gather", 2.0, layers_stage
    )
    exposed_z3 = mb * np.maximum(per_mb_z3 * (1.0 - cal.dp_overlap), per_mb_z3 - compute_mb)
    dp_comm = np.where(p.sharding == 4, exposed_z3, exposed_step)

    # --- optimizer ---------------------------------------------------------------------------
    sharded = p.sharding >= 1
    opt_params = np.where(sharded, dense / d + expert / d_exp, dense + expert)
    optimizer = opt_params * ADAM_BYTES_PER_PARAM / bw

    z = np.zeros(len(p))
    return StepBreakdown(
        compute_s=mb * compute_mb,
        recompute_s=mb * recompute_mb,
        memory_bound_s=mb * mem_mb,
        tp_comm_s=mb * tp_mb,
        cp_comm_s=mb * cp_mb,
        ep_comm_s=mb * ep_mb,
        pp_comm_s=mb * pp_mb,
        bubble_s=bubble,
        dp_comm_s=dp_comm,
        optimizer_s=optimizer,
        overhead_s=z + cal.step_overhead_s + mb * cal.microbatch_overhead_s,
    )
