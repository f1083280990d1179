"""Storage as a training job uses it: checkpoint shards written, then read back.

``gpuscale bench storage --path DIR`` writes ``--files`` files of ``--size / --files`` bytes
each from ``--processes`` processes at once, ``--block`` bytes a ``write`` call, each file
``fsync``-ed before its writer reports (a checkpoint is saved when it is on storage, not in
the page cache), then reads them back in the same way. Before the reads each file's cached
pages are dropped (``posix_fadvise(DONTNEED)``, Linux), so the reads come from the storage;
on network file systems the hint is advisory, and a read rate far above the write rate says
it was ignored. The rates are aggregate: bytes of all files over the wall time from the first
writer's start to the last one's end. They are one node's: a job's checkpoint writes from
many nodes add up until the storage system's own limit, which one node cannot show.

The figures feed ``gpuscale train estimate --storage-write-bw ... --storage-read-bw ...``.
Torch-free: it runs on any host.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpuscale.errors import InputError
from gpuscale.paths import path_kind

MAX_PROCESSES = 256
"""Most writer processes one host runs (a mistyped count would fork thousands)."""
WARMUP_S = 0.05
"""Each worker's first task, untimed: every writer process is running before the clock starts."""
HEADROOM = 1.1
"""Free space the benchmark needs over its bytes (file system metadata, other writers)."""


@dataclass(frozen=True)
class StorageResult:
    """Aggregate rates of one write-then-read pass, bytes/s."""

    path: str
    total_bytes: int
    files: int
    processes: int
    block_bytes: int
    write_s: float
    read_s: float
    write_Bps: float
    read_Bps: float
    cache_dropped: bool
    """Whether the kernel accepted the hint to drop the files' cached pages before reading."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_args(
    path: Path, total: int, files: int, processes: int, block: int
) -> None:  # fmt: skip
    """Every argument checked before any byte is written."""
    kind = path_kind(path, "--path")
    if kind != "dir":
        raise InputError("--path", str(path), "an existing directory on the storage to measure")
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError("--path", str(path), "a directory this user can write in")
    if not 1 <= files <= 100_000:
        raise InputError("--files", files, "a file count from 1 to 100,000")
    if not 1 <= processes <= min(files, MAX_PROCESSES):
        raise InputError(
            "--processes", processes, f"from 1 to the file count ({files}, at most {MAX_PROCESSES})"
        )
    if block < 4096 or block > 1 << 30:
        raise InputError("--block", block, "a write size from 4K to 1G")
    if total < files * block:
        raise InputError("--size", total, f"at least --files x --block ({files} x {block:,} bytes)")
    free = _free_bytes(path)
    if total * HEADROOM > free:
        raise InputError(
            "--size", total, f"at most {int(free / HEADROOM):,} bytes (the free space under "
            f"{path}, with {HEADROOM - 1:.0%} to spare)",
        )  # fmt: skip


def _free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _write(name: str, size: int, block: int) -> float:
    """Write ``size`` bytes to ``name`` in ``block``-sized calls and fsync it: seconds."""
    buf = os.urandom(min(block, size))  # incompressible, as checkpoint tensors are
    t0 = time.perf_counter()
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        left = size
        while left > 0:
            n = os.write(fd, buf[: min(left, len(buf))])
            left -= n
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def _drop_cache(name: str) -> bool:
    """Ask the kernel to drop ``name``'s cached pages; whether it took the hint."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return False
    fd = os.open(name, os.O_RDONLY)
    try:
        advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _read(name: str, block: int) -> float:
    """Read ``name`` through in ``block``-sized calls: seconds."""
    t0 = time.perf_counter()
    fd = os.open(name, os.O_RDONLY)
    try:
        while os.read(fd, block):
            pass
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def run(
    path: Path,
    total: int,
    files: int = 8,
    processes: int = 8,
    block: int = 16 << 20,
    on_phase: Callable[[str], None] | None = None,
) -> StorageResult:
    """Write ``total`` bytes as ``files`` files from ``processes`` processes under ``path``,
    read them back, remove them; the aggregate rates."""
    check_args(path, total, files, processes, block)
    size = total // files
    tag = uuid.uuid4().hex[:8]
    names = [str(path / f".gpuscale-storage-{tag}-{i:05d}") for i in range(files)]
    # fresh interpreters (a fork would copy the caller's threads: a progress display's),
    # all started before the clock does
    ctx = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(max_workers=processes, mp_context=ctx) as pool:
            list(pool.map(time.sleep, [WARMUP_S] * processes))
            if on_phase is not None:
                on_phase("write")
            t0 = time.perf_counter()
            list(pool.map(_write, names, [size] * files, [block] * files))
            write_s = time.perf_counter() - t0
            dropped = all(_drop_cache(n) for n in names)
            if on_phase is not None:
                on_phase("read")
            t0 = time.perf_counter()
            list(pool.map(_read, names, [block] * files))
            read_s = time.perf_counter() - t0
    finally:
        for n in names:
            Path(n).unlink(missing_ok=True)
    moved = size * files
    return StorageResult(
        str(path), moved, files, processes, block, write_s, read_s,
        moved / write_s, moved / read_s, dropped,
    )  # fmt: skip
