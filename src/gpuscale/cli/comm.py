"""`gpuscale comm estimate`: the collective model's table in nccl-tests' layout."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from gpuscale.bench.sweep import fmt_us
from gpuscale.cli._common import (
    Cal,
    Datatype,
    MaxBytes,
    MinBytes,
    StepFactor,
    emit_json,
    load_calibration,
)
from gpuscale.errors import InputError
from gpuscale.perf.validity import divisors

app = typer.Typer(no_args_is_help=True)


def check_members_per_domain(members: float, gpus: int, fabric: Any) -> int:
    """``--members-per-domain``: an integer from 1 to the scale-up domain's GPUs that
    divides the group, with enough domains in the cluster for the group."""
    domain = int(fabric.scaleup_domain_gpus)
    top = min(domain, gpus)
    if not (math.isfinite(members) and members == int(members) and 1 <= members <= top):
        raise InputError(
            "--members-per-domain",
            members,
            f"an integer from 1 to {top} (the group's {gpus} GPUs in {domain}-GPU domains)",
        )
    k = int(members)
    if gpus % k:
        fits = ", ".join(str(d) for d in divisors(gpus) if d <= top)
        raise InputError("--members-per-domain", k, f"a divisor of the group's {gpus} GPUs: {fits}")
    domains = fabric.total_gpus // domain
    if gpus // k > domains:
        raise InputError(
            "--members-per-domain",
            k,
            f"{gpus} GPUs at {k} per domain need {gpus // k} domains; the cluster has "
            f"{domains} of {domain} GPUs",
        )
    return k


def model_rows(
    op: str,
    gpus: int,
    sizes: list[int],
    fabric: Any,
    cal: Any,
    dtype: str,
    members_per_domain: float | None = None,
) -> list[dict[str, Any]]:
    """One dict per size: nccl-tests columns plus the chosen algorithm and protocol."""
    from gpuscale.bench.sweep import DTYPE_BYTES, NCCL_TYPE, count_for, row_size
    from gpuscale.perf.comm import estimate

    tb = DTYPE_BYTES[dtype]
    counts = [count_for(op, s, gpus, tb) for s in sizes]
    real = np.array([row_size(op, c, gpus, tb) for c in counts], dtype=np.float64)
    est = estimate(op, real, gpus, fabric, cal, members_per_domain=members_per_domain)
    return [
        {
            "size_bytes": int(real[i]),
            "count": counts[i],
            "type": NCCL_TYPE[dtype],
            "time_us": float(est.time_s[i]) * 1e6,
            "algbw_GBps": float(est.algbw_Bps[i]) / 1e9,
            "busbw_GBps": float(est.busbw_Bps[i]) / 1e9,
            "algorithm": str(est.algorithm[i]),
            "protocol": str(est.protocol[i]),
            "latency_us": float(est.latency_s[i]) * 1e6,
            "members_per_domain": float(est.members_per_domain[i]),
            "domains": float(est.domains[i]),
        }
        for i in range(len(sizes))
        if counts[i] >= 1
    ]


@app.command("estimate")
def estimate_cmd(
    op: Annotated[str, typer.Option("--op", "-o", help="all_reduce, all_gather, ...")] = (
        "all_reduce"
    ),
    gpus: Annotated[int, typer.Option("--gpus", "-g", help="GPUs in the group.")] = 8,
    minbytes: MinBytes = "8",
    maxbytes: MaxBytes = "8G",
    factor: StepFactor = 2.0,
    cluster: Annotated[Path | None, typer.Option("--cluster", help="Cluster YAML.")] = None,
    system: Annotated[str | None, typer.Option("--system", help="Catalog system.")] = None,
    nodes: Annotated[int | None, typer.Option("--nodes", help="Nodes with --system.")] = None,
    members_per_domain: Annotated[
        float | None,
        typer.Option(
            "--members-per-domain", help="Group GPUs per NVLink domain (default: packed)."
        ),
    ] = None,
    datatype: Datatype = "float32",
    json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    calibration: Cal = None,
) -> None:
    """Predicted time, algbw and busbw per size (nccl-tests layout) with NCCL's likely choice."""
    from gpuscale.bench.sweep import DTYPE_BYTES, parse_size, size_sweep
    from gpuscale.perf.comm import check_op

    check_op(op)
    if datatype not in DTYPE_BYTES:
        raise InputError("-d/--datatype", datatype, f"one of {', '.join(DTYPE_BYTES)}")
    if gpus < 1:
        raise InputError("--gpus", gpus, "a group of at least 1 GPU")
    if op == "send_recv" and gpus < 2:
        raise InputError("--gpus", gpus, "at least 2 for send_recv (a sender and a receiver)")
    lo, hi = parse_size(minbytes, "-b/--minbytes"), parse_size(maxbytes, "-e/--maxbytes")
    sizes = size_sweep(lo, hi, factor)
    from gpuscale.topology.select import fabric_for

    fabric = fabric_for(cluster, system, nodes)
    if gpus > fabric.total_gpus:
        raise InputError("--gpus", gpus, f"at most the cluster's {fabric.total_gpus} GPUs")
    k = None
    if members_per_domain is not None:
        k = check_members_per_domain(members_per_domain, gpus, fabric)
    rows = model_rows(op, gpus, sizes, fabric, load_calibration(calibration), datatype, k)
    if not rows:
        from gpuscale.bench.sweep import row_size

        tb = DTYPE_BYTES[datatype]
        need = row_size(op, 1, gpus, tb)
        each = " per rank" if need > tb else ""
        raise InputError(
            "-e/--maxbytes",
            maxbytes,
            f"no size from -b {minbytes} up to it holds one {datatype} element{each}: "
            f"{op} on {gpus} GPUs needs at least {need} bytes",
        )
    if json:
        emit_json({"op": op, "gpus": gpus, "rows": rows})
        return
    print(f"# gpuscale comm estimate: {op} on {gpus} GPUs (model, not a measurement)")
    print("#       size         count      type     time   algbw   busbw  algorithm  proto")
    print("#        (B)    (elements)               (us)  (GB/s)  (GB/s)")
    for r in rows:
        print(
            f"{r['size_bytes']:12d}  {r['count']:12d}  {r['type']:>8s}  {fmt_us(r['time_us'])}  "
            f"{r['algbw_GBps']:6.2f}  {r['busbw_GBps']:6.2f}  {r['algorithm']:>9s}  "
            f"{r['protocol']:>6s}"
        )
    avg = sum(r["busbw_GBps"] for r in rows) / max(len(rows), 1)
    print(f"# Avg bus bandwidth    : {avg:g}")
