"""`gpuscale train search --workload FILE`: the bundled example, flags over the file, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli

from gpuscale.errors import InputError
from gpuscale.spec import TrainingJob, load_training_job

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "workloads" / "llama3-70b-h100-1k.yaml"


def gpuscale(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from gpuscale.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def test_bundled_workload_searches_with_the_file_values() -> None:
    r = gpuscale("train", "search", "--workload", str(EXAMPLE), "--top", "2", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    best = d["plans"][0]
    assert (best["model"], best["gpu"], best["gpus"]) == ("llama3-70b", "h100-sxm", 1024)
    assert (best["seq_len"], best["global_batch"]) == (8192, 1024)
    assert best["train_tokens"] == 15e12  # "tokens: 15T" from the file
    assert best["fits"] and best["gpu_hours"] > 0


def test_flags_override_the_file() -> None:
    r = gpuscale("train", "search", "--workload", str(EXAMPLE), "--gpus", "512", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["plans"][0]["gpus"] == 512


def test_bad_workload_files_are_one_line_errors(tmp_path: Path) -> None:
    cases = {
        "gpus: -4": ("gpus", "-4"),
        "gpux: 1": ("gpux", "unknown key"),
    }
    base = "model: llama3-70b\ngpu: h100-sxm\ngpus: 8\nseq_len: 8192\nglobal_batch: 8\n"
    for extra, (field, text) in cases.items():
        f = tmp_path / "job.yaml"
        body = base.replace("gpus: 8\n", "") + extra + "\n" if "gpus" in extra else base + extra
        f.write_text(body)
        r = gpuscale("train", "search", "--workload", str(f))
        assert r.returncode == 2
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and field in lines[0] and text in lines[0], r.stderr
        assert "Traceback" not in r.stderr
    missing = tmp_path / "missing.yaml"
    missing.write_text("model: llama3-70b\n")
    r = gpuscale("train", "search", "--workload", str(missing))
    assert r.returncode == 2 and "gpu" in r.stderr and "(missing)" in r.stderr


ESTIMATE_JSON = ("train", "estimate", "--json", "--dist-opt", "--workload")
"""`train estimate` with JSON output of a distributed-optimizer plan; the file comes next."""

BASE = "model: llama3-70b\ngpu: h100-sxm\ngpus: 8\nseq_len: 8192\nglobal_batch: 8\n"


@pytest.mark.parametrize(
    ("typo", "line"),
    [
        (
            "seqlen: 8192",  # the key it stands for is then missing, but the typo is the error
            "error: job.yaml:seqlen=8192 is invalid: unknown key; did you mean seq_len? valid "
            "keys: name, model, gpu, gpus, seq_len, global_batch, precision, attention, "
            "zero3_gathers, grad_accumulation, pp_p2p, cp_comm, pp_split, elementwise, "
            "ep_dispatch, recompute_modules, "
            "fp8_param_gather, cuda_graphs, loss, mtp, memory_headroom, shard_group, system, "
            "tokens",
        ),
        ("Global_Batch: 8", "did you mean global_batch?"),
        # one typo from two keys: both are offered, not the one difflib happens to rank first
        ("gpuz: 8", "did you mean gpu or gpus?"),
    ],
)
def test_a_misspelled_key_is_named_with_the_key_it_is_closest_to(
    tmp_path: Path, typo: str, line: str
) -> None:
    path = tmp_path / "job.yaml"
    key = typo.split(":")[0].lower()
    path.write_text(
        "\n".join(k for k in BASE.splitlines() if not k.startswith(key)) + f"\n{typo}\n"
    )
    r = gpuscale("train", "search", "--workload", str(path))
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert line in r.stderr and "(missing)" not in r.stderr


def test_an_unknown_key_unlike_any_lists_the_valid_keys(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(BASE + "zzz: 1\n")
    with pytest.raises(InputError) as exc:
        load_training_job(path)
    assert exc.value.field == "job.yaml:zzz"
    assert exc.value.valid == f"unknown key; valid keys: {', '.join(TrainingJob.model_fields)}"


@pytest.mark.parametrize("path", sorted(EXAMPLE.parent.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_workload_is_valid(path: Path) -> None:
    job = load_training_job(path)
    assert job.model and job.gpu and job.gpus > 0


def test_a_value_from_the_file_is_blamed_on_the_file(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "model: llama3-8b\ngpu: h100-sxm\ngpus: 8\nseq_len: 2048\nglobal_batch: 64\n"
        "precision: fp32\n"
    )
    r = gpuscale("train", "search", "--workload", str(path))
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "error: job.yaml:precision='fp32' is invalid: one of bf16, fp16, fp8 on the h100-sxm"
    )


def test_a_bad_token_count_in_the_file_is_blamed_on_the_file(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(BASE + "tokens: lots\n")
    r = gpuscale("train", "search", "--workload", str(path))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == (
        "error: job.yaml:tokens='lots' is invalid: a count with a decimal prefix, e.g. 15T or 2e12"
    )


def test_a_key_given_twice_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("model: llama3-8b\nmodel: llama3-70b\ngpu: h100-sxm\ngpus: 8\n")
    r = gpuscale("train", "search", "--workload", str(path))
    assert r.returncode == 2
    assert "key 'model' given twice" in r.stderr and "line 2" in r.stderr


@pytest.mark.parametrize(
    ("lines", "needles"),
    [
        # a boolean is not a GPU count
        ("gpus: true\n", ("job.yaml:gpus=True",)),
        # recompute_modules takes a name or a list of them: the error says both, on the key
        (
            "gpus: 8\nrecompute_modules: 5\n",
            ("job.yaml:recompute_modules=5 is invalid", "valid string", "valid list"),
        ),
        # a bad item of a list names the item
        (
            "gpus: 8\nrecompute_modules: [moe, 5]\n",
            ("job.yaml:recompute_modules.1=5 is invalid: Input should be a valid string",),
        ),
    ],
)
def test_a_value_of_the_wrong_type_names_its_key(
    tmp_path: Path, lines: str, needles: tuple[str, ...]
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("model: llama3-8b\ngpu: h100-sxm\n" + lines)
    r = gpuscale("train", "search", "--workload", str(path))
    assert r.returncode == 2
    for needle in needles:
        assert needle in r.stderr


def test_a_fixed_degree_of_zero_is_refused() -> None:
    for flag in ("--pp", "--mbs", "--tp", "--vpp"):
        r = gpuscale(
            "train",
            "search",
            "--model",
            "llama3-8b",
            "--gpu",
            "h100-sxm",
            "--gpus",
            "8",
            flag,
            "0",
            "--json",
        )
        assert r.returncode == 2, flag
        assert r.stdout == ""
        assert f"{flag[2:]}=0 is invalid: a whole number from 1 to" in r.stderr


def test_a_key_that_is_a_list_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("model: llama3-8b\ngpu: h100-sxm\ngpus: 8\n? [a, b]\n: 1\n")
    r = gpuscale("train", "search", "--workload", str(path))
    assert r.returncode == 2
    assert "a key must be a plain name" in r.stderr and "Traceback" not in r.stderr


def test_huge_counts_are_refused_at_once() -> None:
    base = ("train", "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8")
    for extra in (
        ("--global-batch", str(10**22)),
        ("--mbs", str(10**20)),
        ("--seq-len", str(10**22)),
    ):
        r = gpuscale(*base, *extra)
        assert r.returncode == 2, extra
        assert "is invalid" in r.stderr and "Traceback" not in r.stderr


def test_scaling_counts_idle_gpus() -> None:
    r = gpuscale(
        "train",
        "scaling",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm",
        "--gpus",
        "64",
        "--global-batch",
        "1",
        "--mode",
        "strong",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    for p in json.loads(r.stdout)["strong"]:
        if p["gpus_used"] is not None:
            # rates are per GPU of the whole count, so a plan on fewer GPUs is not flattered
            assert p["gpus_used"] == p["gpus"] or "idle" in p["loss_term"]


def _best_plan(
    capsys: pytest.CaptureFixture[str], command: str, job: Path, *args: str
) -> dict[str, Any]:
    """The plan `gpuscale train COMMAND --workload JOB ARGS --json` prints (search: its best)."""
    code, out, err = run_cli(["train", command, "--workload", str(job), *args, "--json"], capsys)
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc["plans"][0] if command == "search" else doc


def _refused(job: Path, flag: str, value: str) -> str:
    """The one line `gpuscale train estimate --workload JOB FLAG VALUE` refuses it with."""
    r = gpuscale("train", "estimate", "--workload", str(job), flag, value)
    assert r.returncode == 2 and r.stdout == ""
    return r.stderr.strip()


def test_the_moe_dispatch_comes_from_the_file_and_the_flag_overrides_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "moe.yaml"
    job.write_text(
        "model: qwen3-30b-a3b\ngpu: h100-sxm\ngpus: 64\nseq_len: 4096\nglobal_batch: 256\n"
        "ep_dispatch: all_to_all\n"
    )
    fixed = ["--tp", "1", "--pp", "1", "--ep", "32", "--mbs", "1", "--recompute", "none"]

    def ep_comm_s(*extra: str) -> float:
        best = _best_plan(capsys, "search", job, *fixed, "--top", "1", *extra)
        return float(best["step_time_breakdown_s"]["ep_comm_s"])

    flat = ep_comm_s()
    tree = ep_comm_s("--ep-dispatch", "hierarchical")
    # EP 32 over 4 nodes: the hierarchical dispatch moves 2.72 of the 6 network copies
    assert 0.0 < tree < flat


def test_fp8_param_gather_from_the_file(tmp_path: Path) -> None:
    body = "model: llama3-8b\ngpu: h100-sxm\ngpus: 64\nseq_len: 4096\nglobal_batch: 256\n"
    path = tmp_path / "job.yaml"
    path.write_text(body + "precision: fp8\nfp8_param_gather: true\n")
    on = gpuscale("train", "search", "--workload", str(path), "--top", "1", "--json")
    off = gpuscale(
        "train", "search", "--workload", str(path), "--no-fp8-param-gather", "--top", "1", "--json"
    )
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    best_on, best_off = json.loads(on.stdout)["plans"][0], json.loads(off.stdout)["plans"][0]
    assert best_on["fp8_param_gather"] is True and best_off["fp8_param_gather"] is False
    assert best_on["step_time_s"] <= best_off["step_time_s"]  # 1-byte gathers never cost more
    path.write_text(body + "precision: bf16\nfp8_param_gather: true\n")
    r = gpuscale("train", "search", "--workload", str(path))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "job.yaml:fp8_param_gather" in r.stderr and "fp8 or fp4" in r.stderr


def test_a_memory_headroom_shrinks_what_a_plan_may_use() -> None:
    from gpuscale.calibrate import default_calibration
    from gpuscale.catalog import get_gpu, get_model, system_for_gpu
    from gpuscale.perf.comm import Fabric
    from gpuscale.perf.memory import memory_breakdown
    from gpuscale.perf.plan import Plans, Workload

    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    # Llama 3 8B, 8,192-token sequences, micro-batch 2, FSDP: partial recompute recomputes
    # just enough layers to fill the memory, so a headroom makes it recompute more
    w = Workload(get_model("llama3-8b"), g, s, Fabric.from_system(s, 8), 8, 8192, 64)
    p = Plans.of(tp=1, pp=1, dp=8, mbs=2, recompute=3, sharding=4)
    cal = default_calibration()
    whole = memory_breakdown(w, p, cal)
    w10 = replace(w, memory_headroom=0.1)
    less = memory_breakdown(w10, p, cal)
    # 81,559 MiB as the driver reports an H100, less 10 %
    assert less.capacity == pytest.approx(0.9 * 81559 * 2**20)
    assert whole.capacity == 81559 * 2**20
    assert float(whole.total[0]) == pytest.approx(whole.capacity)
    assert float(less.total[0]) == pytest.approx(less.capacity)
    assert 0.0 < float(whole.recompute_fraction[0]) < float(less.recompute_fraction[0]) < 1.0
    with pytest.raises(InputError, match="memory-headroom"):
        replace(w, memory_headroom=0.6)


def test_the_workload_file_takes_a_memory_headroom(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "model: llama3-8b\ngpu: h100-sxm\ngpus: 8\nseq_len: 4096\nglobal_batch: 64\n"
        "memory_headroom: 0.1\n"
    )
    assert load_training_job(path).memory_headroom == 0.1
    code, stdout, stderr = run_cli(
        ["train", "search", "--workload", str(path), "--json", "--top", "1"], capsys
    )
    assert code == 0, stderr
    top = json.loads(stdout)["plans"][0]
    assert top["memory_headroom"] == 0.1
    assert top["memory_bytes"]["total"] <= 0.9 * 81559 * 2**20 + 1  # whole bytes in the JSON


def test_estimate_and_scaling_take_the_workload_file_too() -> None:
    r = gpuscale(
        "train", "estimate", "--workload", str(EXAMPLE), "--tp", "8", "--pp", "4", "--json"
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["model"], d["gpu"], d["gpus"], d["seq_len"]) == ("llama3-70b", "h100-sxm", 1024, 8192)
    assert d["plan"]["tp"] == 8 and d["plan"]["dp"] == 32 and d["train_tokens"] == 15e12
    # a flag overrides the file
    r = gpuscale(
        "train", "scaling", "--workload", str(EXAMPLE), "--gpus", "64", "--mode", "strong",
        "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    pts = json.loads(r.stdout)["strong"]
    assert [p["gpus"] for p in pts] == [8, 16, 32, 64]
    assert {p["global_batch"] for p in pts} == {1024}  # the file's batch


def test_a_file_may_leave_out_what_the_flags_or_the_defaults_give(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("model: llama3-8b\ngpus: 8\nprecision: null\n")
    r = gpuscale(
        "train", "estimate", "--workload", str(path), "--gpu", "h100-sxm", "--tp", "8", "--json"
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    # sequence and batch from the defaults, precision bf16 where the GPU has it
    assert (d["seq_len"], d["global_batch"], d["precision"]) == (2048, 512, "bf16")
    # a GPU without bf16 (Volta) defaults to fp16, not to an error blamed on the file
    path.write_text("model: llama3-8b\ngpu: v100-sxm2-32gb\ngpus: 8\n")
    r = gpuscale("train", "estimate", "--workload", str(path), "--tp", "8", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["precision"] == "fp16"
    # a required key that neither gives is named, with where it may come from
    path.write_text("model: llama3-8b\ngpus: 8\n")
    r = gpuscale("train", "search", "--workload", str(path))
    assert r.returncode == 2 and r.stderr.strip() == (
        "error: gpu='(missing)' is invalid: required: --gpu, or a --workload file with gpu"
    )
    # the file's recompute modules under a flag's --recompute none: the file is named
    path.write_text("model: llama3-8b\ngpu: h100-sxm\ngpus: 8\nrecompute_modules: [mlp]\n")
    r = gpuscale("train", "estimate", "--workload", str(path), "--recompute", "none", "--tp", "8")
    assert r.returncode == 2 and r.stderr.startswith(
        "error: job.yaml:recompute_modules='mlp' is invalid: --recompute selective"
    )


def test_checkpoints_from_the_file_price_the_estimate(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(BASE + "checkpoint_every: 100steps\nstorage_write_bw: 10GB/s\n")
    r = gpuscale(
        "train", "estimate", "--workload", str(path), "--tokens", "1B", "--json", "--dist-opt"
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    st = s["storage"]
    # Llama 3 70B: 14 bytes a parameter (16-bit weights, Adam's fp32 master and moments)
    assert st["checkpoint_bytes"] == pytest.approx(70.6e9 * 14, rel=0.01)
    assert st["checkpoint_stall_s"] == pytest.approx(st["checkpoint_bytes"] / 10e9)
    assert s["checkpoints"] == -(-s["train_steps"] // 100)  # and one at the end
    assert st["checkpoint_asynchronous"] is False
    # a flag overrides the file's interval
    r = gpuscale(
        *ESTIMATE_JSON,
        str(path),
        "--checkpoint-every",
        "7steps",
    )
    assert json.loads(r.stdout)["storage"]["checkpoint_every_steps"] == 7
    path.write_text(BASE + "checkpoint_every: 500\nstorage_write_bw: 10GB/s\n")
    r = gpuscale("train", "estimate", "--workload", str(path))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().startswith("error: job.yaml:checkpoint_every='500' is invalid: a time")


def test_a_checkpoint_interval_without_a_write_rate_is_an_error() -> None:
    job = ("--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8")
    r = gpuscale("train", "estimate", *job, "--checkpoint-every", "30min")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == (
        "error: storage-write-bw='(missing)' is invalid: the storage's aggregate write rate "
        "(--storage-write-bw or the workload's storage_write_bw), e.g. 200GB/s, to price the "
        "checkpoints"
    )


def test_async_checkpoints_and_reads_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        BASE + "checkpoint_every: 10steps\nstorage_write_bw: 1GB/s\nstorage_read_bw: 1MB/s\n"
        "async_checkpoint: true\n"
    )
    r = gpuscale(
        "train", "estimate", "--workload", str(path), "--json", "--dist-opt", "--tokens", "1B"
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    st = s["storage"]
    assert st["checkpoint_asynchronous"] is True
    # Llama 3 70B's 988 GB drain in 988 s at 1 GB/s, longer than 10 steps: the next save waits
    assert st["checkpoint_write_s"] == pytest.approx(st["checkpoint_bytes"] / 1e9)
    assert st["checkpoint_wait_s"] == pytest.approx(
        st["checkpoint_write_s"] - st["checkpoint_interval_s"]
    )
    # 8 sequences of 8,193 int32 token ids (a 128K vocabulary) at 1 MB/s: 0.262 s a step
    assert st["data_bytes_per_step"] == 8 * 8193 * 4
    assert st["data_read_s"] == pytest.approx(0.262176)
    exposed = max(0.262176 - s["step_time_s"], 0.0)
    assert st["data_exposed_s"] == pytest.approx(exposed)
    assert st["checkpoint_interval_s"] == pytest.approx(10 * (s["step_time_s"] + exposed))
    # the table has both rows
    r = gpuscale("train", "estimate", "--workload", str(path), "--dist-opt")
    labels = [line.split("│")[1].strip() for line in r.stdout.splitlines() if "│" in line]
    assert "checkpoint" in labels and "data loading" in labels


def test_a_save_mode_without_checkpoints_is_an_error() -> None:
    job = ("--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8")
    for flag in ("--async-checkpoint", "--sync-checkpoint"):
        r = gpuscale("train", "estimate", *job, flag)
        assert r.returncode == 2 and r.stdout == ""
        assert "checkpoint=" in r.stderr and "needs checkpoints" in r.stderr


def test_search_prices_storage_for_its_top_plans() -> None:
    job = ("--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--seq-len", "4096")
    r = gpuscale(
        "train",
        "search",
        *job,
        "--top",
        "2",
        "--json",
        "--checkpoint-every",
        "1h",
        "--storage-write-bw",
        "10GB/s",
    )
    assert r.returncode == 0, r.stderr
    plans = json.loads(r.stdout)["plans"]
    assert len(plans) == 2 and all(p["storage"]["checkpoint_every_steps"] >= 1 for p in plans)


def test_scaling_prices_checkpoints_and_failures_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "model: llama3-8b\ngpu: h100-sxm\ngpus: 16\nglobal_batch: 64\n"
        "checkpoint_every: 30min\nstorage_write_bw: 20GB/s\ngpu_mtbf: 80d\n"
        "restart_time: 10min\n"
    )
    r = gpuscale("train", "scaling", "--workload", str(path), "--mode", "strong", "--json")
    assert r.returncode == 0, r.stderr
    pts = [p for p in json.loads(r.stdout)["strong"] if p["step_time_s"]]
    assert pts and all(0.0 < p["goodput"] < 1.0 for p in pts)
    assert all("failures" in p["gpu_s_per_token"] for p in pts)
    r = gpuscale("train", "scaling", "--workload", str(path), "--mode", "strong")
    assert "goodput" in r.stdout


def test_failures_from_the_file_give_goodput(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        BASE + "checkpoint_every: 100steps\nstorage_write_bw: 10GB/s\n"
        "gpu_mtbf: 2112d\nrestart_time: 10min\n"
    )
    r = gpuscale("train", "estimate", "--workload", str(path), "--json", "--dist-opt")
    assert r.returncode == 0, r.stderr
    rel = json.loads(r.stdout)["reliability"]
    assert rel["gpus"] == 8 and rel["job_mtbf_s"] == 2112 * 86400.0 / 8
    assert 0.0 < rel["goodput"] < 1.0
    # a GPU MTBF without a restart time, or without checkpoints, is refused
    r = gpuscale("train", "estimate", "--workload", str(path), "--restart-time", "soon")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "error: restart-time='soon' is invalid: a time with its unit, e.g. 10min or 0s"
    )
    path.write_text(BASE + "gpu_mtbf: 2112d\nrestart_time: 10min\n")
    r = gpuscale("train", "estimate", "--workload", str(path))
    assert r.returncode == 2 and "checkpoint-every='(missing)'" in r.stderr


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (
            "restart_time: true\n",
            "job.yaml:restart_time=True is invalid: a time with its unit, e.g. 10min",
        ),
        (
            "gpu_mtbf: 2112d\nrestart_time: -1h\n",
            "job.yaml:restart_time='-1h' is invalid: a time of 0 or more, at most 1e+12 s, "
            "e.g. 10min or 0s",
        ),
        (
            "restart_time: 10min\ngpu_mtbf: 1e400d\n",
            "job.yaml:gpu_mtbf='1e400d' is invalid: a time with its unit, e.g. 2112d",
        ),
        (
            "restart_time: 10min\n",
            "gpu-mtbf='(missing)' is invalid: the GPU-time between interruptions (--gpu-mtbf "
            "or the workload's gpu_mtbf), e.g. 2112d, with a restart time",
        ),
    ],
)
def test_bad_failure_keys_are_one_line_errors(tmp_path: Path, extra: str, line: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(BASE + "checkpoint_every: 1h\nstorage_write_bw: 10GB/s\n" + extra)
    r = gpuscale("train", "estimate", "--workload", str(path))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == f"error: {line}"


def test_best_checkpoint_interval_needs_a_failure_rate(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(BASE + "checkpoint_every: best\nstorage_write_bw: 10GB/s\n")
    r = gpuscale("train", "estimate", "--workload", str(path))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().startswith("error: job.yaml:checkpoint_every='best' is invalid")
    fail = ("--gpu-mtbf", "2112d", "--restart-time", "10min")
    r = gpuscale(*ESTIMATE_JSON, str(path), *fail)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)["storage"]
    assert st["checkpoint_every_best"] is True and st["checkpoint_every_steps"] >= 1


def test_the_time_to_train_says_what_it_leaves_out() -> None:
    search = ("train", "search", "--workload", str(EXAMPLE))
    saves = ("--checkpoint-every", "1h", "--storage-write-bw", "100GB/s")
    fails = ("--gpu-mtbf", "2112d", "--restart-time", "10min")
    r = gpuscale(*search)
    assert "note: the time to train has no checkpoints or failures in it" in r.stdout
    r = gpuscale(*search, *saves)
    assert "note: the time to train has no failures in it" in r.stdout
    r = gpuscale(*search, *saves, *fails)
    assert "the time to train has no" not in r.stdout and "failures, " in r.stdout
    # the ranked table gains each plan's goodput
    header = next(line for line in r.stdout.splitlines() if "tokens/s/GPU used" in line)
    assert "goodput" in header


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        # the global batch the file gave, which the plan's DP x micro-batch does not divide
        (
            ["estimate", "--tp", "4", "--mbs", "3"],
            "job.yaml:global_batch=100 is invalid: must be divisible by dp x micro-batch = "
            "3 x 3 = 9",
        ),
        # the GPU count the file gave, which the fixed degrees do not divide
        (
            ["estimate", "--tp", "8"],
            "tp*pp*cp=8 is invalid: must divide the 12 GPUs of job.yaml:gpus (tp=8, pp=1, cp=1), "
            "or give --dp to leave some idle",
        ),
        # the same values given as flags are the flags' errors
        (
            ["estimate", "--tp", "4", "--global-batch", "98"],
            "global-batch=98 is invalid: must be divisible by dp x micro-batch = 3 x 1 = 3",
        ),
        # a micro-batch that does not divide each rank's 33 sequences is the micro-batch's
        (
            ["estimate", "--tp", "4", "--mbs", "2", "--global-batch", "99"],
            "mbs=2 is invalid: a divisor of the 33 sequences each of the 3 data-parallel ranks "
            "takes a step: one of 1, 3, 11, 33",
        ),
        (
            ["estimate", "--tp", "8", "--gpus", "12"],
            "tp*pp*cp=8 is invalid: must divide the 12 GPUs of --gpus (tp=8, pp=1, cp=1), "
            "or give --dp to leave some idle",
        ),
    ],
)
def test_plan_errors_about_file_values_name_the_file_key(
    tmp_path: Path, extra: list[str], line: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("model: llama3-8b\ngpu: h100-sxm\ngpus: 12\nglobal_batch: 100\n")
    r = gpuscale("train", extra[0], "--workload", str(path), *extra[1:])
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == f"error: {line}"


def test_hybrid_sharding_from_the_flag_and_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["train", "estimate", "--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "128"]
    plan = ["--tp", "8", "--zero", "fsdp", "--recompute", "full", "--global-batch", "128"]
    code, out, err = run_cli([*base, *plan, "--shard-group", "4"], capsys)
    assert code == 0, err
    assert "states sharded over 4 ranks, 4 replicas" in out
    code, out, err = run_cli([*base, *plan, "--shard-group", "4", "--json"], capsys)
    hybrid = json.loads(out)
    code, out, err = run_cli([*base, *plan, "--json"], capsys)
    full = json.loads(out)
    assert (hybrid["shard_group"], full["shard_group"]) == (4, 0)
    # ZeRO-3 states over 4 ranks instead of 16: four times the bytes
    for part in ("weights", "gradients", "optimizer"):
        assert hybrid["memory_bytes"][part] == pytest.approx(4 * full["memory_bytes"][part])
    # the file's key, and a group the 16 data-parallel ranks do not split into
    path = tmp_path / "job.yaml"
    path.write_text("model: llama3-70b\ngpu: h100-sxm\ngpus: 128\nshard_group: 3\n")
    code, _, err = run_cli(["train", "estimate", "--workload", str(path), *plan], capsys)
    assert code == 2 and "Traceback" not in err
    assert "job.yaml:shard_group=3 is invalid: a divisor of the plan's dp x cp = 16" in err
    assert "(1, 2, 4, 8), 16 or more for full sharding, or 0" in err
    code, _, err = run_cli([*base, "--tp", "8", "--zero", "none", "--shard-group", "4"], capsys)
    assert code == 2 and "shard-group=4 is invalid: 0 (no hybrid sharding) unless" in err


def test_search_with_a_shard_group_ranks_only_plans_that_split_into_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["train", "search", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "64"]
    code, out, err = run_cli([*args, "--shard-group", "8", "--json", "--top", "20"], capsys)
    assert code == 0, err
    plans = json.loads(out)["plans"]
    assert plans
    for p in plans:
        d = p["plan"]["dp"] * p["plan"]["cp"]
        assert p["plan"]["sharding"] != "none"
        assert d <= 8 or d % 8 == 0


def test_gradient_accumulation_comes_from_the_file_and_a_bad_flag_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "bloom.yaml"
    job.write_text(
        "model: bloom-176b\ngpu: a100-sxm-80gb\ngpus: 384\nglobal_batch: 2048\n"
        "grad_accumulation: separate\n"
    )
    fixed = ["--tp", "4", "--pp", "12", "--mbs", "2", "--recompute", "full", "--zero", "zero1"]
    separate = _best_plan(capsys, "estimate", job, *fixed)
    fused = _best_plan(capsys, "estimate", job, *fixed, "--grad-accumulation", "fused")
    assert separate["grad_accumulation"] == "separate" and fused["grad_accumulation"] == "fused"
    assert separate["step_time_breakdown_s"]["grad_accum_s"] > 0.0
    assert fused["step_time_breakdown_s"]["grad_accum_s"] == 0.0
    assert _refused(job, "--grad-accumulation", "fp32") == (
        "error: grad-accumulation='fp32' is invalid: one of fused, separate"
    )


def test_blocking_pipeline_transfers_come_from_the_file_and_a_bad_flag_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "bloom.yaml"
    job.write_text(
        "model: bloom-176b\ngpu: a100-sxm-80gb\ngpus: 384\nglobal_batch: 2048\npp_p2p: blocking\n"
    )
    fixed = ["--tp", "4", "--pp", "12", "--mbs", "2", "--recompute", "full", "--zero", "zero1"]
    blocking = _best_plan(capsys, "estimate", job, *fixed)
    overlapped = _best_plan(capsys, "estimate", job, *fixed, "--pp-p2p", "overlapped")
    assert (blocking["pp_p2p"], overlapped["pp_p2p"]) == ("blocking", "overlapped")
    pp_b = blocking["step_time_breakdown_s"]["pp_comm_s"]
    pp_o = overlapped["step_time_breakdown_s"]["pp_comm_s"]
    assert pp_b > pp_o > 0.0
    assert blocking["step_time_s"] > overlapped["step_time_s"]
    assert _refused(job, "--pp-p2p", "async") == (
        "error: pp-p2p='async' is invalid: one of overlapped, blocking"
    )


def test_the_context_parallel_exchange_from_the_file_and_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Llama 3 8B at 64K on 16 H100, TP1 CP8: the ring hides its K/V transfers behind
    # attention; Llama 3's all-gather does not, and the plan's Megatron flags say which
    job = tmp_path / "cp.yaml"
    job.write_text(
        "model: llama3-8b\ngpu: h100-sxm\ngpus: 16\nseq_len: 65536\nglobal_batch: 8\n"
        "cp_comm: all_gather\n"
    )
    fixed = ["--tp", "1", "--cp", "8", "--mbs", "1", "--dist-opt"]
    gathered = _best_plan(capsys, "estimate", job, *fixed)
    ring = _best_plan(capsys, "estimate", job, *fixed, "--cp-comm", "p2p")
    assert (gathered["cp_comm"], ring["cp_comm"]) == ("all_gather", "p2p")
    cp_g = gathered["step_time_breakdown_s"]["cp_comm_s"]
    assert cp_g > ring["step_time_breakdown_s"]["cp_comm_s"]
    assert "--cp-comm-type" not in ring["megatron"]["args"]
    args = gathered["megatron"]["args"]
    assert args[args.index("--cp-comm-type") + 1] == "all_gather"
    assert _refused(job, "--cp-comm", "ring") == (
        "error: cp-comm='ring' is invalid: one of p2p, a2a, all_gather"
    )


def test_the_pipeline_split_from_the_file_and_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Llama 3 8B on PP4: 32 layers, the output layer 2 x 128256 x 4096 FLOPs a token, 2.2
    # layers' worth at sequence 4096. Even: 8 layers and the output layer on the last stage;
    # balanced: 9 on the fullest other stage, 6 and the output layer on the last
    job = tmp_path / "pp.yaml"
    job.write_text(
        "model: llama3-8b\ngpu: h100-sxm\ngpus: 8\nseq_len: 4096\nglobal_batch: 256\n"
        "pp_split: balanced\n"
    )
    fixed = ["--pp", "4", "--dp", "2"]
    bal = _best_plan(capsys, "estimate", job, *fixed)
    even = _best_plan(capsys, "estimate", job, *fixed, "--pp-split", "even")
    assert bal["plan"]["pp_split"] == "balanced" and even["plan"]["pp_split"] == "even"
    assert bal["pipeline_stages"] == {
        "fullest": 9,
        "last": 6,
        "slowest": 9,
        "slowest_runs_output_layer": False,
    }
    assert even["pipeline_stages"] == {
        "fullest": 8,
        "last": 8,
        "slowest": 8,
        "slowest_runs_output_layer": True,
    }
    assert bal["step_time_s"] < even["step_time_s"]


@pytest.mark.parametrize("path", sorted((EXAMPLE.parent).glob("*.yaml")), ids=lambda p: p.stem)
def test_every_bundled_workload_names_catalog_parts_and_has_a_plan_that_fits(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuscale.catalog import get_gpu, get_model

    job = load_training_job(path)
    assert job.model and job.gpu and job.gpus
    assert get_model(job.model).key and get_gpu(job.gpu).key
    code, out, err = run_cli(
        ["train", "search", "--workload", str(path), "--top", "1", "--json"], capsys
    )
    assert code == 0, err
    best = json.loads(out)["plans"][0]
    assert best["fits"] and best["gpus"] == job.gpus


def test_a_relative_config_json_is_read_beside_the_workload_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "jobs"
    folder.mkdir()
    cfg = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192}
    cfg.update(num_attention_heads=32, num_hidden_layers=16, vocab_size=128256)
    (folder / "cfg.json").write_text(json.dumps(cfg))
    (folder / "job.yaml").write_text("model: cfg.json\ngpu: h100-sxm\ngpus: 8\n")
    assert load_training_job(folder / "job.yaml").model == str(folder / "cfg.json")
    monkeypatch.chdir(tmp_path)  # elsewhere: the file's folder still holds it
    code, out, err = run_cli(["train", "estimate", "--workload", "jobs/job.yaml"], capsys)
    # 16 x (4 x 2048^2 + 3 x 2048 x 8192) + 2 x 128,256 x 2048 untied = 1.6 B
    assert code == 0 and "1.6 B parameters" in out, err
    # a file that is not there is named by the path tried
    (folder / "bad.yaml").write_text("model: gone.json\ngpu: h100-sxm\ngpus: 8\n")
    code, _, err = run_cli(["train", "estimate", "--workload", "jobs/bad.yaml"], capsys)
    assert code == 2 and "bad.yaml:model='jobs/gone.json' is invalid: no such file" in err


def test_a_config_json_name_too_long_for_the_system_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(f"model: {'a' * 300}.json\ngpu: h100-sxm\ngpus: 8\n")
    code, _, err = run_cli(["train", "estimate", "--workload", str(job)], capsys)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "job.yaml:model=" in err and "File name too long" in err
