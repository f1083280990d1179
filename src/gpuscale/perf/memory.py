"""Memory per GPU of a training plan: weights, gradients, optimizer states, activations.

Bytes per parameter with mixed-precision Adam (ZeRO paper, arXiv 1910.02054; Megatron
``theoretical_memory_usage.py``), d = data-parallel sharding group (DP x CP, or the
hybrid shard group):
  none (Megatron DDP, fp32 main grads): 2 + 4 + 12        = 18
  dist-opt (Megatron distributed opt.): 2 + 4 + 12/d
  zero1:                                2 + 2 + 12/d
  zero2:                                2 + (2 + 12)/d   (under a pipeline: dist-opt's)
  zero3 / FSDP:                         (2 + 2 + 12)/d   (under a pipeline: dist-opt's)
FP8 training keeps an extra 1-byte copy of each weight (Transformer Engine). Gradients
accumulated in a pass of their own (DeepSpeed's BF16 optimizer) take 2 + 4 bytes.

Activations per layer and micro-batch: :mod:`gpuscale.perf.activations` (Korthikanti et
al. 2022, arXiv 2205.05198). The first pipeline stage holds p micro-batches in flight
(x (1 + (p-1)/(p v)) interleaved, at most all m); the last one holds one (interleaved,
((v-1) p + 1)/v) and the fp32 logits of the output layer (three with an op-by-op loss,
:data:`LOSS_BYTES`); memory is that of the fuller of the two.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.perf.activations import activation_bytes_per_layer
from gpuscale.perf.plan import (
    PP_SPLITS,
    FloatArrayT,
    IntArray,
    Plans,
    Workload,
    memory_sharding,
    pipelined_zero3,
    separate_accumulation,
)
from gpuscale.perf.sharding import ShardGroups
from gpuscale.perf.stage_kinds import StageCandidate, stage_candidates
from gpuscale.perf.stage_params import candidate_embedding, candidate_layers, candidate_params
from gpuscale.perf.stages import pipeline_stages, placed_layers
from gpuscale.perf.transformer import kv_pair_width, mtp_layer_equivalents

FloatArray = FloatArrayT

SEPARATE_GRAD_BYTES = 6.0
"""Gradient bytes per parameter when gradients accumulate in a pass of their own (DeepSpeed's
BF16 optimizer, ``Workload.grad_accumulation``, on DDP and ZeRO-1 plans): the 16-bit
gradient and its fp32 accumulator, both whole."""

# bytes per parameter: (weights, gradients, optimizer states, sharded parts divided by d)
# columns: weights, grads, optimizer; each as (unsharded, sharded) byte counts
_BYTES = {
    0: ((2, 0), (4, 0), (12, 0)),
    1: ((2, 0), (4, 0), (0, 12)),
    2: ((2, 0), (2, 0), (0, 12)),
    3: ((2, 0), (0, 2), (0, 12)),
    4: ((0, 2), (0, 2), (0, 12)),
}


LOSS_BYTES = {"fused": 4.0, "eager": 12.0}
"""Bytes a logit takes at the loss's peak, by how the run's memory-bound ops run
(:data:`~gpuscale.perf.plan.ELEMENTWISE`). A fused cross-entropy (Megatron's vocab-parallel
kernel, torch.compile's) keeps one fp32 copy, the softmax it overwrites with its gradient:
Megatron-LM's CI memory tests come within 3 % with it (``gpuscale validate memory`` on
``benchmarks/heldout/memory_published.csv``). PyTorch's op-by-op ``cross_entropy`` of
upcast logits keeps the fp32 log-softmax for the backward, which then writes its gradient
and its input's: three fp32 copies."""


MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "buffers")
"""The parts of a GPU's memory a :class:`MemoryBreakdown` holds, in the order reports list
them; they add up to its total."""


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU on the most loaded pipeline stage, one array element per plan."""

    weights: FloatArray
    gradients: FloatArray
    optimizer: FloatArray
    activations: FloatArray
    buffers: FloatArray
    """Communication buffers, unsharded ZeRO-3 layers, CUDA/NCCL workspaces."""
    capacity: float
    recompute_fraction: FloatArray
    """Fraction of layers whose activations are recomputed (1 for full, 0 for none)."""

    @property
    def total(self) -> FloatArray:
        return self.weights + self.gradients + self.optimizer + self.activations + self.buffers

    @property
    def fits(self) -> np.ndarray:
        # partial recompute fills the memory exactly: allow for the rounding of that sum
        return self.total <= self.capacity * (1.0 + 1e-9)

    @property
    def headroom(self) -> FloatArray:
        """capacity - total: negative means the plan is short by that many bytes."""
        return self.capacity - self.total


def memory_breakdown(w: Workload, p: Plans, cal: Calibration) -> MemoryBreakdown:
    """Memory per GPU of the stage that holds the most: of the first and the last stage
    and, where the layers differ in kind, the stages between them that may be fuller
    (:func:`~gpuscale.perf.stage_kinds.stage_candidates`)."""
    m = w.model
    # the ranks the sharded states spread over (all DP x CP ranks, or a hybrid shard group)
    groups = ShardGroups.of(w, p)
    # ZeRO-2 and FSDP under a pipeline hold whole weights and fp32 gradients, as the
    # distributed optimizer does (plan.memory_sharding)
    shard = memory_sharding(p)
    cands = stage_candidates(w, p)
    # per mix of layers: a model whose layers are all alike prices one for both ends
    by_mix: dict[int, tuple[FloatArray, FloatArray, FloatArray, FloatArray]] = {}
    for c in cands:
        if id(c.mix) not in by_mix:
            # the stage's embedding or output layer: 16-bit, never an FP8 copy
            emb = candidate_embedding(w, p, c)
            by_mix[id(c.mix)] = _states(w, p, cal, groups, shard, emb, *candidate_params(w, p, c))
    states = [by_mix[id(c.mix)] for c in cands]
    # activations in flight: the first and the last pipeline stage (the same one without
    # PP), Megatron's warm-up for one between them
    first_mbs, last_mbs = in_flight(w, p)
    # the MTP depths' activations on the last stage, beside the loss
    stages = pipeline_stages(w, p)
    mtp = mtp_layer_equivalents(m, w.seq_len)
    acts_of = _layer_activations(w, p, cands)
    # the last stage's output layer and loss at its peak, one per MTP depth too
    s_loc = w.seq_len / p.cp
    logits = (1 + m.mtp_layers) * LOSS_BYTES[w.loss_kind] * s_loc * p.mbs * m.vocab / p.tp
    gathered = _gathered_kv(w, p)
    ovh = cal.mem_activation_overhead
    held, extra, rooms = [], [], []
    for c, (weights, grads, opt, buffers) in zip(cands, states, strict=True):
        first, last = c.rank == 0, c.rank == p.pp - 1
        mbs = np.where(first, first_mbs, np.where(last, last_mbs, _warmup(w, p, c.rank)))
        held.append((candidate_layers(p, c, stages) + np.where(last, mtp, 0.0)) * mbs)
        extra.append(np.where(last, logits, 0.0))
        rooms.append(w.memory_capacity - (weights + grads + opt + buffers))

    def recompute_needed(k: int) -> FloatArray:
        """Partial recompute: the fraction r of a stage's layers recomputed that just fills
        the memory left (a recomputed layer keeps its input; one layer is re-materialised
        at a time); none where the stage fits without."""
        _, none_layer, full_layer = acts_of[id(cands[k].mix)]
        kept = none_layer * held[k] * ovh
        need = kept - (rooms[k] - (extra[k] + gathered + none_layer) * ovh)
        span = (none_layer - full_layer) * held[k] * ovh
        out: FloatArray = np.clip(need / np.maximum(span, 1.0), 0.0, 1.0)
        return np.where(kept + (extra[k] + gathered) * ovh <= rooms[k], 0.0, out)

    # The fraction is continuous, not whole layers: besides --recompute-num-layers, Megatron
    # recomputes chosen modules of every layer (--recompute-modules: norms, activations,
    # MoE parts), which trims memory in steps well below a layer. Rounding up to whole
    # layers of a virtual chunk turns Llama 3.1 405B's GB200 plan (one layer per chunk)
    # into full recomputation, 20 % slower than Megatron-Bridge measured. Every stage
    # recomputes the same fraction: the one the fullest stage needs.
    r_partial = recompute_needed(0)
    for k in range(1, len(cands)):
        r_partial = np.maximum(r_partial, recompute_needed(k))
    frac = np.select([p.recompute == 2, p.recompute == 3], [1.0, r_partial], 0.0)

    def stage_acts(k: int) -> FloatArray:
        per_layer_act, none_layer, full_layer = acts_of[id(cands[k].mix)]
        kept = np.where(
            p.recompute == 3,
            held[k] * (none_layer * (1.0 - frac) + full_layer * frac),
            per_layer_act * held[k],
        )
        # a recomputed layer is re-materialised whole, one at a time. The loss frees its
        # logits before the backward recomputes a layer, but the caching allocator's
        # reserved peak holds both: torchtitan's full-checkpointing runs on H100 (reserved
        # peaks of benchmarks/heldout/memory_published.csv) come out 4-8 % lower each when
        # the peak is the larger of the two instead
        out: FloatArray = (kept + np.where(frac > 0, none_layer, 0.0) + extra[k] + gathered) * ovh
        return out

    weights, grads, opt, buffers, acts = _fullest(
        cands, states, [stage_acts(k) for k in range(len(cands))]
    )
    return MemoryBreakdown(weights, grads, opt, acts, buffers, w.memory_capacity, frac)


def _layer_activations(
    w: Workload, p: Plans, cands: list[StageCandidate]
) -> dict[int, tuple[FloatArray, FloatArray, FloatArray]]:
    """Per mix of layers (keyed by its id): the bytes a layer keeps under each plan's
    recompute mode, with none and with full recomputation."""
    cols_p = _cols(p)
    no_rc = Plans.of(**{**cols_p, "recompute": 0})
    full_rc = Plans.of(**{**cols_p, "recompute": 2})
    acts_of: dict[int, tuple[FloatArray, FloatArray, FloatArray]] = {}
    for c in cands:
        if id(c.mix) not in acts_of:
            acts_of[id(c.mix)] = (
                activation_bytes_per_layer(w, p, mix=c.mix),
                activation_bytes_per_layer(w, no_rc, mix=c.mix),
                activation_bytes_per_layer(w, full_rc, mix=c.mix),
            )
    return acts_of


def _fullest(
    cands: list[StageCandidate],
    states: list[tuple[FloatArray, FloatArray, FloatArray, FloatArray]],
    acts: list[FloatArray],
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """The fullest candidate stage's weights, gradients, optimizer states, buffers and
    activations, per plan (stages of the same layers differ only in their activations)."""
    weights, grads, opt, buffers = states[0]
    held = acts[0]
    for k in range(1, len(cands)):
        if cands[k].mix is cands[0].mix:
            held = np.maximum(held, acts[k])
            continue
        w_k, g_k, o_k, b_k = states[k]
        more = w_k + g_k + o_k + b_k + acts[k] > weights + grads + opt + buffers + held
        weights, grads = np.where(more, w_k, weights), np.where(more, g_k, grads)
        opt, buffers = np.where(more, o_k, opt), np.where(more, b_k, buffers)
        held = np.where(more, acts[k], held)
    return weights, grads, opt, buffers, held


def _gathered_kv(w: Workload, p: Plans) -> FloatArray:
    """Bytes an attention layer's all-gather context parallelism (``cp_comm`` all_gather)
    holds while its backward runs: K and V of the whole sequence gathered again, and the
    whole sequence's dK and dV they reduce-scatter from (16-bit); 0 otherwise. One layer
    at a time (the forward's gathered K and V are freed after its kernels)."""
    m = w.model
    if w.cp_exchange != "all_gather" or not m.attn_layers:
        return np.zeros(len(p))
    whole = p.mbs * w.seq_len * kv_pair_width(m, p.tp.astype(np.float64)) * 2.0
    out: FloatArray = np.where(p.cp > 1, 2.0 * whole, 0.0)
    return out


def _states(
    w: Workload,
    p: Plans,
    cal: Calibration,
    groups: ShardGroups,
    shard: IntArray,
    emb: FloatArray,
    dense: FloatArray,
    expert: FloatArray,
    per_layer: FloatArray,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """(weights, gradients, optimizer states, buffers) of a stage holding ``dense`` and
    ``expert`` parameters a GPU, its average layer ``per_layer``, ``emb`` of the dense
    ones its embedding or output layer."""
    d, d_exp = groups.dense, groups.expert
    cols = []
    for j in range(3):
        un = np.select([shard == k for k in _BYTES], [_BYTES[k][j][0] for k in _BYTES])
        sh = np.select([shard == k for k in _BYTES], [_BYTES[k][j][1] for k in _BYTES])
        cols.append(dense * (un + sh / d) + expert * (un + sh / d_exp))
    weights, grads, opt = cols
    # DeepSpeed's BF16 optimizer (DDP or ZeRO-1 plans): the 16-bit gradients the backward
    # writes (2 B) and the fp32 accumulators they are added into (4 B), whole
    grads = np.where(separate_accumulation(w, p), (dense + expert) * SEPARATE_GRAD_BYTES, grads)
    if w.precision in ("fp8", "fp4"):
        # the 1-byte FP8 weight copy (NVFP4: row- and column-wise 0.56-byte copies) of the
        # layers' linear weights, sharded like the 16-bit weights under ZeRO-3/FSDP; the
        # embedding and the output layer stay 16-bit (Transformer Engine's FP8 is its own
        # linear layers'; torchtitan's float8 filters out the output layer). With FP8
        # parameter gathers Megatron's FP8 weights are the only copy of those layers (the
        # optimizer holds the fp32 master), while FSDP casts its sharded parameters to FP8
        # for each all-gather and stores no FP8 shard
        z3 = shard == 4
        linear = dense - emb
        fp8_copy = np.where(z3, linear / d + expert / d_exp, linear + expert)
        if w.fp8_param_gather:
            weights = np.where(z3, weights, fp8_copy + 2.0 * emb)
        else:
            weights = weights + fp8_copy
    # FSDP under a pipeline holds what it gathered, whole: its 16-bit weights (FP8 with FP8
    # gathers), no persistent FP8 copy beside them
    weights = np.where(pipelined_zero3(p), (dense + expert) * w.gathered_weight_bytes, weights)
    # ZeRO-3 gathers a layer's full 16-bit (or FP8) weights and its 16-bit gradients while
    # computing it, with one more prefetched: 2 layers x (2 + 2) bytes per parameter
    zero3 = np.where(shard == 4, 2.0 * per_layer * (w.gathered_weight_bytes + 2.0), 0.0)
    buffers = np.full(len(p), cal.mem_reserved_bytes) + zero3
    return weights, grads, opt, buffers


def _warmup(w: Workload, p: Plans, rank: IntArray) -> FloatArray:
    """Micro-batches' worth of a stage's layers that pipeline rank ``rank`` holds at its
    peak: p - r under 1F1B; interleaved, Megatron's warm-up of 2 (p - 1 - r) + (v - 1) p
    chunks and the one in flight, over v; at most all m (:func:`in_flight` gives the ends)."""
    mb = p.microbatches(w).astype(np.float64)
    pp, v, r = p.pp.astype(np.float64), p.vpp.astype(np.float64), rank.astype(np.float64)
    held = np.where(p.vpp > 1, (2.0 * (pp - 1.0 - r) + (v - 1.0) * pp + 1.0) / v, pp - r)
    out: FloatArray = np.minimum(held, mb)
    return out


def in_flight(w: Workload, p: Plans) -> tuple[FloatArray, FloatArray]:
    """Micro-batches' worth of a stage's layers that the first and the last pipeline stage
    hold at their peak.

    1F1B: the first stage holds min(m, p), the last one. Interleaved (v chunks per stage),
    Megatron's warm-up runs 2(p - 1 - r) + (v - 1) p chunks on rank r before its first
    backward, so at the peak the first stage holds p (1 + (p - 1)/(p v)) micro-batches'
    worth (Korthikanti et al. 2022; p + (p - 1) c / S where the stage's first chunk holds c
    of its S layers, more than S / v where the even split leaves the chunks unequal) and
    the last ((v - 1) p + 1)/v, both capped at all
    m v chunks. With m = p the last stage is kept at ((v - 1) p + 1)/v, not m: Megatron-LM's
    functional test of a 7B model at PP4 VPP8 and 4 micro-batches logs its last rank's peak
    at 56.4 GiB, 1.6 % under this model's figure and 7 % under the one with m in flight
    (``benchmarks/heldout/memory_published.csv``, ``mg-h100-pp4``).
    """
    mb = p.microbatches(w).astype(np.float64)
    pp = p.pp.astype(np.float64)
    v = p.vpp.astype(np.float64)
    # the warm-up's p - 1 chunks beyond p of each run the stage's first chunk, which under
    # the even split holds ceil(L / (p v)) layers, more than the average where they do not
    # divide (chunks of 4, 3 and 3: 4/10 of the stage, not 1/3)
    n = placed_layers(w.model)
    even = p.split == PP_SPLITS.index("even")
    share = np.where(even, np.ceil(n / (pp * v)) / p.stage_layers(n), 1.0 / v)
    first = np.where(p.vpp > 1, pp + (pp - 1.0) * share, pp)
    last = np.where(p.vpp > 1, ((v - 1.0) * pp + 1.0) / v, 1.0)
    return np.minimum(first, mb), np.minimum(last, mb)


def _cols(p: Plans) -> dict[str, np.ndarray]:
    return {k: getattr(p, k) for k in p.__dataclass_fields__}
