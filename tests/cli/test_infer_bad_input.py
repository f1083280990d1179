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


@pytest.mark.parametrize(
    ("load", "field"),
    [
        (["--offline", "1000000000"], "offline=1000000000"),
        (["--concurrency", "1000000000"], "concurrency=1000000000"),
        (["--qps", "1", "--requests", "100000000"], "requests=100000000"),
        (["--qps", "1e300"], "qps=1e+300"),
        (["--qps", "nan"], "qps=nan"),
    ],
)
def test_estimate_refuses_a_load_beyond_its_bound_before_simulating(
    capsys: pytest.CaptureFixture[str], load: list[str], field: str
) -> None:
    # a billion requests used to be simulated until the kernel killed the process
    code, out, err = run([*EST, "--input-len", "128", *load], capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {field} is invalid:") and "up to" in err
    assert len(err.strip().splitlines()) == 1


def test_estimate_takes_a_load_at_its_bound(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run([*EST, "--input-len", "16", "--qps", "1e7", "--requests", "10"], capsys)
    assert code == 0, err


@pytest.mark.parametrize("qps", ["1e12", "1e300", "inf"])
def test_size_refuses_a_rate_beyond_its_bound(capsys: pytest.CaptureFixture[str], qps: str) -> None:
    # 1e12 req/s used to be answered with 1.5e14 GPUs
    argv = list(SIZE)
    argv[argv.index("--qps") + 1] = qps
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert err.startswith("error: qps=") and "up to 10,000,000 req/s" in err


def test_size_refuses_a_deployment_beyond_the_gpus_gpuscale_models() -> None:
    with pytest.raises(InputError) as exc:
        size(
            get_model("llama3-405b"),
            1e7,
            4096,
            4096,
            Slo(10.0, 0.1),
            [get_gpu("h100-sxm")],
            default_calibration(),
            {"h100-sxm": 2.5},
            tps=(8,),
        )
    assert exc.value.field == "qps" and "16,777,216" in exc.value.valid


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("h100-sxm: .nan\n", "h100-sxm=nan"),
        ("h100-sxm: .inf\n", "h100-sxm=inf"),
        ("h100-sxm: true\n", "h100-sxm=True"),
        ("h100-sxm: {usd_per_gpu_hour: false}\n", "h100-sxm=False"),
        ("h100-sxm: 1" + "0" * 400 + "\n", "h100-sxm=1000"),
        ("h100-sxm: {usd_per_gpu_hour: 3, bogus: 1}\n", "h100-sxm.bogus=1"),
    ],
)
def test_a_price_that_is_no_price_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str
) -> None:
    # NaN used to surface as an unmet SLO, true as a price of 1.00 USD/h
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    code, out, err = run([*SIZE, "--gpus", "h100-sxm", "--prices", str(path)], capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {path}:{field}")
    assert len(err.strip().splitlines()) == 1


def test_the_shipped_prices_and_their_sources_still_load() -> None:
    prices = load_prices()
    assert prices["h100-sxm"] == 3.99 and all(v > 0 for v in prices.values())


def test_requests_with_offline_is_refused_not_ignored(capsys: pytest.CaptureFixture[str]) -> None:
    args = [*EST, "--input-len", "512", "--offline", "10", "--requests", "5"]
    code, _, err = run(args, capsys)
    assert code == 2
    assert "requests=5 is invalid: not given with --offline, which simulates its 10" in err


def test_an_slo_missed_under_load_names_the_deployment_nearest_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 12 ms p99 TTFT is reachable by one unloaded H100 TP8 prefill (11.3 ms) but not with
    # Poisson arrivals: every candidate simulated misses it; the error names the one whose
    # worse p99 is nearest its target, with its figures
    args = [*SIZE[:-4], "--ttft-p99", "12ms", "--tpot-p99", "100ms", "--gpus", "h100-sxm"]
    code, _, err = run(args, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "not met under load: the closest tried, h100-sxm TP" in err
    ttft = float(err.split("p99 TTFT ")[1].split("s,")[0])
    assert 0.012 < ttft < 0.012 * 1.5


def test_size_json_names_the_model_by_its_catalog_key_as_estimate_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = [*SIZE, "--gpus", "h100-sxm", "--json"]
    args[args.index("llama3-8b")] = "Llama3-8B"
    code, out, err = run(args, capsys)
    assert code == 0, err
    assert json.loads(out)["model"] == "llama3-8b"
    code, out, err = run([*EST, "--input-len", "512", "--offline", "16", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["model"] == "llama3-8b"


def test_a_closed_loop_needs_as_many_requests_as_it_keeps_in_flight(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(
        [*EST, "--input-len", "512", "--concurrency", "64", "--requests", "10"], capsys
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "requests=10" in err and "at least --concurrency (64)" in err
    # without --requests, a loop of more than the default 2,000 simulates its own count
    code, out, _ = run([*EST, "--input-len", "512", "--concurrency", "3000", "--json"], capsys)
    assert code == 0 and json.loads(out)["load"] == "concurrency 3000, 3000 requests"


def test_more_in_flight_than_the_kv_cache_holds_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    # Llama 3 70B at TP4 on H100: the KV cache holds 228 sequences of 2,304 tokens
    args = ["infer", "estimate", "--model", "llama3-70b", "--gpu", "h100-sxm", "--tp", "4"]
    args += ["--input-len", "2048", "--output-len", "256", "--concurrency", "300", "--json"]
    code, out, err = run(args, capsys)
    assert code == 0
    assert json.loads(out)["memory_per_gpu"]["max_seqs"] == 228
    assert "--concurrency 300 is more than the 228 sequences" in err and "72 requests" in err
