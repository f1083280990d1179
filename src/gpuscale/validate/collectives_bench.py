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
from gpuscale.perf.comm import OPS, Fabric, estimate
from gpuscale.perf.plan import MAX_GPUS
from gpuscale.units import GB
from gpuscale.validate.collectives import LARGE_BYTES
from gpuscale.validate.numbers import json_positive
from gpuscale.validate.report import RowResult, signed_error_pct

TORCH_HARNESS = (
    "timed through torch.distributed, not nccl-tests: the small-message time includes Python "
    "dispatch and synchronisation the NCCL model does not cover"
)


def cluster_record(system: str | None, nodes: int | None, cluster: Path | None) -> dict[str, Any]:
    """What the bench writes of the cluster it priced (``bench collectives --json``): the
    catalog system and node count, or the cluster YAML's own mapping (the file then prices
    the same wherever it is moved)."""
    if cluster is not None:
        from gpuscale.spec.files import read_yaml

        return {"cluster_spec": read_yaml(cluster, "--model", "a cluster YAML file")}
    return {"system": system, "nodes": nodes}


def _fabric(rec: Any, path: Path) -> Fabric:
    where = f"{path.name}:cluster"
    if isinstance(rec, dict) and "cluster_spec" in rec:
        from gpuscale.topology.spec import parse_cluster_spec

        spec = rec["cluster_spec"]
        if not isinstance(spec, dict):
            raise InputError(f"{where}.cluster_spec", spec, "a cluster spec mapping")
        try:
            return parse_cluster_spec(spec).to_fabric()
        except InputError as exc:  # named as the spec's key inside this file
            raise InputError(f"{where}.cluster_spec.{exc.field}", exc.value, exc.valid) from None
    if isinstance(rec, dict) and "system" in rec:
        system = get_system(str(rec["system"]), field=f"{where}.system")
        nodes = rec.get("nodes")
        top = MAX_GPUS // system.gpus_per_node
        if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= top:
            raise InputError(f"{where}.nodes", nodes, f"a node count from 1 to {top:,}")
        return Fabric.from_system(system, total_gpus=nodes * system.gpus_per_node)
    raise InputError(
        "--runs",
        str(path),
        "a file `gpuscale bench collectives` wrote with --system NAME --nodes N or --model "
        "CLUSTER.yaml (it must say the cluster it ran on)",
    )


def _sweep(d: Any, path: Path) -> tuple[dict[str, Any], str, int, list[dict[str, Any]]]:
    """The measured sweep of a bench file, checked: its op, ranks and rows."""
    measured = d.get("measured") if isinstance(d, dict) else None
    if not isinstance(measured, dict):
        raise InputError(
            "--runs",
            str(path),
            "the JSON `gpuscale bench collectives --json` wrote, or `torchrun -m "
            "gpuscale.bench.collectives` with --system NAME --nodes N or --model CLUSTER.yaml "
            "(without them its JSON says no cluster to price)",
        )
    where = f"{path.name}:measured"
    op = measured.get("op")
    if op not in OPS:
        raise InputError(f"{where}.op", op, f"one of {', '.join(OPS)}")
    n = measured.get("ranks")
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise InputError(f"{where}.ranks", n, f"a whole number of ranks, at least 2 for {op}")
    rows = measured.get("rows")
    if not isinstance(rows, list) or not rows or not all(isinstance(x, dict) for x in rows):
        raise InputError(f"{where}.rows", rows, "a non-empty list of the sweep's rows")
    backend = measured.get("backend")
    if backend not in ("nccl", "gloo"):
        raise InputError(f"{where}.backend", backend, "nccl or gloo, as the bench records it")
    return measured, str(op), n, rows


def bench_rows(path: Path, cal: Calibration) -> list[RowResult]:
    """One row per measured size of the bench's JSON at ``path``."""
    try:
        d = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError("--runs", str(path), f"a JSON file ({exc})") from None
    measured, op, n, sweep = _sweep(d, path)
    fabric = _fabric(d.get("cluster"), path)
    if n > fabric.total_gpus:
        raise InputError(
            f"{path.name}:measured.ranks", n, f"at most the cluster's {fabric.total_gpus} GPUs"
        )
    src = f"gpuscale bench collectives ({measured['backend']}, {path.name})"
    out: list[RowResult] = []
    for i, x in enumerate(sweep):
        where = f"{path.name}:measured.rows[{i}]"
        size = json_positive(x, "size_bytes", where)
        if not size.is_integer():
            raise InputError(f"{where}:size_bytes", x.get("size_bytes"), "a whole byte count")
        rid = f"{op}-{n}-{int(size)}"
        if measured["backend"] == "gloo":
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
            meas, pred = json_positive(x, "oop_busbw", where), float(est.busbw_Bps) / GB
            metric, status, reason = "busbw_GBps", "scored", ""
        else:
            meas, pred = json_positive(x, "oop_time_us", where), float(est.time_s) * 1e6
            metric, status, reason = "time_us", "reported", TORCH_HARNESS
        out.append(
            RowResult(
                rid, pred, meas, signed_error_pct(pred, meas), status, reason,
                f"{metric} | {src}", metric, detail,
            )
        )  # fmt: skip
    return out
