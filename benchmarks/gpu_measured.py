"""gpuscale's kernel model beside what ``benchmarks/gpu_checks.py`` measured on a GPU.

    python benchmarks/gpu_measured.py [benchmarks/measured/h200_2026-12-04.json] [--gpu h200]
        [--calibration FILE] [--shapes]

Prints, for the measured GPU under the shipped (or given) calibration:

- GEMMs: the time ``perf/kernels.py::gemm_s`` gives each measured (M, N, K), 16-bit and
  FP8, against the measured time: the median and mean |error| by case (square, forward,
  data gradient, weight gradient), and each shape with ``--shapes``;
- attention: the model's forward + backward rate of the fused kernel (cuDNN, FlashAttention-3)
  and of FlashAttention-2 against SDPA's cuDNN and flash backends;
- HBM: the bandwidth the memory-bound terms are priced at against the measured copy.

The training steps measured beside these are scored as published runs are:
``gpuscale validate training --runs benchmarks/heldout/training_measured_h200.csv``. Errors
are predicted / measured - 1 of the time: negative means gpuscale predicts the kernel faster
than it ran.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gpuscale.calibrate import Calibration
from gpuscale.catalog import GPU, get_gpu
from gpuscale.cli._common import load_calibration
from gpuscale.validate import kernels

DEFAULT = Path(__file__).parent / "measured" / "h200_2026-12-04.json"


def gemm_rows(d: dict[str, Any], gpu: GPU, cal: Calibration) -> list[dict[str, Any]]:
    """Each measured GEMM with the model's time (``gpuscale.validate.kernels``)."""
    out = []
    for r in kernels.gemm_rows([{**d, "path": Path("measured")}], gpu, cal):
        x = dict(r.detail)
        prec = r.metric.split("_")[1]
        err = float(r.predicted or 0.0) / float(r.measured or 1.0) - 1.0
        out.append({**x, "s": r.measured, "precision": prec, "pred_s": r.predicted, "err": err})
    return out


def attention_rows(d: dict[str, Any], gpu: GPU, cal: Calibration) -> list[Any]:
    """The model's forward + backward seconds of each measured attention shape, with the
    kernel it prices the SDPA backend as (``gpuscale.validate.kernels``)."""
    out = []
    for r in kernels.attention_rows([{**d, "path": Path("measured")}], gpu, cal):
        if r.status == "scored":
            x = r.detail
            backend = r.id.split("-")[1]
            out.append((backend, x["seq"], x["head_dim"], x["kernel"], r.measured, r.predicted))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("measured", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--gpu", default="h200", help="catalog GPU the figures were measured on")
    ap.add_argument("--calibration", type=Path, help="calibration JSON (default: shipped)")
    ap.add_argument("--shapes", action="store_true", help="print every GEMM shape")
    a = ap.parse_args()
    cal = load_calibration(a.calibration)
    d = json.loads(a.measured.read_text())
    if d.get("smoke"):  # toy sizes on any device: no figure of it is a GPU's
        sys.exit(f"error: {a.measured}: a --smoke run (toy sizes), not a measurement")
    gpu = get_gpu(a.gpu)
    con = Console()
    con.print(f"{d['device']} (torch {d['torch']}, CUDA {d.get('cuda')}) against {gpu.name}")

    sections = {k: v["result"] for k, v in d["sections"].items() if "result" in v}
    if "matmul" in sections:
        gemm_table(con, gemm_rows(d, gpu, cal), a.shapes)
    if "attention" in sections:
        attention_table(con, d, gpu, cal)
    if "hbm" in sections:
        hbm = sections["hbm"]
        priced = gpu.hbm_bw_Bps * cal.hbm_eff / 1e12
        con.print(
            f"HBM: copy measured {hbm['read_plus_write_tb_s']:.2f} TB/s (read + write); "
            f"memory-bound terms priced at {priced:.2f} TB/s ({gpu.hbm_tb_per_s} x hbm_eff "
            f"{cal.hbm_eff:.3f}): {100 * (hbm['read_plus_write_tb_s'] / priced - 1):+.1f} %"
        )
    nv = d.get("nvml", {}).get("sections", {}).get("matmul")
    if nv:
        con.print(
            f"NVML during the GEMMs: {nv['power_w_mean']:.0f} W mean, {nv['power_w_max']:.0f} W "
            f"peak of {d['nvml_device'].get('power_limit_w')} W; SM clock {nv['sm_mhz_mean']:.0f} "
            f"MHz mean, {nv['sm_mhz_min']} MHz lowest, of {d['nvml_device'].get('max_sm_mhz')}"
        )


def gemm_table(con: Console, rows: list[dict[str, Any]], shapes: bool) -> None:
    t = Table(title="GEMMs: predicted / measured time - 1 (negative: predicted faster)")
    for c in ("precision", "case", "shapes", "median error %", "mean |error| %", "worst %"):
        t.add_column(c, justify="right")
    for prec in ("bf16", "fp8"):
        for case in ("square", "fwd", "dgrad", "wgrad", "all"):
            e = [r["err"] for r in rows if r["precision"] == prec and case in ("all", r["case"])]
            if not e:
                continue
            worst = max(e, key=abs)
            t.add_row(
                prec,
                case,
                str(len(e)),
                f"{100 * statistics.median(e):+.1f}",
                f"{100 * statistics.fmean(abs(v) for v in e):.1f}",
                f"{100 * worst:+.0f}",
            )
    con.print(t)
    if shapes:
        s = Table(title="each GEMM (TFLOP/s)")
        for c in (
            "precision",
            "model",
            "tp",
            "linear",
            "case",
            "M",
            "N",
            "K",
            "measured",
            "predicted",
            "error %",
        ):
            s.add_column(c, justify="right")
        for r in rows:
            fl = 2.0 * r["m"] * r["n"] * r["k"] / 1e12
            s.add_row(
                r["precision"],
                r.get("model", ""),
                str(r.get("tp", "")),
                r.get("linear", ""),
                r["case"],
                str(r["m"]),
                str(r["n"]),
                str(r["k"]),
                f"{fl / r['s']:.0f}",
                f"{fl / r['pred_s']:.0f}",
                f"{100 * r['err']:+.1f}",
            )
        con.print(s)


def attention_table(con: Console, d: dict[str, Any], gpu: GPU, cal: Calibration) -> None:
    t = Table(title="causal attention, forward + backward")
    cols = ("SDPA backend", "seq", "head dim", "model's kernel", "measured ms", "predicted ms")
    for c in (*cols, "error %"):
        t.add_column(c, justify="right")
    for backend, seq, hd, kind, meas, pred in attention_rows(d, gpu, cal):
        t.add_row(
            backend,
            str(seq),
            str(hd),
            kind,
            f"{1e3 * meas:.3f}",
            f"{1e3 * pred:.3f}",
            f"{100 * (pred / meas - 1):+.1f}",
        )
    con.print(t)


if __name__ == "__main__":
    main()
