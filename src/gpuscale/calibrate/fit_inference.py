"""Fit the serving constants on a file of published inference results, as a whole.

    python -m gpuscale.calibrate.fit_inference [--runs FILE.csv] [--write]

The objective is the mean of the three validation scores (offline throughput MAPE, online
TTFT MAPE, TPOT/ITL MAPE) over every scored row: no constant depends on a row, model,
engine or source. The search is a bounded coordinate descent in log space (no SciPy).
With ``--write`` only the inference keys are written into ``calibration.json`` (read,
modify, write: the other sections' keys stay as they are).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gpuscale.calibrate.calibration import Calibration, default_calibration
from gpuscale.validate.inference import run_plan
from gpuscale.validate.inference_rows import (
    REQUIRED,
    SCORED_METRICS,
    RowPlan,
    UnsupportedRowError,
    plan_row,
)
from gpuscale.validate.numbers import num
from gpuscale.validate.report import read_rows, signed_error_pct

DEFAULT_RUNS = Path("../shared/validation/inference_runs.csv")

# constant -> (lower bound, upper bound): physically plausible ranges
BOUNDS: dict[str, tuple[float, float]] = {
    "inf_hbm_eff": (0.4, 0.95),
    "inf_gemm_eff": (0.3, 1.0),
    "inf_lowp_gemm_rel": (0.4, 1.0),
    "inf_gemm_half_dim": (16.0, 4096.0),
    "inf_attn_eff": (0.2, 0.9),
    "decode_step_overhead_s": (1e-5, 0.02),
    "inf_seq_overhead_s": (1e-7, 2e-4),
    "inf_layer_overhead_s": (1e-7, 2e-4),
    "inf_request_overhead_s": (1e-5, 0.05),
}
FIT_MAX_REQUESTS = 3000
"""Offline rows are simulated with at most this many requests while fitting (speed)."""


@dataclasses.dataclass(frozen=True)
class _Case:
    plan: RowPlan
    kind: str
    ttft_stat: str
    itl_is_itl: bool
    throughput: float | None
    ttft_ms: float | None
    itl_ms: float | None


def load_cases(path: Path, max_requests: int = FIT_MAX_REQUESTS) -> list[_Case]:
    """The rows of an inference results file the model can run, each with its plan (offline runs
    cut to ``max_requests`` requests) and its measured throughput (tokens/s), TTFT and TPOT or
    ITL (ms)."""
    cases: list[_Case] = []
    for lineno, row in read_rows(path, REQUIRED):
        where = f"{path.name}:line {lineno}"
        try:
            plan = plan_row(row, where)
        except UnsupportedRowError:
            continue
        if plan.mode == "offline" and plan.requests > max_requests:
            plan = dataclasses.replace(plan, requests=max_requests)
        cases.append(
            _Case(
                plan,
                row.get("throughput_kind", "").lower(),
                row.get("ttft_stat", "").lower(),
                "itl" in row.get("tpot_itl_stat", "").lower(),
                num(row, "metric_throughput_tokens_per_s", where),
                num(row, "ttft_ms", where),
                num(row, "tpot_or_itl_ms", where),
            )
        )
    return cases


def scores(cases: list[_Case], cal: Calibration) -> dict[str, float]:
    """MAPE in percent of each scored metric (throughput, TTFT, TPOT/ITL) over ``cases`` under
    ``cal``, 0 for a metric with no rows; the throughput per GPU where the row gives it so."""
    errs: dict[str, list[float]] = {m: [] for m in SCORED_METRICS}
    for c in cases:
        try:
            res = run_plan(c.plan, cal)
        except UnsupportedRowError:
            continue
        p = c.plan
        if c.throughput is not None and p.mode in ("offline", "static", "saturate"):
            total = res.output_tokens_per_s * p.replicas
            pred = total / (p.tp * p.pp * p.replicas) if c.kind == "output_per_gpu" else total
            if c.kind in ("output_total", "", "output_per_gpu"):
                errs["throughput"].append(abs(signed_error_pct(pred, c.throughput)))
        if c.ttft_ms is not None:
            st = res.ttft_s
            v = st.p99 if "p99" in c.ttft_stat else st.p50 if "median" in c.ttft_stat else st.mean
            errs["ttft"].append(abs(signed_error_pct(v * 1e3, c.ttft_ms)))
        if c.itl_ms is not None:
            v = (res.itl_s if c.itl_is_itl else res.tpot_s).mean
            errs["tpot_itl"].append(abs(signed_error_pct(v * 1e3, c.itl_ms)))
    return {m: (sum(e) / len(e) if e else 0.0) for m, e in errs.items()}


TARGETS_PCT = {"throughput": 15.0, "ttft": 25.0, "tpot_itl": 25.0}
"""The acceptance targets of the three scores; the objective weighs each score by them."""


def objective(s: dict[str, float]) -> float:
    """Root-mean-square of the scores relative to their targets."""
    return math.sqrt(sum((v / TARGETS_PCT[k]) ** 2 for k, v in s.items()) / len(s))


def fit(
    cases: list[_Case],
    start: Calibration,
    rounds: int = 4,
    verbose: bool = True,
    constants: Sequence[str] | None = None,
    on_eval: Callable[[float], None] | None = None,
) -> Calibration:
    """Coordinate descent in log space over the keys of :data:`BOUNDS` (of ``constants`` when
    given); ``on_eval`` hears each evaluation's objective."""
    keys = {k: b for k, b in BOUNDS.items() if constants is None or k in constants}
    # constants at zero (no prior fit) start inside their range
    cal = start.replace(
        **{k: math.sqrt(lo * hi) for k, (lo, hi) in keys.items() if getattr(start, k) <= 0.0}
    )
    best = objective(scores(cases, cal))
    step = 0.4  # log-space step
    for rnd in range(rounds):
        improved = False
        for key, (lo, hi) in keys.items():
            for direction in (+1.0, -1.0):
                while True:
                    cur = getattr(cal, key)
                    cur = min(max(cur, lo), hi)
                    trial_v = min(max(cur * math.exp(direction * step), lo), hi)
                    if math.isclose(trial_v, cur):
                        break
                    trial = cal.replace(**{key: trial_v})
                    val = objective(scores(cases, trial))
                    if on_eval is not None:
                        on_eval(val)
                    if val < best - 1e-6:
                        best, cal, improved = val, trial, True
                        if verbose:
                            print(f"  round {rnd} {key} = {trial_v:.4g}: objective {val:.4f}")
                    else:
                        break
        step *= 0.5
        if not improved and step < 0.05:
            break
    return cal


def main(argv: list[str] | None = None) -> None:
    """Fits the serving constants on a file of published inference results and prints them with
    the scores (``--write`` stores them in calibration.json)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    ap.add_argument("--write", action="store_true", help="store the fitted keys")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    cases = load_cases(args.runs)
    start = default_calibration()
    print(f"{len(cases)} rows; start {scores(cases, start)}")
    cal = fit(cases, start, rounds=args.rounds)
    final = scores(cases, cal)
    print(f"fitted in {time.perf_counter() - t0:.0f} s: {final}")
    fitted = {k: getattr(cal, k) for k in BOUNDS}
    print(json.dumps(fitted, indent=2))
    if args.write:
        target = Path(__file__).with_name("calibration.json")
        data = json.loads(target.read_text()) if target.is_file() else {}
        data.update(fitted)
        target.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        print(f"wrote {len(fitted)} keys to {target}")


if __name__ == "__main__":
    main()
