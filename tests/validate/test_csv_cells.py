"""Impossible or duplicate cells in a runs file: an error naming the file, line and column."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.errors import InputError
from gpuscale.validate.report import strict_json
from gpuscale.validate.training import validate_training

HEADER = (
    "id,source,model,gpu,num_gpus,seq_len,global_batch_seqs,target,measured_tokens_per_s_per_gpu"
)
ROW = "r1,torchtitan,llama3-8b,H100-SXM5-80GB,8,8192,64,tokens_per_s_per_gpu,{measured}"


def _file(tmp_path: Path, *lines: str, bom: bool = False) -> Path:
    path = tmp_path / "runs.csv"
    path.write_text(("\ufeff" if bom else "") + "\n".join([HEADER, *lines]) + "\n")
    return path


def test_an_infinite_measured_value_is_a_located_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as exc:
        validate_training(_file(tmp_path, ROW.format(measured="inf")), default_calibration())
    assert exc.value.field == "runs.csv:line 2:measured_tokens_per_s_per_gpu"
    assert exc.value.value == "inf"


@pytest.mark.parametrize("measured", ["0", "-1000"])
def test_an_impossible_measured_value_skips_its_row(tmp_path: Path, measured: str) -> None:
    good = ROW.format(measured="5000").replace("r1,", "r2,", 1)
    rep = validate_training(
        _file(tmp_path, ROW.format(measured=measured), good), default_calibration()
    )
    bad, ok = rep.rows
    assert bad.status == "skipped"
    assert bad.reason == (
        f"measured_tokens_per_s_per_gpu='{measured}': a measured value must be a positive number"
    )
    assert ok.status == "scored"  # the rest of the file is still scored


@pytest.mark.parametrize(
    ("col", "text"), [("num_gpus", "0"), ("num_gpus", "8.5"), ("seq_len", "-1")]
)
def test_a_count_must_be_a_whole_positive_number(tmp_path: Path, col: str, text: str) -> None:
    cells = dict(zip(HEADER.split(","), ROW.format(measured="5000").split(","), strict=True))
    cells[col] = text
    rep = validate_training(_file(tmp_path, ",".join(cells.values())), default_calibration())
    assert rep.rows[0].status == "skipped"
    assert rep.rows[0].reason == f"{col}={text!r}: must be a whole number of at least 1"


def test_duplicate_ids_are_an_error(tmp_path: Path) -> None:
    row = ROW.format(measured="5000")
    with pytest.raises(InputError, match="line 2 has it") as exc:
        validate_training(_file(tmp_path, row, row), default_calibration())
    assert exc.value.field == "runs.csv:line 3:id"


def test_a_header_without_rows_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no data rows"):
        validate_training(_file(tmp_path), default_calibration())


def test_a_spreadsheet_byte_order_mark_is_ignored(tmp_path: Path) -> None:
    rep = validate_training(
        _file(tmp_path, ROW.format(measured="5000"), bom=True), default_calibration()
    )
    assert [r.id for r in rep.rows] == ["r1"]
    assert rep.rows[0].status == "scored"


def test_strict_json_writes_no_nan() -> None:
    text = strict_json({"a": math.nan, "b": [np.float64(math.inf), np.int64(3)], "c": 1.5})
    assert json.loads(text) == {"a": None, "b": [None, 3], "c": 1.5}


def test_seq_parallel_spellings(tmp_path: Path) -> None:
    from gpuscale.validate.training import prepare

    row = dict(zip(HEADER.split(","), ROW.format(measured="5000").split(","), strict=True))
    assert prepare({**row, "seq_parallel": "TRUE", "tp": "2"}, "x").fixed["sp"] is True
    assert prepare({**row, "seq_parallel": "off"}, "x").fixed["sp"] is False
    with pytest.raises(Exception, match="seq_parallel='maybe'"):
        prepare({**row, "seq_parallel": "maybe"}, "x")


@pytest.mark.parametrize(
    ("notes", "seq", "batch"),
    [
        ("global batch 1.5M tokens", 2048, 768),  # 1.5 x 2^20 / 2048, not 1 sequence
        ("global batch 4,000,000 tokens", 2048, 1953),  # not 4,000 sequences
        ("global batch 4 million tokens", 2048, 2048),  # not 4 sequences
        ("sequence length 1.5K, global batch 1,536", None, 1536),
    ],
)
def test_sizes_read_from_notes(notes: str, seq: int | None, batch: int) -> None:
    from gpuscale.validate.training_rows import sizes_from_notes

    got_seq, got_batch, _ = sizes_from_notes(notes, seq, None)
    assert got_batch == batch
    assert got_seq == (seq or 1536)


def test_a_table_as_a_spreadsheet_exports_it_is_read(tmp_path: Path) -> None:
    # header names with spaces and capitals, "not stated" marks, thousands separators,
    # a trailing comma and a blank line: the same row as the plain one, scored alike
    plain = _file(tmp_path, ROW.format(measured="5000"))
    expected = validate_training(plain, default_calibration()).rows[0]
    path = tmp_path / "sheet.csv"
    header = ", ".join(c.capitalize() for c in HEADER.split(",")) + ",Precision,Recompute"
    row = 'r1,torchtitan,llama3-8b,H100-SXM5-80GB,8,"8,192",64,tokens_per_s_per_gpu,"5,000",-,n/a,'
    path.write_text("\n".join([header, row, ",,,,,,,,,,", ""]))
    rep = validate_training(path, default_calibration())
    assert [r.status for r in rep.rows] == ["scored"]
    assert rep.rows[0].predicted == expected.predicted
    assert rep.rows[0].measured == 5000.0


def test_a_malformed_number_is_still_a_located_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as exc:
        validate_training(_file(tmp_path, ROW.format(measured="5k tokens")), default_calibration())
    assert exc.value.field == "runs.csv:line 2:measured_tokens_per_s_per_gpu"
    assert "8,192" in exc.value.valid


@pytest.mark.parametrize(
    ("notes", "stated", "expected"),
    [
        ("FSDP + Megatron tensor parallelism, no pipeline parallelism", {}, {"pp": 1}),
        ("trained without tensor-model-parallelism or context parallel", {}, {"tp": 1}),
        ("no context parallelism; no pipeline parallel", {"pp": 4}, {"pp": 4, "cp": 1}),
        ("pipeline parallelism over 8 stages", {}, {}),  # not a negation
        ("no tensor cores idle", {}, {}),  # not a degree
    ],
)
def test_degrees_the_notes_say_were_not_used(
    notes: str, stated: dict[str, int], expected: dict[str, int]
) -> None:
    from gpuscale.validate.training_rows import absent_degrees

    fixed: dict[str, object] = dict(stated)
    absent_degrees(notes, fixed)
    assert fixed == expected


@pytest.mark.parametrize(
    ("source", "model", "modules"),
    [
        ("torchtitan benchmarks", "llama3-8b", "ops"),  # its default selective_ac_option
        ("Megatron-LM", "llama3-8b", "core_attn"),  # Korthikanti's selective recompute
        ("torchtitan benchmarks", "qwen3-30b-a3b", "core_attn"),  # per-op MoE not modelled
    ],
)
def test_selective_recompute_is_read_as_the_stack_runs_it(
    tmp_path: Path, source: str, model: str, modules: str
) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(
        HEADER + ",recompute\n"
        f"r1,{source},{model},H100-SXM5-80GB,8,4096,64,tokens_per_s_per_gpu,5000,selective\n"
    )
    rep = validate_training(path, default_calibration())
    assert rep.rows[0].status == "scored", rep.rows[0].reason
    assert "rc:selective" in rep.rows[0].detail["plan"]
    per_op = "selective recompute per operator" in rep.rows[0].reason
    assert per_op == (modules == "ops")
