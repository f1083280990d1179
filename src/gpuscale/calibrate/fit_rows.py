"""Fit constants on scored validation rows: a GPU's measured kernels, measured peak memory.

``gpuscale calibrate kernels`` (``benchmarks/gpu_checks.py``'s GEMMs, attention and HBM
copy, priced by ``validate/kernels.py``) and ``gpuscale calibrate memory`` (measured peaks,
``validate/memory.py``) move their constants so that the rows' predictions match the
measured figures as a whole. The loss is the soft-L1 of each row's log error
(``fit_training.LOSS_SCALE``), averaged within each kind of measurement (BF16 GEMMs, FP8
GEMMs, attention, the copy; a memory file's peaks) and summed over the kinds: each kind
weighs as one whatever its count, so that a hundred GEMM shapes do not drown the one copy.
The kernel constants' bounds are the training fit's (``fit_training.BOUNDS``): the same
constants price the step. Attention's head-dimension half point (``attn_half_dim``) is
fitted here only: the training runs cannot tell it from the GEMMs' ``gemm_half_dim``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from gpuscale.calibrate.calibration import Calibration
from gpuscale.calibrate.fit_training import BOUNDS as TRAINING_BOUNDS
from gpuscale.calibrate.fit_training import LOSS_SCALE
from gpuscale.validate.report import RowResult

KERNEL_BOUNDS: dict[str, tuple[float, float]] = {
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
} | {"attn_half_dim": TRAINING_BOUNDS["gemm_half_dim"]}
MEMORY_BOUNDS: dict[str, tuple[float, float]] = {
    # the caching allocator's fragmentation and temporaries on top of the activations
    "mem_activation_overhead": (1.0, 2.0),
    # CUDA context, NCCL and cuBLAS workspaces (device-used rows only)
    "mem_reserved_bytes": (0.0, 16.0 * 2**30),
}


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


def loss(rows: list[RowResult]) -> float:
    """The fit's objective: the sum over the kinds of measurement of their mean soft-L1."""
    return float(np.sum(residuals(rows) ** 2))


def fit_rows(
    priced_rows: Callable[[Calibration], list[RowResult]],
    start: Calibration,
    constants: Sequence[str],
    bounds: dict[str, tuple[float, float]],
    on_eval: Callable[[float], None] | None = None,
) -> Calibration:
    """The constants ``constants`` (keys of ``bounds``) that minimise :func:`residuals` of
    the scored rows ``priced_rows`` gives under each trial calibration, from ``start``."""
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
