"""Speed of the serving simulation and of `infer size` (one core).

    python benchmarks/bench_serving.py [--requests 1000000]

Prints requests simulated per second of wall time (Poisson online and offline loads), the
peak RSS of a run of ``--requests`` requests, and the wall time of `infer size` over three
GPU types x TP 1-8. Goals: >= 100,000 requests/s, < 1 GiB, < 2 s.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model
from gpuscale.perf.inference import build_step_model
from gpuscale.perf.kv import precision_plan
from gpuscale.sim.arrivals import offline, poisson
from gpuscale.sim.serving import simulate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    args = ap.parse_args()
    cal = default_calibration()
    m, g = get_model("llama3-70b"), get_gpu("h100-sxm")
    sm = build_step_model(m, g, precision_plan(g, "fp8"), 4, 1, cal, tokens_per_seq=2048 + 256)
    lim = sm.limits()
    n = args.requests
    t0 = time.perf_counter()
    res = simulate(sm, lim, poisson(n, 6.0, 2048, 256, seed=0), cal.inf_request_overhead_s)
    dt = time.perf_counter() - t0
    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30
    print(
        f"poisson 6 req/s, llama3-70b fp8 TP4 H100, 2048/256: {n:,} requests in {dt:.2f} s "
        f"= {n / dt:,.0f} requests/s (mean batch {res.mean_batch:.0f}, "
        f"{res.iterations:,} iterations)"
    )
    print(f"peak RSS after the {n:,}-request run: {rss_gib:.3f} GiB")
    n_off = min(n, 200_000)
    t0 = time.perf_counter()
    res = simulate(sm, lim, offline(n_off, 2048, 256))
    dt = time.perf_counter() - t0
    print(
        f"offline, same deployment: {n_off:,} requests in {dt:.2f} s = {n_off / dt:,.0f} "
        f"requests/s ({res.output_tokens_per_s:,.0f} output tok/s simulated)"
    )
    cmd = [
        sys.executable,
        "-c",
        "from gpuscale.cli import main; main()",
        "infer",
        "size",
        "--model",
        "llama3-70b",
        "--qps",
        "50",
        "--input-len",
        "2048",
        "--output-len",
        "256",
        "--ttft-p99",
        "2s",
        "--tpot-p99",
        "50ms",
        "--gpus",
        "h100-sxm,h200,b200",
        "--json",
    ]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    dt = time.perf_counter() - t0
    print(f"`gpuscale infer size` (3 GPU types x TP 1-8, incl. interpreter start): {dt:.2f} s")


if __name__ == "__main__":
    main()
