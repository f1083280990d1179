"""Scaling curves: the step terms split the change in GPU-time per token exactly, and each
point names the terms that moved most."""

from __future__ import annotations

import itertools
import re

import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import Workload
from gpuscale.search.scaling import (
    attribution,
    describe_changes,
    gpu_counts,
    scaling_curve,
    term_changes,
)


def test_terms_split_the_change_in_gpu_time_per_token_exactly() -> None:
    # Llama 3 70B, global batch 1,024 of 8K: 16 GPUs fit only by recomputing part of the
    # model, 32-4,096 GPUs run faster per GPU (less recompute), 8,192+ lose to the bubble,
    # DP communication and the fixed per-step costs as the batch per GPU shrinks
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    n = 16384
    w = Workload(get_model("llama3-70b"), g, s, Fabric.from_system(s, n), n, 8192, 1024, "bf16")
    pts = [p for p in scaling_curve(w, default_calibration(), "strong") if p.efficiency]
    kinds = set()
    for prev, p in itertools.pairwise(pts):
        assert p.efficiency is not None and prev.efficiency is not None
        assert p.tokens_per_s_per_gpu is not None
        # GPU-seconds per token, summed over the terms, is the inverse of tokens/s per GPU
        assert sum(p.gpu_s_per_token.values()) * p.tokens_per_s_per_gpu == pytest.approx(1.0)
        moved = term_changes(prev.gpu_s_per_token, p.gpu_s_per_token)
        assert sum(moved.values()) == pytest.approx(prev.efficiency / p.efficiency - 1.0)
        assert p.loss_term == describe_changes(moved)
        if not p.loss_term.startswith(("no change", "no net change")):
            top = (min if p.loss_term.startswith("gain: ") else max)(moved, key=moved.__getitem__)
            assert p.loss_term.removeprefix("gain: ").startswith(top.replace("_", " "))
            kinds.add("gain" if p.loss_term.startswith("gain: ") else "loss")
    assert kinds == {"gain", "loss"}
    span = attribution(pts)
    assert span is not None and span[0] is pts[0] and span[1] is pts[-1]
    assert pts[-1].efficiency is not None and pts[-1].efficiency < 1.0
    assert sum(span[2].values()) == pytest.approx(1.0 / pts[-1].efficiency - 1.0)
    assert span[2]["recompute"] < 0 < span[2]["bubble"]  # recompute saved, bubble grown


def test_describe_changes_names_the_largest_moves_in_the_direction_of_the_total() -> None:
    loss = {"bubble": 0.10, "dp_comm": 0.04, "recompute": -0.02, "overhead": 0.003}
    assert describe_changes(loss) == "bubble +10.0%, dp comm +4.0%"
    assert describe_changes(loss, most=3) == "bubble +10.0%, dp comm +4.0%"  # 0.3 % is noise
    gain = {"recompute": -0.22, "dp_comm": -0.023, "bubble": 0.01}
    assert describe_changes(gain) == "gain: recompute -22.0%, dp comm -2.3%"
    # a total under half a percent is no change, unless terms of 2.5 % or more cancel
    assert describe_changes({"bubble": 0.02, "dp_comm": -0.018}) == "no change"
    cancel = {"dp_comm": -0.078, "bubble": 0.043, "overhead": 0.033}
    assert describe_changes(cancel) == "no net change: dp comm -7.8%, bubble +4.3%"
    # a move against the total of a quarter of the first named or more is said
    offset = {"recompute": -0.215, "overhead": 0.189, "compute": 0.011}
    assert describe_changes(offset) == "gain: recompute -21.5%; offset by overhead +18.9%"
    # a real total change names its largest term even when that term alone is small
    assert describe_changes({"a": 0.004, "b": 0.003, "c": 0.002}) == "a +0.4%"
    assert term_changes({"a": 1.0, "b": 3.0}, {"a": 2.0, "c": 1.0}) == {
        "a": 0.25,
        "b": -0.75,
        "c": 0.25,
    }


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


def test_gpus_a_plan_leaves_idle_are_a_term_of_their_own() -> None:
    # 1,000 GPUs: no plan of Llama 3 70B at batch 1,024 uses them all (640 do); the idle
    # ones are charged as idle_gpus, not spread over compute and the other terms
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    n = 1000
    w = Workload(get_model("llama3-70b"), g, s, Fabric.from_system(s, n), n, 8192, 1024, "bf16")
    last = scaling_curve(w, default_calibration(), "strong")[-1]
    assert last.gpus == n and last.gpus_used is not None and last.gpus_used < n
    assert last.step_s is not None and last.tokens_per_s_per_gpu is not None
    idle = last.step_s * (n - last.gpus_used) / (1024 * 8192)
    assert last.gpu_s_per_token["idle_gpus"] == pytest.approx(idle)
    assert sum(last.gpu_s_per_token.values()) * last.tokens_per_s_per_gpu == pytest.approx(1.0)
    busy = sum(v for k, v in last.gpu_s_per_token.items() if k != "idle_gpus")
    assert busy == pytest.approx(last.step_s * last.gpus_used / (1024 * 8192))


def test_each_point_is_the_search_s_fastest_plan_even_when_it_leaves_gpus_idle() -> None:
    # a batch of 1,000 on 512 GPUs: 500 data-parallel ranks of one sequence beat every
    # plan that splits it over all 512 (model parallelism, context parallelism)
    from gpuscale.search.plans import search_plans

    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    w = Workload(get_model("llama3-8b"), g, s, Fabric.from_system(s, 1000), 1000, 8192, 1000)
    cal = default_calibration()
    pt = next(p for p in scaling_curve(w, cal, "strong") if p.gpus == 512)
    w512 = Workload(w.model, g, s, Fabric.from_system(s, 512), 512, 8192, 1000)
    res = search_plans(w512, cal)
    assert pt.step_s == pytest.approx(float(res.estimate.step_s[res.best]))
    assert pt.gpus_used == 500 and "12 of 512 GPUs idle (faster than the plans using" in (
        pt.loss_term
    )
    full = search_plans(w512, cal, exact_gpus=True)
    assert pt.step_s < 0.8 * float(full.estimate.step_s[full.best])


def llama3_405b_16k() -> Workload:
    """Llama 3 405B on 16,384 H100, 8K x 2,048 (the weak-scaling target)."""
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    n = 16384
    return Workload(get_model("llama3-405b"), g, s, Fabric.from_system(s, n), n, 8192, 2048, "bf16")


def test_failures_are_a_term_that_grows_with_the_cluster() -> None:
    # Llama 3 405B weak scaling to 16,384 H100 at its cluster's GPU MTBF (2,112 days),
    # saving every hour at 200 GB/s with a 10-minute restart: the job fails ever more often
    # as GPUs are added (GPU MTBF / GPUs), so goodput falls at every doubling
    from gpuscale.ops.reliability import FailurePolicy
    from gpuscale.perf.storage import StoragePolicy

    w = llama3_405b_16k()
    store = StoragePolicy(checkpoint_every_s=3600.0, write_Bps=200e9, read_Bps=200e9)
    fail = FailurePolicy(2112 * 86400.0, 600.0)
    pts = [p for p in scaling_curve(w, default_calibration(), "weak", store, fail) if p.step_s]
    goodputs = [p.goodput for p in pts]
    assert all(gp is not None for gp in goodputs)
    assert goodputs == sorted(goodputs, reverse=True)  # type: ignore[type-var]
    for p in pts:
        assert p.tokens_per_s_per_gpu is not None and p.step_s is not None
        # the run's rate: every GPU's time in saves, reads and failures is in the sum
        assert sum(p.gpu_s_per_token.values()) * p.tokens_per_s_per_gpu == pytest.approx(1.0)
        assert {"checkpoints", "data_loading", "failures"} <= set(p.gpu_s_per_token)
    span = attribution(pts)
    assert span is not None
    # from 128 GPUs to 16,384, failures cost more GPU-time per token than any step term
    assert max(span[2], key=span[2].__getitem__) == "failures"
    # without storage priced, the same curve has no goodput and no such terms
    plain = [p for p in scaling_curve(w, default_calibration(), "weak") if p.step_s]
    assert all(p.goodput is None and "failures" not in p.gpu_s_per_token for p in plain)
    assert plain[-1].tokens_per_s_per_gpu > pts[-1].tokens_per_s_per_gpu  # type: ignore[operator]


def test_scaling_goodput_is_the_estimates_for_the_same_plan() -> None:
    # exposed data loading (1 MB/s for 34 MB a step) and failures: the curve's goodput at
    # the last point, step / wall, is what train estimate reports for that plan, and that
    # plan trains at least as many tokens a second, net, as the fastest step's
    from gpuscale.ops.reliability import FailurePolicy
    from gpuscale.perf.storage import StoragePolicy
    from gpuscale.search.plans import search_plans

    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    n = 1024
    w = Workload(get_model("llama3-70b"), g, s, Fabric.from_system(s, n), n, 8192, 1024, "bf16")
    cal = default_calibration()
    store = StoragePolicy(checkpoint_every_s=1800.0, write_Bps=100e9, read_Bps=1e6)
    fail = FailurePolicy(2112 * 86400.0, 600.0)
    curve = scaling_curve(w, cal, "strong", store, fail)
    last = curve[-1]
    # the last point's search, with the smaller points' data-parallel degrees
    dps = {int(m.group(1)) for pt in curve if (m := re.search(r"DP(\d+)", pt.plan))}
    res = search_plans(w, cal, extra_dp=dps)
    e = res.estimate
    i = next(int(j) for j in res.order if e.plans.label(int(j)) == last.plan)
    rel = e.summary(i, None, store, fail)["reliability"]
    assert last.goodput == pytest.approx(rel["goodput"], rel=1e-9)
    # MFU, like tokens/s per GPU, counts the run's wall time and all the GPUs (at 1 MB/s
    # the storage paces the run: a plan on fewer GPUs hides more of the reading)
    used = int(e.plans.gpus_used()[i])
    assert last.mfu == pytest.approx(float(e.mfu[i]) * rel["goodput"] * used / n)
    fastest = e.summary(res.best, None, store, fail)["reliability"]
    assert fastest["data_loading_share"] > 0
    best_used = int(e.plans.gpus_used()[res.best])
    net_fastest = float(e.tokens_per_s_per_gpu[res.best]) * fastest["goodput"] * best_used / n
    assert last.tokens_per_s_per_gpu is not None
    assert last.tokens_per_s_per_gpu >= net_fastest * (1 - 1e-9)


def test_the_best_interval_at_every_point_never_loses_goodput() -> None:
    from gpuscale.ops.reliability import FailurePolicy
    from gpuscale.perf.storage import StoragePolicy

    w = llama3_405b_16k()
    cal = default_calibration()
    fail = FailurePolicy(2112 * 86400.0, 600.0)
    hourly = StoragePolicy(checkpoint_every_s=3600.0, write_Bps=200e9, read_Bps=200e9)
    best = StoragePolicy(checkpoint_every_best=True, write_Bps=200e9, read_Bps=200e9)
    a = [p for p in scaling_curve(w, cal, "weak", hourly, fail) if p.step_s]
    b = [p for p in scaling_curve(w, cal, "weak", best, fail) if p.step_s]
    assert [p.gpus for p in a] == [p.gpus for p in b]
    for p, q in zip(a, b, strict=True):
        assert q.goodput is not None and p.goodput is not None
        assert q.goodput >= p.goodput - 1e-12
    assert b[-1].goodput > a[-1].goodput + 0.05  # at 16,384 GPUs an hour is far too long


def test_adding_gpus_never_slows_the_best_plan() -> None:
    # Llama 3 70B at a batch of 512 sequences of 8K: past 8,192 GPUs no plan that uses them
    # all keeps a pipeline of PP8 x VPP5 fed (each rank would get a fraction of a
    # sequence); the best on 16,384 is the 8,192-GPU point's plan with half the GPUs idle
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    n = 16384
    w = Workload(get_model("llama3-70b"), g, s, Fabric.from_system(s, n), n, 8192, 512, "bf16")
    pts = [p for p in scaling_curve(w, default_calibration(), "strong") if p.step_s is not None]
    steps = [p.step_s for p in pts]
    assert all(b <= a for a, b in itertools.pairwise(steps))
    last, before = pts[-1], pts[-2]
    assert last.gpus == n and last.gpus_used == before.gpus_used == n // 2
    assert last.step_s == pytest.approx(before.step_s)
    assert last.loss_term.startswith("8192 of 16384 GPUs idle (faster than the plans using all)")


def test_with_failures_priced_adding_gpus_never_lowers_the_jobs_net_throughput() -> None:
    # Llama 3.1 405B at a fixed 16,384 sequences (examples/workloads/llama3-405b-h100-16k):
    # past 65,536 GPUs failures take more than the extra GPUs give, so the last point keeps
    # the 65,536-GPU plan and leaves the rest idle (failures strike the GPUs a job runs on)
    from pathlib import Path

    from gpuscale.cli.train_workload import resolve

    root = Path(__file__).resolve().parents[2]
    flags = {"gpus": 131072, "global_batch": 16384}
    r = resolve(root / "examples/workloads/llama3-405b-h100-16k.yaml", flags, None)
    curve = scaling_curve(r.workload, default_calibration(), "strong", r.storage, r.failures)
    pts = [p for p in curve if p.tokens_per_s_per_gpu is not None]
    for a, b in itertools.pairwise(pts):
        assert b.tokens_per_s_per_gpu * b.gpus >= a.tokens_per_s_per_gpu * a.gpus * (1 - 1e-9)
    assert pts[-1].gpus_used == 65536 and pts[-2].plan == pts[-1].plan
