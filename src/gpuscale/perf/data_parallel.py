"""Data-parallel communication and the optimizer step of a training iteration.

Gradients are reduced (all-reduce, or reduce-scatter with a sharded optimizer) and sharded
parameters all-gathered once per step, hidden behind the last micro-batch's backward and the
first's forward up to ``dp_overlap`` and that window. ZeRO-2 reduce-scatters every
micro-batch's gradients (it keeps them only as shards), each hidden as ZeRO-1's one is, and
gathers parameters once per step. ZeRO-3/FSDP gathers each layer's weights in forward and
backward and reduce-scatters its gradients every micro-batch, hidden up to
``zero3_overlap`` and the micro-batch's compute. Expert weights reduce over their own,
smaller expert-data-parallel group. With hybrid sharding (HSDP) the gathers and
reduce-scatters run within a shard group, and each reduce-scatter's shard is all-reduced
across the group's replicas (as FSDP's HYBRID_SHARD does after every reduce-scatter). The
optimizer reads and writes every local parameter's Adam state at HBM speed. Gradients
accumulated outside the GEMMs (``Workload.grad_accumulation``) cost a pass over every
parameter a GPU holds after each micro-batch's backward (:func:`grad_accum_mb_s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.perf.comm.distinct import collective_s
from gpuscale.perf.plan import (
    FloatArrayT,
    IntArray,
    Plans,
    Workload,
    cost_sharding,
    separate_accumulation,
)
from gpuscale.perf.sharding import ShardGroups
from gpuscale.perf.stage_params import heaviest_stage_params, stage_param_sets

FloatArray = FloatArrayT

ADAM_BYTES_PER_PARAM = 30.0
"""HBM traffic of one fused Adam update per parameter: read fp32 param, grad, m, v (16 B),
write param, m, v (12 B) and the 16-bit model copy (2 B)."""
ACCUM_BYTES_PER_GRAD = 18.0
"""HBM traffic of a separate fp32 gradient accumulation per gradient element, as DeepSpeed's
BF16 optimizer runs it (``hp_grad.add_(lp.grad.to(fp32))``, two kernels): read the 16-bit
gradient (2 B), write and read its fp32 copy (8 B), read and write the accumulator (8 B)."""


@dataclass(frozen=True)
class _Group:
    """The ranks of one kind of data-parallel collective: ``n`` of them for the dense
    parameters, ``k`` inside each scale-up domain, and the share ``1 / split`` of the
    parameters each one moves (the same for the expert parameters' groups)."""

    n: FloatArray
    k: FloatArray
    n_exp: FloatArray
    k_exp: FloatArray
    split: FloatArray | float = 1.0
    split_exp: FloatArray | float = 1.0


def data_parallel_s(
    w: Workload,
    p: Plans,
    cal: Calibration,
    busy_mb: FloatArray,
    compute_mb: FloatArray,
    mb: FloatArray,
    layers_stage: FloatArray,
    full_frac: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """(exposed DP communication, optimizer) seconds per step of each plan: those of the
    pipeline stage whose gradients and optimizer step take longest (every stage reduces its
    own; dense and expert parameters over different groups). ``busy_mb`` is a micro-batch's
    GPU work on the stage (GEMMs, attention, memory-bound, quantisation), ``compute_mb`` its
    GEMMs and attention, each less what the micro-batch's context- and expert-parallel
    collectives already hide behind; ``mb`` the micro-batches per step."""
    work = StageWork(busy_mb, compute_mb, mb, layers_stage, full_frac)
    best: tuple[FloatArray, FloatArray] | None = None
    for dense, expert in stage_param_sets(w, p):
        dp, opt = _stage_dp_s(w, p, cal, work, dense, expert)
        if best is None:
            best = (dp, opt)
            continue
        more = dp + opt > best[0] + best[1]
        best = (np.where(more, dp, best[0]), np.where(more, opt, best[1]))
    assert best is not None
    return best


class StageWork(NamedTuple):
    """What hides a stage's data-parallel collectives (:func:`data_parallel_s`'s inputs)."""

    busy_mb: FloatArray
    compute_mb: FloatArray
    mb: FloatArray
    layers_stage: FloatArray
    full_frac: FloatArray


@dataclass(frozen=True)
class _StageCollectives:
    """The data-parallel collectives of a stage holding ``dense`` and ``expert`` parameters
    a GPU, per plan: the groups they run among and the bytes a gradient takes."""

    w: Workload
    cal: Calibration
    dense: FloatArray
    expert: FloatArray
    d: FloatArray
    """Data-parallel ranks, DP x CP."""
    whole: _Group
    """All the data-parallel ranks (expert parameters: the expert-data-parallel ones)."""
    shards: _Group
    """One shard group's ranks (all of them without hybrid sharding)."""
    replicas: _Group
    """The ranks holding the same shard in the other shard groups, each moving a shard."""
    grad_b: FloatArray
    """Bytes a gradient element takes in the reduction."""
    groups: ShardGroups
    """The ranks the sharded states spread over, and their replicas."""

    def time_s(
        self,
        op: str,
        nbytes_per_param: FloatArray | float,
        pieces: FloatArray | float = 1.0,
        over: _Group | None = None,
    ) -> FloatArray:
        """DP collective over the stage's parameters (1 / ``over.split`` of them), issued
        as ``pieces`` equal calls among the ranks of ``over`` (all of them by default)."""
        over = self.whole if over is None else over
        f, cal = self.w.fabric, self.cal
        t_dense = collective_s(
            op, self.dense * nbytes_per_param / (pieces * over.split), over.n, over.k, f, cal
        )
        t_exp = (
            collective_s(
                op,
                self.expert * nbytes_per_param / (pieces * over.split_exp),
                over.n_exp,
                over.k_exp,
                f,
                cal,
            )
            if self.w.model.is_moe
            else np.zeros_like(self.d)
        )
        return pieces * (np.where(over.n > 1, t_dense, 0.0) + np.where(over.n_exp > 1, t_exp, 0.0))

    def reduce_grads_s(self, pieces: FloatArray | float = 1.0) -> FloatArray:
        """Reduce-scatter within the shard group, then all-reduce each shard across the
        replicas (nothing more without hybrid sharding)."""
        return self.time_s("reduce_scatter", self.grad_b, pieces, self.shards) + self.time_s(
            "all_reduce", self.grad_b, pieces, self.replicas
        )


def _stage_collectives(
    w: Workload,
    p: Plans,
    cal: Calibration,
    shard: IntArray,
    dense: FloatArray,
    expert: FloatArray,
) -> _StageCollectives:
    """The groups a stage's gradient reductions and parameter gathers run among, placed on
    the fabric (``shard``: each plan's sharding as it is costed)."""
    f = w.fabric
    tp = p.tp.astype(np.float64)
    d = (p.dp * p.cp).astype(np.float64)
    d_exp = np.maximum(d * tp / p.ep, 1.0)
    dp_k = np.clip(f.scaleup_domain_gpus / tp, 1.0, d)
    # gradients reduce in fp32 under Megatron's DDP and distributed optimizer and FSDP's
    # mixed precision (reduce_dtype fp32); in the 16-bit dtype under DeepSpeed's ZeRO,
    # stage 3 included (its communication_data_type defaults to the model's)
    fsdp = (shard == 4) & (w.zero3_gathers != "per-param")
    grad_b = np.where((shard <= 1) | fsdp, 4.0, 2.0)

    # expert parallelism takes the innermost ranks (expert TP = 1), so an expert-DP group
    # has only domain / EP members in each scale-up domain
    k_exp = np.clip(f.scaleup_domain_gpus / p.ep, 1.0, d_exp)
    # hybrid sharding: a shard group takes the innermost data-parallel ranks, its replicas
    # the ranks a shard group's size apart
    g = ShardGroups.of(w, p)
    whole = _Group(d, dp_k, d_exp, k_exp)
    shards = _Group(g.dense, np.minimum(dp_k, g.dense), g.expert, np.minimum(k_exp, g.expert))
    replicas = _Group(
        g.dense_replicas,
        np.clip(dp_k / g.dense, 1.0, g.dense_replicas),
        g.expert_replicas,
        np.clip(k_exp / g.expert, 1.0, g.expert_replicas),
        g.dense,
        g.expert,
    )
    return _StageCollectives(w, cal, dense, expert, d, whole, shards, replicas, grad_b, g)


def _stage_dp_s(
    w: Workload,
    p: Plans,
    cal: Calibration,
    work: StageWork,
    dense: FloatArray,
    expert: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """:func:`data_parallel_s` of a stage holding ``dense`` and ``expert`` parameters a GPU."""
    # ZeRO-2 under a pipeline gathers and reduces once a step, as the distributed
    # optimizer does (plan.pipelined_fsdp)
    shard = cost_sharding(p)
    c = _stage_collectives(w, p, cal, shard, dense, expert)
    dp_comm = _exposed_dp_s(c, work, shard)
    # --- optimizer ---------------------------------------------------------------------------
    bw = w.gpu.hbm_bw_Bps * cal.hbm_eff
    g = c.groups
    sharded = shard >= 1
    opt_params = np.where(sharded, dense / g.dense + expert / g.expert, dense + expert)
    optimizer = opt_params * ADAM_BYTES_PER_PARAM / bw
    return dp_comm, optimizer


def _exposed_dp_s(c: _StageCollectives, work: StageWork, shard: IntArray) -> FloatArray:
    """The stage's data-parallel communication left exposed a step, by how each plan
    shards: once a step (DDP, distributed optimizer, ZeRO-1), the gradients every
    micro-batch (ZeRO-2), every layer and micro-batch (ZeRO-3/FSDP)."""
    busy_mb, compute_mb, mb, layers_stage, full_frac = work
    cal = c.cal
    reduce_scatter = c.reduce_grads_s()
    grads = np.where(shard == 0, c.time_s("all_reduce", c.grad_b), reduce_scatter)
    ag_b = c.w.gathered_weight_bytes
    gather = c.time_s("all_gather", ag_b, over=c.shards)
    # bwd of the last micro-batch (grads) and fwd of the first (param all-gather) hide it
    window = busy_mb * (2.0 / 3.0)

    def exposed(t: FloatArray) -> FloatArray:
        """What a per-step collective leaves exposed beyond dp_overlap and the window."""
        out: FloatArray = np.maximum(t * (1.0 - cal.dp_overlap), t - window)
        return out

    exposed_step = exposed(grads + np.where(shard >= 1, gather, 0.0))
    per_mb_z3 = _zero3_per_mb_s(c, layers_stage, full_frac)
    exposed_z3 = mb * np.maximum(per_mb_z3 * (1.0 - cal.zero3_overlap), per_mb_z3 - compute_mb)
    # ZeRO-2 / FSDP SHARD_GRAD_OP: gradients live only as shards, so every micro-batch's
    # backward reduce-scatters them into their owners (DeepSpeed stage 2 reduces at each
    # micro-step), each hidden as ZeRO-1's one reduction is behind the last (a
    # one-micro-batch ZeRO-2 step times as ZeRO-1's); parameters are gathered once per step
    exposed_z2 = mb * exposed(reduce_scatter) + exposed(gather)
    dp_comm: FloatArray = np.select(
        [shard == 4, shard == 3], [exposed_z3, exposed_z2], exposed_step
    )
    return dp_comm


def _zero3_per_mb_s(
    c: _StageCollectives, layers_stage: FloatArray, full_frac: FloatArray
) -> FloatArray:
    """ZeRO-3/FSDP's collectives of one micro-batch on the stage: it gathers each layer's
    weights in forward and in backward and reduce-scatters its gradients, layer by layer
    (one collective per layer each)."""
    rs_z3 = c.reduce_grads_s(layers_stage)
    ag_b = c.w.gathered_weight_bytes
    ag_z3 = c.time_s("all_gather", ag_b, layers_stage, c.shards)
    if c.w.zero3_gathers == "per-param":
        # per-tensor gathers from module hooks: the implementation's rate bounds each pass
        # over the stage's gathered weights, and recomputation gathers them once more
        impl = (c.dense + c.expert) * ag_b / c.cal.zero3_param_gather_Bps
        per_param: FloatArray = np.maximum(rs_z3, impl) + (2.0 + full_frac) * np.maximum(
            ag_z3, impl
        )
        return per_param
    coalesced: FloatArray = rs_z3 + 2.0 * ag_z3
    return coalesced


def grad_accum_mb_s(w: Workload, p: Plans, cal: Calibration) -> FloatArray:
    """Seconds of a separate gradient accumulation after one micro-batch's backward (0 where
    gradients accumulate in the GEMMs): every parameter the GPU holds, cast to fp32 and
    added into its accumulator, at the achieved HBM rate. It runs before the stage sends
    its input gradient back (DeepSpeed's pipeline engine calls it inside the backward
    step), so it is part of the stage time the pipeline bubble scales."""
    pays = separate_accumulation(w, p)
    if not pays.any():  # no plan pays it: skip the parameter count
        return np.zeros(len(p))
    dense, expert = heaviest_stage_params(w, p)
    bw = w.gpu.hbm_bw_Bps * cal.hbm_eff
    out: FloatArray = np.where(pays, (dense + expert) * ACCUM_BYTES_PER_GRAD / bw, 0.0)
    return out
