"""Storage as a training job uses it: checkpoint shards written, then read back.

``gpuscale bench storage --path DIR`` writes ``--files`` files of ``--size / --files`` bytes
each (``--size`` rounded down to a whole number of bytes a file) from ``--processes``
processes at once, ``--block`` bytes a ``write`` call, each file ``fsync``-ed before its
writer reports (a checkpoint is saved when it is on storage, not in the page cache), then
reads them back in the same way. Every writer process is started, with its data made,
before the clock does; a phase's time runs from the first file's start to the last file's
end, as the processes' own clocks give them (one monotonic clock on a host), so that the
rate is bytes over the time the storage was busy. Files beyond a multiple of
``--processes`` are written by fewer processes at the end, as a job's uneven shards are.
Before the reads each file's cached pages are dropped (``posix_fadvise(DONTNEED)``, Linux),
so the reads come from the storage; on network file systems the hint is advisory, and a read
rate far above the write rate says it was ignored. The rates are one node's: a job's
checkpoint writes from many nodes add up until the storage system's own limit, which one
node cannot show.

The figures feed ``gpuscale train estimate --storage-write-bw ... --storage-read-bw ...``.
Torch-free: it runs on any host. The writers are fresh interpreters (``spawn``): a script
calling :func:`run` needs the usual ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpuscale.errors import InputError
from gpuscale.paths import path_kind

MAX_PROCESSES = 256
"""Most writer processes one host runs (a mistyped count would fork thousands)."""
HEADROOM = 1.1
"""Free space the benchmark needs over its bytes (file system metadata, other writers)."""
READY_TIMEOUT_S = 120.0
"""How long the writers may take to start, all of them, before the run gives up."""
PREFIX = ".gpuscale-storage-"
"""The benchmark's files' names begin so (to find any a killed run left behind)."""

_buf: bytes = b""
_rbuf: bytearray = bytearray()
_ready: Any = None


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


def _available_memory() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_args(path: Path, total: int, files: int, processes: int, block: int) -> None:
    """Every argument checked before any byte is written."""
    kind = path_kind(path, "--path")
    if kind != "dir":
        raise InputError("--path", str(path), "an existing directory on the storage to measure")
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError("--path", str(path), "a directory this user can write in")
    if not 1 <= files <= 100_000:
        raise InputError("--files", files, "a file count from 1 to 100,000")
    if not 1 <= processes <= min(files, MAX_PROCESSES):
        top = min(files, MAX_PROCESSES)
        raise InputError("--processes", processes, f"from 1 to {top} (the files, at most 256)")
    if block < 4096 or block > 1 << 30:
        raise InputError("--block", block, "a write size from 4K to 1G")
    mem = _available_memory()
    if mem is not None and 2 * block * processes > mem / 2:
        raise InputError(
            "--block", block, f"at most {mem // (4 * processes):,} bytes with {processes} "
            "processes (each holds a write and a read buffer of it; half the free memory)",
        )  # fmt: skip
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


def _init(ready: Any, block: int) -> None:
    """A writer process: its buffers made before any timing; interrupts left to the parent
    (which stops the run and removes the files)."""
    global _buf, _rbuf, _ready
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _buf = os.urandom(block)  # incompressible, as checkpoint tensors are
    _rbuf = bytearray(block)
    _ready = ready


def _wait_ready() -> None:
    """One per writer: returns when every writer has started."""
    _ready.wait(READY_TIMEOUT_S)


def _write(name: str, size: int) -> tuple[float, float]:
    """Write ``size`` bytes to ``name`` in block-sized calls and fsync it: its start and end
    on the host's monotonic clock."""
    t0 = time.monotonic()
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view, left = memoryview(_buf), size
        while left > 0:
            left -= os.write(fd, view[: min(left, len(view))])
        os.fsync(fd)
    finally:
        os.close(fd)
    return t0, time.monotonic()


def _read(name: str) -> tuple[float, float]:
    """Read ``name`` through into the block-sized buffer: its start and end."""
    t0 = time.monotonic()
    with open(name, "rb", buffering=0) as f:
        while f.readinto(_rbuf):
            pass
    return t0, time.monotonic()


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


def _span(times: list[tuple[float, float]]) -> float:
    return max(t[1] for t in times) - min(t[0] for t in times)


@contextmanager
def _sigterm_exits() -> Iterator[None]:
    """A termination signal (a scheduler's time limit) unwinds as an exit, so the files
    are removed; the previous handler is restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _remove(names: list[str]) -> None:
    for n in names:  # each its own: the others still go (a leftover's name starts with PREFIX)
        with suppress(OSError):
            Path(n).unlink(missing_ok=True)


def run(
    path: Path,
    total: int,
    files: int = 8,
    processes: int = 8,
    block: int = 16 << 20,
    on_phase: Callable[[str], None] | None = None,
) -> StorageResult:
    """Write ``total`` bytes as ``files`` files from ``processes`` processes under ``path``,
    read them back, remove them; the aggregate rates. A storage error (full, read-only,
    failing) is an :class:`InputError` naming ``--path``."""
    check_args(path, total, files, processes, block)
    size = total // files
    names = [str(path / f"{PREFIX}{uuid.uuid4().hex[:8]}-{i:05d}") for i in range(files)]
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Barrier(processes)
    pool = ProcessPoolExecutor(processes, ctx, initializer=_init, initargs=(ready, block))
    try:
        with _sigterm_exits():
            # one waiting task per writer: each is started, its data made, when all return
            waits = [pool.submit(_wait_ready) for _ in range(processes)]
            for fut in waits:
                fut.result(timeout=READY_TIMEOUT_S + 10)
            if on_phase is not None:
                on_phase("write")
            write_s = _span(list(pool.map(_write, names, [size] * files)))
            dropped = all(_drop_cache(n) for n in names)
            if on_phase is not None:
                on_phase("read")
            read_s = _span(list(pool.map(_read, names)))
    except (threading.BrokenBarrierError, TimeoutError):
        raise InputError(
            "--processes", processes, f"as many processes as this host starts in "
            f"{READY_TIMEOUT_S:g} s",
        ) from None  # fmt: skip
    except BrokenProcessPool:
        # a worker killed (the kernel's out-of-memory killer, a signal): not the storage's
        raise InputError(
            "--processes", processes, "writers this host keeps running: one ended abruptly "
            "(out of memory? fewer --processes or a smaller --block)",
        ) from None  # fmt: skip
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise InputError(
            "--path", str(path), f"a directory that takes {total:,} bytes of writes and reads "
            f"({why})",
        ) from None  # fmt: skip
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        _remove(names)
    moved = size * files
    return StorageResult(
        str(path), moved, files, processes, block, write_s, read_s,
        moved / write_s, moved / read_s, dropped,
    )  # fmt: skip
