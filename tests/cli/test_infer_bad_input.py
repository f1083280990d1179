"""`gpuscale infer` bad input: prices for every GPU compared, a sequence longer than the KV
cache named as such, and a request beyond the model's context window warned about."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_cli

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model
from gpuscale.errors import InputError
from gpuscale.perf.inference_size import Slo, load_prices, size

run = run_cli


SIZE = [
    "infer",
    "size",
    "--model",
    "llama3-8b",
    "--qps",
    "2",
    "--input-len",
    "512",
    "--output-len",
    "128",
    "--ttft-p99",
    "2s",
    "--tpot-p99",
    "100ms",
]
EST = ["infer", "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--output-len", "64"]


@pytest.fixture
def h100_prices(tmp_path: Path) -> Path:
    path = tmp_path / "prices.yaml"
    path.write_text("h100-sxm: 2.5\n")
    return path


def test_an_unpriced_gpu_in_gpus_is_named(
    h100_prices: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run([*SIZE, "--gpus", "h100-sxm,h200", "--prices", str(h100_prices)], capsys)
    assert code == 2
    assert "gpus='h200'" in err and "--prices" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_gpu_the_shipped_prices_lack_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    # l4 has no shipped price: it used to be costed at 1 USD/GPU-hour and won
    code, _, err = run([*SIZE, "--gpus", "h100-sxm,l4"], capsys)
    assert code == 2
    assert "gpus='l4'" in err and "drop it from --gpus" in err


def test_gpus_none_of_them_priced_are_ranked_by_gpu_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run([*SIZE, "--gpus", "l4", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["ranked_by"] == "gpus" and doc["best"]["usd_per_hour"] is None
    code, out, _ = run([*SIZE, "--gpus", "l4"], capsys)
    assert code == 0 and "ranked by GPU count" in out


def test_without_gpus_unpriced_defaults_are_skipped_and_said(
    h100_prices: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([*SIZE, "--prices", str(h100_prices), "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["best"]["gpu"] == "h100-sxm"
    assert sorted(doc["skipped_gpus"]) == ["b200", "h200"]
    code, out, _ = run([*SIZE, "--prices", str(h100_prices)], capsys)
    assert code == 0
    assert "skipped" in out and "h200, b200" in out


def test_the_library_refuses_to_compare_priced_with_unpriced() -> None:
    with pytest.raises(InputError) as exc:
        size(
            get_model("llama3-8b"),
            2.0,
            512,
            128,
            Slo(2.0, 0.1),
            [get_gpu("h100-sxm"), get_gpu("l4")],
            default_calibration(),
            load_prices(),
        )
    assert exc.value.field == "gpus" and exc.value.value == "l4"


def test_size_names_input_len_when_one_sequence_does_not_fit() -> None:
    with pytest.raises(InputError) as exc:
        size(
            get_model("llama3-8b"),
            1.0,
            2_000_000,
            128,
            Slo(1000.0, 1.0),
            [get_gpu("h100-sxm")],
            default_calibration(),
            load_prices(),
            tps=(1,),
        )
    assert exc.value.field == "input-len"
    assert "output-len 128" in exc.value.valid and "max_seq" in exc.value.valid


def test_estimate_names_input_len_not_tp_when_the_sequence_does_not_fit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run([*EST, "--input-len", "600000", "--concurrency", "1"], capsys)
    assert code == 2
    assert "input-len=600000" in err and "output-len 64" in err
    assert "tp=1" not in err
    assert len(err.strip().splitlines()) == 1


def test_estimate_warns_beyond_the_context_window(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["infer", "estimate", "--model", "llama2-7b", "--gpu", "h100-sxm"]
    code, _, err = run(
        [*args, "--input-len", "8000", "--output-len", "64", "--offline", "4", "--json"], capsys
    )
    assert code == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "warning" in lines[0] and "max_seq 4096" in lines[0]
    code, _, err = run(
        [*args, "--input-len", "1000", "--output-len", "64", "--offline", "4", "--json"], capsys
    )
    assert code == 0 and err == ""


def test_a_bad_time_target_is_quoted_as_typed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([*SIZE[:-4], "--ttft-p99", "-2s", "--tpot-p99", "50ms"], capsys)
    assert code == 2 and out == ""
    assert err.strip() == "error: ttft-p99='-2s' is invalid: a positive time, e.g. 2s or 50ms"


def test_the_load_curve_at_the_asked_load_repeats_the_chosen_deployment() -> None:
    # the curve's point at the asked request rate is the simulation that chose the
    # deployment (same requests), so the headline and the table agree
    res = size(
        get_model("llama3-8b"),
        20.0,
        512,
        128,
        Slo(2.0, 0.1),
        [get_gpu("h100-sxm")],
        default_calibration(),
        {"h100-sxm": 2.5},
    )
    at = [p for p in res.curve if p.qps == pytest.approx(20.0)]
    assert len(at) == 1
    assert at[0].ttft_p99_s == res.best.ttft_p99_s
    assert at[0].tpot_p99_s == res.best.tpot_p99_s
