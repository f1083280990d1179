"""`validate training` reports accuracy by kind of model (dense, MoE, hybrid Mamba), where
it differs most, in its table and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_cli
from test_training_rows import _row
from test_twin_rows import _write

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_model
from gpuscale.validate.report import RowResult, ValidationReport
from gpuscale.validate.training import validate_training
from gpuscale.validate.training_rows import model_kind


@pytest.mark.parametrize(
    ("model", "kind"),
    [
        ("llama3-70b", "dense"),
        ("mixtral-8x7b", "MoE"),
        ("deepseek-v3", "MoE"),
        # Mamba-2 layers and MoE layers: a hybrid first
        ("nemotron3-nano-30b-a3b", "hybrid Mamba"),
    ],
)
def test_kind_of_catalog_models(model: str, kind: str) -> None:
    assert model_kind(get_model(model)) == kind


def test_rows_group_by_their_kind_with_their_own_errors() -> None:
    rows = [
        RowResult("a", 110.0, 100.0, 10.0, "scored", detail={"model_kind": "dense"}),
        RowResult("b", 80.0, 100.0, -20.0, "scored", detail={"model_kind": "dense"}),
        RowResult("c", 130.0, 100.0, 30.0, "scored", detail={"model_kind": "MoE"}),
        RowResult("d", 1.0, 1.0, 0.0, "reported", detail={"model_kind": "MoE"}),
        RowResult("e", 1.0, 2.0, -50.0, "scored"),  # no kind (inference, collectives)
    ]
    rep = ValidationReport("training", rows)
    assert {k: [r.id for r in rs] for k, rs in rep.by_model_kind().items()} == {
        "dense": ["a", "b"],
        "MoE": ["c"],
    }
    got = rep.to_json()["by_model_kind"]
    assert got == {
        # the mean signed error: (+10 - 20) / 2, a bias the terminal's table shows too
        "dense": {"n": 2, "mape_pct": 15.0, "median_abs_error_pct": 15.0,
                  "max_abs_error_pct": 20.0, "mean_signed_error_pct": -5.0},
        "MoE": {"n": 1, "mape_pct": 30.0, "median_abs_error_pct": 30.0,
                "max_abs_error_pct": 30.0, "mean_signed_error_pct": 30.0},
    }  # fmt: skip
    assert "by_model_kind" not in ValidationReport("inference", rows[4:]).to_json()
    # rows with no source or figure named still count in those tables, under ""
    assert [r.id for r in rep.by_group()[""]] == ["a", "b", "c", "e"]
    assert [r.id for r in rep.by_metric()[""]] == ["a", "b", "c", "e"]


def test_the_cli_table_names_each_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        _row(id="dense", tp="8", dp="8"),
        _row(id="moe", model="mixtral-8x7b", tp="1", dp="64"),
    ]
    path = _write(tmp_path, rows)
    rep = validate_training(path, default_calibration())
    assert {r.id: r.detail["model_kind"] for r in rep.rows} == {"dense": "dense", "moe": "MoE"}
    code, out, _ = run_cli(["validate", "training", "--runs", str(path)], capsys)
    assert code == 0 and "by kind of model (scored rows)" in out
    code, out, _ = run_cli(["validate", "training", "--runs", str(path), "--json"], capsys)
    assert sorted(json.loads(out)["by_model_kind"]) == ["MoE", "dense"]
