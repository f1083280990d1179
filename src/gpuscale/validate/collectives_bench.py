"""What ``gpuscale bench collectives --json`` measured, as collective validation rows.

The bench's JSON holds the measured sweep (nccl-tests' columns, out-of-place) and, when it
was run with ``--system NAME --nodes N`` or ``--model CLUSTER.yaml``, the cluster it ran
on: gpuscale prices each size on that cluster's fabric as ``validate collectives`` prices a
published row (bus bandwidth for messages of 64 MiB and more, time below). The small
messages' times are reported, not scored: torch.distributed's dispatch and synchronisation
are in them, which the NCCL model does not price. A Gloo run (through host memory) is not
a measurement of the fabric the model prices: its rows are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuscale.calibrate import Calibration
from gpuscale.catalog import get_system
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric, estimate
from gpuscale.units import GB
from gpuscale.validate.collectives import LARGE_BYTES
from gpuscale.validate.report import RowResult, signed_error_pct

TORCH_HARNESS = (
    "timed through torch.distributed, not nccl-tests: the small-message time includes Python "
    "dispatch and synchronisation the NCCL model does not cover"
)


def cluster_record(system: str | None, nodes: int | None, cluster: Path | None) -> dict[str, Any]:
    """What the bench writes of the cluster it priced (``bench collectives --json``)."""
    if cluster is not None:
        return {"cluster_file": str(cluster.resolve())}
    return {"system": system, "nodes": nodes}


def _fabric(rec: Any, path: Path) -> Fabric:
    if isinstance(rec, dict) and isinstance(rec.get("cluster_file"), str):
        from gpuscale.topology import load_cluster_spec

        return load_cluster_spec(Path(rec["cluster_file"])).to_fabric()
    if isinstance(rec, dict) and isinstance(rec.get("system"), str):
        system = get_system(rec["system"], field=f"{path.name}:cluster.system")
        nodes = rec.get("nodes")
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
            raise InputError(f"{path.name}:cluster.nodes", nodes, "a node count of at least 1")
        return Fabric.from_system(system, total_gpus=nodes * system.gpus_per_node)
    raise InputError(
        "--runs",
        str(path),
        "a file `gpuscale bench collectives` wrote with --system NAME --nodes N or --model "
        "CLUSTER.yaml (it must say the cluster it ran on)",
    )


def _positive(x: dict[str, Any], key: str, where: str) -> float:
    v = x.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
        raise InputError(f"{where}:{key}", v, "a positive number")
    return float(v)


def bench_rows(path: Path, cal: Calibration) -> list[RowResult]:
    """One row per measured size of the bench's JSON at ``path``."""
    try:
        d = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError("--runs", str(path), f"a JSON file ({exc})") from None
    measured = d.get("measured") if isinstance(d, dict) else None
    if not isinstance(measured, dict) or not isinstance(measured.get("rows"), list):
        raise InputError("--runs", str(path), "the JSON `gpuscale bench collectives --json` wrote")
    fabric = _fabric(d.get("cluster"), path)
    op, n = str(measured.get("op")), int(measured.get("ranks") or 0)
    src = f"gpuscale bench collectives ({measured.get('backend')}, {path.name})"
    out: list[RowResult] = []
    for i, x in enumerate(measured["rows"]):
        where = f"{path.name}:measured.rows[{i}]"
        size = _positive(x, "size_bytes", where)
        rid = f"{op}-{n}-{int(size)}"
        if measured.get("backend") != "nccl":
            why = "measured with Gloo through host memory: the model prices NCCL on the fabric"
            out.append(RowResult.skip(rid, why, group=src))
            continue
        if measured.get("emulated"):
            out.append(RowResult.skip(rid, f"{op} emulated by the bench", group=src))
            continue
        est = estimate(op, size, n, fabric, cal)
        detail: dict[str, object] = {
            "op": op,
            "ranks": n,
            "size_bytes": size,
            "algorithm": str(est.algorithm),
            "protocol": str(est.protocol),
        }
        if size >= LARGE_BYTES:
            meas, pred = _positive(x, "oop_busbw", where), float(est.busbw_Bps) / GB
            metric, status, reason = "busbw_GBps", "scored", ""
        else:
            meas, pred = _positive(x, "oop_time_us", where), float(est.time_s) * 1e6
            metric, status, reason = "time_us", "reported", TORCH_HARNESS
        out.append(
            RowResult(
                rid, pred, meas, signed_error_pct(pred, meas), status, reason,
                f"{metric} | {src}", metric, detail,
            )
        )  # fmt: skip
    return out
