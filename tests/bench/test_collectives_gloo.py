"""The nccl-tests-style benchmark on Gloo (CPU), launched like a user would with torchrun."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuscale.bench.sweep import avg_busbw, bandwidths, count_for, parse_size, row_size, size_sweep
from gpuscale.errors import InputError

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(
    not HAS_TORCH, reason="torch is not importable (pip install torch==2.13.0 for the CPU build)"
)

Factor = Callable[[int], float]
FACTOR: dict[str, Factor] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}


def _run(
    tmp: Path, nproc: int, op: str, *extra: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    out = tmp / f"{op}-{nproc}.json"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "-m",
        "gpuscale.bench.collectives",
        "-b",
        "8",
        "-e",
        "64K",
        "-f",
        "32",
        "-o",
        op,
        "-c",
        "1",
        "-n",
        "3",
        "-w",
        "1",
        "--json",
        str(out),
        *extra,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r, json.loads(out.read_text())


@needs_torch
@pytest.mark.parametrize("nproc", [2, 4])
@pytest.mark.parametrize("op", sorted(FACTOR))
def test_gloo_benchmark_is_correct_and_its_bandwidths_follow_nccl_tests(
    tmp_path: Path, nproc: int, op: str
) -> None:
    r, res = _run(tmp_path, nproc, op)
    assert res["ranks"] == nproc and res["backend"] == "gloo" and res["wrong_total"] == 0
    rows = res["rows"]
    assert isinstance(rows, list) and rows
    for row in rows:
        assert row["oop_wrong"] == 0 and row["ip_wrong"] == 0
        for side in ("oop", "ip"):
            t_s = row[f"{side}_time_us"] * 1e-6
            alg = row["size_bytes"] / t_s / 1e9
            assert row[f"{side}_algbw"] == pytest.approx(alg, rel=1e-9)
            assert row[f"{side}_busbw"] == pytest.approx(alg * FACTOR[op](nproc), rel=1e-9)
    assert res["avg_busbw_GBps"] == pytest.approx(
        sum(x["oop_busbw"] + x["ip_busbw"] for x in rows) / (2 * len(rows))
    )
    assert "# Avg bus bandwidth" in r.stdout and "#wrong" in r.stdout


@needs_torch
def test_bad_flags_fail_before_launching_anything() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gpuscale.bench.collectives", "-o", "allgather"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "-o/--op='allgather'" in r.stderr


def test_gpuscale_imports_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import gpuscale.bench.collectives, gpuscale.cli.bench, gpuscale.perf.comm\n"
        "from gpuscale.cli import app\nprint('ok')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_sweep_sizes_counts_and_bandwidths_by_hand() -> None:
    assert parse_size("8", "-b") == 8 and parse_size("64K", "-b") == 65536
    assert parse_size("1G", "-e") == 2**30
    assert parse_size("1.5G", "-e") == 3 * 2**29 and parse_size("0.5K", "-b") == 512
    assert size_sweep(8, 1024, 4) == [8, 32, 128, 512]
    assert count_for("all_gather", 4096, 4, 4) == 256  # per-rank count: 4096/4/4
    assert row_size("all_gather", 256, 4, 4) == 4096
    assert count_for("all_reduce", 4096, 4, 4) == 1024
    alg, bus = bandwidths("all_reduce", 1e9, 0.5, 4)
    assert alg == pytest.approx(2.0)
    assert bus == pytest.approx(3.0)  # 2 GB/s x 2*3/4
    assert avg_busbw([]) == 0.0


@pytest.mark.parametrize(
    ("b", "e", "f", "field"),
    [
        ("1M", "8", 2.0, "-b/--minbytes"),
        ("8", "1M", 0.0, "-f/--stepfactor"),
        ("8", "1M", -1.0, "-f/--stepfactor"),
        ("x", "1M", 2.0, "-b/--minbytes"),
    ],
)
def test_bad_sweep_is_an_input_error(b: str, e: str, f: float, field: str) -> None:
    with pytest.raises(InputError, match=field.replace("/", "/")):
        size_sweep(parse_size(b, "-b/--minbytes"), parse_size(e, "-e/--maxbytes"), f)


@needs_torch
def test_cli_bench_errors_are_one_line_exit_2() -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "from gpuscale.cli import main; main()",
            "bench",
            "collectives",
            "--nproc",
            "4",
            "--system",
            "dgx-h100",
            "--nodes",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--nodes" in r.stderr


@needs_torch
def test_a_run_naming_its_cluster_writes_the_file_validate_reads(tmp_path: Path) -> None:
    # as the exported sbatch runs it on many nodes: the module itself writes the measured
    # sweep beside the cluster it ran on, which `validate collectives` reads (a Gloo run's
    # rows are then skipped, with that reason, rather than the file refused)
    from gpuscale.calibrate import default_calibration
    from gpuscale.validate.collectives_bench import bench_rows

    _, res = _run(tmp_path, 2, "all_reduce", "--system", "dgx-h100", "--nodes", "1")
    assert res["cluster"] == {"system": "dgx-h100", "nodes": 1}
    measured = res["measured"]
    assert isinstance(measured, dict) and measured["ranks"] == 2
    rows = bench_rows(tmp_path / "all_reduce-2.json", default_calibration())
    assert rows and all("Gloo" in (r.reason or "") for r in rows)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--system", "dgx-h100"], "--nodes='(missing)' is invalid: a node count of at least 1"),
        (["--nodes", "2"], "--model='(missing)' is invalid: a cluster YAML, or --system NAME"),
        (["--model", "c.yaml", "--system", "dgx-h100"], "--model='c.yaml' is invalid: give either"),
        (["--system", "dgx-h10", "--nodes", "2"], "--system='dgx-h10' is invalid: unknown"),
        (["--system", "dgx-h100", "--nodes", "0"], "--nodes=0 is invalid: a node count of"),
    ],
)
def test_the_cluster_a_run_names_is_checked_before_it_starts(extra: list[str], said: str) -> None:
    from gpuscale.bench.collectives import build_parser, check_args

    with pytest.raises(InputError) as exc:
        check_args(build_parser().parse_args(extra))
    assert str(exc.value).startswith(said)
