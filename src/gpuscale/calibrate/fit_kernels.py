"""Fit a kernel's efficiency on its published microbenchmark.

    python -m gpuscale.calibrate.fit_kernels [--write]

``ssd_eff``: Mamba-2's chunked scan (SSD, ``mamba_chunk_scan_combined``: five Triton
kernels) against :func:`gpuscale.perf.kernels.scan_s`, which composes the scan's block
GEMMs at the GPU's matmul rate and its HBM traffic. The runs are ``ssd_kernel_runs.csv``
(one H100, Granite 4.0 H Small's scan: 128 heads of 64, one group, state 128, chunks of
256, forward, from vLLM's pull request 27299). The constant is the median, over the runs of
at least :data:`MIN_TOKENS` tokens, of the measured rate over the modelled one: below that,
launch latency sets the rate (the per-layer fixed costs price it in a step). Training rows
cannot fit it: the validation file holds no hybrid run. Its limits: one shape (the catalog's
Nemotron models scan 8 groups in chunks of 128), the forward only (the backward is priced at
the same fraction), and a measured rate that falls 15 % from 16K to 262K tokens where the
modelled one does not. ``--write`` read-modify-writes ``calibration.json``: only this key
changes.
"""

from __future__ import annotations

import argparse
import csv
import json
from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np

from gpuscale.calibrate.calibration import Calibration, default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.catalog.model_parts import Mamba
from gpuscale.perf.comm import Fabric
from gpuscale.perf.kernels import scan_s, sustained_peak16
from gpuscale.perf.plan import Workload

MIN_TOKENS = 4096
"""Tokens a run needs for the kernels' steady rate (a training micro-batch has as many)."""
HOST = "nemotron-h-56b"
"""A hybrid model of the catalog whose scan the runs' dimensions replace."""


def ssd_rates(cal: Calibration | None = None) -> list[tuple[int, float, float]]:
    """(tokens, measured, modelled tokens/s) of each run of ``ssd_kernel_runs.csv``, the
    model with ``cal`` (default: the shipped constants with ``ssd_eff`` 1)."""
    base = replace(cal or default_calibration(), ssd_eff=1.0)
    text = resources.files("gpuscale.calibrate").joinpath("ssd_kernel_runs.csv").read_text()
    out = []
    for row in csv.DictReader(text.splitlines()):
        scan = Mamba(
            heads=int(row["heads"]),
            head_dim=int(row["head_dim"]),
            groups=int(row["groups"]),
            state=int(row["state"]),
            chunk=int(row["chunk"]),
            conv_kernel=4,
            rule="ssd",
        )
        model = get_model(HOST).model_copy(update={"mamba": scan})
        gpu = get_gpu(row["gpu"])
        system = system_for_gpu(gpu)
        tokens = int(row["tokens"])
        w = Workload(model, gpu, system, Fabric.from_system(system, 1), 1, tokens, 1)
        peak16 = sustained_peak16(gpu)  # as the training step has it
        bw = gpu.hbm_bw_Bps * base.hbm_eff
        secs = scan_s(w, np.array([float(tokens)]), np.array([1.0]), peak16, bw, base)
        out.append((tokens, float(row["tokens_per_s"]), tokens / float(secs[0])))
    return out


def fit_ssd_eff(cal: Calibration | None = None) -> float:
    """The median measured / modelled rate over the runs of at least MIN_TOKENS tokens."""
    ratios = [meas / model for tokens, meas, model in ssd_rates(cal) if tokens >= MIN_TOKENS]
    return float(np.median(ratios))


def main() -> None:
    """Fits ``ssd_eff`` on the published Mamba-2 scan benchmark and prints the measured and
    modelled tokens/s (``--write`` stores it in calibration.json)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="update calibration.json")
    args = ap.parse_args()
    for tokens, meas, model in ssd_rates():
        print(f"{tokens:>8,} tokens  measured {meas:>12,.0f}  modelled {model:>12,.0f} tokens/s")
    eff = round(fit_ssd_eff(), 4)
    print(f"ssd_eff = {eff} (median over runs of {MIN_TOKENS:,}+ tokens)")
    if args.write:
        path = Path(str(resources.files("gpuscale.calibrate").joinpath("calibration.json")))
        data = json.loads(path.read_text())
        data["ssd_eff"] = eff
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
