"""`gpuscale validate collectives`: predict every published collective benchmark row.

Each row's GPU, node count, GPUs per node, scale-up description and NICs become a
:class:`~gpuscale.perf.comm.Fabric` (the GPU's catalog system supplies what the row does
not say). Rows with messages of at least 64 MiB are scored on busbw (metric
``busbw_GBps``); smaller ones on time per operation (``time_us``), taken from the row or,
where only busbw is given, from time = size x factor / busbw. A row whose ``algorithm``
names one (NCCL_ALGO forced) is predicted with that algorithm. The ``group`` of a row is
``<metric> | <source repository>`` so the by-source table shows both scores apart.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from gpuscale.calibrate import Calibration
from gpuscale.catalog import GPU, get_gpu, system_for_gpu
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric, busbw_factor, estimate
from gpuscale.perf.comm.nccl import NET_OVERHEAD_S, nvls_efficiency
from gpuscale.units import GB
from gpuscale.validate.report import (
    RowResult,
    SkipRow,
    ValidationReport,
    count,
    num,
    read_rows,
    signed_error_pct,
)

REQUIRED = (
    "id",
    "source",
    "system",
    "gpu",
    "num_nodes",
    "gpus_per_node",
    "intra_node",
    "inter_node",
    "collective",
    "algorithm",
    "message_bytes",
    "algbw_gbps",
    "busbw_gbps",
    "time_us",
)
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

_OPS = {
    "all_reduce": "all_reduce",
    "allreduce": "all_reduce",
    "all_gather": "all_gather",
    "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "all_to_all": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "send_recv",
    "send_recv": "send_recv",
}
_ALGOS = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvlstree": "nvls_tree", "pat": "pat"}


SkipRowError = SkipRow
"""A row gpuscale cannot model yet; the message is the reason."""


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


@dataclass(frozen=True)
class RowFabric:
    fabric: Fabric
    nics_from: str
    """'row' when the NICs come from the row's text, else the catalog system used."""


def _gpu(name: str) -> GPU:
    try:
        return get_gpu(name)
    except InputError:
        pass
    bare = re.sub(r"\s*\(.*?\)\s*", " ", name).strip()
    try:
        return get_gpu(bare)
    except InputError:
        raise SkipRowError(f"GPU {name!r} not in the catalog") from None


_RATE = r"(\d+(?:\.\d+)?)\s*(Tb/s|Tbps|Gb/s|Gbps|Gbit/s|GBps|GB/s)"


def _bps(value: str, unit: str) -> float:
    v = float(value)
    return {"Tb/s": v * 1e12 / 8, "Tbps": v * 1e12 / 8, "GBps": v * 1e9, "GB/s": v * 1e9}.get(
        unit, v * 1e9 / 8
    )


def parse_nics(text: str) -> tuple[float, int] | None:
    """(node scale-out bytes/s, NIC count) from a row's ``inter_node`` text, or None.

    Understands '8 x 400 Gbps', '8 x 2 x 400 Gb/s = 6.4 Tb/s', '8 x 50 GBps', '3200 Gbps
    EFAv2 (32 EFA devices)', '400 Gbps ... per node'. Text that says the figure is not
    stated, or gives no rate, returns None (the catalog system's NICs are used).
    """
    if "not stated" in text:
        return None
    prod = re.search(r"(\d+)\s*x\s*(?:(\d+)\s*x\s*)?" + _RATE, text)
    if prod:
        nics, ports = int(prod.group(1)), int(prod.group(2) or 1)
        return nics * ports * _bps(prod.group(3), prod.group(4)), nics
    one = re.search(_RATE, text)
    if one:
        devices = re.search(r"(\d+)\s+\w*\s*devices", text)
        return _bps(one.group(1), one.group(2)), int(devices.group(1)) if devices else 0
    return None


HOST_CPUS: tuple[tuple[str, str], ...] = (
    (r"\bepyc\b|\bgenoa\b|\bmilan\b|\brome\b", "amd"),
    (r"\bxeon\b|(sapphire|emerald|granite) rapids|cascade lake", "intel"),
    (r"\bgrace\b", "arm"),
    # AWS instances by their published hosts: p4d/p4de Xeon 8275CL, p5/p5e EPYC 7R13,
    # p5en Xeon Sapphire Rapids, p6 Xeon Emerald Rapids
    (r"\bp5en\b", "intel"),
    (r"\bp5e?\b", "amd"),
    (r"\bp4de?\b|\bp6\b", "intel"),
)
"""Host CPU names and instance types a row's system text may give, and the CPU vendor, the
first match winning."""


def row_fabric(row: dict[str, str], where: str) -> RowFabric:
    gpu = _gpu(row["gpu"])
    system = system_for_gpu(gpu)
    gpn = count(row, "gpus_per_node", where)
    if gpn is None:
        raise SkipRowError("GPUs per node not stated")
    intra = row["intra_node"]
    if "pcie only" in intra.lower() or gpu.nvlink_gb_per_s <= 0:
        domain, up_Bps = 1, system.scaleup_bw_Bps
    elif "mnnvl" in intra.lower() or "nvl72" in intra.lower():
        domain, up_Bps = system.nvlink_domain_gpus, gpu.nvlink_bw_Bps
    else:  # an NVSwitch board: the node is the domain
        domain, up_Bps = gpn, gpu.nvlink_bw_Bps
    inter = row["inter_node"]
    parsed = parse_nics(inter)
    if parsed is not None:
        node_Bps, nics = parsed
        nics_from = "row"
    else:
        node_Bps = system.nic_bw_Bps_per_gpu * gpn
        nics = max(1, round(system.nics_per_node * gpn / system.gpus_per_node))
        nics_from = system.key
    low = (inter + " " + row["system"]).lower()
    transport = "efa" if ("efa" in low or "aws" in low) else "roce" if "roce" in low else "ib"
    # the host CPUs, where the row names them, else the GPU's reference system's
    named = [v for pat, v in HOST_CPUS if re.search(pat, low)]
    host = named[0] if named else system.host_cpu
    fabric = Fabric(
        domain_gpus=domain,
        gpus_per_node=gpn,
        scaleup_bw_Bps=up_Bps,
        nic_bw_Bps_per_gpu=node_Bps / gpn,
        nvls=system.nvls and domain > 1,
        nics_per_node=nics,
        nvls_efficiency=nvls_efficiency(gpu.key),
        transport=transport,
        net_overhead_s=NET_OVERHEAD_S[host],
    )
    return RowFabric(fabric, nics_from)


def _source(url: str) -> str:
    m = re.search(r"github\.com/([^/]+/[^/]+)", url)
    return m.group(1) if m else re.sub(r"^https?://", "", url).split("/")[0]


def predict_row(row: dict[str, str], where: str, cal: Calibration) -> RowResult:
    rid, src = row["id"], _source(row["source"])
    op = _OPS.get(row["collective"].lower().replace("-", "_"))
    try:
        if op is None:
            raise SkipRowError(f"collective {row['collective']!r} not modelled")
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
        algo_txt = row["algorithm"].lower()
        algo = _ALGOS.get(algo_txt) if algo_txt else None
        if algo_txt and algo is None:
            raise SkipRowError(f"algorithm {row['algorithm']!r} not modelled")
        size = _figure(row, "message_bytes", where)
        if size is not None:
            _positive(row, "message_bytes", size, "a message size")
        busbw = _figure(row, "busbw_gbps", where)
        algbw = _figure(row, "algbw_gbps", where)
        time_us = _figure(row, "time_us", where)
        factor = float(busbw_factor(op, n))
        busbw_col = "busbw_gbps"
        if busbw is None and algbw is not None:
            busbw, busbw_col = algbw * factor, "algbw_gbps"
        note = ""
        if size is None:
            if busbw is None:
                raise SkipRowError("neither message size nor busbw stated")
            size, note = float(PLATEAU_BYTES), "size not stated: predicted at the 16 GiB plateau"
        if size >= LARGE_BYTES or note:
            metric = "busbw_GBps"
            if busbw is None:
                raise SkipRowError("large-message row without busbw")
            measured = _positive(row, busbw_col, busbw)
        else:
            metric = "time_us"
            if time_us is None:
                if busbw is None:
                    raise SkipRowError("small-message row without time or busbw")
                if busbw <= 0 or PRINT_RESOLUTION_GBPS / busbw > MAX_ROUNDING:
                    raise SkipRowError(
                        f"{busbw_col}={row[busbw_col]!r} GB/s is at the print resolution: "
                        "the time derived from it is uncertain by more than +-10 %"
                    )
                time_us = size * factor / (busbw * GB) * 1e6
                note = "time derived from busbw"
            measured = _positive(row, "time_us", time_us)
        est = estimate(op, size, n, rf.fabric, cal, algorithm=algo)
        pred = float(est.busbw_Bps) / GB if metric == "busbw_GBps" else float(est.time_s) * 1e6
    except SkipRowError as why:
        return RowResult(rid, None, None, None, "skipped", str(why), group=src)
    except InputError as exc:
        if exc.field.startswith(f"{where}:"):
            raise  # a malformed cell: one line naming file, line and column
        return RowResult(rid, None, None, None, "skipped", f"unsupported: {exc}", group=src)
    detail: dict[str, object] = {
        "op": op,
        "ranks": int(n),
        "size_bytes": size,
        "algorithm": str(est.algorithm),
        "protocol": str(est.protocol),
        "nics_from": rf.nics_from,
        "transport": rf.fabric.transport,
    }
    if note:
        detail["note"] = note
    status, reason = "scored", ""
    if metric == "time_us" and FRAMEWORK_HARNESS.search(row.get("notes", "")):
        status = "reported"
        reason = (
            "timed through torch.distributed, not nccl-tests: the small-message time "
            "includes Python dispatch and synchronisation the NCCL model does not cover"
        )
    return RowResult(
        rid,
        pred,
        measured,
        signed_error_pct(pred, measured),
        status,
        reason,
        group=f"{metric} | {src}",
        metric=metric,
        detail=detail,
    )


def validate_collectives(path: Path, cal: Calibration) -> ValidationReport:
    rows = [predict_row(r, f"{path.name}:line {ln}", cal) for ln, r in read_rows(path, REQUIRED)]
    return ValidationReport("collectives", rows)


def scores(report: ValidationReport) -> dict[str, dict[str, float | None]]:
    """The two headline scores apart: busbw MAPE on large rows, time MAPE on small ones."""
    out: dict[str, dict[str, float | None]] = {}
    for metric in ("busbw_GBps", "time_us"):
        rows = [r for r in report.scored if r.metric == metric]
        out[metric] = {"n": float(len(rows)), **report.stats(rows)}
    return out
