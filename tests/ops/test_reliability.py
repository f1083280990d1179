"""Failures and goodput (ops/reliability.py).

Llama 3 405B's pre-training: 419 unexpected interruptions in 54 days on 2,048 nodes of 8
H100 (Dubey et al. 2024, sec. 3.3.4), a job MTBF of 54 x 24 / 419 = 3.09 hours.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.errors import InputError
from gpuscale.ops.reliability import FailurePolicy, goodput, optimal_interval_s, reliability
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import Plans, Workload
from gpuscale.perf.storage import StoragePolicy
from gpuscale.perf.training import estimate

DAY = 86400.0
LLAMA3_NODE_MTBF_S = 2048 * 54 * DAY / 419


def test_llama3_cluster_fails_every_three_hours() -> None:
    r = reliability(FailurePolicy(LLAMA3_NODE_MTBF_S, 600.0), 2048, 5.0, 360, 10.0, None)
    assert r.job_mtbf_s / 3600 == pytest.approx(54 * 24 / 419)
    assert r.job_mtbf_s / 3600 == pytest.approx(3.09, abs=0.01)
    assert r.interval_s == 1800.0


def test_goodput_by_hand() -> None:
    # tau = 1 h of work, C = 1 min a save, R = 10 min a restart, M = 10 h between failures
    tau, c, r, m = 3600.0, 60.0, 600.0, 36000.0
    lost = (r + (tau + c) / 2) / m  # 0.0675 of wall time goes to failures
    assert lost == pytest.approx(0.0675)
    assert goodput(tau, c, r, m) == pytest.approx(3600 / 3660 * (1 - 0.0675))
    rel = reliability(FailurePolicy(m * 4, r), 4, 10.0, 360, c, None)
    assert rel.goodput == pytest.approx(goodput(tau, c, r, m))
    # the shares of wall time add up: training, saving, lost work, restarts
    total = rel.goodput + rel.checkpoint_share + rel.lost_work_share + rel.restart_share
    assert total == pytest.approx(1.0)
    assert rel.lost_work_share == pytest.approx(1830 / m)
    assert rel.restart_share == pytest.approx(600 / m)


def test_optimal_interval_by_hand() -> None:
    # sqrt(2 C (M - R)) - C: Daly's sqrt(2 C M) - C when R = 0
    assert optimal_interval_s(60.0, 0.0, 36000.0) == pytest.approx(math.sqrt(2 * 60 * 36000) - 60)
    assert optimal_interval_s(60.0, 600.0, 36000.0) == pytest.approx(math.sqrt(2 * 60 * 35400) - 60)
    assert optimal_interval_s(60.0, 40000.0, 36000.0) == 36000.0  # no time left to train


@settings(max_examples=60, deadline=None)
@given(
    tau=st.floats(1.0, 1e6),
    c=st.floats(0.1, 1e4),
    r=st.floats(0.0, 1e4),
    m=st.floats(1e3, 1e8),
)
def test_the_optimum_beats_every_other_interval(tau: float, c: float, r: float, m: float) -> None:
    best = goodput(optimal_interval_s(c, r, m), c, r, m)
    assert best >= goodput(tau, c, r, m) - 1e-12
    assert 0.0 <= best <= 1.0


def test_suggested_step_count_never_loses_goodput() -> None:
    for every in (1, 10, 100, 1000, 10000):
        rel = reliability(FailurePolicy(200 * DAY, 300.0), 512, 7.3, every, 25.0, 12.0)
        assert rel.optimal_goodput >= rel.goodput - 1e-12
        assert rel.restart_s == 312.0  # relaunch plus reload


def test_failures_need_checkpoints_and_positive_times() -> None:
    with pytest.raises(InputError, match="checkpoint-every"):
        FailurePolicy(DAY, 60.0).check(checkpoints=False)
    with pytest.raises(InputError, match="node-mtbf"):
        FailurePolicy(0.0, 60.0).check(checkpoints=True)
    with pytest.raises(InputError, match="restart-time"):
        FailurePolicy(DAY, -1.0).check(checkpoints=True)


def test_failures_stretch_time_to_train() -> None:
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    w = Workload(
        get_model("llama3-70b"), g, s, Fabric.from_system(s, 1024), 1024, 8192, 1024, "bf16"
    )
    e = estimate(w, Plans.of(tp=8, pp=4, dp=32, sharding=1), default_calibration())
    store = StoragePolicy(checkpoint_every_steps=180, write_Bps=100e9, read_Bps=100e9)
    fail = FailurePolicy(264 * DAY, 600.0)
    base = e.summary(0, 1e12, store)
    s1 = e.summary(0, 1e12, store, fail)
    rel = s1["reliability"]
    assert rel["nodes"] == 128
    assert rel["job_mtbf_s"] == pytest.approx(264 * DAY / 128)
    lost = rel["lost_work_share"] + rel["restart_share"]
    assert s1["time_to_train_s"] == pytest.approx(base["time_to_train_s"] / (1 - lost))
    assert s1["failures"] == pytest.approx(s1["time_to_train_s"] / rel["job_mtbf_s"])
    # a cluster failing faster than it can save and restart never finishes
    doomed = e.summary(0, 1e12, store, FailurePolicy(60.0, 600.0))
    assert doomed["time_to_train_s"] is None and doomed["fits"]
