"""Fit the training-model constants on a validation file as a whole.

    python -m gpuscale.calibrate.fit_training --runs ../shared/validation/training_runs.csv

Minimises the mean absolute log error of all scored rows together over a handful of
physically meaningful constants (GEMM and attention efficiency, HBM efficiency, the FP8
speed-up, DP overlap and fixed per-micro-batch and per-layer costs), within physical
bounds. Plans of rows with unstated degrees are re-chosen after each round. Each round first
scans every constant over a few points of its range, one at a time, then refines all
together. A constant that no row's prediction depends on (a feature absent from the file)
keeps its value. The host's two constants (:data:`HOST_CONSTANTS`) are then fitted the same
way on short steps (:data:`SHORT_STEP_RUNS`). Writes the fitted keys into
``calibration.json`` (other keys are kept).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from gpuscale.calibrate.calibration import Calibration, default_calibration
from gpuscale.perf.plan import Plans
from gpuscale.validate.report import read_rows
from gpuscale.validate.training import (
    PreparedRow,
    UnsupportedRowError,
    choose_plan,
    predict,
    prepare,
)

# constant -> (lower, upper) physical bounds
BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_eff_max": (0.5, 1.0),
    "gemm_half_dim": (16.0, 512.0),
    "gemm_tile": (64.0, 256.0),
    "attn_eff": (0.2, 0.8),
    "attn_flash2_rel": (0.3, 1.0),
    "hbm_eff": (0.5, 0.95),
    "elementwise_bytes_per_token_layer": (8.0, 40.0),
    "fp8_gemm_speedup": (1.1, 2.0),
    # at least the two FP8 copies written (rowwise and columnwise), as when the cast is fused
    # into the preceding kernel; at most a separate read plus an amax pass and both writes
    "fp8_cast_bytes": (2.0, 8.0),
    "dp_overlap": (0.0, 1.0),
    "tp_overlap": (0.0, 1.0),
    "zero3_overlap": (0.0, 1.0),
    "zero3_param_gather_Bps": (5e9, 100e9),
    "pp_overlap": (0.0, 1.0),
    "ep_overlap": (0.0, 1.0),
    "microbatch_overhead_s": (0.0, 0.02),
    "layer_overhead_s": (0.0, 0.002),
    "moe_layer_overhead_s": (0.0, 0.005),
    "moe_expert_overhead_s": (0.0, 0.0005),
    "step_overhead_s": (0.0, 0.3),
    # a layer's forward issues some 20-40 kernels: 2 ms is 50-100 us of the host's time for
    # each, more than an eager framework spends; after the cost a step (see HOST_CONSTANTS)
    "host_layer_s": (0.0, 0.002),
}

HOST_CONSTANTS = ("step_overhead_s", "host_layer_s")
"""The host's fixed cost a step and its time to issue a layer, fitted on short steps: the
validation file's steps (0.4-60 s, most of them several seconds) cannot tell a cost a step
from the costs a token (a fit moves ``step_overhead_s`` to what evens out its rows' other
misses), and none of its runs waits on the host's launches. The cost a step comes first in
the fit's scan: the launch time is a floor under each micro-batch, so the loss is flat in it
wherever the floor does not bind, and only a scan point where it binds can move it."""

FILE_CONSTANTS = tuple(n for n in BOUNDS if n not in HOST_CONSTANTS)
"""The constants fitted on the validation file: all of :data:`BOUNDS` but the host's."""

REPO = Path(__file__).resolve().parents[3]
SHORT_STEP_RUNS = REPO / "benchmarks" / "calibration" / "training_vtrain_single.csv"
"""vTrain's 1,440 measured single-node runs (GPT models of 0.2-1.3 B parameters on 2-8 A100
GPUs, 60-1,600 ms a step, TP/PP/DP 1-8, micro-batches of 1-8): the runs where the host's
costs show (README beside it)."""

LOSS_SCALE = 0.03
"""Log-error beyond which a row's pull grows linearly (soft-L1), not quadratically: small,
so the fit nears the least mean absolute error that MAPE scores."""


def _rows(path: Path) -> list[PreparedRow]:
    from gpuscale.validate.training import REQUIRED

    out = []
    for lineno, row in read_rows(path, REQUIRED):
        try:
            pr = prepare(row, f"{path.name}:line {lineno}")
        except UnsupportedRowError:
            continue
        if pr.target == "excluded" or (
            pr.convention == "unspecified" and pr.target != "tokens_per_s_per_gpu"
        ):
            continue
        out.append(pr)
    return out


def _pairs(rows: list[PreparedRow], cal: Calibration) -> list[tuple[PreparedRow, Plans]]:
    """Each row with the plan ``cal`` chooses for it (rows whose plan is invalid left out)."""
    pairs: list[tuple[PreparedRow, Plans]] = []
    for pr in rows:
        try:
            pairs.append((pr, choose_plan(pr, cal)[0]))
        except UnsupportedRowError:
            continue
    return pairs


def _residuals(
    x: np.ndarray,
    base: Calibration,
    pairs: list[tuple[PreparedRow, Plans]],
    names: list[str],
    lo: np.ndarray,
    hi: np.ndarray,
) -> np.ndarray:
    """log(predicted / measured) per row for the constants encoded in ``x`` (0..1 each)."""
    c = base.replace(**dict(zip(names, lo + x * (hi - lo), strict=True)))
    return np.array([np.log(predict(pr, pl, c) / pr.measured) for pr, pl in pairs])


SCAN = (0.02, 0.25, 0.5, 0.75, 0.98)
"""Points of each constant's range (0 = lower bound, 1 = upper) tried one constant at a time
before the local least-squares search, so that a constant whose loss has two valleys (an
overlap fraction against a fixed cost that explains the same rows) is not left in the valley
where the previous calibration happened to sit."""


def _soft_l1(r: np.ndarray, scale: float) -> float:
    """The loss least_squares minimises with loss="soft_l1": sum of 2 ((1 + z)^0.5 - 1)."""
    z = (r / scale) ** 2
    return float(np.sum(2.0 * (np.sqrt(1.0 + z) - 1.0)))


Residuals = Callable[..., np.ndarray]
""":func:`_residuals`'s signature: (x, base, pairs, names, lo, hi) -> log errors."""


def _scan(
    x: np.ndarray,
    base: Calibration,
    pairs: list[tuple[PreparedRow, Plans]],
    names: list[str],
    lo: np.ndarray,
    hi: np.ndarray,
    scale: float,
    residuals: Residuals | None = None,
) -> np.ndarray:
    """One pass of coordinate scanning over :data:`SCAN`: each constant moves to the point of
    its range with the lowest loss, the others held (``residuals``: :func:`_residuals`
    unless given)."""
    residuals = residuals if residuals is not None else _residuals
    x = x.copy()
    best = _soft_l1(residuals(x, base, pairs, names, lo, hi), scale)
    for i in range(len(names)):
        for v in SCAN:
            trial = x.copy()
            trial[i] = v
            loss = _soft_l1(residuals(trial, base, pairs, names, lo, hi), scale)
            if loss < best:
                best, x = loss, trial
    return x


def _informed(name: str, cal: Calibration, pairs: list[tuple[PreparedRow, Plans]]) -> bool:
    """Whether any row's prediction moves when the constant moves across its bounds."""
    lo, hi = BOUNDS[name]
    a, b = cal.replace(**{name: lo}), cal.replace(**{name: hi})
    return any(predict(pr, pl, a) != predict(pr, pl, b) for pr, pl in pairs)


def informed_constants(
    path: Path, cal: Calibration, constants: Sequence[str] | None = None
) -> tuple[list[str], int]:
    """The keys of :data:`BOUNDS` (of ``constants`` when given) that move some prediction of
    the file's runs under ``cal``'s plans, and the number of runs priced."""
    pairs = _pairs(_rows(path), cal)
    allowed = list(BOUNDS) if constants is None else [n for n in BOUNDS if n in constants]
    return [n for n in allowed if _informed(n, cal, pairs)], len(pairs)


def fit(
    path: Path,
    rounds: int = 2,
    loss_scale: float = LOSS_SCALE,
    start: Calibration | None = None,
    constants: Sequence[str] | None = None,
    on_eval: Callable[[float], None] | None = None,
) -> tuple[Calibration, float]:
    """Fitted constants and the mean |log error| they leave; ``start`` is where the search
    begins (the shipped calibration unless given), ``constants`` the keys of :data:`BOUNDS`
    it may move (all of them unless given); ``on_eval`` hears each evaluation's mean |log
    error| over the rows (a progress display)."""
    from scipy.optimize import least_squares  # type: ignore[import-untyped]

    def residuals(x: np.ndarray, *args: object) -> np.ndarray:
        r = _residuals(x, *args)  # type: ignore[arg-type]
        if on_eval is not None:
            on_eval(float(np.mean(np.abs(r))) if r.size else 0.0)
        return r

    rows = _rows(path)
    cal = start if start is not None else default_calibration()
    allowed = list(BOUNDS) if constants is None else [n for n in BOUNDS if n in constants]
    for _ in range(rounds):
        pairs = _pairs(rows, cal)
        # a constant no row depends on (e.g. the DeepSpeed ZeRO-3 rate without a DeepSpeed
        # ZeRO-3 row) keeps its value: a flat direction gives the optimiser no information
        names = [n for n in allowed if _informed(n, cal, pairs)]
        if not names:
            break
        lo = np.array([BOUNDS[n][0] for n in names])
        hi = np.array([BOUNDS[n][1] for n in names])
        x0 = np.array([(getattr(cal, n) - lo[i]) / (hi[i] - lo[i]) for i, n in enumerate(names)])
        x0 = _scan(np.clip(x0, 1e-3, 1 - 1e-3), cal, pairs, names, lo, hi, loss_scale, residuals)
        res = least_squares(
            residuals,
            x0,
            bounds=(0.0, 1.0),
            loss="soft_l1",
            f_scale=loss_scale,
            diff_step=1e-3,
            max_nfev=200,
            args=(cal, pairs, names, lo, hi),
        )
        cal = cal.replace(**dict(zip(names, lo + res.x * (hi - lo), strict=True)))
    # the error the fitted constants leave with the plans they choose themselves (the last
    # round's plans were chosen under the constants it started from)
    return cal, _mean_log_error(rows, cal)


def _mean_log_error(rows: list[PreparedRow], cal: Calibration) -> float:
    errs = [abs(np.log(predict(pr, pl, cal) / pr.measured)) for pr, pl in _pairs(rows, cal)]
    return float(np.mean(errs)) if errs else float("nan")


def main() -> None:
    """Fits the training-model constants on a validation file (the host's on the short steps)
    and prints them with the mean absolute log error (``--out`` or ``--write`` stores them)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--runs", type=Path, required=True)
    out = ap.add_mutually_exclusive_group()
    out.add_argument("--out", type=Path, help="write the fitted constants to this JSON file")
    out.add_argument(
        "--write", action="store_true", help="store them in the shipped calibration.json"
    )
    ap.add_argument(
        "--short-steps",
        type=Path,
        default=SHORT_STEP_RUNS,
        help=f"runs that fit the host's constants ({', '.join(HOST_CONSTANTS)})",
    )
    ap.add_argument(
        "--loss-scale",
        type=float,
        default=LOSS_SCALE,
        help="log-error beyond which a row's pull grows linearly (soft-L1), not quadratically",
    )
    args = ap.parse_args()
    for path in (args.runs, args.short_steps):
        if not path.is_file():
            ap.error(f"no such file: {path}")
    # the host's constants on the short steps, the others on the file with those held, and
    # the host's again under the file's constants (the short steps' GEMMs and attention are
    # priced with them; the file barely moves with the host's launch time)
    scale = args.loss_scale
    cal, _ = fit(args.short_steps, rounds=1, loss_scale=scale, constants=HOST_CONSTANTS)
    cal, _ = fit(args.runs, loss_scale=scale, start=cal, constants=FILE_CONSTANTS)
    cal, host_err = fit(
        args.short_steps, rounds=1, loss_scale=scale, start=cal, constants=HOST_CONSTANTS
    )
    err = _mean_log_error(_rows(args.runs), cal)
    names = ", ".join(HOST_CONSTANTS)
    print(f"{names} on {args.short_steps.name}: mean |log error| {host_err:.4f}")
    dest: Path | None = Path(__file__).with_name("calibration.json") if args.write else args.out
    if dest is None:
        print(f"mean |log error| {err:.4f} (--out FILE or --write to store the constants)")
    else:
        data = json.loads(dest.read_text()) if dest.is_file() else {}
        for n in BOUNDS:
            data[n] = round(float(getattr(cal, n)), 6)
        dest.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        print(f"mean |log error| {err:.4f}; wrote {', '.join(BOUNDS)} to {dest}")
    for n in BOUNDS:
        print(f"  {n} = {getattr(cal, n):.6g}")


if __name__ == "__main__":
    main()
