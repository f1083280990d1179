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


def _stage_dp_s(
    w: Workload,
    p: Plans,
    cal: Calibration,
    work: StageWork,
    dense: FloatArray,
    expert: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """:func:`data_parallel_s` of a stage holding ``dense`` and ``expert`` parameters a GPU."""
    busy_mb, compute_mb, mb, layers_stage, full_frac = work
    f = w.fabric
    tp = p.tp.astype(np.float64)
    bw = w.gpu.hbm_bw_Bps * cal.hbm_eff
    # --- data-parallel gradient / parameter communication ------------------------------
    d = (p.dp * p.cp).astype(np.float64)
    d_exp = np.maximum(d * tp / p.ep, 1.0)
    dp_k = np.clip(f.scaleup_domain_gpus / tp, 1.0, d)
    # ZeRO-2 under a pipeline gathers and reduces once a step, as the distributed
    # optimizer does (plan.pipelined_fsdp)
    shard = cost_sharding(p)
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

    def dp_time(
        op: str,
        nbytes_per_param: FloatArray | float,
        pieces: FloatArray | float = 1.0,
        over: _Group = whole,
    ) -> FloatArray:
        """DP collective over the stage's parameters (1 / ``over.split`` of them), issued
        as ``pieces`` equal calls among the ranks of ``over``."""
        t_dense = collective_s(
            op, dense * nbytes_per_param / (pieces * over.split), over.n, over.k, f, cal
        )
        t_exp = (
            collective_s(
                op,
                expert * nbytes_per_param / (pieces * over.split_exp),
                over.n_exp,
                over.k_exp,
                f,
                cal,
            )
            if w.model.is_moe
            else np.zeros_like(d)
        )
        return pieces * (np.where(over.n > 1, t_dense, 0.0) + np.where(over.n_exp > 1, t_exp, 0.0))

    def reduce_grads(pieces: FloatArray | float = 1.0) -> FloatArray:
        """Reduce-scatter within the shard group, then all-reduce each shard across the
        replicas (nothing more without hybrid sharding)."""
        return dp_time("reduce_scatter", grad_b, pieces, shards) + dp_time(
            "all_reduce", grad_b, pieces, replicas
        )

    reduce_scatter = reduce_grads()
    grads = np.where(shard == 0, dp_time("all_reduce", grad_b), reduce_scatter)
    ag_b = w.gathered_weight_bytes
    gather = dp_time("all_gather", ag_b, over=shards)
    # bwd of the last micro-batch (grads) and fwd of the first (param all-gather) hide it
    window = busy_mb * (2.0 / 3.0)

    def exposed(t: FloatArray) -> FloatArray:
        """What a per-step collective leaves exposed beyond dp_overlap and the window."""
        out: FloatArray = np.maximum(t * (1.0 - cal.dp_overlap), t - window)
        return out

    exposed_step = exposed(grads + np.where(shard >= 1, gather, 0.0))
    # ZeRO-3/FSDP: gather each layer's weights in forward and in backward and reduce-scatter
    # its gradients, layer by layer, every micro-batch (one collective per layer each)
    rs_z3 = reduce_grads(layers_stage)
    ag_z3 = dp_time("all_gather", ag_b, layers_stage, shards)
    if w.zero3_gathers == "per-param":
        # per-tensor gathers from module hooks: the implementation's rate bounds each pass
        # over the stage's gathered weights, and recomputation gathers them once more
        impl = (dense + expert) * ag_b / cal.zero3_param_gather_Bps
        per_mb_z3 = np.maximum(rs_z3, impl) + (2.0 + full_frac) * np.maximum(ag_z3, impl)
    else:
        per_mb_z3 = rs_z3 + 2.0 * ag_z3
    exposed_z3 = mb * np.maximum(per_mb_z3 * (1.0 - cal.zero3_overlap), per_mb_z3 - compute_mb)
    # ZeRO-2 / FSDP SHARD_GRAD_OP: gradients live only as shards, so every micro-batch's
    # backward reduce-scatters them into their owners (DeepSpeed stage 2 reduces at each
    # micro-step), each hidden as ZeRO-1's one reduction is behind the last (a
    # one-micro-batch ZeRO-2 step times as ZeRO-1's); parameters are gathered once per step
    exposed_z2 = mb * exposed(reduce_scatter) + exposed(gather)
    dp_comm = np.select([shard == 4, shard == 3], [exposed_z3, exposed_z2], exposed_step)

    # --- optimizer ---------------------------------------------------------------------------
    sharded = shard >= 1
    opt_params = np.where(sharded, dense / g.dense + expert / g.expert, dense + expert)
    optimizer = opt_params * ADAM_BYTES_PER_PARAM / bw
    return dp_comm, optimizer


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
