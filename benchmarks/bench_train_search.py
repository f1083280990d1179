"""Speed of the training-plan search on one core.

For each case: the search wall time after start-up (one warm-up search first), the plans
evaluated, plans evaluated per second (goal >= 500,000) and the peak RSS of the process
(goal < 1 GiB for the 405B / 16,384-GPU case). Each case runs in its own child process so
its peak RSS is its own.

    python benchmarks/bench_train_search.py            # all cases
    python benchmarks/bench_train_search.py --case c   # one case, in this process
"""

from __future__ import annotations

import os

# one thread, before NumPy is imported anywhere
for _var in (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

CASES: dict[str, tuple[str, str, int, int, int]] = {
    # key: (model, gpu, gpus, global batch, sequence)
    "a": ("mt-nlg-530b", "a100-sxm-80gb", 5128, 2520, 2048),
    "b": ("gpt3-175b", "a100-sxm-80gb", 1024, 1536, 2048),
    "c": ("llama3-405b", "h100-sxm", 16384, 2048, 8192),
}
GOAL_RATE = 500_000
GOAL_RSS_C = 2**30


def _pin_one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[0]})


def run_case(key: str, repeats: int) -> dict[str, Any]:
    _pin_one_core()
    from gpuscale.calibrate import default_calibration
    from gpuscale.catalog import get_gpu, get_model, system_for_gpu
    from gpuscale.perf.comm import Fabric
    from gpuscale.perf.plan import Workload
    from gpuscale.search.plans import search_plans

    model, gpu, gpus, gbs, seq = CASES[key]
    # as gpuscale.cli.train_workload.build_workload builds it (the GPU's reference system)
    g = get_gpu(gpu)
    s = system_for_gpu(g)
    w = Workload(get_model(model), g, s, Fabric.from_system(s, gpus), gpus, seq, gbs, "bf16")
    cal = default_calibration()
    search_plans(w, cal)  # warm-up: imports, catalog caches, first-call allocations
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = search_plans(w, cal)
        times.append(time.perf_counter() - t0)
    wall = statistics.median(times)
    best = res.best
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {
        "case": key,
        "model": model,
        "gpu": gpu,
        "gpus": gpus,
        "global_batch": gbs,
        "seq_len": seq,
        "wall_s": wall,
        "wall_min_s": min(times),
        "evaluated": res.evaluated,
        "valid": res.valid,
        "fitting": len(res.order),
        "plans_per_s": res.evaluated / wall,
        "peak_rss_bytes": rss_kib * 1024,
        "best": res.estimate.plans.label(best),
        "best_gpus_used": int(res.estimate.plans.gpus_used()[best]),
        "best_mfu": float(res.estimate.mfu[best]),
    }


def _print(r: dict[str, Any]) -> None:
    rate_ok = "ok" if r["plans_per_s"] >= GOAL_RATE else "BELOW GOAL"
    rss = r["peak_rss_bytes"] / 2**20
    rss_note = ""
    if r["case"] == "c":
        rss_note = "  (goal < 1024 MiB: " + (
            "ok)" if r["peak_rss_bytes"] < GOAL_RSS_C else "ABOVE GOAL)"
        )
    print(
        f"({r['case']}) {r['model']} on {r['gpus']:,} {r['gpu']}, global batch "
        f"{r['global_batch']:,}, seq {r['seq_len']:,}"
    )
    print(
        f"    search wall time   {r['wall_s'] * 1e3:9.1f} ms  (median; min "
        f"{r['wall_min_s'] * 1e3:.1f} ms)"
    )
    print(
        f"    plans evaluated    {r['evaluated']:9,d}  ({r['valid']:,} valid, {r['fitting']:,} fit)"
    )
    print(f"    plans / second     {r['plans_per_s']:9,.0f}  (goal >= {GOAL_RATE:,}: {rate_ok})")
    print(f"    peak RSS           {rss:9.1f} MiB{rss_note}")
    print(
        f"    best plan          {r['best']}  ({r['best_gpus_used']:,} GPUs, "
        f"MFU {100 * r['best_mfu']:.1f}%)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=sorted(CASES), help="run one case in this process")
    ap.add_argument("--repeats", type=int, default=3, help="timed searches per case")
    ap.add_argument("--json", action="store_true", help="one JSON object per case")
    args = ap.parse_args()
    if args.case:
        r = run_case(args.case, args.repeats)
        print(json.dumps(r)) if args.json else _print(r)
        return
    print(f"gpuscale training-plan search, one core, {args.repeats} timed runs after a warm-up")
    for key in sorted(CASES):
        out = subprocess.run(
            [sys.executable, __file__, "--case", key, "--repeats", str(args.repeats), "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if args.json:
            print(json.dumps(r))
        else:
            _print(r)


if __name__ == "__main__":
    main()
