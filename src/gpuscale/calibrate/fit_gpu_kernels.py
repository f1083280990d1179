"""Fit the kernel constants on one GPU's measured kernels (``benchmarks/gpu_checks.py``).

``gpuscale calibrate kernels --runs MEASURED.json`` moves the constants the measured GEMMs,
attention and HBM copy inform (``validate/kernels.py`` prices each measurement) so that the
kernels' predicted times match the measured ones as a whole. The loss is the soft-L1 of
each row's log error (``fit_training.LOSS_SCALE``), averaged within each kind of
measurement (BF16 GEMMs, FP8 GEMMs, attention, the copy) and summed over the kinds: each
kind weighs as one whatever its count, so that a hundred GEMM shapes do not drown the one
copy. The bounds are the training fit's (``fit_training.BOUNDS``): the same constants
price the step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gpuscale.calibrate.calibration import Calibration
from gpuscale.calibrate.fit_training import BOUNDS as TRAINING_BOUNDS
from gpuscale.calibrate.fit_training import LOSS_SCALE
from gpuscale.catalog import GPU
from gpuscale.validate.kernels import attention_rows, gemm_rows, hbm_rows
from gpuscale.validate.report import RowResult

BOUNDS: dict[str, tuple[float, float]] = {
    k: TRAINING_BOUNDS[k]
    for k in (
        "gemm_eff_max",
        "gemm_half_dim",
        "gemm_tile",
        "fp8_gemm_speedup",
        "attn_eff",
        "attn_flash2_rel",
        "hbm_eff",
    )
}


def priced(
    files: list[dict[str, Any]], gpu: GPU, cal: Calibration, sdpa_backend: str | None = None
) -> list[RowResult]:
    """The scored rows of every measurement under ``cal``."""
    rows = gemm_rows(files, gpu, cal) + attention_rows(files, gpu, cal, sdpa_backend)
    rows += hbm_rows(files, gpu, cal)
    return [r for r in rows if r.status == "scored"]


def _log_error(r: RowResult) -> float:
    return float(np.log(float(r.predicted or 0.0) / float(r.measured or 1.0)))


def residuals(rows: list[RowResult], scale: float = LOSS_SCALE) -> np.ndarray:
    """Per row, the square root of its soft-L1 loss 2 s^2 (sqrt(1 + (e / s)^2) - 1) divided
    by its kind's count, signed as its log error e: their sum of squares is the sum over
    the kinds of measurement of each kind's mean soft-L1 loss."""
    count: dict[str, int] = {}
    for r in rows:
        count[r.metric] = count.get(r.metric, 0) + 1
    e = np.array([_log_error(r) for r in rows])
    n = np.array([count[r.metric] for r in rows], dtype=np.float64)
    rho = 2.0 * scale**2 * (np.sqrt(1.0 + (e / scale) ** 2) - 1.0)
    out: np.ndarray = np.sign(e) * np.sqrt(rho / n)
    return out


def loss(
    files: list[dict[str, Any]], gpu: GPU, cal: Calibration, sdpa_backend: str | None = None
) -> float:
    """The fit's objective: the sum over the kinds of measurement of their mean soft-L1."""
    return float(np.sum(residuals(priced(files, gpu, cal, sdpa_backend)) ** 2))


def fit(
    files: list[dict[str, Any]],
    gpu: GPU,
    start: Calibration,
    constants: Sequence[str],
    on_eval: Callable[[float], None] | None = None,
    sdpa_backend: str | None = None,
) -> Calibration:
    """The constants ``constants`` (keys of :data:`BOUNDS`) fitted from ``start``."""
    return fit_rows(
        lambda c: priced(files, gpu, c, sdpa_backend), start, constants, BOUNDS, on_eval
    )


def fit_rows(
    priced_rows: Callable[[Calibration], list[RowResult]],
    start: Calibration,
    constants: Sequence[str],
    bounds: dict[str, tuple[float, float]],
    on_eval: Callable[[float], None] | None = None,
) -> Calibration:
    """The constants ``constants`` (keys of ``bounds``) that minimise :func:`residuals` of
    the rows ``priced_rows`` gives under each trial calibration, from ``start``."""
    from scipy.optimize import least_squares  # type: ignore[import-untyped]

    names = [n for n in bounds if n in constants]
    if not names:
        return start
    lo = np.array([bounds[n][0] for n in names])
    hi = np.array([bounds[n][1] for n in names])

    def cal_at(x: np.ndarray) -> Calibration:
        return start.replace(**dict(zip(names, lo + x * (hi - lo), strict=True)))

    def objective(x: np.ndarray) -> np.ndarray:
        r = residuals(priced_rows(cal_at(x)))
        if on_eval is not None:
            on_eval(float(np.sum(r**2)))
        return r

    x0 = np.array([(getattr(start, n) - lo[i]) / (hi[i] - lo[i]) for i, n in enumerate(names)])
    res = least_squares(
        objective,
        np.clip(x0, 1e-3, 1 - 1e-3),
        bounds=(0.0, 1.0),
        diff_step=1e-3,
        max_nfev=200,
    )
    return cal_at(res.x)
