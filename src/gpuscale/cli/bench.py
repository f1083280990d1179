"""`gpuscale bench collectives`: run the nccl-tests-style benchmark under torchrun.

It launches ``python -m torch.distributed.run --nproc-per-node N -m
gpuscale.bench.collectives ...`` (same flags), and with ``--model cluster.yaml`` (or
``--system NAME --nodes N``) prints each measured row next to the model's prediction.
"""

from __future__ import annotations

import json as jsonlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuscale.bench.sweep import fmt_us
from gpuscale.cli._common import Cal, Datatype, MaxBytes, MinBytes, StepFactor, load_calibration
from gpuscale.errors import InputError
from gpuscale.paths import path_kind

app = typer.Typer(no_args_is_help=True)


def check_output_file(path: Path, field: str) -> None:
    """Refuse, before any work, an output path that could not be written at the end."""
    parent = path.parent
    kind = path_kind(path, field)  # a name too long for the system: an error, not a crash
    if kind == "dir":
        raise InputError(field, str(path), "a file path (it is a directory)")
    up = path_kind(parent, field)
    if up != "dir":
        what = "does not exist" if up == "missing" else "is not a directory"
        raise InputError(field, str(path), f"a file in an existing directory ({parent} {what})")
    if kind != "missing":
        if not os.access(path, os.W_OK):
            raise InputError(field, str(path), "a writable file (it is not writable)")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(field, str(path), f"a file in a writable directory ({parent} is not)")


def launch(nproc: int, args: list[str], json_path: Path) -> int:
    """The exit status of the benchmark run on ``nproc`` local processes under torchrun
    (``python -m torch.distributed.run ... -m gpuscale.bench.collectives``), with ``args``
    passed on and its results written as JSON to ``json_path``."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "-m",
        "gpuscale.bench.collectives",
        *args,
        "--json",
        str(json_path),
    ]
    return subprocess.call(cmd)


def compare(measured: dict[str, Any], fabric: Any, cal: Any) -> list[dict[str, Any]]:
    """Measured (out-of-place) next to predicted, per size."""
    from gpuscale.cli.comm import model_rows

    op, n = measured["op"], int(measured["ranks"])
    sizes = [int(r["size_bytes"]) for r in measured["rows"]]
    pred = {r["size_bytes"]: r for r in model_rows(op, n, sizes, fabric, cal, measured["dtype"])}
    out = []
    for r in measured["rows"]:
        p = pred.get(int(r["size_bytes"]))
        out.append(
            {
                "size_bytes": r["size_bytes"],
                "measured_time_us": r["oop_time_us"],
                "predicted_time_us": None if p is None else p["time_us"],
                "measured_busbw_GBps": r["oop_busbw"],
                "predicted_busbw_GBps": None if p is None else p["busbw_GBps"],
                "predicted_algorithm": None if p is None else p["algorithm"],
            }
        )
    return out


@app.command("collectives")
def collectives(
    nproc: Annotated[int, typer.Option("--nproc", "-N", help="Processes (GPUs) to launch.")] = 2,
    op: Annotated[
        str,
        typer.Option("-o", "--op", help="Collective: all_reduce, all_gather, reduce_scatter, ..."),
    ] = "all_reduce",
    minbytes: MinBytes = "8",
    maxbytes: MaxBytes = "1M",
    factor: StepFactor = 2.0,
    iters: Annotated[int, typer.Option("-n", "--iters", help="Timed iterations per size.")] = 20,
    warmup: Annotated[
        int, typer.Option("-w", "--warmup_iters", help="Untimed iterations first.")
    ] = 5,
    check: Annotated[
        int, typer.Option("-c", "--check", help="1: check results (#wrong), 0: skip.")
    ] = 1,
    datatype: Datatype = "float32",
    backend: Annotated[str, typer.Option("--backend", help="auto, nccl or gloo")] = "auto",
    model: Annotated[
        Path | None, typer.Option("--model", help="Cluster YAML to predict with.")
    ] = None,
    system: Annotated[
        str | None, typer.Option("--system", help="Catalog system to predict with.")
    ] = None,
    nodes: Annotated[
        int | None, typer.Option("--nodes", help="Nodes, with --system, for the prediction.")
    ] = None,
    json: Annotated[
        Path | None, typer.Option("--json", help="Write results (and model) as JSON.")
    ] = None,
    calibration: Cal = None,
) -> None:
    """nccl-tests-style sweep on torch.distributed (NCCL on GPUs, Gloo on CPU)."""
    from gpuscale.bench.collectives import check_backend

    args = _worker_args(minbytes, maxbytes, factor, op, iters, warmup, check, datatype, backend)
    if nproc < 1:
        raise InputError("--nproc", nproc, "at least 1 process")
    check_backend(backend, nproc)
    fabric, cal = _model_cluster(model, system, nodes, nproc, calibration)
    if json is not None:
        check_output_file(json, "--json")
    rc, measured = _run_sweep(nproc, args)
    result: dict[str, Any] = {"measured": measured}
    if fabric is not None:
        from gpuscale.validate.collectives_bench import cluster_record

        # what `validate collectives` and `calibrate collectives` price the file on
        result["cluster"] = cluster_record(system, nodes, model)
        rows = compare(measured, fabric, cal)
        result["versus_model"] = rows
        _print_versus_model(measured, rows)
    if json is not None:
        _write_result(json, rc, result)
    if rc != 0:
        raise typer.Exit(rc)


def _worker_args(
    minbytes: str,
    maxbytes: str,
    factor: float,
    op: str,
    iters: int,
    warmup: int,
    check: int,
    datatype: str,
    backend: str,
) -> list[str]:
    """The benchmark worker's arguments, checked by the worker's own parser and checks on
    the very arguments it will get (one source of truth); `--flag=value` so that a value
    starting with '-' stays a value."""
    from gpuscale.bench.collectives import build_parser, check_args

    args = [
        f"--minbytes={minbytes}",
        f"--maxbytes={maxbytes}",
        f"--stepfactor={factor!r}",
        f"--op={op}",
        f"--iters={iters}",
        f"--warmup_iters={warmup}",
        f"--check={check}",
        f"--datatype={datatype}",
        f"--backend={backend}",
    ]
    check_args(build_parser().parse_args(args))
    return args


def _model_cluster(
    model: Path | None, system: str | None, nodes: int | None, nproc: int, calibration: Path | None
) -> tuple[Any, Any]:
    """The fabric and calibration to predict with, when --model or --system names a cluster
    (refused when it has fewer GPUs than --nproc; --nodes alone is refused); else (None,
    None)."""
    if model is None and system is None and nodes is None:
        return None, None
    from gpuscale.topology.select import fabric_for

    fabric = fabric_for(model, system, nodes, cluster_flag="--model")
    if nproc > fabric.total_gpus:
        raise InputError("--nproc", nproc, f"at most the model cluster's {fabric.total_gpus} GPUs")
    return fabric, load_calibration(calibration)


def _run_sweep(nproc: int, args: list[str]) -> tuple[int, Any]:
    """Launch the sweep on ``nproc`` processes: its exit status and the results it wrote;
    a run that wrote none exits with its status (1 for a clean exit)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.json"
        rc = launch(nproc, args, path)
        if not path.is_file():
            raise typer.Exit(rc or 1)
        return rc, jsonlib.loads(path.read_text())


def _print_versus_model(measured: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Each measured size's time and bus bandwidth next to the model's, and the algorithm
    the model picks."""
    print("# measured (out-of-place) vs gpuscale model")
    if measured.get("backend") == "gloo":
        print(
            "# note: measured with Gloo through host memory; the model prices NCCL on the "
            "modelled system's links, so the columns differ by design, not by model error"
        )
    print("#       size   meas. time  model time  meas. busbw  model busbw  model algo")
    print("#        (B)         (us)        (us)       (GB/s)       (GB/s)")
    for r in rows:
        pt = r["predicted_time_us"]
        pb = r["predicted_busbw_GBps"]
        print(
            f"{r['size_bytes']:12d}  {fmt_us(r['measured_time_us'], 11)}  "
            f"{'' if pt is None else fmt_us(pt, 10):>10s}  {r['measured_busbw_GBps']:11.2f}  "
            f"{'' if pb is None else f'{pb:11.2f}':>11s}  {r['predicted_algorithm'] or ''}"
        )


def _write_result(path: Path, rc: int, result: dict[str, Any]) -> None:
    """Write the results (and the model's rows) to --json; a failed run's figures are no
    result: nothing is written, and stderr says so."""
    if rc != 0:
        print(f"# --json {path} not written: the run exited with {rc}", file=sys.stderr)
        return
    try:
        path.write_text(jsonlib.dumps(result, indent=2) + "\n")
    except OSError as exc:
        raise InputError(
            "--json", str(path), f"a writable file path ({exc.strerror or exc})"
        ) from None


@app.command("storage")
def storage(
    path: Annotated[
        str,
        typer.Option(
            "--path",
            help="An existing directory on the storage to measure (the files the run writes "
            "there are removed after).",
        ),
    ],
    size: Annotated[
        str, typer.Option("--size", help="Bytes written in all (4G; K/M/G = 1024^n).")
    ] = "4G",
    files: Annotated[int, typer.Option("--files", help="Files (checkpoint shards).")] = 8,
    processes: Annotated[
        int | None,
        typer.Option(
            "--processes",
            help="Processes writing and reading at once (default: 8, or --files if fewer).",
        ),
    ] = None,
    block: Annotated[str, typer.Option("--block", help="Bytes per write/read call.")] = "16M",
    json: Annotated[Path | None, typer.Option("--json", help="Write the result as JSON.")] = None,
) -> None:
    """Checkpoint-like writes (fsync) then reads on one node: aggregate GB/s."""
    from rich.console import Console

    from gpuscale.bench.storage import run
    from gpuscale.bench.sweep import parse_size
    from gpuscale.paths import write_atomic
    from gpuscale.units import fmt_rate

    if not path.strip():  # an empty --path would otherwise measure the current directory
        raise InputError("--path", path, "a directory on the storage to measure")
    total, blk = parse_size(size, "--size"), parse_size(block, "--block")
    procs = processes if processes is not None else min(8, files)
    if json is not None:
        check_output_file(json, "--json")  # as the collectives benchmark's, before any write
    err = Console(stderr=True)
    with err.status("writing", spinner="dots") as status:
        doing = {"write": "writing", "read": "reading"}
        res = run(Path(path), total, files, procs, blk, lambda p: status.update(doing[p]))
    print(
        f"# {res.total_bytes:,} bytes as {res.files} files from {res.processes} processes, "
        f"{res.block_bytes:,} bytes a call, under {res.path}"
    )
    cached = "" if res.cache_dropped else "  (cached pages not dropped: may be memory)"
    print(f"write (fsync'd) {res.write_s:8.3f} s  {fmt_rate(res.write_Bps, 'B/s')}")
    print(f"read            {res.read_s:8.3f} s  {fmt_rate(res.read_Bps, 'B/s')}{cached}")
    print(
        f"# one node's rates: gpuscale train estimate ... --storage-write-bw "
        f"{res.write_Bps / 1e9:.3g}GB/s --storage-read-bw {res.read_Bps / 1e9:.3g}GB/s prices a "
        "job on one node; many nodes write up to that many times this, until the storage "
        "system's own limit"
    )
    if json is not None:
        write_atomic(json, jsonlib.dumps(res.to_json(), indent=2) + "\n", "--json")
