"""Failures and goodput (ops/reliability.py).

Llama 3 405B's pre-training: 419 unexpected interruptions in 54 days on 16,384 H100
(Dubey et al. 2024, sec. 3.3.4): a GPU MTBF of 16,384 x 54 / 419 = 2,111.5 days and a job
MTBF of 54 x 24 / 419 = 3.09 hours. Daly 2006: the wall time per tau of work is
M exp(R/M) (exp((tau + C)/M) - 1); his higher-order optimum is
sqrt(2CM) (1 + sqrt(C/2M)/3 + C/18M) - C.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.errors import InputError
from gpuscale.ops.reliability import (
    FailurePolicy,
    daly_interval_s,
    goodput,
    reliability,
    wall_per_interval_s,
)
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import Plans, Workload
from gpuscale.perf.storage import StoragePolicy
from gpuscale.perf.training import TrainingEstimate, estimate

DAY = 86400.0
LLAMA3_GPU_MTBF_S = 16384 * 54 * DAY / 419


def fixed(c: float, lag: float = 0.0):  # type: ignore[no-untyped-def]
    """A save that costs ``c`` at any interval and is durable ``lag`` after it."""
    return lambda n: (c, lag)


def test_llama3_cluster_fails_every_three_hours() -> None:
    gpu_mtbf_days = LLAMA3_GPU_MTBF_S / DAY
    assert gpu_mtbf_days == pytest.approx(2111.54, abs=0.01)
    r = reliability(FailurePolicy(LLAMA3_GPU_MTBF_S, 600.0), 16384, 5.0, 360, fixed(10.0), None)
    assert r.job_mtbf_s / 3600 == pytest.approx(3.0931, abs=1e-4)
    assert r.interval_s == 1800.0


def test_goodput_by_hand() -> None:
    # tau = 1 h of work, C = 1 min a save, R = 10 min a restart, M = 10 h between failures:
    # T = 36000 e^(600/36000) (e^(3660/36000) - 1) = 3917.27 s of wall time per hour of work
    tau, c, r, m = 3600.0, 60.0, 600.0, 36000.0
    assert wall_per_interval_s(tau, c, r, m) == pytest.approx(3917.27, abs=0.01)
    assert goodput(tau, c, r, m) == pytest.approx(0.919008, abs=1e-6)
    # the first-order estimate, tau/(tau+C) (1 - (R + (tau+C)/2)/M) = 0.91721, is close
    assert goodput(tau, c, r, m) == pytest.approx(3600 / 3660 * (1 - 2430 / m), abs=0.002)
    rel = reliability(FailurePolicy(m * 4, r), 4, 10.0, 360, fixed(c), None)
    assert rel.goodput == pytest.approx(0.919008, abs=1e-6)
    # the shares of wall time add up: training, saving, lost work, restarts
    total = rel.goodput + rel.checkpoint_share + rel.lost_work_share + rel.restart_share
    assert total == pytest.approx(1.0)
    assert rel.checkpoint_share == pytest.approx(60 / 3917.27, rel=1e-5)
    # failures' 257.27 s: M expm1(L/M) = 36000 (e^(3660/36000) - 1) = 3852.52 s, of which
    # the work lost is 3852.52 - 3660 = 192.52 s and the restarts 3852.52 (e^(600/36000) - 1)
    # = 64.75 s; 192.52 + 64.75 = 257.27
    assert rel.lost_work_share == pytest.approx(192.52 / 3917.27, rel=1e-4)
    assert rel.restart_share == pytest.approx(64.75 / 3917.27, rel=1e-4)
    # failures strike at 1/M over all 3917.27 s: 0.108813 an interval, each losing 1769.3 s
    # of work (under the 1830 s of half an interval and its save) and 595.0 s of restart
    # (under the 600 s of a whole one: some failures cut a restart short)
    assert rel.lost_per_failure_s == pytest.approx(1769.26, abs=0.05)
    assert rel.restart_per_failure_s == pytest.approx(595.03, abs=0.05)


def test_daly_optimum_by_hand() -> None:
    # C = 60 s, M = 10 h: sqrt(2 x 60 x 36000) = 2078.46 x (1 + 0.01361 + 0.0000617) - 60
    assert daly_interval_s(60.0, 36000.0) == pytest.approx(2038.65, abs=0.01)
    assert daly_interval_s(80000.0, 36000.0) == 36000.0  # a save longer than 2M


def test_best_interval_beats_every_other() -> None:
    rel = reliability(FailurePolicy(36000.0, 600.0), 1, 10.0, 360, fixed(60.0), None)
    best = rel.optimal_every_steps
    assert 190 <= best <= 210  # near Daly's 2038.65 s of 10 s steps
    for n in (1, 50, 100, best - 1, best + 1, 400, 1000, 10000):
        assert rel.optimal_goodput >= goodput(n * 10.0, 60.0, 600.0, 36000.0) - 1e-12


@settings(max_examples=40, deadline=None)
@given(
    every=st.integers(1, 100000),
    step=st.floats(0.5, 60.0),
    c=st.floats(0.1, 1e4),
    r=st.floats(0.0, 1e4),
    mtbf=st.floats(600.0, 1e8),
)
def test_the_suggested_interval_never_loses_goodput(
    every: int, step: float, c: float, r: float, mtbf: float
) -> None:
    rel = reliability(FailurePolicy(mtbf, r), 1, step, every, fixed(c), None)
    assert rel.optimal_goodput >= rel.goodput - 1e-12
    assert 0.0 <= rel.goodput <= 1.0
    assert rel.goodput + rel.checkpoint_share + rel.failure_share == pytest.approx(1.0)


def test_an_asynchronous_save_is_lost_until_its_write_ends() -> None:
    # the same stall, durable 300 s later: a failure in that window loses one more interval
    sync = reliability(FailurePolicy(36000.0, 600.0), 1, 10.0, 360, fixed(60.0), None)
    lag = reliability(FailurePolicy(36000.0, 600.0), 1, 10.0, 360, fixed(60.0, 300.0), None)
    assert lag.goodput == pytest.approx(goodput(3600.0, 60.0, 900.0, 36000.0))
    assert lag.lost_work_share > sync.lost_work_share

    # a stall that grows when saves come faster than their writes end (the write takes
    # 1000 s): the best interval is not the one a fixed stall would give
    def save(n: int) -> tuple[float, float]:
        return 1.0 + max(1000.0 - 10.0 * n, 0.0), 1000.0

    rel = reliability(FailurePolicy(36000.0, 600.0), 1, 10.0, 360, save, None)
    assert rel.optimal_every_steps >= 100  # at least the write's 1000 s
    assert rel.optimal_goodput >= rel.goodput


def test_restart_includes_the_reload_and_failures_outrunning_saves_train_nothing() -> None:
    rel = reliability(FailurePolicy(200 * DAY, 300.0), 512, 7.3, 100, fixed(25.0), 12.0)
    assert rel.restart_s == 312.0
    doomed = reliability(FailurePolicy(60.0, 600.0), 1, 10.0, 360, fixed(60.0), None)
    assert doomed.goodput == pytest.approx(0.0, abs=1e-12)
    assert doomed.failure_share == pytest.approx(1.0)


def test_failures_need_checkpoints_and_times_in_range() -> None:
    with pytest.raises(InputError, match="checkpoint-every"):
        FailurePolicy(DAY, 60.0).check(checkpoints=False)
    with pytest.raises(InputError, match="gpu-mtbf"):
        FailurePolicy(0.0, 60.0).check(checkpoints=True)
    with pytest.raises(InputError, match="restart-time"):
        FailurePolicy(DAY, -1.0).check(checkpoints=True)
    with pytest.raises(InputError, match="gpu-mtbf"):
        FailurePolicy(1e300, 60.0).check(checkpoints=True)


def llama3_70b_estimate() -> TrainingEstimate:
    """Llama 3 70B on 1,024 H100, TP8 PP4 with the distributed optimizer, 8K x 1,024."""
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    fabric = Fabric.from_system(s, 1024)
    w = Workload(get_model("llama3-70b"), g, s, fabric, 1024, 8192, 1024, "bf16")
    return estimate(w, Plans.of(tp=8, pp=4, dp=32, sharding=1), default_calibration())


def test_failures_stretch_time_to_train() -> None:
    e = llama3_70b_estimate()
    store = StoragePolicy(checkpoint_every_steps=180, write_Bps=100e9, read_Bps=100e9)
    fail = FailurePolicy(2112 * DAY, 600.0)
    base = e.summary(0, 1e12, store)
    s1 = e.summary(0, 1e12, store, fail)
    rel = s1["reliability"]
    assert rel["gpus"] == 1024
    assert rel["job_mtbf_s"] == pytest.approx(2112 * DAY / 1024)
    # the restart: 10 min plus reading back 988 GB at 100 GB/s
    assert rel["restart_s"] == pytest.approx(600.0 + 70.55e9 * 14 / 100e9, rel=1e-3)
    lost = rel["lost_work_share"] + rel["restart_share"]
    assert s1["time_to_train_s"] == pytest.approx(base["time_to_train_s"] / (1 - lost))
    assert s1["failures"] == pytest.approx(s1["time_to_train_s"] / rel["job_mtbf_s"])
    # an asynchronous save stalls less but is durable later
    asyn = e.summary(0, 1e12, StoragePolicy(**{**store.__dict__, "asynchronous": True}), fail)
    assert asyn["reliability"]["durable_after_s"] == pytest.approx(70.55e9 * 14 / 100e9, rel=1e-3)
    assert math.isfinite(asyn["time_to_train_s"])
    # a cluster failing faster than it can save and restart never finishes
    doomed = e.summary(0, 1e12, store, FailurePolicy(60.0 * 1024, 600.0))
    assert doomed["time_to_train_s"] is None and doomed["fits"]


def test_the_best_interval_is_resolved_per_plan() -> None:
    from dataclasses import replace

    e = llama3_70b_estimate()
    fixed_pol = StoragePolicy(checkpoint_every_steps=500, write_Bps=20e9, read_Bps=20e9)
    fail = FailurePolicy(100 * DAY, 600.0)
    hint = e.summary(0, None, fixed_pol, fail)["reliability"]
    best = e.summary(
        0, None, replace(fixed_pol, checkpoint_every_steps=None, checkpoint_every_best=True), fail
    )
    assert best["storage"]["checkpoint_every_best"] is True
    # the run saves at the interval the fixed run's hint named, with its goodput
    assert best["storage"]["checkpoint_every_steps"] == hint["optimal_checkpoint_every_steps"]
    assert best["reliability"]["goodput"] == pytest.approx(hint["optimal_goodput"])
    assert best["reliability"]["goodput"] >= hint["goodput"]


def test_when_nothing_trains_the_restarts_take_their_limiting_share() -> None:
    # an interval far beyond the job MTBF: T overflows; of the time, restarts take
    # 1 - exp(-R/M) (the limit of M expm1(L/M) expm1(R/M) / T as L grows), lost work the rest
    rel = reliability(FailurePolicy(3600.0, 7200.0), 1, 1e6, 1000, fixed(60.0), None)
    assert rel.goodput == 0.0
    assert rel.restart_share == pytest.approx(1.0 - math.exp(-2.0))
    assert rel.lost_work_share == pytest.approx(math.exp(-2.0))
    assert math.isinf(rel.lost_per_failure_s) and math.isinf(rel.restart_per_failure_s)
