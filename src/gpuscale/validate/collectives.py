"""`gpuscale validate collectives`: predict every published collective benchmark row.

Each row's GPU, node count, GPUs per node, scale-up description and NICs become a
:class:`~gpuscale.perf.comm.Fabric` (the GPU's catalog system supplies what the row does
not say). Rows with messages of at least 64 MiB are scored on busbw (metric
``busbw_GBps``); smaller ones on time per operation (``time_us``), taken from the row or,
where only busbw is given, from time = size x factor / busbw. A row whose ``algorithm``
names one (NCCL_ALGO forced) is predicted with that algorithm. The ``group`` of a row is
``<metric> | <source repository>`` so the by-source table shows both scores apart.

A row whose figures cannot be what they say is skipped with the reason: a busbw/algbw ratio
that gives another rank count than num_nodes x gpus_per_node, a busbw beyond what the GPU's
links carry (Gbit/s for GB/s) or a time under a microsecond (ms for us).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from gpuscale.calibrate import Calibration
from gpuscale.errors import InputError
from gpuscale.paths import require_file
from gpuscale.perf.comm import CommEstimate, Fabric, busbw_factor, estimate
from gpuscale.units import GB
from gpuscale.validate.collectives_fabric import RowFabric, row_fabric
from gpuscale.validate.numbers import count, num
from gpuscale.validate.report import (
    RowResult,
    SkipRow,
    ValidationReport,
    read_rows,
    signed_error_pct,
    unread_columns,
)

REQUIRED = (
    "id",
    "source",
    "gpu",
    "num_nodes",
    "gpus_per_node",
    "collective",
    "message_bytes",
    "busbw_gbps",
)
"""Columns a runs file must have."""
OPTIONAL = ("system", "intra_node", "inter_node", "algorithm", "algbw_gbps", "time_us", "notes")
"""The schema's other columns: read as empty (not stated) when the file has none."""
LARGE_BYTES = 64 * 2**20
"""Messages at or above this are scored on busbw; below it on time."""
PLATEAU_BYTES = 16 * 2**30
"""Where a row gives busbw without a size, it is the plateau: predicted at 16 GiB."""
PRINT_RESOLUTION_GBPS = 0.005
"""nccl-tests prints GB/s with two decimals: half a unit of the last digit."""
MAX_ROUNDING = 0.10
"""A time derived from a busbw whose rounding alone spans more than +-10 % is not scored."""

FRAMEWORK_HARNESS = re.compile(r"all_reduce_bench|torch\.distributed", re.IGNORECASE)
"""Notes naming a framework-level harness: its small-message times are reported, not scored
(comm-anchors.md section 8: all_reduce_bench.py rows are not nccl-tests)."""

SkipRowError = SkipRow
"""A row gpuscale cannot model yet; the message is the reason."""

MIN_TIME_US = 1.0
"""No NCCL collective completes in under a microsecond (its kernel launch alone takes a
few): a smaller time_us is in another unit (ms)."""
MAX_OVER_PEAK = 1.1
"""A busbw above 1.1 x what a GPU's links can carry is in another unit (Gbit/s)."""
SIZE_PREFIX = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
"""Message size prefixes, binary: nccl-tests reads -b/-e 8G as 8 GiB (K = 1024), and a size
column's "GB", "MB" or "KB" is read the same way (16 GB = 16 GiB), as tables quote the sizes
nccl-tests swept; plain integers are bytes."""
MAX_MESSAGE_BYTES = 2**50
"""Largest message a row may state (1 PiB): a collective's buffers sit in one GPU's memory,
a few hundred GB at most, and nccl-tests sweeps end at 8-16 GiB; a larger size is a typo
or a unit slip, not a measurement."""
_SIZE = re.compile(r"(.*\d)\s*([kmgt]?)(i?b|bytes?)?", re.IGNORECASE)

# spellings without case, spaces, '-', '_' or '/', nor nccl-tests' '_perf' and '(in-place)'
_OPS = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "all2all": "all_to_all",
    "broadcast": "broadcast",
    "bcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "send_recv",
    "p2p": "send_recv",
}
_ALGOS = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvlstree": "nvls_tree", "pat": "pat"}
NCCL_CHOOSES = ("", "auto", "default")
"""Algorithm cells that force nothing: NCCL's tuner picks, as when the cell is empty."""
RANKS_FACTOR = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}
"""busbw/algbw = RANKS_FACTOR x (n - 1) / n (nccl-tests PERFORMANCE.md); other ops: 1."""


def read_op(text: str) -> str | None:
    """The collective a row's cell names ('all reduce', 'AllReduce', 'all_reduce_perf',
    'send/recv', 'all_reduce (in-place)'), or None."""
    return _OPS.get(re.sub(r"\(.*?\)|^nccl|_perf\b|[\s/_-]", "", text.lower()))


def read_algorithm(text: str) -> str | None:
    """The NCCL algorithm a row forces ('NVLS_Tree', 'NCCL_ALGO=Ring', 'Ring (forced)'), or
    None where NCCL chooses ('', 'auto', 'NCCL default'); an unknown one skips the row."""
    key = re.sub(r"\(.*?\)|^nccl(?:_algo)?\s*=?|[\s_-]", "", text.lower())
    if key in NCCL_CHOOSES:
        return None
    if key not in _ALGOS:
        valid = ", ".join(sorted(set(_ALGOS.values())))
        raise SkipRowError(f"algorithm {text!r} not modelled (modelled: {valid}, or auto)")
    return _ALGOS[key]


def _figure(row: dict[str, str], col: str, where: str) -> float | None:
    """A measured figure or message size: None when empty; negative or non-finite skips the
    row naming the column (0 is kept: nccl-tests prints 0.00 GB/s for tiny messages)."""
    v = num(row, col, where)
    if v is not None and not (math.isfinite(v) and v >= 0):
        raise SkipRowError(f"{col}={row[col]!r}: must be a finite positive number")
    return v


def _positive(row: dict[str, str], col: str, v: float, what: str = "a measured value") -> float:
    """A figure the row is scored on or derived from (or its size): it must be above 0."""
    if not v > 0:
        raise SkipRowError(f"{col}={row[col]!r}: {what} must be a finite positive number")
    return v


def message_bytes(row: dict[str, str], where: str) -> float | None:
    """The row's message size in bytes: '17179869184', '17,179,869,184', '16G', '16 GiB',
    '16 GB', '16384M', '8B' (see SIZE_PREFIX); None when empty. Text that is no size is a
    malformed cell (an InputError naming file, line and column); a negative size skips."""
    col, text = "message_bytes", row["message_bytes"]
    m = _SIZE.fullmatch(text)
    number, scale = (m.group(1), SIZE_PREFIX[m.group(2).lower()]) if m else (text, 1)
    try:
        v = num({col: number}, col, where)
    except InputError:
        raise InputError(
            f"{where}:{col}", text, "a size in bytes (8192, 8,192, 16G, 1 GiB) or an empty cell"
        ) from None
    if v is None:
        return None
    if v < 0:
        raise SkipRowError(f"{col}={text!r}: must be a finite positive number")
    size = v * scale
    if not (size <= MAX_MESSAGE_BYTES and size.is_integer()):  # False for inf and nan
        raise SkipRowError(
            f"{col}={text!r}: must be a whole number of bytes up to {MAX_MESSAGE_BYTES:,} (1 PiB)"
        )
    return size


def _source(url: str) -> str:
    m = re.search(r"github\.com/([^/]+/[^/]+)", url)
    return m.group(1) if m else re.sub(r"^https?://", "", url).split("/")[0]


def _half_unit(cell: str) -> float:
    """Half a unit of the last digit a figure is printed with: '41.78' -> 0.005."""
    decimals = re.search(r"\.(\d+)", cell)
    return 0.5 * 10.0 ** -len(decimals.group(1) if decimals else "")


def check_ranks(row: dict[str, str], op: str, n: int, busbw: float, algbw: float) -> None:
    """Where a row gives both busbw and algbw, their ratio fixes its rank count (all_reduce
    2(n-1)/n, all_gather, reduce_scatter and all_to_all (n-1)/n, others 1): a ratio that
    differs from n's by more than the printed digits allow skips the row."""
    if not (busbw > 0 and algbw > 0):
        return  # not both stated, or printed 0.00 for a tiny message
    ratio, factor = busbw / algbw, float(busbw_factor(op, n))
    rounding = ratio * (
        _half_unit(row["busbw_gbps"]) / busbw + _half_unit(row["algbw_gbps"]) / algbw
    )
    if abs(ratio - factor) <= rounding + 1e-9:
        return
    per = RANKS_FACTOR.get(op)
    # per (n - 1) / n = ratio: n = per / (per - ratio), 2 ranks or more
    means = f" means {per / (per - ratio):.0f} ranks" if per and per / 2 <= ratio < per else ""
    raise SkipRowError(
        f"busbw_gbps/algbw_gbps = {ratio:.4f}{means} for {op}, not the {factor:.4f} of "
        f"num_nodes x gpus_per_node = {n}: the ranks or a figure are not as stated"
    )


def check_peak(row: dict[str, str], col: str, busbw: float, op: str, fabric: Fabric) -> None:
    """A busbw above MAX_OVER_PEAK x what a GPU here can move (its scale-up and NIC rates;
    twice that for an all_reduce the NVLink switches reduce) is in another unit."""
    peak = (fabric.scaleup_bw_Bps + fabric.nic_bw_Bps_per_gpu) / GB
    if op == "all_reduce" and fabric.nvls:
        peak *= 2.0  # NVLS: each GPU sends its data once, the switch adds and multicasts
    if busbw > MAX_OVER_PEAK * peak:
        raise SkipRowError(
            f"{col}={row[col]!r}: a busbw of {busbw:.4g} GB/s is over {MAX_OVER_PEAK:g} x the "
            f"{peak:.0f} GB/s a GPU here can move: check the unit (Gbit/s, not GB/s?) or "
            "the row's intra_node and inter_node"
        )


@dataclass(frozen=True)
class Ranks:
    """The collective a row benchmarks, over how many ranks, on what fabric."""

    op: str
    n: int
    """num_nodes x gpus_per_node."""
    rf: RowFabric
    algo: str | None
    """The NCCL algorithm the row forces; None where NCCL chooses."""


def _ranks(row: dict[str, str], op: str | None, where: str) -> Ranks:
    """The row's collective, ranks, fabric and algorithm, in that order: a collective not
    modelled, no node count or fewer than 2 ranks skips the row."""
    if op is None:
        valid = ", ".join(sorted(set(_OPS.values())))
        raise SkipRowError(f"collective {row['collective']!r} not modelled ({valid})")
    nodes = count(row, "num_nodes", where)
    if nodes is None:
        raise SkipRowError("node count not stated")
    rf = row_fabric(row, where)
    n = nodes * rf.fabric.gpus_per_node
    if n < 2:
        raise SkipRowError(
            f"num_nodes={row['num_nodes']!r} x gpus_per_node={row['gpus_per_node']!r} = "
            f"{n} rank: {op} needs at least 2"
        )
    algo = read_algorithm(row["algorithm"])
    return Ranks(op, n, rf, algo)


@dataclass(frozen=True)
class Figures:
    """What a row states of its message and measurements, each checked."""

    size: float | None
    """Message bytes; None when not stated."""
    busbw: float | None
    """GB/s: the row's busbw, or where it gives only algbw, algbw x the busbw factor."""
    busbw_col: str
    """The cell busbw comes from (``busbw_gbps`` or ``algbw_gbps``)."""
    time_us: float | None
    factor: float
    """busbw / algbw for the collective over its ranks."""


def _figures(row: dict[str, str], where: str, r: Ranks) -> Figures:
    """The row's message size (above 0 when stated) and figures (none negative), the
    busbw/algbw ratio checked against its ranks, and its busbw against the GPU's links
    (:func:`check_ranks`, :func:`check_peak`)."""
    size = message_bytes(row, where)
    if size is not None:
        _positive(row, "message_bytes", size, "a message size")
    busbw = _figure(row, "busbw_gbps", where)
    algbw = _figure(row, "algbw_gbps", where)
    time_us = _figure(row, "time_us", where)
    if busbw is not None and algbw is not None:
        check_ranks(row, r.op, r.n, busbw, algbw)
    factor = float(busbw_factor(r.op, r.n))
    busbw_col = "busbw_gbps"
    if busbw is None and algbw is not None:
        busbw, busbw_col = algbw * factor, "algbw_gbps"
    if busbw is not None:
        check_peak(row, busbw_col, busbw, r.op, r.rf.fabric)
    return Figures(size, busbw, busbw_col, time_us, factor)


@dataclass(frozen=True)
class Compared:
    """The figure a row is scored on, at the message size it is predicted at."""

    metric: str
    """``busbw_GBps`` or ``time_us``."""
    measured: float
    size: float
    note: str
    """How the size or the measured time was arrived at; "" when the row states both."""


def _small_message_time(row: dict[str, str], f: Figures, size: float) -> tuple[float, str]:
    """A small message's time in microseconds and how it was had: the row's, or where it
    gives none, size x factor / busbw, unless busbw's printed digits leave that time
    uncertain by more than MAX_ROUNDING. A time under MIN_TIME_US is in another unit."""
    if f.time_us is None:
        if f.busbw is None:
            raise SkipRowError("small-message row without time or busbw")
        if f.busbw <= 0 or PRINT_RESOLUTION_GBPS / f.busbw > MAX_ROUNDING:
            raise SkipRowError(
                f"{f.busbw_col}={row[f.busbw_col]!r} GB/s is at the print resolution: "
                "the time derived from it is uncertain by more than +-10 %"
            )
        return size * f.factor / (f.busbw * GB) * 1e6, "time derived from busbw"
    if 0 < f.time_us < MIN_TIME_US:
        raise SkipRowError(
            f"time_us={row['time_us']!r} is under {MIN_TIME_US:g} us, faster than any "
            "NCCL collective: check the unit (ms, not us?)"
        )
    return f.time_us, ""


def _compared(row: dict[str, str], f: Figures) -> Compared:
    """What a row is scored on: busbw for a message of LARGE_BYTES or more, or one of no
    stated size (predicted at the PLATEAU_BYTES plateau); time for a smaller one. The
    figure scored must be above 0."""
    note = ""
    size = f.size
    if size is None:
        if f.busbw is None:
            raise SkipRowError("neither message size nor busbw stated")
        size, note = float(PLATEAU_BYTES), "size not stated: predicted at the 16 GiB plateau"
    if size >= LARGE_BYTES or note:
        if f.busbw is None:
            raise SkipRowError("large-message row without busbw")
        return Compared("busbw_GBps", _positive(row, f.busbw_col, f.busbw), size, note)
    time_us, note = _small_message_time(row, f, size)
    return Compared("time_us", _positive(row, "time_us", time_us), size, note)


def _detail(r: Ranks, c: Compared, est: CommEstimate) -> dict[str, object]:
    """What a result shows of its prediction: collective, ranks, size, NCCL's algorithm and
    protocol, where the NICs came from, the transport, and how a figure was arrived at."""
    detail: dict[str, object] = {
        "op": r.op,
        "ranks": int(r.n),
        "size_bytes": c.size,
        "algorithm": str(est.algorithm),
        "protocol": str(est.protocol),
        "nics_from": r.rf.nics_from,
        "transport": r.rf.fabric.transport,
    }
    if c.note:
        detail["note"] = c.note
    return detail


def _harness_reason(row: dict[str, str], metric: str) -> str:
    """Why a row is reported and not scored, or "": a small-message time measured through a
    framework harness (FRAMEWORK_HARNESS) includes overheads NCCL's model leaves out."""
    if metric == "time_us" and FRAMEWORK_HARNESS.search(row.get("notes", "")):
        return (
            "timed through torch.distributed, not nccl-tests: the small-message time "
            "includes Python dispatch and synchronisation the NCCL model does not cover"
        )
    return ""


def predict_row(row: dict[str, str], where: str, cal: Calibration) -> RowResult:
    """One benchmark row's result: its busbw (GB/s) or time (us) predicted on its fabric
    with the algorithm it forces, or the reason it is skipped. A malformed cell is an
    InputError naming file, line and column; any other the model raises skips the row."""
    row = {**dict.fromkeys(OPTIONAL, ""), **row}
    rid, src = row["id"], _source(row["source"])
    op = read_op(row["collective"])
    try:
        r = _ranks(row, op, where)
        c = _compared(row, _figures(row, where, r))
        est = estimate(r.op, c.size, r.n, r.rf.fabric, cal, algorithm=r.algo)
        busbw = c.metric == "busbw_GBps"
        pred = float(est.busbw_Bps) / GB if busbw else float(est.time_s) * 1e6
    except SkipRowError as why:
        return RowResult.skip(rid, str(why), group=src)
    except InputError as exc:
        if exc.field.startswith(f"{where}:"):
            raise  # a malformed cell: one line naming file, line and column
        return RowResult.skip(rid, f"unsupported: {exc}", group=src)
    reason = _harness_reason(row, c.metric)
    return RowResult(
        rid,
        pred,
        c.measured,
        signed_error_pct(pred, c.measured),
        "reported" if reason else "scored",
        reason,
        group=f"{c.metric} | {src}",
        metric=c.metric,
        detail=_detail(r, c, est),
    )


def validate_collectives(path: Path, cal: Calibration) -> ValidationReport:
    """The rows of a CSV of published benchmarks, or of the JSON `gpuscale bench
    collectives --json` wrote (``collectives_bench.py``)."""
    if path.suffix.lower() == ".json":
        from gpuscale.validate.collectives_bench import bench_rows

        require_file(path, "--runs", "a CSV of collective benchmarks or a bench JSON file")
        return ValidationReport("collectives", bench_rows(path, cal))
    table = read_rows(path, REQUIRED)
    rows = [predict_row(r, f"{path.name}:line {ln}", cal) for ln, r in table]
    return ValidationReport("collectives", rows, unread_columns(table, (*REQUIRED, *OPTIONAL)))


def scores(report: ValidationReport) -> dict[str, dict[str, float | None]]:
    """The two headline scores apart: busbw MAPE on large rows, time MAPE on small ones."""
    out: dict[str, dict[str, float | None]] = {}
    for metric in ("busbw_GBps", "time_us"):
        rows = [r for r in report.scored if r.metric == metric]
        out[metric] = {"n": float(len(rows)), **report.stats(rows)}
    return out
