"""The error band printed beside a training estimate (gpuscale.calibrate.accuracy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_cli

from gpuscale.calibrate import accuracy
from gpuscale.calibrate.accuracy import (
    ACCURACY_FILE,
    DEFAULT_FITTED,
    DEFAULT_HELDOUT,
    MIN_ROWS,
    ErrorBand,
    band_for,
    calibration_digest,
    error_stats,
    group_stats,
    measure,
)
from gpuscale.calibrate.calibration import default_calibration
from gpuscale.catalog import get_gpu, get_model


def test_error_stats_by_hand() -> None:
    s = error_stats([10.0, -20.0, 5.0, 40.0])
    assert s["rows"] == 4
    assert s["mape_pct"] == pytest.approx(18.75)  # (10 + 20 + 5 + 40) / 4
    assert s["median_abs_pct"] == pytest.approx(15.0)  # between 10 and 20
    # |errors| sorted 5, 10, 20, 40: the 90th percentile sits 0.7 of the way from 20 to 40
    assert s["p90_abs_pct"] == pytest.approx(34.0)
    assert s["bias_pct"] == pytest.approx(8.75)
    assert s["median_signed_pct"] == pytest.approx(7.5)  # between 5 and 10


def test_groups_per_kind_architecture_and_all() -> None:
    samples = [("dense", "hopper", 10.0), ("dense", "ampere", -4.0), ("MoE", "hopper", 30.0)]
    got = {(g["kind"], g["arch"]): g["rows"] for g in group_stats(samples)}
    assert got == {
        (None, None): 3,
        ("MoE", None): 1,
        ("MoE", "hopper"): 1,
        ("dense", None): 2,
        ("dense", "ampere"): 1,
        ("dense", "hopper"): 1,
    }


def _shipped(groups: list[dict[str, object]]) -> dict[str, object]:
    return {"calibration": calibration_digest(default_calibration()), "heldout": groups}


def _group(kind: str, arch: str | None, rows: int, med: float) -> dict[str, object]:
    return {
        "kind": kind,
        "arch": arch,
        "rows": rows,
        "median_abs_pct": med,
        "p90_abs_pct": 3 * med,
        "median_signed_pct": -med,
    }


def test_band_prefers_kind_and_architecture_then_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    cal = default_calibration()
    data = _shipped(
        [
            _group("dense", "hopper", MIN_ROWS, 8.0),
            _group("dense", "ampere", MIN_ROWS - 1, 2.0),
            _group("dense", None, 3 * MIN_ROWS, 6.0),
        ]
    )
    monkeypatch.setattr(accuracy, "_shipped", lambda: data)
    llama = get_model("llama3-70b")
    hopper = band_for(llama, get_gpu("h100-sxm"), cal)
    assert hopper is not None and (hopper.arch, hopper.rows) == ("hopper", MIN_ROWS)
    # too few Ampere runs: the band of every dense run
    ampere = band_for(llama, get_gpu("a100-sxm-80gb"), cal)
    assert ampere is not None and (ampere.arch, ampere.rows) == (None, 3 * MIN_ROWS)
    assert ampere.median_abs_pct == 6.0
    # no MoE group: no band rather than a dense one
    assert band_for(get_model("mixtral-8x7b"), get_gpu("h100-sxm"), cal) is None
    # under other constants the figures do not hold
    other = cal.replace(attn_eff=cal.attn_eff / 2)
    assert band_for(llama, get_gpu("h100-sxm"), other) is None


def test_band_line_says_a_lean_only_when_there_is_one() -> None:
    fast = ErrorBand("MoE", "blackwell", 149, 14.9, 41.8, 7.4)
    assert fast.line() == (
        "typically within 15 %, 9 in 10 within 42 % (149 published runs of MoE models on "
        "Blackwell GPUs, none used in the fit; the median prediction was 7 % fast)"
    )
    even = ErrorBand("dense", None, 500, 6.6, 20.8, -3.0)
    assert even.line() == (
        "typically within 7 %, 9 in 10 within 21 % (500 published runs of dense models, "
        "none used in the fit)"
    )


@pytest.mark.skipif(
    not (DEFAULT_FITTED.is_file() and DEFAULT_HELDOUT.is_dir()),
    reason="needs the shared validation file and the held-out files",
)
def test_shipped_figures_are_those_of_the_shipped_calibration() -> None:
    """training_accuracy.json is what `python -m gpuscale.calibrate.accuracy --write`
    computes now: regenerate it after any change to the model or its constants."""
    shipped = json.loads(ACCURACY_FILE.read_text())
    heldout = sorted(DEFAULT_HELDOUT.glob("training_*.csv"))
    assert measure([DEFAULT_FITTED], heldout, default_calibration()) == shipped
    # the in-sample figures over every run are those `gpuscale validate training` prints
    every = next(g for g in shipped["fitted"] if g["kind"] is None)
    assert every["rows"] == 166


def test_estimate_json_carries_the_band(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "train",
        "estimate",
        "--model",
        "llama3-70b",
        "--gpu",
        "h100-sxm",
        "--gpus",
        "64",
        "--seq-len",
        "4096",
        "--global-batch",
        "64",
        "--tp",
        "8",
        "--pp",
        "4",
        "--json",
    ]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    band = json.loads(out)["expected_error"]
    assert (band["kind"], band["arch"]) == ("dense", "hopper")
    assert band["rows"] >= MIN_ROWS
    own = tmp_path / "cal.json"
    own.write_text(json.dumps({"attn_eff": 0.3}))
    code, out, err = run_cli([*args, "--calibration", str(own)], capsys)
    assert code == 0, err
    assert json.loads(out)["expected_error"] is None
