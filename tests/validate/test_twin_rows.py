"""Rows gpuscale reads as one configuration but whose measurements are too far apart for
any single prediction to be within 25 % of each: found, named in JSON and in words."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from cli_runner import run_cli
from test_training_rows import COLUMNS, _row

from gpuscale.calibrate import default_calibration
from gpuscale.cli._common import _num
from gpuscale.validate.report import TWIN_LIMIT, TWIN_TOLERANCE, RowResult, ValidationReport
from gpuscale.validate.training import validate_training


def _write(tmp_path: Path, rows: list[dict[str, str]]) -> Path:
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([r.get(c, "") for c in COLUMNS])
    return path


def test_the_limit_is_what_one_prediction_can_span() -> None:
    # p within 25 % of a and of b: a >= p / 1.25 and b <= p / 0.75, so b / a <= 5 / 3
    assert pytest.approx(5 / 3) == (1 + TWIN_TOLERANCE) / (1 - TWIN_TOLERANCE) == TWIN_LIMIT


@pytest.mark.parametrize(("second", "twins"), [("1600", False), ("1700", True)])
def test_identical_rows_measured_far_apart_are_named(
    tmp_path: Path, second: str, twins: bool
) -> None:
    rows = [
        _row(id="a", tp="8", pp="1", dp="8", micro_batch="1"),
        _row(id="b", tp="8", pp="1", dp="8", micro_batch="1"),
        _row(id="c", tp="8", pp="1", dp="8", micro_batch="2"),  # another plan: not a twin
    ]
    rows[1]["measured_tokens_per_s_per_gpu"] = second
    rows[2]["measured_tokens_per_s_per_gpu"] = "3000"
    report = validate_training(_write(tmp_path, rows), default_calibration())
    found = report.twins()
    if not twins:
        assert found == []
        return
    assert [(t.ids, t.measured) for t in found] == [(["a", "b"], [1000.0, 1700.0])]
    assert found[0].ratio == pytest.approx(1.7)
    assert report.to_json()["indistinguishable_rows"] == [
        {"ids": ["a", "b"], "measured": [1000.0, 1700.0], "metric": "tokens_per_s_per_gpu",
         "ratio": pytest.approx(1.7)}
    ]  # fmt: skip


def test_the_cli_says_why_no_prediction_fits_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [_row(id="first", tp="8", dp="8"), _row(id="second", tp="8", dp="8")]
    rows[1]["measured_tokens_per_s_per_gpu"] = "2000"
    path = str(_write(tmp_path, rows))
    code, out, _ = run_cli(["validate", "training", "--runs", path], capsys)
    assert code == 0
    text = " ".join(out.split())
    assert "note: first 1,000, second 2,000 (tokens_per_s_per_gpu) are one configuration" in text
    assert "measured 2.00 x apart" in text and "at most 1.67 x apart" in text
    code, out, _ = run_cli(["validate", "training", "--runs", path, "--json"], capsys)
    assert json.loads(out)["indistinguishable_rows"][0]["ids"] == ["first", "second"]


def test_rows_without_a_configuration_are_never_twins() -> None:
    rows = [
        RowResult("x", 1.0, 1.0, 0.0, "scored", metric="m"),
        RowResult("y", 1.0, 3.0, -66.7, "scored", metric="m"),
    ]
    assert ValidationReport("inference", rows).twins() == []


def test_rows_on_different_gpus_are_not_twins_even_when_predicted_alike(tmp_path: Path) -> None:
    # the A800 is the A100 SXM die with slower NVLink: on one GPU both predict the same
    rows = [
        _row(id=g, model="llama3-8b", gpu=f"{g}-sxm-80gb", num_gpus="1", global_batch_seqs="4")
        for g in ("a100", "a800")
    ]
    rows[0]["measured_tokens_per_s_per_gpu"] = "500"
    report = validate_training(_write(tmp_path, rows), default_calibration())
    assert len(report.scored) == 2
    assert report.scored[0].predicted == report.scored[1].predicted
    assert report.twins() == []


@pytest.mark.parametrize(
    ("x", "shown"),
    [(999.97, "1,000"), (999.4, "999.4"), (123456.7, "123,457"), (0.5, "0.5"), (-2500.0, "-2,500")],
)
def test_validation_figures_print_whole_from_a_thousand(x: float, shown: str) -> None:
    assert _num(x) == shown
