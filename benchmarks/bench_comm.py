"""Evaluations per second of the collective model on one core: (op, size, group) points.

    python benchmarks/bench_comm.py [--points 1000000] [--repeat 3]

Each call evaluates one op over an array of (size, group size, members per domain) points
on a DGX H100 fabric and picks NCCL's likely algorithm/protocol for every point. The
figure printed is measured here (best of ``--repeat``), never hard-coded.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_system
from gpuscale.perf.comm import OPS, Fabric, estimate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    fabric = Fabric.from_system(get_system("dgx-h100"), total_gpus=16384)
    cal = default_calibration()
    size = 2.0 ** rng.integers(3, 35, a.points)
    n = 2.0 ** rng.integers(1, 14, a.points)
    k = np.minimum(n, 2.0 ** rng.integers(0, 4, a.points))
    total_pts, total_s = 0, 0.0
    for op in OPS:
        best = float("inf")
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            estimate(op, size, n, fabric, cal, members_per_domain=k)
            best = min(best, time.perf_counter() - t0)
        print(f"{op:15s} {a.points / best:12,.0f} evaluations/s")
        total_pts += a.points
        total_s += best
    print(
        f"{'all ops':15s} {total_pts / total_s:12,.0f} evaluations/s "
        f"({a.points:,} points per call, one core)"
    )


if __name__ == "__main__":
    main()
