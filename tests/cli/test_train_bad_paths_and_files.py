"""Bad files and paths given to the train and validate commands: each is one line on stderr
naming the field, the value and what is valid, exit code 2, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_cli

from gpuscale.catalog import get_gpu
from gpuscale.errors import InputError
from gpuscale.spec.files import read_yaml

LONG = "a" * 300  # longer than a file name may be (255 bytes)
SMALL = ["--gpu", "h100-sxm", "--gpus", "8"]
RUNS_HEADER = (
    "id,source,model,seq_len,global_batch_seqs,gpu,num_gpus,measured_tokens_per_s_per_gpu,target"
)


def _error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code, _, err = run_cli(args, capsys)
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _workload_error(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of `train estimate` on a workload file ``job.yaml`` of ``text``."""
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return _error(["train", "estimate", "--workload", str(path)], capsys)


@pytest.mark.parametrize(
    "args",
    [
        ["train", "estimate", "--model", LONG, *SMALL],
        ["train", "estimate", "--workload", f"/tmp/{LONG}.yaml"],
        ["validate", "training", "--runs", f"/tmp/{LONG}.csv"],
        ["train", "search", "--model", "llama3.2-1b", *SMALL, "--html", f"/tmp/{LONG}.html"],
    ],
)
def test_a_name_too_long_for_the_system_is_an_input_error(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    line = _error(args, capsys)
    assert "a path the system can open (File name too long)" in line
    assert "(3" in line and "characters)" in line  # the value is cut, its length said


def test_deeply_nested_files_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text("[" * 5000 + "]" * 5000)
    line = _error(["train", "estimate", "--model", str(cfg), *SMALL], capsys)
    assert "JSON nested at most a few hundred levels deep" in line
    nested = "name: " + "[" * 5000 + "]" * 5000 + "\n"
    assert "YAML nested at most a few hundred levels deep" in _workload_error(
        tmp_path, nested, capsys
    )
    line = _error(
        ["train", "estimate", "--model", "llama3.2-1b", *SMALL, "--calibration", str(cfg)], capsys
    )
    assert line.startswith("error: calibration=")
    assert "JSON nested at most a few hundred levels deep" in line


def test_integers_too_long_for_python_to_read_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    huge = "9" * 5000  # past Python's 4,300-digit limit on reading an integer
    cfg = tmp_path / "config.json"
    cfg.write_text(f'{{"hidden_size": {huge}}}')
    expected = "is invalid: integers of at most 4,300 digits (Python's limit for reading one)"
    assert expected in _error(["train", "estimate", "--model", str(cfg), *SMALL], capsys)
    cal = ["train", "estimate", "--model", "llama3.2-1b", *SMALL, "--calibration", str(cfg)]
    assert _error(cal, capsys).startswith(f"error: calibration='{cfg}' {expected}")
    text = f"model: llama3.2-1b\ngpu: h100-sxm\ngpus: {huge}\n"
    assert expected in _workload_error(tmp_path, text, capsys)


def test_an_impossible_date_in_a_workload_file_is_not_called_a_long_integer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _workload_error(tmp_path, "model: llama3.2-1b\nseq_len: 2024-13-01\n", capsys)
    assert "is invalid: valid YAML (month must be in 1..12)" in line


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null"])
def test_a_device_is_not_a_calibration_file(path: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["train", "estimate", "--model", "llama3.2-1b", *SMALL, "--calibration", path]
    line = _error(args, capsys)
    assert line == (
        f"error: calibration='{path}' is invalid: not a regular file (a device, pipe or "
        "socket); give a calibration JSON file"
    )


def test_a_device_is_not_a_runs_file(capsys: pytest.CaptureFixture[str]) -> None:
    line = _error(["validate", "training", "--runs", "/dev/null"], capsys)
    assert "not a regular file" in line


def test_an_empty_model_name_is_said_to_be_empty(capsys: pytest.CaptureFixture[str]) -> None:
    assert "is invalid: empty" in _error(["train", "estimate", "--model", "", *SMALL], capsys)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("gpus: 0512\n", 512),  # YAML 1.1 would read octal 330
        ("gpus: 0o1000\n", 512),
        ("gpus: 0x200\n", 512),
        ("gpus: 1_024\n", 1024),
        ("gpus: 1:04\n", "1:04"),  # YAML 1.1 would read base 60: 64
        ("gpus: 1:30.5\n", "1:30.5"),
        ("gpus: 2.5\n", 2.5),
    ],
)
def test_workload_numbers_are_read_as_yaml_1_2(tmp_path: Path, text: str, value: object) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    assert read_yaml(path, "workload", "a workload")["gpus"] == value


def test_a_base_60_count_is_refused_not_read_as_64(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _workload_error(tmp_path, "model: llama3.2-1b\ngpu: h100-sxm\ngpus: 1:04\n", capsys)
    assert "job.yaml:gpus='1:04' is invalid" in line


def _alias_bomb(key: str) -> str:
    """A workload whose ``key`` is 9^7 (4.8 million) strings once its aliases expand."""
    levels = ["&a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdef", "bcdefg", strict=True):
        levels.append(f"&{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    base = {"model": "llama3.2-1b", "gpu": "h100-sxm", "gpus": "8"}
    base[key] = f"[{', '.join(levels)}]"
    return "".join(f"{k}: {v}\n" for k, v in base.items())


def test_an_alias_bomb_is_refused_without_expanding_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _workload_error(tmp_path, _alias_bomb("tokens"), capsys)
    assert "job.yaml:tokens='a list' is invalid" in line


def test_tokens_given_as_a_list_are_named_by_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _workload_error(
        tmp_path, "model: llama3.2-1b\ngpu: h100-sxm\ngpus: 8\ntokens: [1, 2]\n", capsys
    )
    assert "job.yaml:tokens='a list' is invalid" in line


def test_the_echoed_value_is_cut_to_a_readable_length() -> None:
    err = InputError("gpu", "x" * 10_000, "a catalog GPU")
    assert len(str(err)) < 300
    assert "(10,002 characters)" in str(err)


@pytest.mark.parametrize("name", ["Intel H100", "Radeon H100", "Gaudi H100", "Google TPU H100"])
def test_another_makers_name_contradicts_the_part(name: str) -> None:
    with pytest.raises(InputError, match="unknown"):
        get_gpu(name)


def test_a_superscript_step_count_is_an_input_error(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["train", "estimate", "--model", "llama3.2-1b", *SMALL, "--checkpoint-every", "²steps"]
    line = _error([*args, "--storage-write-bw", "1GB/s"], capsys)
    assert "checkpoint-every='²steps' is invalid" in line


def test_mtp_depths_are_bounded_by_the_layers(capsys: pytest.CaptureFixture[str]) -> None:
    line = _error(["train", "estimate", "--model", "llama3.2-1b", *SMALL, "--mtp", "17"], capsys)
    assert "mtp=17 is invalid: a number of MTP depths, 0 to 16" in line


def test_no_rope_layers_of_lists_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = {
        "model_type": "llama4_text",
        "num_hidden_layers": 2,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "vocab_size": 1000,
        "intermediate_size": 1024,
        "attention_chunk_size": 128,
        "no_rope_layers": [[1], [0]],
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    line = _error(["train", "estimate", "--model", str(path), *SMALL], capsys)
    assert "no_rope_layers=[[1], [0]] is invalid: a list of 2 zeros and ones" in line


def test_a_broken_config_a_runs_row_names_is_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "m" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(
        json.dumps(
            {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 0, "vocab_size": 100}
        )
    )
    header = (
        "id,source,model,layers,hidden,heads,seq_len,global_batch_seqs,gpu,num_gpus,"
        "measured_tokens_per_s_per_gpu,target"
    )
    runs = tmp_path / "runs.csv"
    runs.write_text(f"{header}\nr1,test,{cfg},2,64,4,2048,8,h100-sxm,8,1000,tokens_per_s_per_gpu\n")
    _, out, _ = run_cli(["validate", "training", "--runs", str(runs), "--json"], capsys)
    row = json.loads(out)["rows"][0]
    assert row["status"] == "skipped"
    assert "num_attention_heads=0" in row["reason"]


def test_an_empty_row_id_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header = RUNS_HEADER
    runs = tmp_path / "runs.csv"
    runs.write_text(f"{header}\n,test,llama3-8b,8192,64,h100-sxm,8,9000,tokens_per_s_per_gpu\n")
    line = _error(["validate", "training", "--runs", str(runs)], capsys)
    assert "runs.csv:line 2:id='' is invalid" in line


def test_scaling_blames_the_failure_rate_when_failures_stop_every_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["train", "scaling", "--model", "llama3.2-1b", "--gpu", "h100-sxm", "--gpus", "16"]
    args += ["--gpu-mtbf", "1s", "--restart-time", "10min", "--checkpoint-every", "1h"]
    line = _error([*args, "--storage-write-bw", "200GB/s"], capsys)
    assert line.startswith("error: gpu-mtbf='1 s' is invalid: a GPU MTBF the run outlasts")


def test_tp_overlap_on_one_gpu_names_tp(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["train", "estimate", "--model", "llama3.2-1b", *SMALL, "--tp", "1", "--tp-overlap"]
    assert "needs tp > 1 with sequence parallelism" in _error(args, capsys)


def test_a_nul_in_a_model_name_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = 'model: "llama\\0x"\ngpu: h100-sxm\ngpus: 8\n'
    assert "without NUL characters" in _workload_error(tmp_path, text, capsys)


def test_an_alias_bomb_in_a_count_is_echoed_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _workload_error(tmp_path, _alias_bomb("gpus"), capsys)
    assert line.startswith("error: job.yaml:gpus=[[") and len(line) < 600


def test_a_missing_config_a_runs_row_names_skips_that_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header = RUNS_HEADER
    runs = tmp_path / "runs.csv"
    runs.write_text(
        f"{header}\nr1,test,{tmp_path}/gone/config.json,8192,64,h100-sxm,8,9000,"
        "tokens_per_s_per_gpu\nr2,test,llama3-8b,8192,64,h100-sxm,8,9000,tokens_per_s_per_gpu\n"
    )
    code, out, _ = run_cli(["validate", "training", "--runs", str(runs), "--json"], capsys)
    assert code == 0
    rows = {r["id"]: r for r in json.loads(out)["rows"]}
    assert rows["r1"]["status"] == "skipped" and "no such file" in rows["r1"]["reason"]
    assert rows["r2"]["status"] == "scored"


@pytest.mark.parametrize(
    "given",
    [["--gpus", "8_0"], ["--gpus=1_024"], ["--tp", "+2_0"], ["--memory-headroom", "0.0_5"]],
)
def test_digits_grouped_with_underscores_are_refused(
    given: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Python's int() reads 8_0 as 80; an option value that way is a typo more often
    args = ["train", "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", *given]
    if "--gpus" not in given[0]:
        args += ["--gpus", "8"]
    line = _error(args, capsys)
    flag, _, value = given[0].partition("=")
    value = value or given[1]
    assert line == f"error: {flag[2:]}={value!r} is invalid: digits only, without _ between them"


def test_text_options_may_hold_underscored_digits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a path is text: only number options refuse digits grouped by _
    html = tmp_path / "2024_06"
    args = ["train", "search", "--model", "llama3.2-1b", *SMALL, "--top", "1", "--html", str(html)]
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    assert html.is_file()
