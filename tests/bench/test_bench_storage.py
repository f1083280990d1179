"""`gpuscale bench storage`: checkpoint-like writes (fsync) and reads on one node, their
aggregate rates, and the flags that price a job's storage with them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_runner import run_cli

from gpuscale.bench import storage
from gpuscale.bench.storage import check_args, run
from gpuscale.errors import InputError

MiB = 2**20


def test_a_pass_writes_reads_and_removes_its_files(tmp_path: Path) -> None:
    phases: list[str] = []
    res = run(tmp_path, 8 * MiB, files=2, processes=2, block=MiB, on_phase=phases.append)
    assert phases == ["write", "read"]
    assert res.total_bytes == 8 * MiB and res.files == 2 and res.processes == 2
    assert res.write_Bps == pytest.approx(res.total_bytes / res.write_s)
    assert res.read_Bps == pytest.approx(res.total_bytes / res.read_s)
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_a_size_that_does_not_divide_is_written_whole_files(tmp_path: Path) -> None:
    res = run(tmp_path, 3 * MiB + 1, files=3, processes=1, block=4096)
    assert res.total_bytes == 3 * MiB  # three files of 1 MiB, the odd byte left out


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"files": 0}, "--files"),
        ({"processes": 3, "files": 2}, "--processes"),
        ({"block": 512}, "--block"),
        ({"total": 4096}, "--size"),
    ],
)
def test_arguments_are_checked_before_any_write(
    tmp_path: Path, kw: dict[str, int], field: str
) -> None:
    args = {"total": 8 * MiB, "files": 2, "processes": 2, "block": MiB, **kw}
    with pytest.raises(InputError, match=re.escape(field)):
        check_args(tmp_path, **args)
    assert list(tmp_path.iterdir()) == []


def test_more_than_the_free_space_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storage, "_free_bytes", lambda _p: 10 * MiB)
    with pytest.raises(InputError, match="free space"):
        check_args(tmp_path, 10 * MiB, 2, 2, MiB)  # 10 MiB and 10 % to spare > 10 MiB


def test_the_command_prints_the_flags_that_price_a_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    data = tmp_path / "data"
    data.mkdir()
    args = ["bench", "storage", "--path", str(data), "--size", "4M", "--files", "2"]
    code, stdout, err = run_cli([*args, "--processes", "2", "--block", "1M", "--json", str(out)],
                                capsys)  # fmt: skip
    assert code == 0, err
    res = json.loads(out.read_text())
    assert res["total_bytes"] == 4 * MiB
    m = re.search(r"--storage-write-bw (\S+) --storage-read-bw (\S+)", stdout)
    assert m is not None
    # the printed rates are the measured ones, in the form train estimate reads
    assert float(m.group(1).removesuffix("GB/s")) == pytest.approx(res["write_Bps"] / 1e9, rel=1e-2)
    est = ["train", "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8"]
    est += ["--checkpoint-every", "30min", "--storage-write-bw", m.group(1)]
    est += ["--storage-read-bw", m.group(2), "--json"]
    code, stdout, err = run_cli(est, capsys)
    assert code == 0, err
    priced = json.loads(stdout)["storage"]  # a checkpoint written at the measured rate
    assert priced["checkpoint_bytes"] / priced["checkpoint_write_s"] == pytest.approx(
        res["write_Bps"], rel=1e-2
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--path", "/no/such/dir"], "--path='/no/such/dir'"),
        (["--size", "lots"], "--size='lots'"),
        (["--block", "0"], "--block="),
        (["--path", ""], "--path=''"),  # not the current directory
        (["--size", "0.5"], "a whole number of bytes"),
        (["--size", "9" * 400], "up to 1024T"),  # a float's infinity, not a traceback
    ],
)
def test_bad_options_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    base = ["bench", "storage", "--path", str(tmp_path), "--size", "4M", "--files", "2"]
    code, out, err = run_cli([*base, "--processes", "1", *args], capsys)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert needle in line


def test_a_storage_error_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    """Files capped at 1 MiB (RLIMIT_FSIZE, inherited by the writers): the 4 MiB shards fail
    with EFBIG, as a full or quota-capped file system fails a checkpoint."""
    import resource
    import subprocess
    import sys

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (MiB, MiB))

    data, out = tmp_path / "data", tmp_path / "r.json"
    data.mkdir()
    cmd = [sys.executable, "-c", "from gpuscale.cli import main; main()", "bench", "storage"]
    cmd += ["--path", str(data), "--size", "8M", "--files", "2", "--processes", "2"]
    r = subprocess.run(
        [*cmd, "--block", "1M", "--json", str(out)],
        capture_output=True, text=True, timeout=120, preexec_fn=cap, check=False,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "--path=" in line and "File too large" in line
    assert list(data.iterdir()) == [] and not out.exists()


def test_fewer_files_than_the_default_processes_take_one_process_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, out = tmp_path / "data", tmp_path / "r.json"
    data.mkdir()
    args = ["bench", "storage", "--path", str(data), "--size", "4M", "--files", "2"]
    code, _, err = run_cli([*args, "--block", "1M", "--json", str(out)], capsys)
    assert code == 0, err
    assert json.loads(out.read_text())["processes"] == 2


def test_a_writer_that_dies_is_not_blamed_on_the_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer process killed (by the out-of-memory killer, say) breaks the pool: the
    error names --processes, not --path, and the files are still removed."""
    from concurrent.futures.process import BrokenProcessPool

    def broken(*_: object, **__: object) -> list[float]:
        raise BrokenProcessPool("A child process terminated abruptly")

    monkeypatch.setattr(storage, "_span", broken)
    with pytest.raises(InputError, match=r"--processes=2 .*ended abruptly"):
        run(tmp_path, 4 * MiB, files=2, processes=2, block=MiB)
    assert list(tmp_path.iterdir()) == []
