"""`gpuscale train estimate|search|scaling` through a real process: JSON outputs, and every
user error as exit code 2 with exactly one line on stderr naming the field and the value."""

from __future__ import annotations

import csv
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscale.catalog import get_model
from gpuscale.perf.transformer import model_flops_per_token

ENTRY = "from gpuscale.cli import main; main()"
VALIDATION = Path("/work/shared/validation/training_runs.csv")


def gpuscale(*args: str) -> subprocess.CompletedProcess[str]:
    # a narrow terminal: a message that wrapped would show up as several lines
    env = {**os.environ, "COLUMNS": "60", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def assert_one_line_error(r: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


EST = [
    "train",
    "estimate",
    "--model",
    "gpt3-175b",
    "--gpu",
    "a100-sxm-80gb",
    "--gpus",
    "1024",
    "--seq-len",
    "2048",
    "--global-batch",
    "1536",
]


def test_estimate_json_has_breakdowns_and_mfu() -> None:
    r = gpuscale(
        *EST,
        "--tp",
        "8",
        "--pp",
        "8",
        "--vpp",
        "2",
        "--mbs",
        "1",
        "--recompute",
        "selective",
        "--dist-opt",
        "--tokens",
        "3e11",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["plan"] == {
        "tp": 8,
        "pp": 8,
        "dp": 16,
        "cp": 1,
        "ep": 1,
        "vpp": 2,
        "mbs": 1,
        "sequence_parallel": True,
        "recompute": "selective",
        "sharding": "dist-opt",
        "tp_comm_overlap": False,
        "shard_group": 0,
        "pp_split": "even",
    }
    # GPT-3 175B's 96 layers on 16 chunks: 12 a stage, the output layer beside the last 12
    assert d["pipeline_stages"] == {
        "fullest": 12,
        "last": 12,
        "slowest": 12,
        "slowest_runs_output_layer": True,
    }
    assert d["microbatches"] == 1536 // 16
    mem = d["memory_bytes"]
    for k in ("weights", "gradients", "optimizer", "activations", "buffers"):
        assert mem[k] > 0
    assert mem["total"] == pytest.approx(
        sum(mem[k] for k in ("weights", "gradients", "optimizer", "activations", "buffers"))
    )
    assert mem["capacity"] == 80 * 2**30  # A100 80GB: 81,920 MiB
    steps = d["step_time_breakdown_s"]
    assert {"compute_s", "bubble_s", "tp_comm_s", "dp_comm_s", "optimizer_s"} <= set(steps)
    assert d["step_time_s"] == pytest.approx(sum(steps.values()), rel=1e-9)
    assert 0.0 < d["mfu"] < 1.0
    # the MFU's real bar: the A100's measured BF16 matmul ceiling (271.2 of 312 TFLOP/s)
    assert d["gpu_bf16_matmul_ceiling"] == 0.869 and d["mfu"] < d["gpu_bf16_matmul_ceiling"]
    # tokens/s/GPU from the step time: 1536 x 2048 / (step x 1024)
    assert d["tokens_per_s_per_gpu"] == pytest.approx(1536 * 2048 / (d["step_time_s"] * 1024))
    # whole steps of 1536 x 2048 tokens: ceil(3e11 / 3,145,728) = 95,368 steps
    assert d["train_steps"] == 95368
    assert d["time_to_train_s"] == pytest.approx(95368 * d["step_time_s"], rel=1e-12)
    # GPU-hours = steps x step x GPUs / 3600
    assert d["gpu_hours"] == pytest.approx(95368 * d["step_time_s"] * 1024 / 3600, rel=1e-12)


def test_tokens_take_whole_steps_and_decimal_prefixes() -> None:
    plan = ("--tp", "8", "--pp", "8", "--dist-opt")
    one = json.loads(gpuscale(*EST, *plan, "--tokens", "2", "--json").stdout)
    assert one["train_steps"] == 1 and one["time_to_train_s"] == one["step_time_s"]
    low = json.loads(gpuscale(*EST, *plan, "--tokens", "300b", "--json").stdout)
    assert low["train_tokens"] == 3e11  # lower-case prefixes are counts too
    # 4.1T is not quite whole in binary floating point: still a count of 4.1e12
    odd = json.loads(gpuscale(*EST, *plan, "--tokens", "4.1T", "--json").stdout)
    assert odd["train_tokens"] == 4_100_000_000_000
    r = gpuscale(*EST, *plan, "--tokens", "15Ti")
    assert_one_line_error(r, "tokens", "15Ti", "decimal prefix")


def test_a_plan_that_does_not_fit_gets_no_time_to_train() -> None:
    # GPT-3 175B on TP2 PP1 (DP512): 87 B parameters' weights alone overflow an 80 GB GPU
    plan = ("--tp", "2", "--pp", "1", "--mbs", "1", "--tokens", "3e11")
    r = gpuscale(*EST, *plan, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["fits"] is False
    assert d["time_to_train_s"] is None and d["gpu_hours"] is None
    table = gpuscale(*EST, *plan)
    words = " ".join(table.stdout.replace("│", " ").split())
    assert "none: the plan does not fit in memory" in words
    # and it points at the fastest plan that does fit: the search's best, which fits
    best = d["best_fitting_plan"]
    assert best is not None and best["memory_bytes"] <= 80 * 1024**3
    s = gpuscale("train", "search", *EST[2:], "--json", "--top", "1")
    assert s.returncode == 0, s.stderr
    top = json.loads(s.stdout)["plans"][0]
    assert best["plan"] == top["plan"]
    assert best["step_time_s"] == pytest.approx(top["step_time_s"])
    assert f"the fastest plan that fits is {best['label']}" in words


def test_no_fitting_plan_is_said_so() -> None:
    # Llama 3 405B's 16-bit weights alone (756 GiB) overflow 8 x 80 GB whatever the layout
    args = ("--model", "llama3-405b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "16")
    r = gpuscale("train", "estimate", *args, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["best_fitting_plan"] is None
    words = " ".join(gpuscale("train", "estimate", *args).stdout.split())
    assert "no plan of this workload fits on these GPUs" in words


def test_search_json_returns_plans() -> None:
    r = gpuscale(
        "train",
        "search",
        "--model",
        "gpt3-175b",
        "--gpu",
        "a100-sxm-80gb",
        "--gpus",
        "1024",
        "--seq-len",
        "2048",
        "--global-batch",
        "1536",
        "--top",
        "3",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert 1 <= len(d["plans"]) <= 3
    assert d["evaluated"] >= d["valid"] >= d["fitting"] >= len(d["plans"])
    steps = [p["step_time_s"] for p in d["plans"]]
    assert steps == sorted(steps)
    for p in d["plans"]:
        assert p["fits"] and p["gpus_used"] <= 1024 and 0 < p["mfu"] < 1
    assert "fastest plan with another parallel layout" in d["why_best"]
    # each plan's rank as the table shows it: its place, or that of the first of the plans
    # it ties with (the table's "=N")
    for k, p in enumerate(d["plans"], 1):
        assert isinstance(p["rank"], int) and isinstance(p["tied"], bool)
        assert p["rank"] == k or (p["tied"] and p["rank"] < k)
        # its step time against the first plan's, as the table's "vs #1" column
        vs = (p["step_time_s"] / steps[0] - 1) * 100
        assert p["step_vs_best_pct"] == pytest.approx(vs, abs=1e-9)
    assert d["plans"][0]["step_vs_best_pct"] == 0.0


def test_scaling_json() -> None:
    r = gpuscale(
        "train",
        "scaling",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm",
        "--gpus",
        "64",
        "--seq-len",
        "4096",
        "--global-batch",
        "256",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d) == {"workload", "strong", "weak"}
    assert d["workload"] | {"batch": ""} == {
        "model": "llama3-8b",
        "gpu": "h100-sxm",
        "gpus": 64,
        "seq_len": 4096,
        "global_batch": 256,
        "precision": "bf16",
        "batch": "",
    }
    # weak scaling: the batch grows in proportion to the GPU count, up to the given one
    assert [p["global_batch"] for p in d["weak"]] == [32, 64, 128, 256]
    pts = d["strong"]
    assert [p["gpus"] for p in pts] == [8, 16, 32, 64]
    assert all(p["global_batch"] == 256 for p in pts)
    assert pts[0]["efficiency"] == pytest.approx(1.0)
    assert all(0 < p["mfu"] < 1 and p["step_time_s"] > 0 for p in pts)
    # MFU against the run's dense peak (bf16 on H100: 989.4 TFLOP/s), as train estimate's
    assert all(p["mfu_peak_tflops"] == pytest.approx(989.4, rel=1e-3) for p in pts)
    # strong scaling: more GPUs never make the step slower
    steps = [p["step_time_s"] for p in pts]
    assert steps == sorted(steps, reverse=True)
    # the plan's rates mean what train estimate's mean (per GPU it uses, per step); the net
    # ones count every GPU of the point: here all are used and no run cost is priced
    for p in pts:
        used = p["gpus_used"] * p["step_time_s"]
        assert p["tokens_per_s_per_gpu"] == pytest.approx(256 * 4096 / used, rel=1e-9)
        net = p["tokens_per_s_per_gpu"] * p["gpus_used"] / p["gpus"]
        assert p["net_tokens_per_s_per_gpu"] == pytest.approx(net, rel=1e-9)
        # MFU: the plan's rate x the model FLOPs a token over the dense peak, as estimate's
        flops = model_flops_per_token(get_model("llama3-8b"), 4096, causal=True)
        mfu = p["tokens_per_s_per_gpu"] * flops / (p["mfu_peak_tflops"] * 1e12)
        assert p["mfu"] == pytest.approx(mfu, rel=1e-9)
        assert p["net_mfu"] == pytest.approx(mfu * p["gpus_used"] / p["gpus"], rel=1e-9)


def test_scaling_point_where_nothing_fits_has_no_figures() -> None:
    # Llama 3 70B does not fit on 8 H100s: that point carries the reason, not zeros, and
    # efficiency is measured from the first point that fits
    args = ("--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "32", "--seq-len", "8192")
    r = gpuscale("train", "scaling", *args, "--global-batch", "64", "--mode", "strong", "--json")
    assert r.returncode == 0, r.stderr
    pts = json.loads(r.stdout)["strong"]
    assert pts[0]["gpus"] == 8 and pts[0]["plan"].startswith("none: ")
    assert pts[0]["step_time_s"] is None and pts[0]["efficiency"] is None
    assert pts[1]["efficiency"] == pytest.approx(1.0)
    r = gpuscale("train", "scaling", *args, "--global-batch", "64", "--mode", "strong")
    row8 = next(line for line in r.stdout.splitlines() if line.startswith("│    8 "))
    assert "0.0%" not in row8 and "0 us" not in row8


# --- bad input: exit 2, one line, the field and the value ------------------------------


def test_unknown_gpu_suggests_closest() -> None:
    args = ("--model", "gpt3-175b", "--gpu", "a100-sxm-8gb", "--gpus", "8")
    r = gpuscale("train", "estimate", *args)
    line = assert_one_line_error(r, "gpu", "a100-sxm-8gb")
    assert "did you mean" in line and "a100-sxm-80gb" in line


def test_unknown_model_suggests_closest() -> None:
    r = gpuscale("train", "search", "--model", "llama3-7b", "--gpu", "h100-sxm", "--gpus", "8")
    line = assert_one_line_error(r, "model", "llama3-7b")
    assert "did you mean" in line and "llama3-8b" in line


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        # tp x pp = 24 does not divide 1024 GPUs
        (["--tp", "8", "--pp", "3"], ("tp*pp*cp", "24", "1024")),
        # dp = 1024 / 8 = 128 ranks of 12 sequences each, which 5 does not divide
        (["--tp", "8", "--mbs", "5"], ("mbs=5", "12 sequences", "one of 1, 2, 3, 4, 6, 12")),
        # causal CP splits the sequence into 2 x cp chunks: 2,050 tokens only into 2
        (
            ["--tp", "8", "--cp", "2", "--seq-len", "2050"],
            ("cp=2", "2 x cp load-balanced chunks divide the sequence length 2050: one of 1"),
        ),
        # dp = 1024 / 32 = 32 does not divide 1,000 sequences
        (["--tp", "32", "--global-batch", "1000"], ("global-batch", "1000", "32 x 1")),
        # GPT-3 has 96 heads; tp 64 divides the GPU count but not the heads
        (["--tp", "64"], ("tp", "64", "96 attention heads")),
        # expert parallelism on a dense model says so, not that ep must divide the experts
        (["--tp", "8", "--ep", "4"], ("ep=4", "1 for a dense model (gpt3-175b has no experts)")),
        # an MoE dispatcher gpuscale does not model names the two it does
        (["--tp", "8", "--ep-dispatch", "deepep"], ("ep-dispatch", "deepep", "all_to_all")),
        # a recompute module Megatron-Core does not have names the ones it does
        (["--tp", "8", "--recompute-modules", "qkv"], ("recompute-modules", "qkv", "moe_act")),
        # sequence parallelism splits activations over TP: asked for without it, it is
        # refused rather than dropped
        (["--sp"], ("sp=", "--tp > 1")),
        # a fraction of a token is no training run
        (["--tokens", "0.5"], ("tokens", "0.5", "at least one token")),
        (["--tokens", "1.5"], ("tokens", "1.5", "a whole count")),
        # a pipeline placement gpuscale does not model names the three it does
        (["--tp", "8", "--pp", "4", "--pp-split", "uneven"], ("pp-split", "uneven", "account")),
    ],
)
def test_estimate_rejects_bad_plans(extra: list[str], needles: tuple[str, ...]) -> None:
    assert_one_line_error(gpuscale(*EST, *extra), *needles)


def test_sequence_not_divisible_by_cp() -> None:
    r = gpuscale(
        "train",
        "estimate",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm",
        "--gpus",
        "8",
        "--seq-len",
        "4097",
        "--global-batch",
        "8",
        "--cp",
        "2",
    )
    assert_one_line_error(r, "cp", "2", "4097")


def test_malformed_config_json_value(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "num_hidden_layers": "thirty-two",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "vocab_size": 32000,
            }
        )
    )
    r = gpuscale("train", "estimate", "--model", str(cfg), "--gpu", "h100-sxm", "--gpus", "8")
    assert_one_line_error(r, "num_hidden_layers", "thirty-two")


def test_unparseable_config_json(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text('{"num_hidden_layers": 32,\n')
    r = gpuscale("train", "estimate", "--model", str(cfg), "--gpu", "h100-sxm", "--gpus", "8")
    assert_one_line_error(r, "model", str(cfg), "JSON")


def test_malformed_validation_row(tmp_path: Path) -> None:
    with VALIDATION.open(newline="") as f:
        reader = csv.DictReader(f)
        fields = list(reader.fieldnames or [])
        row = next(reader)
    row["num_gpus"] = "lots"
    bad = tmp_path / "bad.csv"
    with bad.open("w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=fields)
        wr.writeheader()
        wr.writerow(row)
    r = gpuscale("validate", "training", "--runs", str(bad))
    assert_one_line_error(r, "num_gpus", "lots")


def test_mtp_depths_can_be_turned_off_and_cost_time() -> None:
    base = [
        "train", "estimate", "--model", "deepseek-v3", "--gpu", "h100-sxm", "--gpus", "1024",
        "--seq-len", "4096", "--global-batch", "1024", "--ep", "64", "--json",
    ]  # fmt: skip
    with_mtp = json.loads(gpuscale(*base, "--pp", "1").stdout)
    without = json.loads(gpuscale(*base, "--pp", "1", "--mtp", "0").stdout)
    # DeepSeek-V3 trains one MTP depth: a 62nd layer and a second output head per token
    assert without["tokens_per_s_per_gpu"] > 1.02 * with_mtp["tokens_per_s_per_gpu"]
    # on PP16 they run on the last stage beside its one layer (Megatron-Bridge's layout),
    # lighter than the four of the others: the pace is theirs, with or without MTP
    piped = json.loads(gpuscale(*base, "--pp", "16").stdout)
    assert piped["pipeline_stages"] == {
        "fullest": 4, "last": 1, "slowest": 4, "slowest_runs_output_layer": False
    }  # fmt: skip
    assert piped["notes"][0].endswith(
        "1 and the output layer (1.4 layers' forward FLOPs), the MTP depth and its head on "
        "the last; the fullest stage sets the pace"
    )
    piped_without = json.loads(gpuscale(*base, "--pp", "16", "--mtp", "0").stdout)
    assert piped_without["step_time_s"] == pytest.approx(piped["step_time_s"], rel=1e-3)
    assert_one_line_error(gpuscale(*base, "--pp", "16", "--mtp", "-1"), "mtp", "-1")


def test_the_estimate_names_the_structure_that_shapes_the_costs() -> None:
    from gpuscale.catalog import get_model
    from gpuscale.cli.train_report import model_line

    line = model_line(get_model("nemotron3-super-120b-a12b"))
    assert "88 blocks: 40 Mamba-2, 8 attention, 40 MoE" in line and "2 MTP depths" in line
    assert "18 layers with a 128-token window" in model_line(get_model("gpt-oss-120b"))
    assert model_line(get_model("llama3-70b")) == "70.6 B parameters; 80 layers"


def test_expert_and_interleaving_errors_name_the_valid_values() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return gpuscale("train", "estimate", "--gpu", "h100-sxm", "--gpus", "64", *args)

    r = run("--model", "mixtral-8x7b", "--ep", "3")
    assert r.returncode == 2
    assert "ep=3 is invalid: must divide the 8 experts of mixtral-8x7b" in r.stderr
    assert "one of 1, 2, 4, 8" in r.stderr
    r = run("--model", "llama3-8b", "--ep", "2")
    assert r.returncode == 2 and "dense model" in r.stderr
    r = run("--model", "llama3-8b", "--vpp", "2")
    assert r.returncode == 2 and "vpp=2 is invalid" in r.stderr
    r = run("--model", "llama3-8b", "--tokens", "1e400")
    assert r.returncode == 2 and "tokens='1e400' is invalid: a finite quantity" in r.stderr


def test_a_system_of_another_gpu_generation_is_refused() -> None:
    r = gpuscale(
        "train",
        "estimate",
        "--model",
        "llama3-8b",
        "--gpu",
        "a100-sxm-80gb",
        "--system",
        "gb200-nvl72",
        "--gpus",
        "72",
    )
    assert_one_line_error(r, "system='gb200-nvl72'", "houses blackwell GPUs")
    ok = gpuscale(
        "train",
        "estimate",
        "--model",
        "llama3-8b",
        "--gpu",
        "h200",
        "--system",
        "dgx-h100",
        "--gpus",
        "8",
        "--json",
    )
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize(
    ("gpu", "system", "refused"),
    [
        ("gb200", "hgx-b200", "houses blackwell GPUs as a baseboard module"),  # a superchip
        ("h100-pcie", "dgx-h100", "houses hopper GPUs as a baseboard module"),  # a card
        ("l40s", "pcie-8gpu-gen5", None),  # a generic PCIe server takes any PCIe card
        ("gb300", "gb200-nvl72", None),  # same generation, same mount
    ],
)
def test_a_system_of_another_mount_is_refused(gpu: str, system: str, refused: str | None) -> None:
    args = ("train", "estimate", "--model", "llama3-8b", "--gpu", gpu, "--system", system)
    r = gpuscale(*args, "--gpus", "8", "--json")
    if refused:
        assert_one_line_error(r, f"system='{system}'", refused)
    else:
        assert r.returncode == 0, r.stderr


def test_notes_for_an_extended_context_and_uneven_stages() -> None:
    r = gpuscale(
        "train",
        "estimate",
        "--model",
        "llama3-70b",
        "--gpu",
        "h100-sxm",
        "--gpus",
        "48",
        "--tp",
        "8",
        "--pp",
        "3",
        "--global-batch",
        "12",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    notes = json.loads(r.stdout)["notes"]
    assert notes[0] == (
        "pipeline (even split): 80 layers over 3 chunks are uneven, 27 on the fullest "
        "stage, 26 and the output layer (1.2 layers' forward FLOPs) on the last; the "
        "fullest stage sets the pace"
    )
    # the rest says what the fixed overhead is: 12 micro-batches a step through 27 layers
    assert len(notes) == 2 and notes[1].startswith("fixed overhead (")
    r = gpuscale(
        "train",
        "estimate",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm",
        "--gpus",
        "8",
        "--seq-len",
        "262144",
        "--cp",
        "8",
        "--global-batch",
        "1",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["notes"][0].startswith(
        "sequence 262,144 is beyond Llama 3 8B's trained context of 131,072"
    )


def test_fp8_param_gather_flag() -> None:
    base = shlex.split(
        "train estimate --model llama3-8b --gpu h100-sxm --gpus 64 --seq-len 4096 "
        "--global-batch 64 --dist-opt --json"
    )
    plain = gpuscale(*base, "--precision", "fp8")
    gathered = gpuscale(*base, "--precision", "fp8", "--fp8-param-gather")
    assert plain.returncode == 0 and gathered.returncode == 0, gathered.stderr
    mem = [json.loads(r.stdout)["memory_bytes"]["weights"] for r in (plain, gathered)]
    # the layers' weights 1 byte a parameter instead of 2 + 1; the embedding and the output
    # layer (and the final norm) 2 bytes either way, 1,050,677,248 parameters of Llama 3 8B
    emb = 1_050_677_248
    assert mem[1] - 2 * emb == pytest.approx((mem[0] - 2 * emb) / 3)
    r = gpuscale(*base, "--fp8-param-gather")  # bf16: nothing to gather in FP8
    assert_one_line_error(r, "fp8-param-gather", "fp8 or fp4")


def test_the_model_line_counts_the_mtp_weights_apart() -> None:
    from gpuscale.catalog import get_model
    from gpuscale.cli.train_report import model_line

    # Nemotron 3 Ultra: 549.3 B, and 560.5 B with its MTP layer (Megatron-Bridge's docs)
    m = get_model("nemotron3-ultra-550b-a55b").model_copy(update={"mtp_layers": 1})
    line = model_line(m)
    assert line.startswith("549.3 B parameters")
    assert "1 MTP depth (+11.2 B parameters" in line


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("--gpus", "abc"), ("--gpus", "'abc'", "valid integer")),
        (("--gpus", "8", "--seq-len", "8k"), ("--seq-len", "'8k'")),
        (("--gpux", "8"), ("--gpux", "--gpus")),  # unknown option, with the close ones
        ((), ("gpus='(missing)'", "required: --gpus, or a --workload file with gpus")),
    ],
)
def test_command_line_parse_errors_are_one_line(
    args: tuple[str, ...], needles: tuple[str, ...]
) -> None:
    r = gpuscale("train", "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", *args)
    assert_one_line_error(r, *needles)


def test_tensor_parallelism_beyond_the_node_is_noted() -> None:
    args = ("--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "64", "--global-batch", "64")
    over = json.loads(gpuscale("train", "estimate", *args, "--tp", "16", "--json").stdout)
    assert any("tensor parallelism spans 2 scale-up domains of 8" in n for n in over["notes"])
    inside = json.loads(gpuscale("train", "estimate", *args, "--tp", "8", "--json").stdout)
    assert not any("tensor parallelism spans" in n for n in inside.get("notes", []))


def test_search_takes_the_distributed_optimizer_flag_as_estimate_does() -> None:
    args = ("--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "64", "--global-batch", "64")
    r = gpuscale("train", "search", *args, "--dist-opt", "--top", "3", "--json")
    assert r.returncode == 0, r.stderr
    assert {p["plan"]["sharding"] for p in json.loads(r.stdout)["plans"]} == {"dist-opt"}
    both = gpuscale("train", "search", *args, "--dist-opt", "--zero", "zero1")
    assert_one_line_error(both, "zero", "not both")
    bogus = gpuscale("train", "search", *args, "--zero", "3")
    assert_one_line_error(bogus, "zero='3'", "none, dist-opt, zero1, zero2, zero3 or fsdp")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("--recompute", "none", "--recompute-modules", "mlp"),
            "error: recompute-modules='mlp' is invalid: --recompute selective "
            "(--recompute none recomputes no module selectively)",
        ),
        (
            ("--recompute", "full", "--recompute-modules", "mlp"),
            "error: recompute-modules='mlp' is invalid: --recompute selective "
            "(--recompute full recomputes no module selectively)",
        ),
        (
            ("--recompute-modules", "moe_act"),
            "error: recompute-modules='moe_act' is invalid: a module the model has "
            "(Llama 3 70B has no MoE layers)",
        ),
    ],
)
def test_recompute_modules_the_plan_would_not_use_are_refused(
    args: tuple[str, ...], line: str
) -> None:
    r = gpuscale(
        "train", "estimate", "--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "64",
        "--tp", "8", "--pp", "4", *args,
    )  # fmt: skip
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == line


def test_scaling_with_no_count_that_fits_is_an_error() -> None:
    r = gpuscale(
        "train", "scaling", "--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "4",
        "--global-batch", "256",
    )  # fmt: skip
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: gpus=4 is invalid: a count where some plan fits; at 4 GPUs,")
    assert "too few for llama3-70b" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_low_precision_mfu_is_also_given_against_the_bf16_peak() -> None:
    args = ("--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "64", "--seq-len", "8192")
    plan = ("--global-batch", "128", "--tp", "4", "--pp", "2", "--dist-opt")
    r = gpuscale("train", "estimate", *args, *plan, "--precision", "fp8", "--json")
    s = json.loads(r.stdout)
    bf16 = s["model_tflops_per_gpu"] / 989.4  # H100 SXM's dense bf16 peak, TFLOP/s
    text = gpuscale("train", "estimate", *args, *plan, "--precision", "fp8").stdout
    row = " ".join(text.replace("\u2502", " ").split())  # the table may wrap a cell
    assert f"{100 * s['mfu']:.1f}% of fp8 dense peak; {100 * bf16:.1f}% of the bf16" in row


def test_estimate_reproduces_a_searched_plan_that_leaves_gpus_idle() -> None:
    # 1,024 sequences on 100,000 GPUs: the best plan runs on 81,920 of them (DP512), which
    # tp x pp x cp alone cannot say; --dp can
    args = ("--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "100000")
    args += ("--seq-len", "8192", "--global-batch", "1024")
    best = json.loads(gpuscale("train", "search", *args, "--top", "1", "--json").stdout)
    plan = best["plans"][0]["plan"]
    assert plan["tp"] * plan["pp"] * plan["cp"] * plan["dp"] < 100000
    flags = [f"--{k}={plan[k]}" for k in ("tp", "pp", "cp", "dp", "vpp", "ep", "mbs")]
    flags += ["--recompute", plan["recompute"], "--zero", plan["sharding"]]
    flags += ["--tp-overlap"] if plan["tp_comm_overlap"] else []
    est = json.loads(gpuscale("train", "estimate", *args, *flags, "--json").stdout)
    assert est["step_time_s"] == pytest.approx(best["plans"][0]["step_time_s"], rel=1e-9)
    # the MFU's peak is named: the dense peak of the run's precision
    assert est["mfu"] == pytest.approx(est["model_tflops_per_gpu"] / est["mfu_peak_tflops"])
    # memory in whole bytes, the total the sum of its parts
    mem = est["memory_bytes"]
    assert all(isinstance(v, int) for v in mem.values())
    parts = ("weights", "gradients", "optimizer", "activations", "buffers")
    assert mem["total"] == sum(mem[k] for k in parts)
    too_many = gpuscale("train", "estimate", *args, *flags[:3], "--dp", "700")
    assert_one_line_error(too_many, "dp=700", "at most 152: tp x pp x cp x dp = 656 x 700")
    no_dp = gpuscale("train", "estimate", *args, "--tp", "8", "--pp", "3")
    assert_one_line_error(no_dp, "tp*pp*cp=24", "or give --dp to leave some idle")
    # as that error says: tp x pp = 128 does not divide 100,000, DP512 runs on 65,536
    idle = gpuscale("train", "estimate", *args, "--tp", "8", "--pp", "16", "--dp", "512")
    assert idle.returncode == 0, idle.stderr
    assert "65536 of 100000 GPUs" in idle.stdout


def test_version_is_the_package_s() -> None:
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).parents[2] / "pyproject.toml"
    version = tomllib.loads(pyproject.read_text())["project"]["version"]
    r = gpuscale("--version")
    assert r.returncode == 0 and r.stdout == f"gpuscale {version}\n"
    assert gpuscale("train", "--version").returncode == 2  # the root's option only


def test_estimate_recomputes_nothing_unless_asked() -> None:
    # Megatron-LM's default; a selective recompute of flash attention costs a forward pass
    # of attention and frees almost nothing (flash keeps no s x s scores)
    args = ("--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "64", "--zero", "zero3")
    args += ("--seq-len", "8192", "--global-batch", "256", "--json")
    plain = json.loads(gpuscale("train", "estimate", *args).stdout)
    assert plain["plan"]["recompute"] == "none"
    assert plain["step_time_breakdown_s"]["recompute_s"] == 0.0
    sel = json.loads(gpuscale("train", "estimate", *args, "--recompute", "selective").stdout)
    assert sel["step_time_breakdown_s"]["recompute_s"] > 0.0


def test_the_estimate_json_holds_the_same_keys_with_or_without_a_token_count() -> None:
    plan = ("--tp", "8", "--pp", "8", "--dist-opt", "--json")
    without = json.loads(gpuscale(*EST, *plan).stdout)
    with_tokens = json.loads(gpuscale(*EST, *plan, "--tokens", "300B").stdout)
    assert set(without) == set(with_tokens)
    keys = ("train_steps", "train_tokens", "time_to_train_s", "gpu_hours", "gpu_hours_allocated")
    assert all(without[k] is None for k in keys)
    assert all(with_tokens[k] is not None for k in keys)
    # with checkpoints and failures priced too: their counts are keys either way
    run = ("--checkpoint-every", "30min", "--storage-write-bw", "200GB/s")
    run += ("--gpu-mtbf", "2112d", "--restart-time", "10min")
    without = json.loads(gpuscale(*EST, *plan, *run).stdout)
    with_tokens = json.loads(gpuscale(*EST, *plan, *run, "--tokens", "300B").stdout)
    assert set(without) == set(with_tokens)
    assert without["checkpoints"] is None and with_tokens["checkpoints"] > 0


def test_scaling_json_records_the_checkpoint_and_failure_inputs_it_priced() -> None:
    r = gpuscale(
        "train", "scaling", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "64",
        "--global-batch", "256", "--checkpoint-every", "30min", "--storage-write-bw",
        "100GB/s", "--gpu-mtbf", "2112d", "--restart-time", "10min", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    w = json.loads(r.stdout)["workload"]
    assert w["storage"]["checkpoint_every_s"] == 1800.0 and w["storage"]["write_Bps"] == 1e11
    assert w["failures"] == {"gpu_mtbf_s": 2112 * 86400.0, "restart_s": 600.0}
