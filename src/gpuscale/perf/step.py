"""Training step time of a plan, term by term (the breakdown explains the total).

Per micro-batch, on the slowest pipeline stage (perf/stages.py: the slower of the fullest
stage and the last one, whose layers the output layer, the loss and the multi-token-
prediction depths, as their FLOP-equivalent of layers, join; a hybrid model's layers are
its blocks, each costed by its kind):
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
              PyTorch (no fused norm/RoPE/SwiGLU kernels) adds the bytes its extra ops move
              (perf/step_memory_bound.py).
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

from dataclasses import dataclass, field, fields

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.perf.data_parallel import data_parallel_s, grad_accum_mb_s
from gpuscale.perf.kernels import (
    FLASH_BWD_FACTOR,
    Rates,
    attention_core_s,
    cast_bytes_per_element,
    gemm_s,
    scan_s,
)
from gpuscale.perf.memory import memory_breakdown
from gpuscale.perf.plan import FloatArrayT, Plans, Workload
from gpuscale.perf.recompute import op_sac_gemms, selective_forward_s, up_proj_shapes
from gpuscale.perf.stages import Stages, pipeline_stages
from gpuscale.perf.step_comm import StageMicroBatch, micro_batch_comm
from gpuscale.perf.step_fixed import FixedCosts, fixed_costs, host_wait_mb_s
from gpuscale.perf.step_gemms import Gemms, LayerGemms, layer_gemms
from gpuscale.perf.step_memory_bound import MemoryBound, act_rw, memory_bound, moe_ffn_width
from gpuscale.perf.transformer import mtp_layer_equivalents

FloatArray = FloatArrayT


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

    pace: Stages = field(compare=False)
    """The stage each plan's terms are priced on: of the fullest stage and the last (with the
    output layer), the slower in time (not a term of the step)."""

    @property
    def step_s(self) -> FloatArray:
        total: FloatArray = np.sum(list(self.terms().values()), axis=0)
        return total

    def terms(self) -> dict[str, FloatArray]:
        return {name: getattr(self, name) for name in STEP_TERMS}


STEP_TERMS: tuple[str, ...] = tuple(f.name for f in fields(StepBreakdown) if f.name != "pace")
"""The step's terms, in the breakdown's order (every field but ``pace``)."""


def full_recompute_fraction(
    w: Workload, p: Plans, cal: Calibration, given: FloatArray | None
) -> FloatArray:
    """Fraction of each plan's layers recomputed whole: all of them under full
    recomputation, none without it or under selective recomputation, and under partial
    recomputation just enough to fit (the memory model's figure, perf/memory.py; ``given``
    where the caller has it)."""
    if given is not None:
        return given
    if (p.recompute == 3).any():
        return memory_breakdown(w, p, cal).recompute_fraction
    out: FloatArray = np.where(p.recompute == 2, 1.0, 0.0)
    return out


def stage_micro_batch(
    w: Workload, p: Plans, cal: Calibration, stages: Stages, recompute_fraction: FloatArray | None
) -> StageMicroBatch:
    """One micro-batch of each plan on the stage that sets its pipeline's pace
    (``stages.slowest``, perf/stages.py): mbs x s / cp tokens a GPU; the share of each block
    type per layer (attention + MLP (or MoE) layers have attention share 1 and MLP + MoE
    shares 1; a hybrid's blocks are one of attention, Mamba, MLP, MoE); multi-token
    prediction's depths as their FLOP-equivalent of average layers where that stage is the
    last (Megatron-Core places them beside the loss)."""
    m = w.model
    tp = p.tp.astype(np.float64)
    cp = p.cp.astype(np.float64)
    s_loc = w.seq_len / cp
    return StageMicroBatch(
        w=w,
        p=p,
        cal=cal,
        tokens=p.mbs * s_loc,
        s_loc=s_loc,
        tp=tp,
        cp=cp,
        layers_stage_mtp=stages.slowest + stages.head * mtp_layer_equivalents(m, w.seq_len),
        full_frac=full_recompute_fraction(w, p, cal, recompute_fraction),
        a_frac=m.attn_layers / m.layers,
        mlp_frac=m.mlp_layers / m.layers,
        moe_frac=m.moe_layers / m.layers,
        mamba_frac=m.mamba_layers / m.layers,
        # norms, residuals and TP reductions per layer, / 2
        sub=m.sublayers_per_layer / 2.0,
    )


@dataclass(frozen=True)
class LayerWork:
    """Seconds of one average layer's GEMMs and attention cores (or scans) on one
    micro-batch, per plan, and of quantising the GEMMs' inputs."""

    gemms: LayerGemms
    """Each block kind's forward GEMMs (perf/step_gemms.py)."""
    gemm_fwd_s: FloatArray
    """The forward GEMMs, the block kinds weighed by their shares."""
    attn_fwd_s: FloatArray
    """An attention layer's core, forward (perf/kernels.py)."""
    attn_bwd_s: FloatArray
    scan_fwd_s: FloatArray
    """A hybrid mixer's chunked scan, forward (perf/kernels.py)."""
    core_fwd_s: FloatArray
    """Attention cores and scans weighed by their shares, forward."""
    core_bwd_s: FloatArray
    quantise_s_per_el: float
    """Quantising one GEMM input element (0 at 16-bit precision)."""
    cast_fwd_s: FloatArray
    """Quantising the GEMMs' inputs X, forward."""
    cast_bwd_s: FloatArray
    """Quantising the GEMMs' output gradients dY, backward."""

    @property
    def fwd_s(self) -> FloatArray:
        """GEMMs and cores, forward."""
        out: FloatArray = self.gemm_fwd_s + self.core_fwd_s
        return out


def layer_work(c: StageMicroBatch, rates: Rates, gemms: Gemms) -> LayerWork:
    """One average layer's forward GEMMs (perf/step_gemms.py: tensor parallelism shrinks
    their per-GPU widths) weighed by the model's block shares; the attention core and a
    hybrid's scan (perf/kernels.py), the scan's backward FLASH_BWD_FACTOR x its forward as
    flash attention's (Dao 2023); FP8/NVFP4 quantising the GEMMs' inputs at HBM speed, X
    in forward (and again when the forward is recomputed), dY in backward."""
    w, cal, tp = c.w, c.cal, c.tp
    g = layer_gemms(w, c.p, gemms, tp, rates.mm16_flops)
    gemm_fwd = c.per_layer(g.attn, g.dense_mlp, g.moe, g.mamba)
    # the inputs a low precision quantises: X (forward), dY (backward)
    x_el = c.per_layer(g.attn_el[0], g.dense_mlp_el[0], g.moe_el[0], g.mamba_el[0])
    dy_el = c.per_layer(g.attn_el[1], g.dense_mlp_el[1], g.moe_el[1], g.mamba_el[1])
    per_el = cast_bytes_per_element(w, cal) / rates.hbm_Bps
    peak16, bw = rates.peak16_flops, rates.hbm_Bps
    mbs_f = c.p.mbs.astype(np.float64)
    attn_fwd, attn_bwd = attention_core_s(w, mbs_f, c.s_loc, tp, peak16, bw, cal)
    ssd_fwd = scan_s(w, c.tokens, tp, peak16, bw, cal)
    return LayerWork(
        gemms=g,
        gemm_fwd_s=gemm_fwd,
        attn_fwd_s=attn_fwd,
        attn_bwd_s=attn_bwd,
        scan_fwd_s=ssd_fwd,
        core_fwd_s=c.a_frac * attn_fwd + c.mamba_frac * ssd_fwd,
        core_bwd_s=c.a_frac * attn_bwd + c.mamba_frac * FLASH_BWD_FACTOR * ssd_fwd,
        quantise_s_per_el=per_el,
        cast_fwd_s=per_el * x_el,
        cast_bwd_s=per_el * dy_el,
    )


@dataclass(frozen=True)
class MicroBatchWork:
    """Seconds of one micro-batch's GPU work on the stage, per plan, by term."""

    compute_s: FloatArray
    """GEMMs and attention cores (or scans), forward and backward, the output layer's too."""
    memory_bound_s: FloatArray
    fixed_s: FloatArray
    """The layers' small kernels and launches (``FixedCosts.per_layer_s``), every pass."""
    quantise_s: FloatArray
    tp_slowdown: FloatArray
    """What overlapping TP communication with the GEMMs multiplies their time by."""

    @property
    def busy_s(self) -> FloatArray:
        """All of it: the GPU's work that hides the data-parallel collectives."""
        out: FloatArray = self.compute_s + self.memory_bound_s + self.fixed_s + self.quantise_s
        return out


def micro_batch_work(
    c: StageMicroBatch,
    rates: Rates,
    layer: LayerWork,
    mem: MemoryBound,
    fixed: FixedCosts,
    head: FloatArray,
) -> MicroBatchWork:
    """One micro-batch through the stage's layers, forward and backward: the GEMMs three
    times their forward (backward: dX and dW for each forward GEMM), the cores forward and
    backward, memory-bound kernels and fixed costs three times their forward, the inputs
    quantised forward and backward; on the last stage (``head`` 1) the output layer, whose
    logits GEMM stays 16-bit (Megatron-Core's output layer is not a Transformer Engine
    module, and torchtitan's float8 conversion leaves it out) and whose softmax/loss reads
    and writes fp32 logits, and one more head for each multi-token-prediction depth,
    which runs there too. Overlapping TP communication slows the compute by
    ``tp_overlap_slowdown``."""
    w, p, cal, tp, tokens, m = c.w, c.p, c.cal, c.tp, c.tokens, c.w.model
    heads = head * (1.0 + m.mtp_layers)
    logits_fwd = gemm_s(
        tokens, m.vocab / tp, float(m.hidden), 1.0, rates.mm16_flops, w.gpu.sms, cal
    )
    logits_mem = 3.0 * 4.0 * tokens * m.vocab / tp / rates.hbm_Bps
    overlap_slow = np.where(p.tp_overlap, 1.0 + cal.tp_overlap_slowdown, 1.0)
    layers = c.layers_stage_mtp
    layer_s = layer.gemm_fwd_s * 3.0 + layer.core_fwd_s + layer.core_bwd_s
    return MicroBatchWork(
        compute_s=(layers * layer_s + 3.0 * heads * logits_fwd) * overlap_slow,
        memory_bound_s=layers * mem.fwd_s * 3.0 + 3.0 * heads * logits_mem,
        fixed_s=layers * fixed.per_layer_s * 3.0,
        quantise_s=layers * (layer.cast_fwd_s + layer.cast_bwd_s),
        tp_slowdown=overlap_slow,
    )


def selective_recompute_s(
    c: StageMicroBatch,
    rates: Rates,
    gemms: Gemms,
    layer: LayerWork,
    mem: MemoryBound,
    fixed: FixedCosts,
) -> FloatArray:
    """Forward seconds a layer that selective recomputation runs again: those of the
    workload's modules (perf/recompute.py: Megatron-Core's ``--recompute-modules``,
    torchtitan's per-op policy), each averaged over the layers: its GEMMs, cores,
    memory-bound kernels and, for a whole MoE layer, its fixed costs."""
    m, p, tp, tokens, bw = c.w.model, c.p, c.tp, c.tokens, rates.hbm_Bps
    mods = c.w.recompute_modules
    g = layer.gemms
    shapes = up_proj_shapes(m) if "mla_up_proj" in mods else []
    up_t, _ = gemms(*((tokens, n / tp if split else n, float(k)) for n, k, split in shapes))
    # the norms that are modules of their own (an MoE layer's pre-norm, MLA's input norm;
    # Transformer Engine fuses the others into the next GEMM): read and write, 16-bit
    n_norms = c.moe_frac + (c.a_frac if m.mla is not None else 0.0)
    norm_bytes = n_norms * 4.0 * float(m.hidden) * tokens
    gate_rw = act_rw(m)
    moe_act_bytes = gate_rw * c.moe_frac * moe_ffn_width(m) * 2.0
    moe_bytes = mem.moe_permute_bytes
    parts = {
        "core_attn": c.a_frac * layer.attn_fwd_s,
        "layernorm": np.where(p.sp, norm_bytes / tp, norm_bytes) / bw,
        "mla_up_proj": c.a_frac * up_t,
        "mlp": c.mlp_frac * (g.dense_mlp + gate_rw * m.dense_ffn_hidden * tokens * 2.0 / tp / bw),
        "moe": c.moe_frac * (g.moe + fixed.per_moe_layer_s)
        + (moe_bytes + moe_act_bytes * tokens / tp) / bw,
        "moe_act": moe_act_bytes * tokens / tp / bw,
        "shared_experts": c.moe_frac
        * (g.shared + gate_rw * m.shared_ffn_hidden * tokens * 2.0 / tp / bw),
        "mamba": c.mamba_frac * (g.mamba + layer.scan_fwd_s) + mem.mamba_bytes / bw,
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
        redo_s = redo_t + layer.quantise_s_per_el * redo_c[0]
        parts["ops"] = c.a_frac * redo_s + mem.fwd_s + fixed.per_layer_s
    return selective_forward_s(mods, parts)


def recompute_mb_s(
    c: StageMicroBatch,
    layer: LayerWork,
    mem: MemoryBound,
    fixed: FixedCosts,
    tp_slowdown: FloatArray,
    selective: FloatArray,
) -> FloatArray:
    """Recomputed forward seconds of one micro-batch on the stage: the fully recomputed
    layers' whole forward again (full: all of them; partial: the fraction that must be
    recomputed to fit) with its memory-bound kernels, fixed costs and quantisation;
    selective: the chosen modules' forwards again, ``selective`` a layer (default the
    attention core; :func:`selective_recompute_s`)."""
    full_s = layer.fwd_s * tp_slowdown + mem.fwd_s + fixed.per_layer_s + layer.cast_fwd_s
    out: FloatArray = c.full_frac * c.layers_stage_mtp * full_s + np.where(
        c.p.recompute == 1, c.layers_stage_mtp * selective, 0.0
    )
    return out


def _on_stage(
    w: Workload, p: Plans, cal: Calibration, stages: Stages, frac: FloatArray
) -> StepBreakdown:
    """Each plan's step priced on the stage ``stages.slowest`` (with the output layer where
    ``stages.head``): m micro-batches there, the bubble (p - 1)/v of one, the data-parallel
    communication that stage's work leaves exposed, the optimizer, the fixed cost a step."""
    c = stage_micro_batch(w, p, cal, stages, frac)
    rates = Rates.of(w, cal)
    gemms = Gemms(c.tokens, rates.gemm_flops, w.gpu.sms, cal)
    layer = layer_work(c, rates, gemms)
    mem = memory_bound(c, rates.hbm_Bps)
    fixed = fixed_costs(c)
    work = micro_batch_work(c, rates, layer, mem, fixed, stages.head)
    selective = selective_recompute_s(c, rates, gemms, layer, mem, fixed)
    recompute_mb = recompute_mb_s(c, layer, mem, fixed, work.tp_slowdown, selective)
    kv_rank = layer.gemms.kv_rank
    comm = micro_batch_comm(c, kv_rank, layer.attn_fwd_s, layer.attn_bwd_s, work.compute_s)
    accum_mb = grad_accum_mb_s(w, p, cal)
    mb_fixed = fixed.per_micro_batch_s
    busy_mb = work.busy_s
    t_mb = (
        busy_mb + recompute_mb + comm.tp_s + comm.cp_s + comm.ep_s + comm.pp_s + accum_mb + mb_fixed
    )
    wait_mb = host_wait_mb_s(c, fixed, t_mb - mb_fixed)
    t_mb = t_mb + wait_mb
    mb = p.microbatches(w).astype(np.float64)
    dp_comm, optimizer = data_parallel_s(
        w,
        p,
        cal,
        busy_mb - comm.hidden_s,
        work.compute_s - comm.hidden_s,
        mb,
        stages.fullest,  # its ZeRO-3 collectives' count a micro-batch (a layer each)
        frac,
    )
    z = np.zeros(len(p))
    return StepBreakdown(
        compute_s=mb * work.compute_s,
        recompute_s=mb * recompute_mb,
        memory_bound_s=mb * work.memory_bound_s,
        quantise_s=mb * work.quantise_s,
        tp_comm_s=mb * comm.tp_s,
        cp_comm_s=mb * comm.cp_s,
        ep_comm_s=mb * comm.ep_s,
        pp_comm_s=mb * comm.pp_s,
        bubble_s=(p.pp - 1) / p.vpp * t_mb,
        dp_comm_s=dp_comm,
        optimizer_s=optimizer,
        grad_accum_s=mb * accum_mb,
        overhead_s=z + fixed.per_step_s + mb * (mb_fixed + work.fixed_s + wait_mb),
        pace=stages,
    )


def step_breakdown(
    w: Workload, p: Plans, cal: Calibration, recompute_fraction: FloatArray | None = None
) -> StepBreakdown:
    """Step-time terms of each plan; ``recompute_fraction`` is the memory model's (computed
    here when not given). A micro-batch on the slowest stage is its GPU work, recomputation,
    exposed TP, CP, EP and PP communication, gradient accumulation, the framework's loop and
    any wait on the host; the step is m such micro-batches, the bubble (p - 1)/v of one,
    the exposed data-parallel communication, the optimizer and the fixed cost a step.

    The slowest stage is the one :func:`~gpuscale.perf.stages.pipeline_stages` chose by
    FLOPs or, where a pipeline's fullest stage and its last (with the output layer) differ,
    the other one when the step priced on it is longer (an MoE layer's communication and
    fixed costs, which the output layer has not, or a 16-bit output layer beside FP8
    layers, can outweigh a layer's FLOPs)."""
    frac = full_recompute_fraction(w, p, cal, recompute_fraction)
    stages = pipeline_stages(w, p)
    out = _on_stage(w, p, cal, stages, frac)
    two = (p.pp > 1) & ((stages.head == 0) | (stages.last < stages.fullest))
    if not two.any():
        return out
    idx = np.flatnonzero(two)
    head = stages.head[idx]
    alt = Stages(
        fullest=stages.fullest[idx],
        last=stages.last[idx],
        slowest=np.where(head == 1, stages.fullest[idx], stages.last[idx]),
        head=1.0 - head,
    )
    other = _on_stage(w, p.take(idx), cal, alt, frac[idx])
    slower = other.step_s > out.step_s[idx]
    at = idx[slower]

    def merged(mine: FloatArray, theirs: FloatArray) -> FloatArray:
        v = mine.copy()
        v[at] = theirs[slower]
        return v

    pace = Stages(*(merged(getattr(stages, f.name), getattr(alt, f.name)) for f in fields(alt)))
    terms = {k: merged(v, getattr(other, k)) for k, v in out.terms().items()}
    return StepBreakdown(**terms, pace=pace)
