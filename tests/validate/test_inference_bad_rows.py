"""`gpuscale validate inference` on bad rows: a row gpuscale cannot score is skipped with a
reason naming the CSV column and value, the rest of the file is still scored; a malformed
cell is one line naming file:line:column with exit code 2."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.cli import main
from gpuscale.validate.inference import validate_inference
from gpuscale.validate.inference_rows import COLUMNS

GOOD = {
    "id": "good",
    "source": "a",
    "engine": "TensorRT-LLM 0.14",
    "model": "llama3-8b",
    "precision": "fp8",
    "gpu": "H100-SXM5-80GB",
    "num_gpus": "1",
    "tp": "1",
    "pp": "1",
    "input_len": "128",
    "output_len": "128",
    "batch_or_concurrency": "",
    "request_rate": "offline",
    "metric_throughput_tokens_per_s": "10000",
    "ttft_ms": "",
    "tpot_or_itl_ms": "",
    "throughput_kind": "output_total",
    "ttft_stat": "",
    "tpot_itl_stat": "",
    "notes": "200 requests",
}
ONLINE = {
    **GOOD,
    "batch_or_concurrency": "8",
    "request_rate": "",
    "metric_throughput_tokens_per_s": "",
    "ttft_ms": "100",
    "ttft_stat": "p99",
}


def write(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=[*COLUMNS, "notes"])
        w.writeheader()
        for r in rows:
            w.writerow(r)
    return path


BAD_ROWS = [
    # (changes to a good row, the column and value its reason names)
    ({"metric_throughput_tokens_per_s": "0"}, "metric_throughput_tokens_per_s='0'"),
    ({"metric_throughput_tokens_per_s": "-5"}, "metric_throughput_tokens_per_s='-5'"),
    ({**ONLINE, "ttft_ms": "0"}, "ttft_ms='0'"),
    ({"tp": "0"}, "tp='0'"),
    ({"pp": "0"}, "pp='0'"),
    ({"tp": "1.5"}, "tp='1.5'"),
    ({"num_gpus": "0"}, "num_gpus='0'"),
    ({"num_gpus": "3", "tp": "2"}, "num_gpus='3'"),
    ({"tp": "3", "num_gpus": "3"}, "tp=3"),
    ({"input_len": "0"}, "input_len='0'"),
    ({"output_len": "-4"}, "output_len='-4'"),
    ({"input_len": "abc"}, "input_len='abc': not a number of tokens"),
    ({"output_len": ""}, "output_len not stated"),
    ({"batch_or_concurrency": "-4"}, "batch_or_concurrency='-4': on an offline row"),
    ({"batch_or_concurrency": "max batch 0"}, "batch_or_concurrency='max batch 0'"),
    ({**ONLINE, "batch_or_concurrency": "0"}, "batch_or_concurrency='0'"),
    ({"batch_or_concurrency": "static batch 0"}, "batch_or_concurrency='static batch 0'"),
    ({**ONLINE, "batch_or_concurrency": "", "request_rate": "0"}, "request_rate='0'"),
    ({"input_len": "2000000", "output_len": "128"}, "input_len + output_len"),
]


@pytest.mark.parametrize(("change", "names"), BAD_ROWS)
def test_bad_row_is_skipped_naming_the_column(
    tmp_path: Path, change: dict[str, str], names: str
) -> None:
    path = write(tmp_path / "runs.csv", [GOOD, {**GOOD, **change, "id": "bad"}])
    rep = validate_inference(path, default_calibration())
    by_id = {r.id: r for r in rep.rows}
    assert by_id["good"].status == "scored"
    bad = [r for r in rep.rows if r.id == "bad"]
    assert len(bad) == 1 and bad[0].status == "skipped"
    assert names in bad[0].reason


def test_bad_rows_do_not_stop_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [GOOD, *({**GOOD, **c, "id": f"bad{i}"} for i, (c, _) in enumerate(BAD_ROWS[:12]))]
    path = write(tmp_path / "runs.csv", rows)
    try:
        main(["validate", "inference", "--runs", str(path), "--json"])
    except SystemExit as exc:  # pragma: no cover - a failure path
        pytest.fail(f"exit {exc.code}: {capsys.readouterr().err}")
    assert '"scored": 1' in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"request_rate": "."}, "runs.csv:line 3:request_rate='.'"),
        ({"metric_throughput_tokens_per_s": "fast"}, "runs.csv:line 3:metric_throughput"),
        ({"ttft_ms": "inf"}, "runs.csv:line 3:ttft_ms='inf'"),
        ({"ttft_ms": "nan"}, "runs.csv:line 3:ttft_ms='nan'"),
        ({"metric_throughput_tokens_per_s": "-inf"}, "runs.csv:line 3:metric_throughput"),
        ({"tp": "x"}, "runs.csv:line 3:tp='x'"),
    ],
)
def test_malformed_cell_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, str], field: str
) -> None:
    path = write(tmp_path / "runs.csv", [GOOD, {**ONLINE, **change, "id": "bad"}])
    with pytest.raises(SystemExit) as exc:
        main(["validate", "inference", "--runs", str(path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert field in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
