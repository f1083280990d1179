"""Scaling curves: the term each point names is the one whose share of the step moved."""

from __future__ import annotations

import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import Workload
from gpuscale.search.scaling import GAIN_TOL, gpu_counts, scaling_curve


def test_each_point_names_the_term_that_moved_most() -> None:
    # Llama 3 70B, global batch 1,024 of 8K: 16 GPUs fit only by recomputing part of the
    # model, 32-4,096 GPUs run faster per GPU (less recompute), 8,192+ lose to the bubble
    # and DP communication as the batch per GPU shrinks
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    n = 16384
    w = Workload(get_model("llama3-70b"), g, s, Fabric.from_system(s, n), n, 8192, 1024, "bf16")
    pts = [p for p in scaling_curve(w, default_calibration(), "strong") if p.efficiency]
    base = pts[0].shares
    kinds = set()
    for p in pts[1:]:
        assert p.efficiency is not None
        moved = {k: p.shares[k] - base.get(k, 0.0) for k in p.shares if k != "compute"}
        if p.efficiency > 1 + GAIN_TOL:
            term = min(moved, key=lambda k: moved[k])
            assert p.loss_term == f"gain: {term.replace('_', ' ')} {100 * moved[term]:.1f} pts"
            kinds.add("gain")
        else:
            term = max(moved, key=lambda k: moved[k])
            assert p.loss_term == f"{term.replace('_', ' ')} +{100 * moved[term]:.1f} pts"
            kinds.add("loss")
    assert kinds == {"gain", "loss"}
    assert pts[-1].efficiency is not None and pts[-1].efficiency < 1.0


@pytest.mark.parametrize(
    ("n", "counts"),
    [(3, [1, 2, 3]), (8, [8]), (100, [8, 16, 32, 64, 100]), (16384, [8 << k for k in range(12)])],
)
def test_gpu_counts_double_from_8_or_from_1_below_it(n: int, counts: list[int]) -> None:
    assert gpu_counts(n) == counts


def test_weak_scaling_starts_where_one_sequence_fits() -> None:
    # a batch of 64 on 1,024 GPUs is 0.5 sequence at 8 GPUs and 1 at 16: the 8-GPU point
    # has no figures (rounding it up to one sequence would make 8 -> 16 a strong-scaling
    # step), and the efficiency baseline is the 16-GPU point
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    w = Workload(get_model("llama3-8b"), g, s, Fabric.from_system(s, 1024), 1024, 4096, 64)
    pts = scaling_curve(w, default_calibration(), "weak")
    assert pts[0].gpus == 8 and pts[0].step_s is None and "0.5 sequences" in pts[0].plan
    assert pts[0].global_batch is None  # JSON null, not a batch of 0
    assert pts[1].gpus == 16 and pts[1].global_batch == 1 and pts[1].efficiency == 1.0
