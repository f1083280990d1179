"""Edges of the command line: an option given an empty value, a plan's degrees in a
workload file, an output that cannot be written, and what the estimate reports beside its
figures (the FLOPs count behind MFU, GPU-hours of idle GPUs, ranks in the search's JSON)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import run_cli

from gpuscale.catalog import get_model
from gpuscale.perf.transformer import model_flops_per_token

ENTRY = "from gpuscale.cli import main; main()"
SMALL = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8"]
RUNS_HEADER = (
    "id,source,model,gpu,num_gpus,seq_len,global_batch_seqs,measured_tokens_per_s_per_gpu,target\n"
)


def _one_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code, _, err = run_cli(args, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["--precision", ""],
        ["--precision="],
        ["--zero", ""],
        ["--attention", " "],
        ["--system", ""],
        ["--html", ""],
    ],
)
def test_an_empty_option_value_is_refused_not_defaulted(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_error(["train", "search", *SMALL, *args], capsys)
    flag = args[0].split("=")[0]
    assert f"{flag.lstrip('-')}=" in line and "is invalid: empty" in line and flag in line


def test_plan_degrees_in_a_workload_file_point_to_the_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpu: h100-sxm\ngpus: 8\ntp: 2\n")
    line = _one_error(["train", "estimate", "--workload", str(job)], capsys)
    assert "job.yaml:tp=2 is invalid" in line and "--tp" in line and "mtp" not in line


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_an_output_that_cannot_be_written_is_one_line() -> None:
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [sys.executable, "-c", ENTRY, "train", "estimate", *SMALL, "--json"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "200"},
            check=False,
        )
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "error: the output could not be written: No space left on device"
    ]


def test_estimate_reports_its_flop_count_and_idle_gpu_hours(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # TP8 PP4 DP16 on 1,024 GPUs uses 512: both GPU-hour figures, in the ratio 1 : 2
    args = ["--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "1024", "--seq-len"]
    args += ["8192", "--global-batch", "1024", "--tp", "8", "--pp", "4", "--dp", "16"]
    code, out, err = run_cli(["train", "estimate", *args, "--tokens", "15T", "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["gpus_used"] == 512 and d["gpus"] == 1024
    assert d["gpu_hours_allocated"] == pytest.approx(2.0 * d["gpu_hours"], rel=1e-12)
    # Megatron-LM's causal count for Llama 3 70B at 8K, 3 x the forward a token: per layer
    # Q and O 2 x 2 h^2, K and V 2 x 2 h (8 x 128), the SwiGLU MLP 2 x 3 h f, the causal
    # attention core 2 x 2 (s / 2) h; then the output layer 2 V h
    h, f, s, v = 8192, 28672, 8192, 128256
    layer = 2 * 2 * h * h + 2 * 2 * h * 1024 + 2 * 3 * h * f + 2 * 2 * (s // 2) * h
    flops = 3 * (80 * layer + 2 * v * h)  # 449.2 GFLOP
    assert model_flops_per_token(get_model("llama3-70b"), s) == pytest.approx(flops, rel=1e-12)
    assert d["model_flops_per_token"] == pytest.approx(flops, rel=1e-12)
    rate = d["tokens_per_s_per_gpu"] * flops / 1e12
    assert d["model_tflops_per_gpu"] == pytest.approx(rate, rel=1e-9)


def test_search_json_ranks_are_integers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["train", "search", *SMALL, "--top", "4", "--json"], capsys)
    assert code == 0, err
    plans = json.loads(out)["plans"]
    assert [type(p["rank"]) for p in plans] == [int] * len(plans)
    assert plans[0]["rank"] == 1
    # a plan's rank is its place, or, tied, the place of the first plan of its step time
    for k, p in enumerate(plans, 1):
        if not p["tied"]:
            assert p["rank"] == k
        else:
            assert plans[p["rank"] - 1]["step_time_s"] == pytest.approx(p["step_time_s"])


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        # a dispatcher of experts on a model without any
        (["--ep-dispatch", "all_to_all"], ("ep-dispatch='all_to_all'", "no experts")),
        # ZeRO-3's gathers under a sharding that gathers nothing
        (["--zero", "zero1", "--zero3-gathers", "per-param"], ("zero3-gathers=", "zero1,")),
        # kernels Volta does not run
        (["--gpu", "v100-sxm2-32gb", "--attention", "fused"], ("attention='fused'", "Ampere")),
    ],
)
def test_a_flag_that_does_not_apply_is_refused(
    args: list[str], needles: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_error(["train", "estimate", *SMALL, *args], capsys)
    assert all(n in line for n in needles), line


@pytest.mark.parametrize(
    ("flag", "value", "label"),
    [("--recompute", "Full", "full"), ("--zero", "ZeRO3", "zero3"), ("--zero", "FSDP", "zero3")],
)
def test_choices_are_read_in_any_case(
    flag: str, value: str, label: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["train", "estimate", *SMALL, flag, value, "--json"], capsys)
    assert code == 0, err
    plan = json.loads(out)["plan"]
    assert plan["recompute" if flag == "--recompute" else "sharding"] == label


def test_scaling_mode_in_any_case(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["train", "scaling", *SMALL[:4], "--gpus", "16", "--mode", "Strong", "--json"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    assert set(json.loads(out)) >= {"strong"} and "weak" not in json.loads(out)


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("1e8h", "a time above 0 and at most 1e+10 s"),
        ("0s", "a time above 0 and at most 1e+10 s"),
        ("0steps", "1 to "),
        ("soon", "a time such as 30min"),
    ],
)
def test_a_checkpoint_interval_out_of_range_says_the_range(
    value: str, valid: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["train", "estimate", *SMALL, "--checkpoint-every", value]
    line = _one_error([*args, "--storage-write-bw", "200GB/s"], capsys)
    assert f"checkpoint-every='{value}' is invalid: {valid}" in line


def test_validate_exits_1_when_no_row_is_scored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # every row skipped (a GPU count below one): the table or JSON still lists each reason,
    # and the exit status says nothing was scored
    row = "r{0},src,llama3-8b,H100-SXM5-80GB,-8,4096,64,1000,tokens_per_s_per_gpu\n"
    runs = tmp_path / "runs.csv"
    runs.write_text(RUNS_HEADER + row.format(1) + row.format(2))
    code, out, err = run_cli(["validate", "training", "--runs", str(runs), "--json"], capsys)
    assert code == 1
    rows = json.loads(out)["rows"]
    assert [r["status"] for r in rows] == ["skipped", "skipped"]
    assert err.strip() == (
        "error: no row was scored (2 skipped, 0 reported): each row's reason is in the JSON's rows"
    )
    # one scorable row: status 0
    runs.write_text(RUNS_HEADER + row.format(1) + row.format(2).replace(",-8,", ",8,"))
    code, out, _ = run_cli(["validate", "training", "--runs", str(runs), "--json"], capsys)
    assert code == 0 and json.loads(out)["scored"] == 1


def test_a_default_value_an_error_is_about_says_it_is_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 1,024 GPUs data-parallel take at least 1,024 sequences; the default batch is 512
    args = ["train", "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "1024"]
    line = _one_error(args, capsys)
    assert "global-batch=512 is invalid: must be divisible by dp x micro-batch = 1024" in line
    assert line.endswith("(512 is the default: give --global-batch)")
    line = _one_error([*args, "--global-batch", "512"], capsys)
    assert "default" not in line


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--tp-overlap"], "tp-overlap='on' is invalid: tp communication overlap needs tp > 1"),
        (["--fp8-param-gather", "--precision", "fp8"], "fp8-param-gather='on' is invalid"),
        (["--gpus", "64", "--global-batch", "64", "--pp", "64"], "pp=64 is invalid: pp x vpp"),
    ],
)
def test_a_rule_one_flag_breaks_names_the_flag_and_the_plan(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_error(["train", "estimate", *SMALL, "--global-batch", "64", *flags], capsys)
    assert named in line and "(plan TP1 " in line


def test_tokens_beyond_any_training_run_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["train", "estimate", *SMALL, "--zero", "zero3", "--tokens"]
    line = _one_error([*base, "1e30"], capsys)
    assert "tokens='1e30' is invalid: at most 1e+16 tokens (10P)" in line
    code, out, err = run_cli([*base, "10P"], capsys)
    assert code == 0, err
    assert "10P tokens" in out


def test_a_shard_group_no_plan_can_split_into_is_refused_by_the_search(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 8 GPUs: dp x cp is 1, 2, 4 or 8, none a multiple of 3 above 3; the estimate refuses
    # the same group for its one plan
    args = ["train", "search", *SMALL, "--global-batch", "64", "--zero", "fsdp"]
    line = _one_error([*args, "--shard-group", "3"], capsys)
    assert "shard-group=3 is invalid" in line and "a divisor (2, 4), 8 or more" in line
    code, _, err = run_cli([*args, "--shard-group", "4", "--top", "1"], capsys)
    assert code == 0, err


def test_a_sequence_beyond_a_learned_position_table_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GPT-2's 1,024 learned positions: no context extension reaches 4,096 without new rows
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12}
    gpt2.update(vocab_size=50257, n_positions=1024)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(gpt2))
    args = ["train", "estimate", "--model", str(path), "--gpu", "h100-sxm", "--gpus", "8"]
    code, out, err = run_cli([*args, "--seq-len", "4096", "--global-batch", "64"], capsys)
    assert code == 0, err
    flat = " ".join(out.split())
    assert "learned position table of 1,024 rows: a run at this length needs the table" in flat
    assert "context-extension" not in flat


def test_a_run_that_almost_never_trains_says_so_rather_than_a_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # a 10.1-minute restart against a failure every 84 s (1 day of GPU MTBF over 1,024 GPUs)
    base = ["train", "estimate", "--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "1024"]
    plan = ["--tp", "8", "--pp", "4", "--dist-opt", "--tokens", "15T", "--restart-time", "10min"]
    ckpt = ["--checkpoint-every", "30min", "--storage-write-bw", "200GB/s"]
    code, out, err = run_cli([*base, *plan, *ckpt, "--gpu-mtbf", "1d"], capsys)
    assert code == 0, err
    flat = " ".join(out.split())
    assert "time to train │ more than 100 years: " in flat


def test_the_best_interval_reads_the_same_in_the_hint_and_when_taken(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # reading at 2 MB/s leaves 0.2 s a step exposed, which the interval counts
    base = ["train", "estimate", "--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "1024"]
    plan = ["--tp", "8", "--pp", "4", "--dist-opt", "--tokens", "15T", "--restart-time", "10min"]
    run = [*plan, "--storage-write-bw", "200GB/s", "--storage-read-bw", "2MB/s"]
    run += ["--gpu-mtbf", "2112d"]
    _, hint, _ = run_cli([*base, *run, "--checkpoint-every", "30min"], capsys)
    _, taken, _ = run_cli([*base, *run, "--checkpoint-every", "best"], capsys)
    said = re.search(r"every ([\d,]+ steps \([^)]*\))", " ".join(hint.split("goodput")[1].split()))
    assert said is not None
    assert f"every {said.group(1)} (the best interval" in " ".join(taken.split())


def test_a_restart_longer_than_the_time_between_failures_is_named_the_cause(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["train", "estimate", "--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "1024"]
    plan = ["--tp", "8", "--pp", "4", "--dist-opt", "--tokens", "15T"]
    run = ["--checkpoint-every", "30min", "--storage-write-bw", "200GB/s"]
    run += ["--gpu-mtbf", "1e12s", "--restart-time", "1e12s"]
    code, out, err = run_cli([*base, *plan, *run], capsys)
    assert code == 0, err
    flat = " ".join(out.split())
    assert "a restart takes longer than the time between failures" in flat
    assert "failures come faster than an interval completes" not in flat


def test_several_runs_files_are_scored_as_one_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = "{0},src,llama3-8b,H100-SXM5-80GB,8,4096,64,{1},tokens_per_s_per_gpu\n"
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text(RUNS_HEADER + row.format("r1", 1000))
    b.write_text(RUNS_HEADER + row.format("r2", 2000) + row.format("r3", 3000))
    args = ["validate", "training", "--runs", str(a), "--runs", str(b), "--json"]
    code, out, _ = run_cli(args, capsys)
    rows = json.loads(out)["rows"]
    assert code == 0 and [r["id"] for r in rows] == ["r1", "r2", "r3"]
    # one plan for the three rows: the measured figures set the errors apart
    assert rows[1]["predicted"] == rows[0]["predicted"]
    assert json.loads(out)["scored"] == 3
    # an id in two files would make two rows one: refused, naming both files
    b.write_text(RUNS_HEADER + row.format("r1", 2000))
    line = _one_error(args, capsys)
    assert line == (
        "error: b.csv:id='r1' is invalid: already a row of a.csv: ids must differ across "
        "--runs files"
    )


def test_a_given_shard_group_is_the_plan_s_as_a_searched_one_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # --shard-group 8 on 64 data-parallel ranks: the plan's JSON and label carry it (hsdp8),
    # as the search's hybrid twins do; on 8 ranks or fewer it shards over all of them
    args = ["train", "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "64"]
    args += ["--seq-len", "8192", "--global-batch", "256", "--dist-opt", "--shard-group", "8"]
    code, out, _ = run_cli([*args, "--json"], capsys)
    d = json.loads(out)
    assert code == 0 and d["plan"]["shard_group"] == d["shard_group"] == 8
    code, out, _ = run_cli([*args, "--tp", "8", "--json"], capsys)
    assert code == 0 and json.loads(out)["plan"]["shard_group"] == 0
    search = ["train", "search", *args[2:], "--top", "1", "--json"]
    code, out, _ = run_cli(search, capsys)
    assert code == 0 and json.loads(out)["plans"][0]["label"].count("hsdp8") == 1


def test_an_async_save_waiting_on_slow_storage_is_not_said_to_set_up_slowly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # every step saves 112 GB to 5 GB/s storage: the stall is the wait on the previous
    # write (storage), not the set-up; at 200 GB/s every 30 min, the set-up is the stall
    base = ["train", "estimate", *SMALL[:4], "--gpus", "64", "--seq-len", "4096"]
    base += ["--global-batch", "256", "--async-checkpoint"]
    slow = [*base, "--checkpoint-every", "1steps", "--storage-write-bw", "5GB/s"]
    code, out, _ = run_cli(slow, capsys)
    flat = " ".join(out.replace("│", " ").split())
    assert code == 0 and "waits for the previous write" in flat
    assert "a synchronous save would stall only" not in flat
    fast = [*base, "--checkpoint-every", "30min", "--storage-write-bw", "200GB/s"]
    code, out, _ = run_cli(fast, capsys)
    flat = " ".join(out.replace("│", " ").split())
    assert code == 0 and "the storage writes faster than an asynchronous save sets up" in flat
