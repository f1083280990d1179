"""Impossible or duplicate cells in a runs file: an error naming the file, line and column."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_cli

from gpuscale.calibrate import default_calibration
from gpuscale.errors import InputError
from gpuscale.validate.numbers import num
from gpuscale.validate.report import signed_error_pct, strict_json
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


@pytest.mark.parametrize("text", ["nan", "NaN", "NAN", "-nan", "-inf", "+Inf", "Infinity", "~nan"])
def test_a_nan_or_infinite_measured_value_is_a_located_error(tmp_path: Path, text: str) -> None:
    # nan is no more a measurement than inf: not read as an empty cell (the row skipped)
    with pytest.raises(InputError) as exc:
        validate_training(_file(tmp_path, ROW.format(measured=text)), default_calibration())
    assert exc.value.field == "runs.csv:line 2:measured_tokens_per_s_per_gpu"
    assert exc.value.value == text
    assert exc.value.valid == "a finite number or an empty cell"


@pytest.mark.parametrize(("col", "text"), [("seq_len", "nan"), ("num_gpus", "NaN")])
def test_a_nan_in_any_numeric_cell_is_a_located_error(tmp_path: Path, col: str, text: str) -> None:
    cells = dict(zip(HEADER.split(","), ROW.format(measured="5000").split(","), strict=True))
    cells[col] = text
    with pytest.raises(InputError) as exc:
        validate_training(_file(tmp_path, ",".join(cells.values())), default_calibration())
    assert exc.value.field == f"runs.csv:line 2:{col}"
    assert exc.value.value == text


def test_a_nan_measured_value_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(
        tmp_path, ROW.format(measured="5000"), ROW.format(measured="nan").replace("r1", "r2")
    )
    code, out, err = run_cli(["validate", "training", "--runs", str(path)], capsys)
    assert code == 2 and out == ""
    assert err.strip() == (
        "error: runs.csv:line 3:measured_tokens_per_s_per_gpu='nan' is invalid: "
        "a finite number or an empty cell"
    )


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
    assert rep.rows[0].reason == f"{col}={text!r}: must be a whole number from 1 to 16,777,216"


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
    # a remark after the word, the technique's name alone, or negated
    for cell, on in (("Yes (SP)", True), ("SP", True), ("on (with TP)", True)):
        assert prepare({**row, "seq_parallel": cell, "tp": "2"}, "x").fixed["sp"] is on
    for cell, on in (("sequence parallel", True), ("no SP", False), ("\u2705\ufe0f", True)):
        assert prepare({**row, "seq_parallel": cell, "tp": "2"}, "x").fixed["sp"] is on
    for cell, on in (("SP=off", False), ("SP (Megatron)", True)):
        assert prepare({**row, "seq_parallel": cell, "tp": "2"}, "x").fixed["sp"] is on
    with pytest.raises(Exception, match="seq_parallel='SP: maybe'"):
        prepare({**row, "seq_parallel": "SP: maybe"}, "x")


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


@pytest.mark.parametrize(
    ("col", "text", "value"),
    [
        ("measured_tokens_per_s_per_gpu", "1.6k", 1600.0),  # decimal thousands
        ("measured_tokens_per_s_per_gpu", "5K", 5000.0),
        ("measured_tflops_per_gpu", "0.4M", 400000.0),
        ("params_b", "70B", 70.0),  # the column's own unit restated
        ("params_b", "1.8T", 1800.0),
        ("seq_len", "8K", 8192.0),  # context lengths count binary thousands
        # units, remarks and approximate marks as other authors write them
        ("measured_step_time_s", "9100 ms", 9.1),
        ("measured_step_time_s", "61,756 ms", 61.756),
        ("measured_step_time_s", "~5.2s", 5.2),
        ("measured_tflops_per_gpu", "520 TFLOP/s", 520.0),
        ("measured_tflops_per_gpu", "520 TFLOPS", 520.0),
        ("measured_tokens_per_s_per_gpu", "1050 tok/s", 1050.0),
        ("measured_tokens_per_s_per_gpu", "1.6k tokens/s/GPU", 1600.0),
        ("measured_tokens_per_s_per_gpu", "approx. 1050", 1050.0),
        ("measured_mfu", "43 % (bf16)", 0.43),
        ("num_gpus", "16K GPUs", 16384.0),  # Llama 3's "16K H100s": 16,384
        ("global_batch_seqs", "512 (4M tokens)", 512.0),
        ("seq_len", "8192 tokens", 8192.0),
        ("micro_batch", "1 (GA 8)", 1.0),
        ("params_b", "671 (37 active)", 671.0),
        ("tp", "4x", 4.0),
        ("cp", "none", 1.0),  # no context parallelism: a degree of 1
        ("measured_step_time_s", "9100 (ms)", 9.1),  # a unit in brackets is the unit
        ("seq_len", "8 (K)", 8192.0),
        ("measured_step_time_s", "9100 ms (median)", 9.1),  # a remark after the unit
        ("measured_tflops_per_gpu", "520 TFLOPS (bf16)", 520.0),
        ("measured_tokens_per_s_per_gpu", "1050 TGS", 1050.0),
        ("measured_step_time_s", "15.6 s/iter", 15.6),
        ("measured_step_time_s", "900 ms/iter", 0.9),
        ("measured_step_time_s", "0.26 min", 15.6),
        ("cp", "CP=2", 2.0),  # a label before the degree, a word after it
        ("ep", "EP64", 64.0),
        ("ep", "64-way", 64.0),
        ("pp", "4 stages", 4.0),
        ("vpp", "interleaved, 5", 5.0),
        ("num_gpus", "8x8", 64.0),  # nodes times their GPUs
        ("num_gpus", "8 nodes x 8 GPUs", 64.0),
        ("global_batch_seqs", "1K", 1024.0),
        ("vocab", "32K", 32000.0),  # LLaMA's 32,000 tokens, a decimal K
    ],
)
def test_unit_suffixes_tables_print(col: str, text: str, value: float) -> None:
    assert num({col: text}, col, "runs.csv:line 2") == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize(
    ("col", "text"),
    [("tp", "PP=4"), ("tp", "abc 4"), ("cp", "no 2"), ("pp", "VPP 2"), ("micro_batch", "GBS=512")],
)
def test_a_degree_cell_takes_only_its_own_label(col: str, text: str) -> None:
    # "PP=4" in the tp column is no TP degree of 4: refused, not read silently
    with pytest.raises(InputError):
        num({col: text}, col, "runs.csv:line 2")


def test_a_factor_in_brackets_is_no_remark() -> None:
    # "8 (x 8 nodes)" GPUs is not 8 GPUs: the cell is refused, not read as 8
    with pytest.raises(InputError):
        num({"num_gpus": "8 (x 8 nodes)"}, "num_gpus", "runs.csv:line 2")


def test_a_malformed_number_is_still_a_located_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as exc:
        validate_training(_file(tmp_path, ROW.format(measured="5k tokens")), default_calibration())
    assert exc.value.field == "runs.csv:line 2:measured_tokens_per_s_per_gpu"
    assert exc.value.valid == "a number (6412, 6,412, 6.4k, 6412 tok/s) or an empty cell"


@pytest.mark.parametrize(
    ("col", "forms"),
    [
        ("seq_len", "8192, 8,192, 8K, 8192 tokens"),  # no percentage offered for a length
        ("params_b", "70, 70B, 1.8T"),
        ("measured_mfu", "0.43, 43%"),
        ("measured_step_time_s", "12.5, 1,024.5, 9100 ms, 9.1 s"),  # a time is no share
        ("num_gpus", "1024, 1,024, 1K, 1024 GPUs"),
        ("measured_tflops_per_gpu", "412, 412.5, 412 TFLOP/s"),
        ("tp", "8, 8x, none"),
    ],
)
def test_a_malformed_number_lists_the_forms_its_column_reads(col: str, forms: str) -> None:
    with pytest.raises(InputError) as exc:
        num({col: "eight thousand"}, col, "runs.csv:line 2")
    assert exc.value.valid == f"a number ({forms}) or an empty cell"
    for form in forms.split(", "):  # each form listed is one the column reads
        assert num({col: form}, col, "runs.csv:line 2") is not None


@pytest.mark.parametrize(
    ("notes", "stated", "expected"),
    [
        ("FSDP + Megatron tensor parallelism, no pipeline parallelism", {}, {"pp": 1}),
        ("trained without tensor-model-parallelism or context parallel", {}, {"tp": 1}),
        ("no context parallelism; no pipeline parallel", {"pp": 4}, {"pp": 4, "cp": 1}),
        ("pipeline parallelism over 8 stages", {}, {}),  # not a negation
        ("no tensor cores idle", {}, {}),  # not a degree
        ("no pipeline parallel bubble to speak of", {}, {}),  # the bubble, not the degree
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


# A row whose cells do not line up with the header: an error naming file, line and both counts


def test_a_short_row_is_a_located_error_not_an_empty_target(tmp_path: Path) -> None:
    with pytest.raises(InputError) as exc:
        validate_training(
            _file(tmp_path, ROW.format(measured="5000"), "a,b,c"), default_calibration()
        )
    assert exc.value.field == "runs.csv:line 3"
    assert exc.value.value == "a"
    assert exc.value.valid == "row has 3 fields where the header names 9 columns"


def test_a_row_one_cell_short_is_an_error(tmp_path: Path) -> None:
    row = ROW.format(measured="5000").rsplit(",", 1)[0]  # the measured cell left out
    with pytest.raises(InputError, match="row has 8 fields where the header names 9 columns"):
        validate_training(_file(tmp_path, row), default_calibration())


def test_a_long_row_names_both_counts(tmp_path: Path) -> None:
    with pytest.raises(InputError) as exc:
        validate_training(
            _file(tmp_path, ROW.format(measured="5000") + ",,bf16"), default_calibration()
        )
    assert exc.value.field == "runs.csv:line 2"
    assert exc.value.valid == (
        "row has 11 fields where the header names 9 columns; only empty fields may follow the last"
    )


def test_a_short_row_is_one_line_exit_2_before_any_row_is_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = ROW.format(measured="5000")
    path = _file(tmp_path, good, good.replace("r1,", "r2,", 1), "r3,torchtitan,llama3-8b")
    code, out, err = run_cli(["validate", "training", "--runs", str(path), "--json"], capsys)
    assert code == 2 and out == ""
    assert err.strip() == (
        "error: runs.csv:line 4='r3' is invalid: row has 3 fields where the header names 9 columns"
    )


def test_the_tables_shape_is_checked_before_any_row_is_read(tmp_path: Path) -> None:
    # line 2's malformed cell would stop the file too, but the table is checked first
    path = _file(tmp_path, ROW.format(measured="5k tokens"), "r2,torchtitan")
    with pytest.raises(InputError) as exc:
        validate_training(path, default_calibration())
    assert exc.value.field == "runs.csv:line 3"


@pytest.mark.parametrize(
    ("header", "row"),
    [
        (HEADER, "{row},"),  # a trailing comma
        (HEADER, "{row},,, "),  # trailing empty cells a spreadsheet exported
        (HEADER + ",", "{row},"),  # a trailing comma on every line
        (HEADER + ",", "{row}"),  # ... but the header's only
    ],
)
def test_trailing_empty_cells_are_not_columns(tmp_path: Path, header: str, row: str) -> None:
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([header, row.format(row=ROW.format(measured="5000")), ",,", ""]))
    rep = validate_training(path, default_calibration())
    assert [(r.id, r.status) for r in rep.rows] == [("r1", "scored")]


def test_lines_are_counted_across_blank_lines_and_quoted_line_breaks(tmp_path: Path) -> None:
    row = ROW.format(measured="5000")
    header = HEADER + ",notes"
    lines = [header, row + ',"two\nlines"', "", row + ","]  # the id again on line 5
    path = tmp_path / "runs.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="line 2 has it") as exc:
        validate_training(path, default_calibration())
    assert exc.value.field == "runs.csv:line 5:id"


def test_an_unclosed_quote_is_a_short_row_on_its_line(tmp_path: Path) -> None:
    # the quote runs to the end of the file, taking the rows below into one cell
    good = ROW.format(measured="5000")
    path = _file(tmp_path, good, good.replace("r1,", 'r2,"', 1), good.replace("r1,", "r3,", 1))
    with pytest.raises(InputError, match="row has 2 fields where the header names 9") as exc:
        validate_training(path, default_calibration())
    assert exc.value.field == "runs.csv:line 3"


def test_a_cell_past_the_csv_field_limit_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, ROW.format(measured="5000") + "x" * 200_000)
    code, out, err = run_cli(["validate", "training", "--runs", str(path)], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "a well-formed CSV file (line 2: field larger than field limit" in err


@pytest.mark.parametrize("gpus", ["1e20", "1e30", "16777217"])
def test_a_count_beyond_any_cluster_skips_the_row_naming_it(tmp_path: Path, gpus: str) -> None:
    # not an overflow deep in the model: the row is skipped, the rest of the file scored
    row = ROW.format(measured="5000").replace(",8,8192,", f",{gpus},8192,")
    (r,) = validate_training(_file(tmp_path, row), default_calibration()).rows
    assert r.status == "skipped"
    assert f"num_gpus='{gpus}'" in r.reason and "16,777,216" in r.reason


def test_a_share_is_no_gpu_count(tmp_path: Path) -> None:
    row = ROW.format(measured="5000").replace(",8,8192,", ",800%,8192,")
    with pytest.raises(InputError) as exc:
        validate_training(_file(tmp_path, row), default_calibration())
    assert exc.value.field == "runs.csv:line 2:num_gpus" and exc.value.value == "800%"


def test_the_error_of_a_huge_measurement_is_finite() -> None:
    assert signed_error_pct(76.5, 1e308) == pytest.approx(-100.0)
    assert signed_error_pct(110.0, 100.0) == pytest.approx(10.0)


def test_a_column_outside_the_schema_is_named_as_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelt column ("tensor_parallel" for tp) reads as not stated: the report says so,
    in the table's note and in the JSON."""
    path = tmp_path / "runs.csv"
    path.write_text(HEADER + ",tensor_parallel,notes\n" + ROW.format(measured="5000") + ",2,run\n")
    report = validate_training(path, default_calibration())
    assert report.unread_columns == ("tensor_parallel",)
    assert json.loads(report.dumps())["unread_columns"] == ["tensor_parallel"]
    code, out, _ = run_cli(["validate", "training", "--runs", str(path)], capsys)
    assert code == 0
    assert "note: column(s) tensor_parallel are not in the training schema" in " ".join(out.split())
