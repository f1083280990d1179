"""The fixed costs of a training step's layers, micro-batches and step (calibrated), and the
GPU's wait on the host's launches (:func:`gpuscale.perf.step.step_breakdown`'s
``overhead_s``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscale.perf.plan import FloatArrayT
from gpuscale.perf.step_comm import StageMicroBatch

FloatArray = FloatArrayT


@dataclass(frozen=True)
class FixedCosts:
    """Fixed seconds of a step's parts, per plan (``layer_overhead_s`` and the host's
    ``*_overhead_s``)."""

    host: float
    """1 where the host issues the step's kernels, 0 where the step is replayed whole as
    CUDA graphs."""
    per_moe_layer_s: FloatArray
    """An MoE layer's router, permutation and per-expert launches, with the host waiting on
    the token counts."""
    per_layer_s: FloatArray
    """One average layer's pass: its kernel launches and small kernels at their minimum
    time, and the MoE layers' share of ``per_moe_layer_s``."""
    per_micro_batch_s: float
    """The framework's loop, once a micro-batch."""
    per_step_s: float
    """The framework's loop, logging and data loader, once a step."""


def fixed_costs(c: StageMicroBatch) -> FixedCosts:
    """The fixed costs of each plan's layers, micro-batches and step (calibrated). An MoE
    layer's router, permutation and per-expert launches, with the host waiting on the token
    counts, and the per-step and per-micro-batch work are the host's: a step replayed whole
    as CUDA graphs issues no kernel from the host and its MoE layers cannot wait on it
    (Megatron-Core captures only sync-free dispatch), so it pays none of them, recomputed
    layers' included. A layer's small kernels still run, each for its minimum time: the
    per-layer cost stays."""
    cal = c.cal
    host = 0.0 if c.w.cuda_graphs else 1.0
    experts = c.w.model.num_experts / c.p.ep
    moe_fixed = host * (cal.moe_layer_overhead_s + experts * cal.moe_expert_overhead_s)
    return FixedCosts(
        host=host,
        per_moe_layer_s=moe_fixed,
        per_layer_s=c.sub * cal.layer_overhead_s + c.moe_frac * moe_fixed,
        per_micro_batch_s=host * cal.microbatch_overhead_s,
        per_step_s=host * cal.step_overhead_s,
    )


def host_wait_mb_s(c: StageMicroBatch, fixed: FixedCosts, gpu_mb: FloatArray) -> FloatArray:
    """Seconds one micro-batch's GPU work of ``gpu_mb`` waits on the host's launches. The
    host issues a layer's forward kernels in host_layer_s (a hybrid's block in its share,
    as the small kernels' cost), its backward in twice that, a recomputed forward again
    (torchtitan's per-op checkpointing reruns most of a forward's launches); it runs ahead
    of the GPU, so a micro-batch takes at least that long, plus the framework's loop that
    the same host runs: the GPU waits on the launches when its own work is shorter."""
    rerun = np.where(c.p.recompute == 1, 1.0 if "ops" in c.w.recompute_modules else 0.0, 0.0)
    passes = 3.0 + c.full_frac + rerun
    host_mb = fixed.host * c.layers_stage_mtp * c.sub * c.cal.host_layer_s * passes
    out: FloatArray = np.maximum(host_mb - gpu_mb, 0.0)
    return out
