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
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from gpuscale.calibrate import Calibration
from gpuscale.catalog import GPU, Model, get_gpu, get_model, system_for_gpu
from gpuscale.cli._common import load_calibration
from gpuscale.perf.comm import Fabric
from gpuscale.perf.kernels import (
    attention_core_s,
    gemm_s,
    low_precision_speedup,
    sustained_peak16,
)
from gpuscale.perf.plan import Workload

DEFAULT = Path(__file__).parent / "measured" / "h200_2026-12-04.json"


def _workload(gpu: GPU, model: Model, seq: int, precision: str, attention: str) -> Workload:
    """One GPU's job of ``model`` as the step model sees it (its kernels' rates are the
    GPU's, whatever the job around them)."""
    system = system_for_gpu(gpu)
    fabric = Fabric.from_system(system, 8)
    return Workload(model, gpu, system, fabric, 8, seq, 8, precision, attention=attention)


def gemm_rows(res: dict[str, Any], gpu: GPU, cal: Calibration) -> list[dict[str, Any]]:
    out = []
    llama = get_model("llama3-8b")
    for prec in ("bf16", "fp8"):
        # the rate the step prices GEMMs at: the sustained 16-bit peak x the part's MAMF
        # fraction x the precision's speed-up
        speedup = low_precision_speedup(_workload(gpu, llama, 4096, prec, "fused"), cal)
        peak = sustained_peak16(gpu) * gpu.matmul_eff * speedup
        for x in res[prec]:
            pred = float(gemm_s(x["m"], x["n"], x["k"], 1, peak, gpu.sms, cal))
            out.append({**x, "precision": prec, "pred_s": pred, "err": pred / x["s"] - 1.0})
    return out


def attention_rows(res: list[dict[str, Any]], gpu: GPU, cal: Calibration) -> list[Any]:
    """The model's forward + backward seconds of the measured shape (one layer, one
    sequence, no tensor parallelism) next to each SDPA backend's."""
    out = []
    for x in res:
        if "error" in x:
            continue
        # Llama 3 8B's layer with the benchmark's heads (32 of 128 and 8 KV, or 64 of 64)
        shape = {"heads": x["heads"], "kv_heads": x["kv_heads"], "head_dim": x["head_dim"]}
        model = get_model("llama3-8b").model_copy(update=shape)
        for kind in ("fused", "flash2"):
            w = _workload(gpu, model, x["seq"], "bf16", kind)
            one = np.array([1.0])
            fwd, bwd = attention_core_s(
                w,
                one * x["batch"],
                one * x["seq"],
                one,
                sustained_peak16(gpu),
                gpu.hbm_bw_Bps * cal.hbm_eff,
                cal,
            )
            pred = float(fwd[0] + bwd[0])
            out.append((x["backend"], x["seq"], x["head_dim"], kind, x["fwd_bwd_s"], pred))
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
    gpu = get_gpu(a.gpu)
    con = Console()
    con.print(f"{d['device']} (torch {d['torch']}, CUDA {d.get('cuda')}) against {gpu.name}")

    sections = {k: v["result"] for k, v in d["sections"].items() if "result" in v}
    if "matmul" in sections:
        gemm_table(con, gemm_rows(sections["matmul"], gpu, cal), a.shapes)
    if "attention" in sections:
        attention_table(con, sections["attention"], gpu, cal)
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


def attention_table(con: Console, res: list[dict[str, Any]], gpu: GPU, cal: Calibration) -> None:
    t = Table(title="causal attention, forward + backward")
    cols = ("SDPA backend", "seq", "head dim", "model's kernel", "measured ms", "predicted ms")
    for c in (*cols, "error %"):
        t.add_column(c, justify="right")
    for backend, seq, hd, kind, meas, pred in attention_rows(res, gpu, cal):
        if (backend == "flash") == (kind == "flash2"):
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
