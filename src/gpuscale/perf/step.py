"""Training step time of a plan, term by term (the breakdown explains the total).

Per micro-batch, on the slowest pipeline stage (perf/stages.py: with the even split
ceil(L / pp) layers and the output layer on the last stage; with the account or balanced
placement, the slower of the last stage and the fullest other; plus multi-token-prediction
depths as their FLOP-equivalent of layers, spread over the stages; a hybrid model's layers
are its blocks, each costed by its kind):
  GEMMs       FLOPs / (peak x matmul_eff x eff): peak x matmul_eff is the GPU's measured
              maximum achievable matmul rate (catalog), eff = gemm_eff_max x d / (d +
              gemm_half_dim) for the smallest per-GPU GEMM dimension d (tensor parallelism
              shrinks N or K);
              FP8 GEMMs run fp8_gemm_speedup x faster than BF16; NVFP4 GEMMs that times
              the GPU's FP4/FP8 peak ratio (the same fraction of their peak as FP8's);
              the output layer and the MoE router stay 16-bit (perf/step_gemms.py).
  attention   fused (flash) kernels at attn_eff of the 16-bit peak for head dimension 128,
              scaled by d / (d + attn_half_dim) for head dimension d as a GEMM's reduction
              (d + 22 on Ampere's FlashAttention-2; FlashAttention-2 on Hopper and newer at
              attn_flash2_rel of the fused kernels), times the GPU's attention_rel
              (Blackwell Ultra's faster exponential units: 1.35);
              backward = 2.5 x forward (Dao 2023), causal masking halves the work;
              below the GPU's softmax_head_dim the exponentials set the pace (forward
              x softmax_head_dim / d, backward x 0.4 softmax_head_dim / d, at least 1).
              Unfused (Megatron's original path): batched GEMMs over the full s x s
              scores + softmax/dropout bytes.
  memory-bound  norms, residuals (DeepSeek-V4's hyper-connections: n streams), dropout,
              activation functions: bytes / (HBM x hbm_eff);
              replicated over TP ranks unless sequence parallelism splits them; eager
              PyTorch (no fused norm/RoPE/SwiGLU kernels) adds the bytes its extra ops move.
  quantise    FP8/NVFP4 quantise every GEMM input (X forward, dY backward) at HBM speed,
              fp8_cast_bytes per element (NVFP4: 7.125 / 4 of that).
  recompute   full: the whole forward again; partial: that for the fraction of layers that
              must be recomputed to fit; selective: the chosen modules' forwards again
              (default the attention core; perf/recompute.py), with the TP and EP
              collectives of a recomputed MLP or MoE layer.
  TP, CP, EP and PP comm  tensor- and context-parallel collectives, expert-parallel
              all-to-alls and pipeline sends, per micro-batch (perf/step_comm.py).
  DP comm     gradient reduce(-scatter) and parameter all-gather once per step, exposed
              beyond dp_overlap (ZeRO-2: a reduce-scatter every micro-batch); ZeRO-3/FSDP
              gathers per layer every micro-batch, exposed beyond zero3_overlap, and
              per-parameter gathers (DeepSpeed) no faster than zero3_param_gather_Bps.
  Grad accum  a separate fp32 accumulation pass after each micro-batch's backward
              (DeepSpeed's BF16 optimizer; perf/data_parallel.py), in the stage time.
  Host floor  a micro-batch takes at least the host's time to issue it: host_layer_s per
              layer forward, twice that backward, once more for a recomputed forward (the
              host runs ahead of the GPU, so it shows only where the GPU's work is shorter);
              the GPU's wait is overhead.
The iteration is m x (per-micro-batch stage time) + bubble (p - 1)/v x that time
+ exposed data-parallel communication + optimizer step + fixed overhead (per step, per
micro-batch, and layer_overhead_s per layer and pass: kernel launches and small kernels).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.catalog import Model
from gpuscale.perf.attn_kinds import kind_mean
from gpuscale.perf.data_parallel import data_parallel_s, grad_accum_mb_s
from gpuscale.perf.kernels import (
    FLASH_BWD_FACTOR,
    attention_core_s,
    cast_bytes_per_element,
    gemm_s,
    low_precision_speedup,
    scan_s,
    sustained_peak16,
)
from gpuscale.perf.memory import memory_breakdown
from gpuscale.perf.plan import FloatArrayT, Plans, Workload
from gpuscale.perf.recompute import op_sac_gemms, selective_forward_s, up_proj_shapes
from gpuscale.perf.stages import pipeline_stages
from gpuscale.perf.step_comm import StageMicroBatch, cp_comm_s, ep_comm_s, pp_comm_s, tp_comm_s
from gpuscale.perf.step_gemms import Gemms, layer_gemms, mamba_widths
from gpuscale.perf.transformer import mean_attn_dims, mtp_layer_equivalents

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


@dataclass(frozen=True)
class StepBreakdown:
    """Seconds per iteration, by term, one array element per plan. ``step_s`` is the sum."""

    compute_s: FloatArray
    """GEMMs and attention, forward and backward, over all micro-batches."""
    recompute_s: FloatArray
    memory_bound_s: FloatArray
    quantise_s: FloatArray
    """Low-precision (FP8, NVFP4) quantisation of the GEMMs' inputs, at HBM speed."""
    tp_comm_s: FloatArray
    cp_comm_s: FloatArray
    ep_comm_s: FloatArray
    pp_comm_s: FloatArray
    bubble_s: FloatArray
    dp_comm_s: FloatArray
    optimizer_s: FloatArray
    grad_accum_s: FloatArray
    """Gradient accumulation in a pass of its own (``Workload.grad_accumulation``)."""
    overhead_s: FloatArray
    """Fixed costs: each layer's small kernels at their minimum time and launch, per pass;
    an MoE layer's host work (router, token counts, permutation); the framework's loop per
    micro-batch and per step; the GPU waiting on the host's launches where a micro-batch's
    work is shorter than their issue (the host's parts gone under whole-step CUDA graphs)."""

    @property
    def step_s(self) -> FloatArray:
        total: FloatArray = np.sum([getattr(self, f.name) for f in fields(self)], axis=0)
        return total

    def terms(self) -> dict[str, FloatArray]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def step_breakdown(
    w: Workload, p: Plans, cal: Calibration, recompute_fraction: FloatArray | None = None
) -> StepBreakdown:
    """Step-time terms of each plan; ``recompute_fraction`` is the memory model's (computed
    here when not given)."""
    m = w.model
    tp = p.tp.astype(np.float64)
    cp = p.cp.astype(np.float64)
    s_loc = w.seq_len / cp
    tokens = p.mbs * s_loc  # tokens per GPU per micro-batch
    h = float(m.hidden)
    # Q and K/V widths, averaged over the attention layers' kinds (Step 3.5's windowed ones
    # have more query heads); a head-wise gate's heads the same way
    q, kv = mean_attn_dims(m)
    gate_heads = kind_mean(m, lambda v: v.heads) if m.head_gate else 0.0
    # share of each block type per layer: attention + MLP (or MoE) layers have a_frac = 1
    # and mlp_frac + moe_frac = 1; a hybrid's blocks are one of attention, Mamba, MLP, MoE
    a_frac = m.attn_layers / m.layers
    mlp_frac = m.mlp_layers / m.layers
    moe_frac = m.moe_layers / m.layers
    mamba_frac = m.mamba_layers / m.layers
    sub = m.sublayers_per_layer / 2.0  # norms, residuals and TP reductions per layer, / 2
    # the stage that sets the pipeline's pace: its layers, and whether it runs the output
    # layer (perf/stages.py: the plan's even, account or balanced placement)
    stages = pipeline_stages(w, p)
    layers_stage = stages.slowest
    # multi-token prediction: its depths as their FLOP-equivalent of average layers and one
    # more output head each; with pipeline stages, spread over them, as the layouts that
    # place MTP beside the loss balance them (Megatron-Core pipeline_model_parallel_layout)
    layers_stage_mtp = layers_stage + mtp_layer_equivalents(m, w.seq_len) / p.pp
    heads = stages.head + m.mtp_layers / p.pp
    mb = p.microbatches(w).astype(np.float64)

    peak16 = sustained_peak16(w.gpu)
    mm16 = peak16 * w.gpu.matmul_eff  # the GEMM rate the part can reach (MAMF)
    gemm_peak = mm16 * low_precision_speedup(w, cal)
    bw = w.gpu.hbm_bw_Bps * cal.hbm_eff

    # --- GEMMs, forward, one layer, one micro-batch (per GPU; perf/step_gemms.py) --------
    gemms = Gemms(tokens, gemm_peak, w.gpu.sms, cal)
    g = layer_gemms(w, p, gemms, tp, mm16)
    gemm_fwd = a_frac * g.attn + mlp_frac * g.dense_mlp + moe_frac * g.moe + mamba_frac * g.mamba
    # quantising the GEMMs' inputs (FP8, NVFP4) at HBM speed: X in forward (and again when
    # the forward is recomputed), dY in backward
    per_el = cast_bytes_per_element(w, cal) / bw
    blocks = (
        (a_frac, g.attn_el),
        (mlp_frac, g.dense_mlp_el),
        (moe_frac, g.moe_el),
        (mamba_frac, g.mamba_el),
    )
    cast_fwd = per_el * sum(fr * c[0] for fr, c in blocks)
    cast_bwd = per_el * sum(fr * c[1] for fr, c in blocks)

    mbs_f = p.mbs.astype(np.float64)
    attn_fwd, attn_bwd = attention_core_s(w, mbs_f, s_loc, tp, peak16, bw, cal)
    ssd_fwd = scan_s(w, tokens, tp, peak16, bw, cal)
    core_fwd = a_frac * attn_fwd + mamba_frac * ssd_fwd
    core_bwd = a_frac * attn_bwd + mamba_frac * FLASH_BWD_FACTOR * ssd_fwd
    layer_fwd = gemm_fwd + core_fwd

    # --- memory-bound kernels -----------------------------------------------------------
    f_moe = m.ffn_hidden * m.top_k + m.shared_ffn_hidden  # a token's expert widths
    f_act = mlp_frac * m.dense_ffn_hidden + moe_frac * f_moe
    gate_rw = 3.0 if m.gated_mlp else 2.0
    h_bytes = sub * cal.elementwise_bytes_per_token_layer * h * tokens * 2.0
    if w.elementwise == "eager":  # two norms per layer (one per hybrid block), op by op
        h_bytes = h_bytes + sub * 2.0 * EAGER_NORM_BYTES * h * tokens
    h_bytes = h_bytes + hyper_connection_bytes(m) * tokens
    h_bytes = np.where(p.sp, h_bytes / tp, h_bytes)
    f_bytes = gate_rw * f_act * tokens * 2.0 / tp
    if w.elementwise == "eager":
        rope = a_frac * EAGER_ROPE_BYTES * (q + kv) if m.position == "rope" else 0.0
        glu = EAGER_GLU_BYTES * f_act if m.gated_mlp else 0.0
        f_bytes = f_bytes + (rope + glu) * tokens / tp
    # MoE token permutation before and unpermutation after the experts, and the weighted
    # combine: each reads and writes the top-k copies of the hidden state
    mw = float(m.moe_width)  # LatentMoE's routed experts work in a narrower width
    moe_bytes = moe_frac * MOE_PERMUTE_PASSES * m.top_k * mw * tokens / tp * 2.0
    # an MoE layer's router, permutation and per-expert launches, with the host waiting on
    # the token counts, and the per-step and per-micro-batch work are the host's: a step
    # replayed whole as CUDA graphs issues no kernel from the host and its MoE layers cannot
    # wait on it (Megatron-Core captures only sync-free dispatch), so it pays none of them,
    # recomputed layers' included. A layer's small kernels still run, each for its minimum
    # time: the per-layer cost stays.
    host = 0.0 if w.cuda_graphs else 1.0
    moe_fixed = host * (cal.moe_layer_overhead_s + m.num_experts / p.ep * cal.moe_expert_overhead_s)
    # Mamba-2: depthwise causal conv over x, B, C (read + write) and the gated RMSNorm of the
    # scan's output (read y and z, write); a Gated DeltaNet's conv over v, k, q and gated norm
    # the same (the L2 norms of q and k run inside its scan kernel; its per-head decay and
    # beta are a few values a token)
    d_in, _, conv_c = mamba_widths(m)
    mamba_bytes = mamba_frac * (2.0 * conv_c + 3.0 * d_in) * 2.0 * tokens / tp
    # gated attention: the sigmoid gate times the attention output (read both, write); a
    # head-wise gate reads one value a head
    gate_bytes = a_frac * 3.0 * (q if m.attn_gate else 0.0) * 2.0 * tokens / tp
    if m.head_gate:
        gate_bytes = gate_bytes + a_frac * (2.0 * q + gate_heads) * 2.0 * tokens / tp
    mem_fwd = (h_bytes + f_bytes + moe_bytes + mamba_bytes + gate_bytes) / bw

    # --- output layer (last stage): logits GEMM + fp32 softmax/loss ---------------------
    # in 16-bit precision: Megatron-Core's output layer is not a Transformer Engine module,
    # and torchtitan's float8 conversion leaves it out
    logits_fwd = gemm_s(tokens, m.vocab / tp, h, 1.0, mm16, w.gpu.sms, cal)
    logits_mem = 3.0 * 4.0 * tokens * m.vocab / tp / bw

    overlap_slow = np.where(p.tp_overlap, 1.0 + cal.tp_overlap_slowdown, 1.0)
    compute_mb = (
        layers_stage_mtp * (gemm_fwd * 3.0 + core_fwd + core_bwd) + 3.0 * heads * logits_fwd
    ) * overlap_slow
    # kernel launches and small kernels (and an MoE layer's fixed costs): a fixed cost per
    # layer and pass, reported with the other fixed costs (overhead), not as HBM traffic
    layer_fixed = sub * cal.layer_overhead_s + moe_frac * moe_fixed
    fixed_mb = layers_stage_mtp * layer_fixed * 3.0
    mb_fixed = host * cal.microbatch_overhead_s
    mem_mb = layers_stage_mtp * mem_fwd * 3.0 + 3.0 * heads * logits_mem
    quant_mb = layers_stage_mtp * (cast_fwd + cast_bwd)
    # fraction of layers fully recomputed (partial: just enough to fit, from the memory model)
    if recompute_fraction is not None:
        full_frac = recompute_fraction
    elif (p.recompute == 3).any():
        full_frac = memory_breakdown(w, p, cal).recompute_fraction
    else:
        full_frac = np.where(p.recompute == 2, 1.0, 0.0)
    # selective: the chosen modules' forwards once more (default: the attention core)
    mods = w.recompute_modules
    shapes = up_proj_shapes(m) if "mla_up_proj" in mods else []
    up_t, _ = gemms(*((tokens, n / tp if split else n, float(k)) for n, k, split in shapes))
    # the norms that are modules of their own (an MoE layer's pre-norm, MLA's input norm;
    # Transformer Engine fuses the others into the next GEMM): read and write, 16-bit
    n_norms = moe_frac + (a_frac if m.mla is not None else 0.0)
    norm_bytes = n_norms * 4.0 * h * tokens
    moe_act_bytes = gate_rw * moe_frac * f_moe * 2.0
    parts = {
        "core_attn": a_frac * attn_fwd,
        "layernorm": np.where(p.sp, norm_bytes / tp, norm_bytes) / bw,
        "mla_up_proj": a_frac * up_t,
        "mlp": mlp_frac * (g.dense_mlp + gate_rw * m.dense_ffn_hidden * tokens * 2.0 / tp / bw),
        "moe": moe_frac * (g.moe + moe_fixed) + (moe_bytes + moe_act_bytes * tokens / tp) / bw,
        "moe_act": moe_act_bytes * tokens / tp / bw,
        "shared_experts": moe_frac
        * (g.shared + gate_rw * m.shared_ffn_hidden * tokens * 2.0 / tp / bw),
        "mamba": mamba_frac * (g.mamba + ssd_fwd) + mamba_bytes / bw,
    }
    if "ops" in mods:
        # torchtitan's per-op checkpointing: the even matmuls of the layer (for Llama wk,
        # wo and w3) and every elementwise kernel (norms, rotary embedding, activation,
        # residual adds) run again
        _, redo = op_sac_gemms(m, tp)
        redo_t, redo_c = gemms(*((tokens, n_cols, k_red) for _name, n_cols, k_red in redo))
        # a low precision re-quantises the rerun GEMMs' inputs; the kernels launched again
        # (every elementwise one and three of seven GEMMs: most of a forward's launches)
        # are priced as one forward pass's fixed cost
        parts["ops"] = a_frac * (redo_t + per_el * redo_c[0]) + mem_fwd + layer_fixed
    selective = selective_forward_s(mods, parts)
    recompute_mb = full_frac * layers_stage_mtp * (
        layer_fwd * overlap_slow + mem_fwd + layer_fixed + cast_fwd
    ) + np.where(p.recompute == 1, layers_stage_mtp * selective, 0.0)

    # --- communication: tensor, context and expert parallel, pipeline (perf/step_comm.py) --
    stage_mb = StageMicroBatch(
        w=w,
        p=p,
        cal=cal,
        tokens=tokens,
        s_loc=s_loc,
        tp=tp,
        cp=cp,
        layers_stage_mtp=layers_stage_mtp,
        full_frac=full_frac,
        a_frac=a_frac,
        mlp_frac=mlp_frac,
        moe_frac=moe_frac,
        mamba_frac=mamba_frac,
        sub=sub,
    )
    tp_mb = tp_comm_s(stage_mb)
    # one micro-batch's compute hides each collective once: the ring's K/V exchange takes
    # the attention cores' time it overlaps, the all-to-alls what is left of the compute,
    # and the data-parallel collectives (perf/data_parallel.py) what they leave
    cp_mb, cp_hidden = cp_comm_s(stage_mb, g.kv_rank, attn_fwd, attn_bwd)
    ep_mb, ep_hidden = ep_comm_s(stage_mb, compute_mb - cp_hidden)
    hidden_mb = cp_hidden + ep_hidden
    pp_mb = pp_comm_s(stage_mb)

    accum_mb = grad_accum_mb_s(w, p, cal)

    t_mb = (
        compute_mb
        + mem_mb
        + fixed_mb
        + quant_mb
        + recompute_mb
        + tp_mb
        + cp_mb
        + ep_mb
        + pp_mb
        + accum_mb
        + mb_fixed
    )
    # the host issues a layer's forward kernels in host_layer_s (a hybrid's block in its
    # share, as the small kernels' cost), its backward in twice that, a recomputed forward
    # again (torchtitan's per-op checkpointing reruns most of a forward's launches); it runs
    # ahead of the GPU, so a micro-batch takes at least that long, plus the framework's loop
    # that the same host runs: the GPU waits on the launches when its own work is shorter
    rerun = np.where(p.recompute == 1, 1.0 if "ops" in mods else 0.0, 0.0)
    passes = 3.0 + full_frac + rerun
    host_mb = host * layers_stage_mtp * sub * cal.host_layer_s * passes
    wait_mb = np.maximum(host_mb - (t_mb - mb_fixed), 0.0)
    t_mb = t_mb + wait_mb
    bubble = (p.pp - 1) / p.vpp * t_mb

    dp_comm, optimizer = data_parallel_s(
        w,
        p,
        cal,
        compute_mb + mem_mb + fixed_mb + quant_mb - hidden_mb,
        compute_mb - hidden_mb,
        mb,
        stages.fullest,  # its ZeRO-3 collectives' count a micro-batch (a layer each)
        full_frac,
    )

    z = np.zeros(len(p))
    # the framework's loop, logging and data loader, once a step
    step_fixed = host * cal.step_overhead_s
    return StepBreakdown(
        compute_s=mb * compute_mb,
        recompute_s=mb * recompute_mb,
        memory_bound_s=mb * mem_mb,
        quantise_s=mb * quant_mb,
        tp_comm_s=mb * tp_mb,
        cp_comm_s=mb * cp_mb,
        ep_comm_s=mb * ep_mb,
        pp_comm_s=mb * pp_mb,
        bubble_s=bubble,
        dp_comm_s=dp_comm,
        optimizer_s=optimizer,
        grad_accum_s=mb * accum_mb,
        overhead_s=z + step_fixed + mb * (mb_fixed + fixed_mb + wait_mb),
    )
