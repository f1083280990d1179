"""The error band printed beside a training throughput prediction
(gpuscale.calibrate.accuracy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_cli
from markupsafe import escape

from gpuscale.calibrate import accuracy
from gpuscale.calibrate.accuracy import (
    ACCURACY_FILE,
    ARCH_RECORD_ROWS,
    DEFAULT_FITTED,
    DEFAULT_HELDOUT,
    LEAN_PCT,
    MIN_ROWS,
    ErrorBand,
    ModelRecord,
    NoBand,
    Sample,
    band_for,
    calibration_digest,
    error_stats,
    group_stats,
    model_stats,
    score,
)
from gpuscale.calibrate.calibration import default_calibration
from gpuscale.catalog import get_gpu, get_model
from gpuscale.validate.training import validate_training

REGENERATE = "stale: run python -m gpuscale.calibrate.accuracy --write"


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
    samples = [
        Sample("dense", "hopper", "job a", 10.0),
        Sample("dense", "hopper", "job a", 2.0),
        Sample("dense", "ampere", "job b", -4.0),
        Sample("MoE", "hopper", "job c", 30.0),
    ]
    got = group_stats(samples)
    keys = [(g["kind"], g["arch"]) for g in got]
    # kinds in order, the pooled group of each first, the whole set first of all
    assert keys == [
        (None, None),
        ("MoE", None),
        ("MoE", "hopper"),
        ("dense", None),
        ("dense", "ampere"),
        ("dense", "hopper"),
    ]
    by = {(g["kind"], g["arch"]): g for g in got}
    assert (by[("dense", "hopper")]["rows"], by[("dense", "hopper")]["jobs"]) == (2, 1)
    assert by[("dense", None)]["median_signed_pct"] == pytest.approx(2.0)  # -4, 2, 10
    assert by[("dense", None)]["archs"] == ["ampere", "hopper"]
    assert "archs" not in by[("dense", "hopper")]
    assert (by[(None, None)]["rows"], by[(None, None)]["jobs"]) == (4, 3)


def _group(kind: str, arch: str | None, rows: int, med: float) -> dict[str, object]:
    g: dict[str, object] = {
        "kind": kind,
        "arch": arch,
        "rows": rows,
        "jobs": rows - 1,
        "median_abs_pct": med,
        "p90_abs_pct": 3 * med,
        "median_signed_pct": -med,
    }
    if arch is None:
        g["archs"] = ["ampere", "hopper"]
    return g


def _ship(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    f = tmp_path / "training_accuracy.json"
    f.write_text(text)
    monkeypatch.setattr(accuracy, "ACCURACY_FILE", f)
    accuracy._shipped.cache_clear()


@pytest.fixture(autouse=True)
def _fresh_cache() -> object:
    accuracy._shipped.cache_clear()
    yield
    accuracy._shipped.cache_clear()


def test_band_prefers_kind_and_architecture_then_says_it_pooled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cal = default_calibration()
    data = {
        "calibration": calibration_digest(cal),
        "heldout": [
            _group("dense", "hopper", MIN_ROWS, 8.0),
            _group("dense", "ampere", MIN_ROWS - 1, 2.0),
            _group("dense", None, 3 * MIN_ROWS, 6.0),
            _group("hybrid Mamba", None, MIN_ROWS - 1, 9.0),
        ],
    }
    _ship(tmp_path, monkeypatch, json.dumps(data))
    llama = get_model("llama3-70b")
    hopper = band_for(llama, get_gpu("h100-sxm"), cal)
    assert isinstance(hopper, ErrorBand)
    assert (hopper.rows, hopper.pooled) == (MIN_ROWS, None)
    # too few Ampere runs: every dense run, and the line says they are on other GPUs
    ampere = band_for(llama, get_gpu("a100-sxm-80gb"), cal)
    assert isinstance(ampere, ErrorBand)
    assert (ampere.rows, ampere.median_abs_pct) == (3 * MIN_ROWS, 6.0)
    assert ampere.pooled == ("ampere", "hopper")
    assert "too few on Ampere" in ampere.line()
    # no MoE group at all, and a hybrid group below the minimum: unknown, with the count
    moe = band_for(get_model("mixtral-8x7b"), get_gpu("h100-sxm"), cal)
    assert moe == NoBand(f"0 published runs of MoE models outside the fit, {MIN_ROWS} needed")
    hybrid = band_for(get_model("nemotron-h-56b"), get_gpu("h100-sxm"), cal)
    assert isinstance(hybrid, NoBand) and hybrid.reason.startswith(f"{MIN_ROWS - 1} published")
    # under other training constants the figures do not hold; serving constants do not count
    other = cal.replace(attn_eff=cal.attn_eff / 2)
    assert isinstance(band_for(llama, get_gpu("h100-sxm"), other), NoBand)
    serving = cal.replace(inf_hbm_eff=cal.inf_hbm_eff / 2)
    assert calibration_digest(serving) == calibration_digest(cal)


@pytest.mark.parametrize(
    "text",
    [
        "{oops",
        "[]",
        "{}",
        '{"calibration": "x"}',
        '{"calibration": 5, "heldout": []}',
        '{"calibration": "x", "heldout": [{"kind": "dense", "arch": null}]}',
        '{"calibration": "x", "heldout": [{"kind": "dense", "arch": null, "rows": "12",'
        ' "jobs": 1, "median_abs_pct": 1, "p90_abs_pct": 2, "median_signed_pct": 0}]}',
    ],
)
def test_a_malformed_figures_file_gives_no_band_not_a_crash(
    text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ship(tmp_path, monkeypatch, text)
    got = band_for(get_model("llama3-70b"), get_gpu("h100-sxm"), default_calibration())
    assert got == NoBand("no readable figures in training_accuracy.json")


def test_band_line_leans_only_from_the_threshold() -> None:
    high = ErrorBand("MoE", "blackwell", 149, 148, 14.93, 41.8, 7.4)
    assert high.line() == (
        "throughput typically within 14.9 % of measured, 9 in 10 runs within 42 % (149 "
        "published runs of 148 jobs, MoE models on Blackwell GPUs; none used in the fit; "
        "the median prediction 7 % above the measured)"
    )
    low = ErrorBand("MoE", "blackwell", 149, 148, 14.93, 41.8, -7.4)
    assert low.line().endswith("the median prediction 7 % below the measured)")
    at = ErrorBand("dense", "hopper", 20, 20, 6.0, 20.0, LEAN_PCT)
    assert "median prediction 5 % above" in at.line()
    under = ErrorBand("dense", "hopper", 20, 20, 6.0, 20.0, LEAN_PCT - 0.01)
    assert under.line().endswith("none used in the fit)")


def test_model_records_by_hand() -> None:
    fitted = [
        Sample("dense", "hopper", "a", 10.0, "llama3-70b"),
        Sample("dense", "hopper", "b", -4.0, "llama3-70b"),
        Sample("dense", "hopper", "c", 3.0, "a shape from a row alone"),
    ]
    heldout = [Sample("dense", "ampere", "d", 6.0, "llama3-70b"), Sample("MoE", "x", "e", 1.0)]
    got = model_stats(fitted, heldout)
    # runs of no catalog model are left out; every GPU together, then per architecture
    assert got == {
        "llama3-70b": {
            "any": {
                "rows": 3,
                "in_fit": 2,
                "median_signed_pct": 6.0,
                "low_pct": -4.0,
                "high_pct": 10.0,
                "span": "all",
            },
            "ampere": {
                "rows": 1,
                "in_fit": 0,
                "median_signed_pct": 6.0,
                "low_pct": 6.0,
                "high_pct": 6.0,
                "span": "all",
            },
            "hopper": {
                "rows": 2,
                "in_fit": 2,
                "median_signed_pct": 3.0,
                "low_pct": -4.0,
                "high_pct": 10.0,
                "span": "all",
            },
        }
    }
    # from ten runs, the 10th and 90th percentiles: 0..10 % in steps of 1 and one of 100 %
    many = [Sample("dense", "hopper", str(i), float(i), "llama3-8b") for i in range(10)]
    many.append(Sample("dense", "hopper", "x", 100.0, "llama3-8b"))
    stats = model_stats([], many)["llama3-8b"]["hopper"]
    assert (stats["low_pct"], stats["high_pct"], stats["span"]) == (1.0, 9.0, "middle 80 %")
    record = ModelRecord("llama3-70b", None, 3, 2, 6.0, -4.0, 10.0)
    assert record.line() == (
        "this model's own 3 published runs on any GPU (2 in the fit): predictions from 4 % "
        "below to 10 % above the measured, median 6 % above"
    )
    on_hopper = ModelRecord("llama3-8b", "hopper", 11, 0, 5.0, 1.0, 9.0, "middle 80 %")
    assert on_hopper.line() == (
        "this model's own 11 published runs on Hopper GPUs (none in the fit): predictions "
        "from 1 % above to 9 % above the measured (the middle 8 in 10), median 5 % above"
    )
    # under 1 %, one decimal: not "0 % below"
    near = ModelRecord("llama3-8b", None, 35, 15, -0.44, -12.0, 9.0, "middle 80 %")
    assert near.line().endswith("median 0.4 % below")
    one = ModelRecord("llama-65b", "ampere", 1, 1, 15.67, 15.67, 15.67)
    assert one.line() == (
        "this model's own 1 published run on Ampere GPUs (all in the fit): predicted 16 % "
        "above the measured"
    )


def test_band_carries_the_models_own_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cal = default_calibration()
    record = {"rows": 3, "in_fit": 3, "median_signed_pct": 27.4, "low_pct": 26.1}
    record |= {"high_pct": 31.0, "span": "all"}
    data = {
        "calibration": calibration_digest(cal),
        "heldout": [_group("dense", "ampere", MIN_ROWS, 5.0), _group("MoE", None, 2, 9.0)],
        "by_model": {
            "mt-nlg-530b": {"any": record, "ampere": record},
            "mixtral-8x7b": {
                "any": {**record, "rows": 5},
                "hopper": {**record, "rows": 3},
                "blackwell": {**record, "rows": 2},
            },
        },
    }
    _ship(tmp_path, monkeypatch, json.dumps(data))
    band = band_for(get_model("mt-nlg-530b"), get_gpu("a100-sxm-80gb"), cal)
    assert isinstance(band, ErrorBand)
    assert band.record == ModelRecord("mt-nlg-530b", "ampere", 3, 3, 27.4, 26.1, 31.0)
    assert band.line().endswith(
        "; this model's own 3 published runs on Ampere GPUs (all in the fit): predictions "
        "from 26 % above to 31 % above the measured, median 27 % above"
    )
    assert band.to_dict()["record"]["in_fit"] == 3
    # no band for the kind, but the model's own runs are still said: on the prediction's
    # architecture where it has three or more, else on any GPU
    moe = band_for(get_model("mixtral-8x7b"), get_gpu("h100-sxm"), cal)
    assert isinstance(moe, NoBand) and moe.record is not None
    assert (moe.record.arch, moe.record.rows) == ("hopper", ARCH_RECORD_ROWS)
    assert moe.line().startswith("unknown: 2 published runs of MoE models")
    for gpu in ("b200", "a100-sxm-80gb"):  # two runs on Blackwell, none on Ampere
        elsewhere = band_for(get_model("mixtral-8x7b"), get_gpu(gpu), cal).record
        assert elsewhere is not None and (elsewhere.arch, elsewhere.rows) == (None, 5)
    # another shape under the catalog's key (a config.json in a folder of that name): the
    # catalog model's runs are not its own
    other_shape = get_model("mt-nlg-530b").model_copy(update={"layers": 4})
    assert band_for(other_shape, get_gpu("a100-sxm-80gb"), cal).record is None
    # a model with no runs of its own: the band alone
    other = band_for(get_model("llama3-8b"), get_gpu("a100-sxm-80gb"), cal)
    assert isinstance(other, ErrorBand) and other.record is None
    assert "this model's own" not in other.line()
    # a malformed record: no figures at all, as for any malformed file
    data["by_model"] = {"mt-nlg-530b": {"any": {**record, "rows": "3"}}}
    _ship(tmp_path, monkeypatch, json.dumps(data))
    accuracy._shipped.cache_clear()
    assert isinstance(band_for(get_model("mt-nlg-530b"), get_gpu("a100-sxm-80gb"), cal), NoBand)


def test_shipped_held_out_figures_are_current() -> None:
    """The held-out half of training_accuracy.json is what the shipped calibration scores
    on benchmarks/heldout now (those files are in the repository)."""
    shipped = json.loads(ACCURACY_FILE.read_text())
    cal = default_calibration()
    assert shipped["calibration"] == calibration_digest(cal), REGENERATE
    heldout = sorted(DEFAULT_HELDOUT.glob("training_*.csv"))
    assert shipped["heldout_files"] == [f.name for f in heldout], REGENERATE
    held = score(heldout, cal)
    assert group_stats(held) == shipped["heldout"], REGENERATE
    if DEFAULT_FITTED.is_file():  # the models' records count the fit's file's runs too
        fitted = score([DEFAULT_FITTED], cal)
        assert model_stats(fitted, held) == shipped["by_model"], REGENERATE


@pytest.mark.skipif(not DEFAULT_FITTED.is_file(), reason="needs the shared validation file")
def test_shipped_fitted_figures_are_those_validate_prints() -> None:
    shipped = json.loads(ACCURACY_FILE.read_text())
    cal = default_calibration()
    assert group_stats(score([DEFAULT_FITTED], cal)) == shipped["fitted"], REGENERATE
    report = validate_training(DEFAULT_FITTED, cal)
    every = next(g for g in shipped["fitted"] if g["kind"] is None)
    assert every["rows"] == len(report.scored)
    assert every["mape_pct"] == round(report.stats()["mape_pct"], 2)


WORKLOAD = ["--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "64"]
WORKLOAD += ["--seq-len", "4096", "--global-batch", "64"]


def test_every_train_output_carries_the_band(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = ["--tp", "8", "--pp", "4"]
    code, out, err = run_cli(["train", "estimate", *WORKLOAD, *plan, "--json"], capsys)
    assert code == 0, err
    band = json.loads(out)["expected_error"]
    assert (band["available"], band["kind"], band["arch"]) == (True, "dense", "hopper")
    assert band["rows"] >= MIN_ROWS
    line = band_for(get_model("llama3-70b"), get_gpu("h100-sxm"), default_calibration()).line()
    words = line.split()[:6]  # the table wraps the line; its first words stay on one
    code, out, _ = run_cli(["train", "estimate", *WORKLOAD, *plan], capsys)
    assert code == 0 and " ".join(words) in " ".join(out.split())
    page = tmp_path / "search.html"
    code, out, _ = run_cli(["train", "search", *WORKLOAD, "--html", str(page)], capsys)
    assert code == 0 and " ".join(words) in " ".join(out.split())
    shown = str(escape(line))  # the page escapes the model's own runs' apostrophe
    assert f"throughput (not of\nthe gaps between plans): {shown}" in page.read_text()
    code, out, _ = run_cli(["train", "search", *WORKLOAD, "--json"], capsys)
    assert json.loads(out)["expected_error"] == band
    page = tmp_path / "scaling.html"
    args = ["train", "scaling", *WORKLOAD, "--mode", "strong"]
    code, out, _ = run_cli([*args, "--html", str(page)], capsys)
    said = " ".join(f"note: expected error of each point: {line}".split())
    assert code == 0 and said in " ".join(out.split())
    assert str(escape(line)) in page.read_text()
    code, out, _ = run_cli([*args, "--json"], capsys)
    assert all(p["expected_error"] == band for p in json.loads(out)["strong"])


def test_own_constants_say_why_there_is_no_band(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    own = tmp_path / "cal.json"
    own.write_text(json.dumps({"attn_eff": 0.3}))
    args = ["train", "estimate", *WORKLOAD, "--tp", "8", "--pp", "4", "--calibration", str(own)]
    code, out, err = run_cli([*args, "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["expected_error"] == {
        "available": False,
        "reason": "measured for the shipped calibration, not for these constants",
        "record": None,  # the model's own runs were scored under the shipped constants too
    }
