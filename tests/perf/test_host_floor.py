"""The host's launch time as a floor under each micro-batch (``host_layer_s``).

The host issues a layer's forward kernels in ``host_layer_s`` and its backward in twice that
(a recomputed forward once more). It runs ahead of the GPU, so the floor costs nothing
while the GPU's work is longer; a micro-batch whose GPU work is shorter takes the host's
time, the GPU waiting on the launches.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import RECOMPUTE, Plans, Workload
from gpuscale.perf.step import StepBreakdown, step_breakdown

CAL = default_calibration().replace(host_layer_s=0.0, step_overhead_s=0.05)
SLOW_HOST = 0.01  # 10 ms a layer's forward: far above a 1B model's GPU work a layer
LOOP = CAL.microbatch_overhead_s  # the framework's loop a micro-batch, on the same host


def _small(gpus: int = 8, gbs: int = 8) -> Workload:
    """Llama 3.2 1B (16 layers), sequence 1,024 on H100s: a few ms of GPU work a layer."""
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    m = get_model("llama3.2-1b")
    return Workload(m, g, s, Fabric.from_system(s, gpus), gpus, 1024, gbs, "bf16")


def _per_mb_s(b: StepBreakdown, cal_step: float) -> float:
    """A micro-batch's time: the step less what is paid once a step (no pipeline here)."""
    once = float(b.dp_comm_s[0] + b.optimizer_s[0]) + cal_step
    return float(b.step_s[0]) - once


def test_a_micro_batch_takes_at_least_its_layers_host_time() -> None:
    # TP8, one sequence a micro-batch, 8 of them: 16 layers x (1 + 2) passes x 10 ms each
    w, p = _small(), Plans.of(tp=8, dp=1, mbs=1)
    fast = step_breakdown(w, p, CAL)
    slow = step_breakdown(w, p, CAL.replace(host_layer_s=SLOW_HOST))
    assert _per_mb_s(fast, 0.05) / 8 < 16 * 3 * SLOW_HOST  # the GPU is the faster
    # each micro-batch: the launches, then the framework's loop the same host runs
    assert _per_mb_s(slow, 0.05) == pytest.approx(8 * (16 * 3 * SLOW_HOST + LOOP), rel=1e-9)
    # the GPU's own terms do not move: the wait is overhead
    for term in ("compute_s", "memory_bound_s", "tp_comm_s", "dp_comm_s", "optimizer_s"):
        assert float(getattr(slow, term)[0]) == float(getattr(fast, term)[0])
    wait = float(slow.overhead_s[0] - fast.overhead_s[0])
    assert wait == pytest.approx(float(slow.step_s[0] - fast.step_s[0]), rel=1e-9)


def test_a_recomputed_forward_is_issued_again() -> None:
    w = _small()
    p = Plans.of(tp=8, dp=1, mbs=1, recompute=RECOMPUTE.index("full"))
    slow = step_breakdown(w, p, CAL.replace(host_layer_s=SLOW_HOST))
    assert _per_mb_s(slow, 0.05) == pytest.approx(8 * (16 * 4 * SLOW_HOST + LOOP), rel=1e-9)


def test_a_host_faster_than_the_gpu_costs_nothing() -> None:
    w, p = _small(), Plans.of(tp=8, dp=1, mbs=1)
    base = step_breakdown(w, p, CAL)
    quick = step_breakdown(w, p, CAL.replace(host_layer_s=1e-6))
    assert float(quick.step_s[0]) == float(base.step_s[0])


def test_whole_step_cuda_graphs_issue_nothing_from_the_host() -> None:
    w, p = _small(), Plans.of(tp=8, dp=1, mbs=1)
    slow = CAL.replace(host_layer_s=SLOW_HOST)
    graphed = replace(w, cuda_graphs=True)
    assert float(step_breakdown(graphed, p, slow).step_s[0]) == float(
        step_breakdown(graphed, p, CAL).step_s[0]
    )


def test_the_pipeline_bubble_idles_for_the_slower_of_host_and_gpu() -> None:
    # PP2: the bubble is (p - 1) / v = 1 micro-batch time, here the host's: 8 layers x 3
    # passes and its loop
    w, p = _small(), Plans.of(tp=4, pp=2, dp=1, mbs=1)
    slow = step_breakdown(w, p, CAL.replace(host_layer_s=SLOW_HOST))
    assert float(slow.bubble_s[0]) == pytest.approx(8 * 3 * SLOW_HOST + LOOP, rel=1e-9)


def test_more_work_a_micro_batch_hides_the_host() -> None:
    """The floor binds where a micro-batch is small: at 1 ms a layer's forward, Llama 3.2 1B
    with TP8 waits on the host at one sequence a micro-batch and not at sixteen."""
    w = _small(gbs=64)
    cal = CAL.replace(host_layer_s=1e-3)
    waits = []
    for mbs in (1, 16):
        p = Plans.of(tp=8, dp=1, mbs=mbs)
        waits.append(
            float(step_breakdown(w, p, cal).overhead_s[0] - step_breakdown(w, p, CAL).overhead_s[0])
        )
    assert waits[0] > 0.0
    assert waits[1] == 0.0


def test_the_floor_binds_where_the_launches_outlast_the_gpus_work() -> None:
    """At one sequence of 1,024 on TP8 the GPU's share of a micro-batch (its time less the
    framework's loop, which the host runs besides) sets the launch time a layer above which
    the GPU waits: just under it nothing moves, just over it the wait is the difference."""
    w, p = _small(), Plans.of(tp=8, dp=1, mbs=1)
    fast = step_breakdown(w, p, CAL)
    gpu_mb = _per_mb_s(fast, 0.05) / 8 - CAL.microbatch_overhead_s
    edge = gpu_mb / (16 * 3)
    under = step_breakdown(w, p, CAL.replace(host_layer_s=0.99 * edge))
    over = step_breakdown(w, p, CAL.replace(host_layer_s=1.01 * edge))
    assert float(under.step_s[0]) == pytest.approx(float(fast.step_s[0]), rel=1e-12)
    wait = 8 * (16 * 3 * 1.01 * edge - gpu_mb)
    assert float(over.step_s[0] - fast.step_s[0]) == pytest.approx(wait, rel=1e-6)


def test_interleaving_divides_the_bubble_of_the_waiting_micro_batches() -> None:
    # PP2 with two virtual stages a GPU: the bubble is (p - 1) / v = half a micro-batch,
    # each chunk 4 layers; the micro-batch's 8 layers take the host's 8 x 3 launches
    w, p = _small(), Plans.of(tp=4, pp=2, vpp=2, dp=1, mbs=1)
    slow = step_breakdown(w, p, CAL.replace(host_layer_s=SLOW_HOST))
    assert float(slow.bubble_s[0]) == pytest.approx(0.5 * (8 * 3 * SLOW_HOST + LOOP), rel=1e-9)
