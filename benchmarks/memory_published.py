"""How gpuscale's per-GPU memory model does on published, measured peaks.

    python benchmarks/memory_published.py [--csv FILE]

Each row of ``heldout/memory_published.csv`` is one training run whose source states its
plan and its measured peak memory per GPU: torchtitan's benchmark tables (FSDP2, TP, PP,
CP, Float8 on H100 and H200), torchtitan's FSDP2 introduction (per-op selective, full and
no activation checkpointing), torchao's float8/MX training tables (H100, MI300X, B200) and
Megatron-LM's CI memory tests (TP4 and PP4 with interleaving, distributed optimizer). The
figures are the PyTorch caching allocator's peaks (``reserved_peak``: torchtitan's logged
memory; ``allocated_peak``: Megatron's mem-max-allocated-bytes), which hold neither the
CUDA context nor NCCL's and cuBLAS's workspaces: they are compared with gpuscale's total
less its fixed workspace term (``Calibration.mem_reserved_bytes``). The plan each row
states is estimated as ``gpuscale train estimate`` would (a ``.json`` model is a
config.json beside the CSV), runs without torch.compile with ``elementwise="eager"`` (whose
op-by-op loss holds three fp32 copies of the logits). Prints one line per row and the error
by source.

What the model does not see, so that the spread is expected: a compiled run whose loss
stayed op by op (torchtitan compiled its blocks, not its loss, in 2024), allocator caching
that stops growing near the GPU's capacity (rows within a few GiB of it are lower bounds),
and software versions (the same 8-GPU Llama 3 8B run reads 47.7 GiB on an H100 with torch 2.7
and 33.7 GiB on a B200 with torch 2.9).
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gpuscale.calibrate.calibration import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.perf.comm import Fabric
from gpuscale.perf.memory import memory_breakdown
from gpuscale.perf.plan import RECOMPUTE, SHARDING, Plans, Workload
from gpuscale.perf.validity import check_plan

HERE = Path(__file__).with_name("heldout") / "memory_published.csv"
GIB = 2.0**30


def _int(row: dict[str, str], key: str, default: int = 1) -> int:
    return int(row[key]) if row.get(key, "").strip() else default


def predict_gib(row: dict[str, str], folder: Path) -> tuple[float, str]:
    """gpuscale's per-GPU peak for the row's stated plan, less the fixed workspace, and
    the plan as gpuscale labels it."""
    cal = default_calibration()
    name = row["model"]
    model = get_model(str(folder / name) if name.endswith(".json") else name)
    gpu = get_gpu(row["gpu"])
    system = system_for_gpu(gpu)
    gpus = _int(row, "num_gpus")
    modules = tuple(m for m in row["recompute_modules"].split(",") if m)
    w = Workload(
        model,
        gpu,
        system,
        Fabric.from_system(system, gpus),
        gpus,
        _int(row, "seq_len"),
        _int(row, "global_batch"),
        precision=row["precision"],
        elementwise=row["elementwise"],
        **({"recompute_modules": modules} if modules else {}),
    )
    tp, pp, cp = _int(row, "tp"), _int(row, "pp"), _int(row, "cp")
    sharding = "zero3" if row["sharding"] == "fsdp" else row["sharding"]
    plan = Plans.of(
        tp=tp,
        pp=pp,
        vpp=_int(row, "vpp"),
        cp=cp,
        dp=gpus // (tp * pp * cp),
        mbs=_int(row, "micro_batch"),
        recompute=RECOMPUTE.index(row["recompute"]),
        sharding=SHARDING.index(sharding),
        sp=tp > 1 and row["sp"] == "true",
    )
    check_plan(w, plan)
    mem = memory_breakdown(w, plan, cal)
    return (float(mem.total[0]) - cal.mem_reserved_bytes) / GIB, plan.label(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=HERE, help="published peaks (default: %(default)s)")
    args = ap.parse_args()
    rows = list(csv.DictReader(args.csv.open(newline="")))
    t = Table(title="Per-GPU peak memory: published measurement vs gpuscale, GiB")
    for col in ("run", "model", "plan", "figure", "measured", "gpuscale", "error %"):
        t.add_column(col, justify="left" if col in ("run", "model", "plan", "figure") else "right")
    by_source: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        pred, plan = predict_gib(row, args.csv.parent)
        meas = float(row["measured_gib"])
        err = 100.0 * (pred - meas) / meas
        by_source[row["id"].split("-")[0]].append(err)
        modules = f" ({row['recompute_modules']})" if row["recompute_modules"] else ""
        precision = row["precision"] + (" compiled" if row["compile"] == "yes" else "")
        t.add_row(
            row["id"],
            row["model"].split("/")[-2] if "/" in row["model"] else row["model"],
            f"{row['num_gpus']} x {row['gpu']} s{row['seq_len']} {plan}{modules} {precision}",
            row["metric"],
            f"{meas:.1f}",
            f"{pred:.1f}",
            f"{err:+.1f}",
        )
    console = Console()
    console.print(t)
    s = Table(title="Error by source, %")
    for col in ("source", "rows", "mean |error|", "mean signed", "worst"):
        s.add_column(col, justify="left" if col == "source" else "right")
    everything: list[float] = []
    for src, errs in by_source.items():
        everything += errs
        s.add_row(
            src,
            str(len(errs)),
            f"{sum(map(abs, errs)) / len(errs):.1f}",
            f"{sum(errs) / len(errs):+.1f}",
            f"{max(errs, key=abs):+.1f}",
        )
    s.add_row(
        "all",
        str(len(everything)),
        f"{sum(map(abs, everything)) / len(everything):.1f}",
        f"{sum(everything) / len(everything):+.1f}",
        f"{max(everything, key=abs):+.1f}",
    )
    console.print(s)


if __name__ == "__main__":
    main()
