"""The plan search under each context-parallel exchange (``train search --cp-comm best``)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from cli_runner import run_cli

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import CP_COMM, Workload
from gpuscale.search.exchanges import search_exchanges
from gpuscale.search.plans import search_plans

CAL = default_calibration()
ARGS = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "64", "--seq-len", "131072"]


def _workload() -> Workload:
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    return Workload(get_model("llama3-8b"), g, s, Fabric.from_system(s, 64), 64, 131072, 64)


def test_each_exchange_is_searched_and_the_fastest_ranking_kept() -> None:
    w = _workload()
    res, steps = search_exchanges(w, CAL)
    alone = {k: search_plans(replace(w, cp_comm=k), CAL) for k in CP_COMM}
    for kind, r in alone.items():
        assert steps[kind] == float(r.estimate.step_s[r.best])
    fastest = min(CP_COMM, key=lambda k: steps[k] or 0.0)
    assert res.estimate.workload.cp_comm == fastest
    assert float(res.estimate.step_s[res.best]) == min(s for s in steps.values() if s)


def test_an_exchange_no_plan_can_run_is_none() -> None:
    # Llama 3 8B's 8 KV heads cannot split over CP 16: with it fixed, no plan has the
    # all-to-alls, and the ring and the all-gather are ranked
    _, steps = search_exchanges(_workload(), CAL, {"cp": 16, "tp": 1})
    assert steps["a2a"] is None
    assert steps["p2p"] is not None and steps["all_gather"] is not None


def test_the_cli_says_what_each_exchange_gives(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        ["train", "search", *ARGS, "--global-batch", "64", "--cp-comm", "best", "--json"], capsys
    )
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc["cp_comm_compared"]) == set(CP_COMM)
    best = min(v for v in doc["cp_comm_compared"].values() if v is not None)
    assert doc["plans"][0]["step_time_s"] == pytest.approx(best)
    code, out, err = run_cli(
        ["train", "search", *ARGS, "--global-batch", "64", "--cp-comm", "best"], capsys
    )
    assert code == 0, err
    assert "context-parallel exchange (--cp-comm best): the plans are ranked with" in " ".join(
        out.split()
    )
    # best is the search's: an estimate prices one exchange
    code, _, err = run_cli(
        ["train", "estimate", *ARGS, "--global-batch", "64", "--cp-comm", "best"], capsys
    )
    assert code == 2 and "one of p2p, a2a, all_gather" in err
