"""How serving rows of other tables are read: engine, precision and statistic spellings,
thousands separators, figures in another unit, and counts beyond any engine's."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from test_inference_bad_rows import GOOD, ONLINE, write

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model
from gpuscale.perf.transformer import param_count
from gpuscale.validate.inference import validate_inference, validate_row, weight_read_floor_s
from gpuscale.validate.inference_rows import REQUIRED, plan_row


def _plan(**cells: str):  # type: ignore[no-untyped-def]
    return plan_row({**GOOD, **cells}, "t")


@pytest.mark.parametrize(
    ("cells", "mode", "value"),
    [
        ({"request_rate": "1,000", "metric_throughput_tokens_per_s": ""}, "poisson", 1000.0),
        ({"request_rate": "", "batch_or_concurrency": "static batch 1,024"}, "static", 1024),
        ({"request_rate": "", "batch_or_concurrency": "BS=64"}, "static", 64),
        ({"request_rate": "", "batch_or_concurrency": "batch size 64"}, "static", 64),
        ({"request_rate": "", "batch_or_concurrency": "1,024"}, "closed", 1024.0),
    ],
)
def test_thousands_separators_and_batch_spellings(
    cells: dict[str, str], mode: str, value: float
) -> None:
    p = _plan(**cells)
    assert p.mode == mode
    assert (p.rate if mode in ("poisson", "closed") else p.requests) == value


@pytest.mark.parametrize("name", ["TRT-LLM v0.12", "trtllm-bench", "NVIDIA TensorRT LLM"])
def test_engine_spellings(name: str) -> None:
    assert _plan(engine=name).engine.name.startswith("trtllm")


@pytest.mark.parametrize(
    ("cell", "precision"),
    [
        ("FP8 (E4M3)", "fp8"),
        ("W8A8-FP8", "fp8"),
        ("INT4-AWQ", "int4"),
        ("GPTQ-int4", "int4"),
        ("bfloat16", "bf16"),
        ("half", "fp16"),
    ],
)
def test_precision_spellings(cell: str, precision: str) -> None:
    assert _plan(precision=cell).precision == precision


def test_an_unstated_precision_is_the_gpus_16_bit_format_and_says_so() -> None:
    assert _plan(precision="").precision == "bf16"
    v100 = _plan(precision="", gpu="V100-SXM2-32GB")
    assert v100.precision == "fp16" and v100.notes == ("precision not stated: fp16 assumed",)


def test_a_latency_below_the_weight_read_is_in_another_unit() -> None:
    # Llama 3 8B in FP8 on one H100: 8.03e9 bytes / 3.35e12 B/s = 2.40 ms a forward pass
    p = _plan()
    floor = param_count(get_model("llama3-8b")) * 1.0 / get_gpu("h100-sxm").hbm_bw_Bps
    assert weight_read_floor_s(p) == pytest.approx(floor)
    assert floor * 1e3 == pytest.approx(2.40, abs=0.01)
    (r,) = validate_row({**ONLINE, "ttft_ms": "0.092"}, "t", default_calibration())
    assert r.status == "skipped" and "check the column's unit" in r.reason


@pytest.mark.parametrize(("stat", "ok"), [("avg", True), ("Average", True), ("p99.9", False)])
def test_statistic_spellings(stat: str, ok: bool) -> None:
    (r,) = validate_row({**ONLINE, "ttft_stat": stat}, "t", default_calibration())
    assert (r.status == "scored") == ok
    if not ok:
        assert "one of mean (avg, average), median (p50), p99" in r.reason


@pytest.mark.parametrize(
    "cells",
    [
        {"request_rate": "", "batch_or_concurrency": "static batch 100000000000000000000"},
        {"request_rate": "", "batch_or_concurrency": "100000000000000000000"},
    ],
)
def test_counts_beyond_any_engine_skip_the_row_instead_of_simulating_it(
    cells: dict[str, str],
) -> None:
    (r,) = validate_row({**GOOD, **cells}, "t", default_calibration())
    assert r.status == "skipped" and "30,000" in r.reason


def test_a_model_and_a_stated_size_that_disagree_skip_the_row(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=[*GOOD, "params_b"])
        w.writeheader()
        w.writerow({**GOOD, "params_b": "70"})
    (r,) = validate_inference(path, default_calibration()).rows
    assert r.status == "skipped" and "params_b='70' but llama3-8b has 8.0 B" in r.reason


def test_a_file_with_only_the_key_columns_is_read(tmp_path: Path) -> None:
    # the statistics, the throughput kind and the precision are optional columns
    row = {k: v for k, v in GOOD.items() if k in REQUIRED}
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=[*REQUIRED, "metric_throughput_tokens_per_s", "notes"])
        w.writeheader()
        w.writerow({**row, "metric_throughput_tokens_per_s": "10000", "notes": "200 requests"})
    (r,) = validate_inference(path, default_calibration()).rows
    assert r.status == "scored"
    assert "precision not stated: bf16 assumed" in r.reason
    assert "throughput_kind not stated: output_total" in r.reason
    write(tmp_path / "unused.csv", [GOOD])  # the full schema still writes


def test_a_file_without_the_throughput_column_reads_an_engine_limit_row(tmp_path: Path) -> None:
    # an empty rate with "max batch 256" and no throughput column: an online row, not a crash
    cols = [*REQUIRED, "ttft_ms", "notes"]
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        row = {k: GOOD.get(k, "") for k in cols}
        w.writerow(
            {**row, "request_rate": "", "batch_or_concurrency": "max batch 256", "ttft_ms": "100"}
        )
    (r,) = validate_inference(path, default_calibration()).rows
    assert r.status == "skipped" and "load not understood" in r.reason


@pytest.mark.parametrize("cell", ["8B", "~8", "eight"])
def test_a_size_cell_never_stops_the_file(tmp_path: Path, cell: str) -> None:
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=[*GOOD, "params_b"])
        w.writeheader()
        w.writerow({**GOOD, "params_b": cell})
    (r,) = validate_inference(path, default_calibration()).rows
    assert r.status == "scored"


def test_an_moe_size_may_be_its_active_parameters() -> None:
    # DeepSeek-V3: 671 B in all, 37 B active a token; a table may give either
    row = {**GOOD, "model": "deepseek-v3", "gpu": "H200", "tp": "8", "num_gpus": "8"}
    assert plan_row({**row, "params_b": "37"}, "t").model == "deepseek-v3"
    assert plan_row({**row, "params_b": "671"}, "t").model == "deepseek-v3"


@pytest.mark.parametrize(
    ("cell", "weights", "kv"),
    [
        ("FP16 weights, FP8 KV cache", "fp16", "fp8"),
        ("bf16 w/ fp8 kv", "bf16", "fp8"),
        ("FP8 (KV cache: BF16)", "fp8", "bf16"),
        ("fp8", "fp8", None),
    ],
)
def test_a_kv_cache_format_is_read_apart_from_the_weights(
    cell: str, weights: str, kv: str | None
) -> None:
    p = _plan(precision=cell)
    assert (p.precision, p.kv) == (weights, kv)


def test_a_batch_limit_beside_a_rate_is_not_a_static_batch() -> None:
    p = _plan(request_rate="4", batch_or_concurrency="batch size 64")
    assert p.mode == "poisson" and p.rate == 4.0
    assert _plan(batch_or_concurrency="max batch size 64").engine.max_batch == 64


def test_a_rate_range_or_decimal_comma_skips_the_row() -> None:
    from gpuscale.validate.report import SkipRow

    for rate in ("1,5", "2-4"):
        with pytest.raises(SkipRow, match="one rate in req/s"):
            _plan(request_rate=rate, metric_throughput_tokens_per_s="")


def test_the_first_statistic_named_is_the_one_compared() -> None:
    (r,) = validate_row(
        {**ONLINE, "ttft_stat": "mean (p99 in ttft_p99_ms)"}, "t", default_calibration()
    )
    (m,) = validate_row({**ONLINE, "ttft_stat": "mean"}, "t", default_calibration())
    assert r.status == "scored" and r.predicted == m.predicted


def test_the_latency_floor_counts_an_moe_tokens_active_experts_only() -> None:
    # Qwen3-30B-A3B: 3.3 B of 30.5 B parameters a token; the floor reads those
    from gpuscale.perf.transformer import active_param_count

    p = _plan(model="qwen3-30b-a3b", precision="bf16")
    model = get_model("qwen3-30b-a3b")
    floor = active_param_count(model) * 2.0 / get_gpu("h100-sxm").hbm_bw_Bps
    assert weight_read_floor_s(p) == pytest.approx(floor)
    assert active_param_count(model) < 0.2 * param_count(model)
