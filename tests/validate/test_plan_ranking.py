"""The plan-ranking check: pairs of measured runs of one job that differ in plan, and
whether gpuscale predicted the faster one, binned by the gap it predicted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_cli
from hypothesis import given
from hypothesis import strategies as st
from test_training_rows import _row
from test_twin_rows import _write

from gpuscale.calibrate import default_calibration
from gpuscale.validate.ranking import GAP_EDGES, RankedRun, _bin, plan_ranking
from gpuscale.validate.report import RowResult, ValidationReport
from gpuscale.validate.training import validate_training

# one job, three plans: predicted 100 / 110 / 150, measured 100 / 95 / 160
JOB = [
    RankedRun("a", "job", "p1", 100.0, 100.0),
    RankedRun("b", "job", "p2", 110.0, 95.0),
    RankedRun("c", "job", "p3", 150.0, 160.0),
]


def test_three_plans_of_one_job_by_hand() -> None:
    rk = plan_ranking(JOB)
    assert rk is not None
    # a-b: predicted b 10 % faster (bin 10-20 %), measured a faster: not ordered
    # a-c: predicted c 50 % faster, measured c faster: ordered (>= 20 %)
    # b-c: predicted c 36.4 % faster, measured c faster: ordered (>= 20 %)
    assert [(b.label, b.pairs, b.ordered) for b in rk.bins] == [
        ("0-2 %", 0, 0),
        ("2-5 %", 0, 0),
        ("5-10 %", 0, 0),
        ("10-20 %", 1, 0),
        (">= 20 %", 2, 2),
    ]
    assert (rk.jobs, rk.pairs, rk.ordered, rk.measured_ties, rk.predicted_ties) == (
        1, 3, 2, 0, 0
    )  # fmt: skip
    assert rk.share == pytest.approx(2 / 3)
    # predicted over measured speed ratio, the larger over the smaller: a-b (100/110) /
    # (100/95) = 95/110 -> 15.79 %, a-c 160/150 -> 6.67 %, b-c (110 x 160) / (150 x 95)
    # -> 23.51 %; the median is a-b's, the same in either order of the rows
    assert rk.median_ratio_error_pct == pytest.approx((110 / 95 - 1) * 100)
    back = plan_ranking(JOB[::-1])
    assert back is not None and back.median_ratio_error_pct == rk.median_ratio_error_pct


def test_pairs_that_cannot_be_ordered() -> None:
    runs = [
        *JOB,
        RankedRun("d", "job", "p1", 100.0, 110.0),  # a's plan again: p1 at (100 + 110) / 2
        RankedRun("x", "other", "q1", 50.0, 70.0),  # alone in its job: no pair
        RankedRun("t1", "tie", "q1", 10.0, 12.0),  # measured the same: left out
        RankedRun("t2", "tie", "q2", 11.0, 12.0),
        RankedRun("s1", "same", "q1", 10.0, 12.0),  # predicted the same: left out
        RankedRun("s2", "same", "q2", 10.0, 13.0),
        RankedRun("z", "job", "p4", 0.0, 80.0),  # no prediction: not a run to rank
    ]
    rk = plan_ranking(runs)
    assert rk is not None
    # p1 counts once, measured 105: p1-p2 not ordered, p1-c and b-c ordered; the ties'
    # jobs, with no other pair, are not counted
    assert (rk.pairs, rk.ordered, rk.jobs) == (3, 2, 1)
    assert (rk.measured_ties, rk.predicted_ties) == (1, 1)
    # ratio errors: p1-p2 (100/110) / (105/95) -> 11550/9500 - 1 = 21.58 %, p1-c
    # (100/150) / (105/160) -> 1.59 %, b-c 23.51 %: the median is p1-p2's
    assert rk.median_ratio_error_pct == pytest.approx((11550 / 9500 - 1) * 100)


def test_a_gap_on_a_bin_edge_counts_in_the_bin_above() -> None:
    # 120 over 100 is 0.19999999999999996 in floating point: still the >= 20 % bin
    rk = plan_ranking([RankedRun("a", "j", "p", 120.0, 2.0), RankedRun("b", "j", "q", 100.0, 1.0)])
    assert rk is not None
    assert [b.pairs for b in rk.bins] == [0, 0, 0, 0, 1]
    rk = plan_ranking([RankedRun("a", "j", "p", 102.0, 2.0), RankedRun("b", "j", "q", 100.0, 1.0)])
    assert rk is not None
    assert [b.pairs for b in rk.bins] == [0, 1, 0, 0, 0]


def test_no_job_with_two_plans_gives_none() -> None:
    assert plan_ranking([RankedRun("a", "j", "p", 1.0, 1.0)]) is None
    assert plan_ranking([]) is None


@pytest.mark.parametrize(
    ("gap", "index"),
    [(0.0, 0), (0.0199, 0), (0.02, 1), (0.0499, 1), (0.05, 2), (0.1, 3), (0.2, 4), (3.0, 4)],
)
def test_a_gap_on_an_edge_goes_to_the_bin_above(gap: float, index: int) -> None:
    assert len(GAP_EDGES) == 4
    assert _bin(gap) == index


def test_report_pairs_rows_by_their_job_and_skips_rows_without_one() -> None:
    rows = [
        RowResult("a", 100.0, 100.0, 0.0, "scored", detail={"job": "j", "plan": "p1"}),
        RowResult("b", 120.0, 90.0, 33.3, "scored", detail={"job": "j", "plan": "p2"}),
        RowResult("c", 120.0, 90.0, 33.3, "reported", detail={"job": "j", "plan": "p3"}),
        RowResult("d", 1.0, 3.0, -66.7, "scored"),  # no job (inference, collectives)
    ]
    rep = ValidationReport("training", rows)
    rk = rep.to_json()["plan_ranking"]
    assert isinstance(rk, dict)
    assert (rk["pairs"], rk["ordered_as_measured"], rk["jobs"]) == (1, 0, 1)
    assert "plan_ranking" not in ValidationReport("inference", rows[3:]).to_json()


def test_validate_training_pairs_a_sources_plans_but_not_two_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        _row(id="tp8", tp="8", pp="1", dp="8", micro_batch="1"),
        _row(id="tp4", tp="4", pp="2", dp="8", micro_batch="1"),
        # the same job and plan as tp4 from another source (another software stack)
        _row(id="elsewhere", tp="4", pp="2", dp="8", micro_batch="1", source="Another paper"),
    ]
    rows[0]["source"], rows[1]["source"] = "A  Paper, Table 2", "a paper,  table 2 "
    rows[1]["measured_tokens_per_s_per_gpu"] = "900"
    path = _write(tmp_path, rows)
    rep = validate_training(path, default_calibration())
    by_id = {r.id: r for r in rep.rows}
    assert by_id["tp8"].detail["job"] == by_id["tp4"].detail["job"]
    # the same source spelt with other spacing and case is one job; another source is not
    assert by_id["tp4"].detail["job"] != by_id["elsewhere"].detail["job"]
    rk = rep.plan_ranking()
    assert rk is not None and (rk.jobs, rk.pairs) == (1, 1)
    faster_predicted = by_id["tp8"].predicted > by_id["tp4"].predicted  # type: ignore[operator]
    assert rk.ordered == int(faster_predicted)  # measured: tp8 1,000 > tp4 900
    code, out, _ = run_cli(["validate", "training", "--runs", str(path)], capsys)
    assert code == 0
    text = " ".join(out.split())
    assert "1 pair of scored runs of one job" in text and "from 1 job:" in text
    code, out, _ = run_cli(["validate", "training", "--runs", str(path), "--json"], capsys)
    assert json.loads(out)["plan_ranking"]["pairs"] == 1


@given(
    # whole figures, so that no two measured ones are within rounding of each other
    measured=st.lists(st.integers(1, 100_000), min_size=2, max_size=8, unique=True),
    scale=st.floats(min_value=0.2, max_value=5.0),
)
def test_a_model_off_by_one_factor_on_every_plan_ranks_them_all(
    measured: list[int], scale: float
) -> None:
    # what MAPE cannot show: a constant error, however large, orders every pair right,
    # and its predicted speed ratios are the measured ones
    runs = [RankedRun(str(i), "job", f"p{i}", m * scale, m) for i, m in enumerate(measured)]
    rk = plan_ranking(runs)
    assert rk is not None
    n = len(measured)
    assert (rk.pairs, rk.ordered, rk.jobs) == (n * (n - 1) // 2, n * (n - 1) // 2, 1)
    assert rk.median_ratio_error_pct == pytest.approx(0.0, abs=1e-9)


@given(measured=st.lists(st.integers(1, 100_000), min_size=2, max_size=8))
def test_the_reverse_order_orders_no_pair(measured: list[int]) -> None:
    # predicted speeds in the opposite order of the measured ones: no pair is ordered
    runs = [RankedRun(str(i), "job", f"p{i}", 1.0 / m, m) for i, m in enumerate(measured)]
    rk = plan_ranking(runs)
    distinct = len(set(measured))
    if distinct < 2:
        assert rk is None
        return
    assert rk is not None and rk.ordered == 0
    assert rk.pairs + rk.measured_ties == len(measured) * (len(measured) - 1) // 2
