"""nccl-tests-style collective benchmark on torch.distributed (NCCL on GPUs, Gloo on CPU).

    torchrun --nproc-per-node N -m gpuscale.bench.collectives -b 8 -e 1G -f 2 -o all_reduce \
        [-c 1] [-n 20] [-w 5] [-d float32] [-r 0] [--json FILE]

Same flags, columns and formulas as nccl-tests (size, count, type, redop, root, then time
in us, algbw, busbw and #wrong for out-of-place and in-place; the ``# Avg bus bandwidth``
footer is the mean of every printed busbw). Time is the mean of ``-n`` iterations after
``-w`` warm-up ones, averaged over ranks (nccl-tests' default ``-a 1``). ``-c 1`` checks a
separate, untimed call of each variant against values computed on the host.

torch has no out-of-place all-reduce, broadcast or reduce and no in-place all-to-all or
send/recv: those variants copy through a temporary buffer inside the timed region, and the
header says so. Where the backend lacks an op (Gloo: reduce-scatter in some torch builds)
it is emulated by all-reduce + slice and labelled ``emulated``; its bandwidth then is not
the op's. torch is imported here only; the rest of gpuscale runs without it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpuscale.bench.buffers import Call, _Bench
from gpuscale.bench.sweep import (
    DTYPE_BYTES,
    HEADER,
    NCCL_TYPE,
    REDUCING,
    ROOTED,
    Row,
    avg_busbw,
    bandwidths,
    count_for,
    format_row,
    parse_size,
    row_size,
    size_sweep,
)
from gpuscale.errors import InputError
from gpuscale.perf.comm import OPS

BACKENDS = ("auto", "nccl", "gloo")
"""torch.distributed backends: auto = NCCL where CUDA is available, else Gloo."""


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's argument parser: nccl-tests' flags (-b, -e, -f, -o, -d, -r, -n, -w, -c),
    the backend, and ``--json`` with the cluster it ran on (``--system`` and ``--nodes``, or
    ``--model``)."""
    ap = argparse.ArgumentParser(prog="gpuscale.bench.collectives", description=__doc__)
    ap.add_argument("-b", "--minbytes", default="32M")
    ap.add_argument("-e", "--maxbytes", default="32M")
    ap.add_argument("-f", "--stepfactor", type=float, default=2.0)
    ap.add_argument("-o", "--op", default="all_reduce", help=f"one of {', '.join(OPS)}")
    ap.add_argument("-d", "--datatype", default="float32")
    ap.add_argument("-r", "--root", type=int, default=0)
    ap.add_argument("-n", "--iters", type=int, default=20)
    ap.add_argument("-w", "--warmup_iters", type=int, default=5)
    ap.add_argument("-c", "--check", type=int, default=1)
    ap.add_argument("--backend", default="auto", help=f"one of {', '.join(BACKENDS)}")
    ap.add_argument("--json", type=Path, default=None, help="write the results as JSON")
    ap.add_argument(
        "--system",
        default=None,
        help="catalog system the run is on: with --nodes, --json writes the file that "
        "`gpuscale validate collectives` and `calibrate collectives` read",
    )
    ap.add_argument("--nodes", type=int, default=None, help="nodes the run spans (with --system)")
    ap.add_argument(
        "--model", type=Path, default=None, help="the cluster YAML the run is on (or --system)"
    )
    return ap


def check_args(a: argparse.Namespace) -> tuple[list[int], int]:
    """Validate parsed flags (before torch or any process group): (sizes, dtype bytes).

    The one check of the benchmark's flags: each worker runs it, and ``gpuscale bench
    collectives`` runs it on the same argument list before it launches any worker.
    """
    if a.op not in OPS:
        raise InputError("-o/--op", a.op, f"one of {', '.join(OPS)}")
    if a.datatype not in DTYPE_BYTES:
        raise InputError("-d/--datatype", a.datatype, f"one of {', '.join(DTYPE_BYTES)}")
    if a.iters < 1:
        raise InputError("-n/--iters", a.iters, "at least 1")
    if a.warmup_iters < 0:
        raise InputError("-w/--warmup_iters", a.warmup_iters, "0 or more")
    if a.check not in (0, 1):
        raise InputError("-c/--check", a.check, "0 (no check) or 1 (check each variant once)")
    if a.backend not in BACKENDS:
        raise InputError("--backend", a.backend, f"one of {', '.join(BACKENDS)}")
    if a.model is not None or a.system is not None or a.nodes is not None:
        from gpuscale.topology.select import fabric_for

        # readable and valid before any process group starts
        fabric_for(a.model, a.system, a.nodes, cluster_flag="--model")
    sizes = size_sweep(
        parse_size(a.minbytes, "-b/--minbytes"),
        parse_size(a.maxbytes, "-e/--maxbytes"),
        a.stepfactor,
    )
    return sizes, DTYPE_BYTES[a.datatype]


def check_backend(backend: str, nproc: int) -> None:
    """Refuse, before torchrun starts ``nproc`` workers, a backend this host cannot run:
    NCCL needs a torch built with it and one CUDA GPU per process (two ranks on one GPU
    fail NCCL's duplicate-GPU check); ``auto`` means NCCL wherever CUDA is available."""
    if backend == "gloo" or importlib.util.find_spec("torch") is None:
        return  # without torch, torchrun itself says what is missing
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "auto" and gpus == 0:
        return  # auto runs Gloo on the CPU
    if gpus == 0 or not torch.distributed.is_nccl_available():
        lacks = "no CUDA GPU is visible" if gpus == 0 else "this torch build has no NCCL"
        raise InputError("--backend", backend, f"gloo on this host ({lacks})")
    if nproc > gpus:
        raise InputError(
            "--backend",
            backend,
            f"gloo for -N {nproc}, or NCCL with -N at most {gpus}: NCCL needs a CUDA GPU per "
            f"process and this host has {gpus}",
        )


def _time(torch: Any, call: Call, iters: int, warmup: int, cuda: bool) -> float:
    for _ in range(warmup):
        call()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        call()
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Runs the benchmark's sweep on this rank (NCCL on GPUs, else Gloo) and returns its results:
    the op, ranks, backend, the rows (time in us, algbw and busbw in GB/s, #wrong), the count of
    wrong values and the average bus bandwidth in GB/s; rank 0 writes them to ``--json``."""
    a = build_parser().parse_args(argv)
    sizes, tbytes = check_args(a)
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available() and a.backend != "gloo"
    backend = a.backend if a.backend != "auto" else ("nccl" if cuda else "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend=backend)
    try:
        return _sweep(a, torch, dist, sizes, tbytes, backend, device, cuda)
    finally:
        dist.destroy_process_group()


def _sweep(
    a: argparse.Namespace,
    torch: Any,
    dist: Any,
    sizes: list[int],
    tbytes: int,
    backend: str,
    device: Any,
    cuda: bool,
) -> dict[str, Any]:
    n, rank = dist.get_world_size(), dist.get_rank()
    if not 0 <= a.root < n:
        raise InputError("-r/--root", a.root, f"0..{n - 1}")
    dtype = getattr(
        torch,
        a.datatype
        if a.datatype
        in ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8")
        else {"float": "float32", "half": "float16", "double": "float64"}[a.datatype],
    )
    redop = "sum" if a.op in REDUCING else "none"
    root = a.root if a.op in ROOTED else -1
    rows: list[Row] = []
    emulated = False
    say = print if rank == 0 else (lambda *_a, **_k: None)
    say(
        f"# gpuscale.bench.collectives: op {a.op}, {n} ranks, backend {backend}, "
        f"torch {torch.__version__}, device {device.type}"
    )
    say(f"# iters {a.iters} warmup {a.warmup_iters} check {a.check} dtype {a.datatype}")
    if a.op in ("all_reduce", "broadcast", "reduce"):
        say(
            "# out-of-place = copy to the receive buffer + in-place call (torch has no "
            "out-of-place form); the copy is timed"
        )
    if a.op in ("all_to_all", "send_recv"):
        say("# in-place = the call from a temporary copy of the buffer (timed)")
    say(HEADER)
    for size in sizes:
        count = count_for(a.op, size, n, tbytes)
        if count < 1:
            continue
        b = _Bench(torch, dist, a.op, count, n, rank, a.root, dtype, device)
        oop, inp, oop_res, ip_res = b.calls()
        res: list[tuple[float, int]] = []
        for call, result, in_place in ((oop, oop_res, False), (inp, ip_res, True)):
            wrong = -1
            if a.check:
                b.prepare(in_place)
                call()
                wrong = b.wrong(result)
            b.prepare(in_place)
            t = _time(torch, call, a.iters, a.warmup_iters, cuda)
            stats = torch.tensor([t, float(max(wrong, 0))], dtype=torch.float64, device=device)
            dist.all_reduce(stats)
            res.append((float(stats[0].item()) / n, int(stats[1].item()) if a.check else -1))
        emulated = emulated or b.emulated
        sz = row_size(a.op, count, n, tbytes)
        (t_o, w_o), (t_i, w_i) = res
        alg_o, bus_o = bandwidths(a.op, sz, t_o, n)
        alg_i, bus_i = bandwidths(a.op, sz, t_i, n)
        row = Row(
            sz,
            count,
            NCCL_TYPE[a.datatype],
            redop,
            root,
            t_o * 1e6,
            alg_o,
            bus_o,
            w_o,
            t_i * 1e6,
            alg_i,
            bus_i,
            w_i,
        )
        rows.append(row)
        say(format_row(row))
    wrong_total = sum(max(r.oop_wrong, 0) + max(r.ip_wrong, 0) for r in rows)
    if emulated:
        say(
            f"# {a.op} emulated: {backend} lacks it; all_reduce + slice (bandwidth is not the op's)"
        )
    say(f"# Out of bounds values : {wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}")
    avg = avg_busbw(rows)
    say(f"# Avg bus bandwidth    : {avg:g} ")
    out = {
        "op": a.op,
        "ranks": n,
        "backend": backend,
        "device": device.type,
        "dtype": a.datatype,
        "iters": a.iters,
        "warmup_iters": a.warmup_iters,
        "check": a.check,
        "emulated": emulated,
        "torch": str(torch.__version__),
        "rows": [asdict(r) for r in rows],
        "wrong_total": wrong_total,
        "avg_busbw_GBps": avg,
    }
    if rank == 0 and a.json is not None:
        # with the cluster named, the file `validate collectives` reads (as the CLI writes it)
        record: dict[str, Any] = out
        if a.system is not None or a.model is not None:
            from gpuscale.validate.collectives_bench import cluster_record

            record = {"measured": out, "cluster": cluster_record(a.system, a.nodes, a.model)}
        a.json.write_text(json.dumps(record, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    """Runs the nccl-tests-style collective benchmark; exits 2 on bad flags, 1 when values came
    out wrong."""
    try:
        out = run(argv)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(0 if out["wrong_total"] == 0 else 1)


if __name__ == "__main__":
    main()
