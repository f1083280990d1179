"""`gpuscale bench collectives` rejects bad flags and outputs before it launches torchrun."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import gpuscale.cli.bench as bench_cli
from gpuscale.bench import collectives
from gpuscale.cli import main
from gpuscale.errors import InputError

RESULT = {
    "op": "all_reduce",
    "ranks": 2,
    "dtype": "float32",
    "rows": [{"size_bytes": 8, "oop_time_us": 10.0, "oop_busbw": 0.0}],
}


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, list[str]]]:
    """Stub torchrun: record the launch and write a result, as a finished run would."""
    calls: list[tuple[int, list[str]]] = []

    def fake_launch(nproc: int, args: list[str], json_path: Path) -> int:
        calls.append((nproc, list(args)))
        json_path.write_text(json.dumps(RESULT))
        return 0

    monkeypatch.setattr(bench_cli, "launch", fake_launch)
    # the stub needs no GPU: a host's GPU count must not decide these tests
    monkeypatch.setattr(collectives, "check_backend", lambda backend, nproc: None)
    return calls


def _fail(capsys: Any, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "collectives", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("argv", "field", "hint"),
    [
        (["-d", "bogus"], "-d/--datatype='bogus'", "float32"),
        (["-d", ""], "-d/--datatype=''", "float32"),
        (["-n", "0"], "-n/--iters=0", "at least 1"),
        (["-n", "-5"], "-n/--iters=-5", "at least 1"),
        (["-w", "-1"], "-w/--warmup_iters=-1", "0 or more"),
        (["-c", "7"], "-c/--check=7", "0 (no check) or 1"),
        (["-c", "-1"], "-c/--check=-1", "0 (no check) or 1"),
        (["--backend", "mpi"], "--backend='mpi'", "auto, nccl, gloo"),
        (["-o", "allgather"], "-o/--op='allgather'", "all_gather"),
        (["-b", "-x"], "-b/--minbytes='-x'", "byte count"),
        (["-b", "1M", "-e", "8"], "-b/--minbytes=", "at most -e/--maxbytes"),
        (["-f", "1"], "-f/--stepfactor=1.0", "greater than 1"),
        (["-N", "0"], "--nproc=0", "at least 1"),
        (["--nodes", "2"], "--model='(missing)'", "--system NAME with --nodes N"),
    ],
)
def test_bad_flag_fails_before_launching(
    capsys: Any, launched: list[Any], argv: list[str], field: str, hint: str
) -> None:
    err = _fail(capsys, *argv)
    assert err.startswith(f"error: {field}") and hint in err
    assert launched == []


@pytest.mark.parametrize("kind", ["missing-parent", "directory", "parent-is-file"])
def test_unwritable_json_fails_before_launching(
    tmp_path: Path, capsys: Any, launched: list[Any], kind: str
) -> None:
    (tmp_path / "afile").write_text("x\n")
    path = {
        "missing-parent": tmp_path / "no" / "such" / "out.json",
        "directory": tmp_path,
        "parent-is-file": tmp_path / "afile" / "out.json",
    }[kind]
    err = _fail(capsys, "--json", str(path))
    assert err.startswith(f"error: --json={str(path)!r} is invalid:")
    assert launched == []


def test_bad_calibration_fails_before_launching(
    tmp_path: Path, capsys: Any, launched: list[Any]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "bench",
                "collectives",
                "--system",
                "dgx-h100",
                "--nodes",
                "1",
                "--calibration",
                str(tmp_path / "missing.json"),
            ]
        )
    assert exc.value.code == 2
    assert launched == []


def test_good_flags_launch_the_worker_with_flags_it_accepts(
    tmp_path: Path, capsys: Any, launched: list[tuple[int, list[str]]]
) -> None:
    out = tmp_path / "res.json"
    main(["bench", "collectives", "-N", "2", "-c", "0", "-n", "3", "-w", "0", "--json", str(out)])
    ((nproc, args),) = launched
    assert nproc == 2
    parsed = collectives.build_parser().parse_args(args)
    assert (parsed.check, parsed.iters, parsed.warmup_iters) == (0, 3, 0)
    collectives.check_args(parsed)
    assert json.loads(out.read_text())["measured"] == RESULT


@pytest.mark.parametrize(
    ("argv", "field"),
    [(["--backend", "mpi"], "--backend='mpi'"), (["-c", "7"], "-c/--check=7")],
)
def test_worker_rejects_the_same_flags_in_one_line(
    capsys: Any, argv: list[str], field: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        collectives.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {field}") and "\n" not in err


@pytest.mark.parametrize(
    ("us", "text"),
    [(5.123, "   5.12"), (99.99, "  99.99"), (1234.56, " 1234.6"), (15676.56, "  15677")],
)
def test_times_keep_the_nccl_tests_column_width(us: float, text: str) -> None:
    # nccl-tests drops decimals as a time grows (two below 100 us, one below 10 ms, none
    # above), so a column of times stays seven characters wide
    from gpuscale.bench.sweep import fmt_us

    assert fmt_us(us) == text and len(text) == 7


@pytest.mark.parametrize(
    ("gpus", "nccl", "argv", "hint"),
    [
        (0, False, ["--backend", "nccl"], "no CUDA GPU is visible"),
        (2, False, ["--backend", "nccl"], "no NCCL"),
        (1, True, ["--backend", "nccl"], "-N at most 1"),
        (1, True, [], "-N at most 1"),  # auto is NCCL where CUDA is
    ],
)
def test_a_backend_this_host_cannot_run_is_refused_before_launching(
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
    gpus: int,
    nccl: bool,
    argv: list[str],
    hint: str,
) -> None:
    # torchrun's workers used to fail in init_process_group with ~90 lines of tracebacks
    torch = pytest.importorskip("torch")
    calls: list[int] = []
    monkeypatch.setattr(bench_cli, "launch", lambda nproc, args, path: calls.append(nproc) or 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: nccl)
    err = _fail(capsys, "-N", "2", *argv)
    assert err.startswith(f"error: --backend='{argv[1] if argv else 'auto'}' is invalid:")
    assert hint in err and calls == []


def test_a_failed_run_writes_no_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # a run whose results check found wrong values exits 1 after writing its figures
    def failing_launch(nproc: int, args: list[str], json_path: Path) -> int:
        json_path.write_text(json.dumps({**RESULT, "wrong_total": 3}))
        return 1

    monkeypatch.setattr(bench_cli, "launch", failing_launch)
    out = tmp_path / "res.json"
    with pytest.raises(SystemExit) as exc:
        main(["bench", "collectives", "--backend", "gloo", "--json", str(out)])
    assert exc.value.code == 1
    assert not out.exists() and "not written" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("gpus", "nccl", "backend", "nproc"),
    [
        (0, False, "auto", 4),  # auto on a CPU-only host runs Gloo
        (0, False, "gloo", 4),
        (8, True, "nccl", 8),  # one GPU per process
        (8, True, "auto", 2),
    ],
)
def test_a_backend_this_host_can_run_is_accepted(
    monkeypatch: pytest.MonkeyPatch, gpus: int, nccl: bool, backend: str, nproc: int
) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: nccl)
    collectives.check_backend(backend, nproc)  # no error
    if backend != "gloo" and gpus:  # the same host refuses one process more than its GPUs
        with pytest.raises(InputError, match=f"NCCL with -N at most {gpus}"):
            collectives.check_backend(backend, gpus + 1)


def test_an_output_name_too_long_for_the_system_is_one_line(
    capsys: Any, launched: list[Any], tmp_path: Path
) -> None:
    err = _fail(capsys, "--json", str(tmp_path / ("a" * 300 + ".json")))
    assert "--json=" in err and "a path the system can open (File name too long)" in err
    assert launched == []
