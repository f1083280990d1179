"""Scaling curves: the best plan at each GPU count from 8 (from 1 below 8) to N, and where
efficiency goes.

Strong scaling keeps the global batch; weak scaling grows it with the GPU count (the batch
given is the one at the largest count; smaller counts get it scaled down proportionally,
see :func:`weak_batch`). Efficiency is tokens/s per GPU relative to the first point
where a plan fits; the "growing term" is the step-time term whose share grew most since
that point (where efficiency is above 1, the term whose share shrank most, as "gain: ...").
A count where nothing fits has no figures (None), only the reason.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from gpuscale.calibrate import Calibration
from gpuscale.errors import InputError
from gpuscale.perf.plan import Workload
from gpuscale.search.plans import search_plans


def weak_batch(batch: int, n: int, total: int) -> int:
    """The weak-scaling global batch at ``n`` of ``total`` GPUs: ``batch x n / total`` when
    that is whole, else that rounded to a multiple of a quarter of its largest power of two
    (341.3 -> 320 = 5 x 64), within 1/8 of proportional and rich in factors of two, so that
    it splits into data-parallel degrees and micro-batches as a real run's batch does."""
    exact = batch * n / total
    if exact.is_integer():
        return int(exact)
    step = max(1, 2 ** math.floor(math.log2(max(exact, 1.0))) // 4)
    return int(max(step, round(exact / step) * step))


@dataclass(frozen=True)
class ScalingPoint:
    gpus: int
    global_batch: int | None
    """Sequences per step; None where weak scaling gives less than one sequence."""
    plan: str
    gpus_used: int | None
    """GPUs the best plan occupies; the rates are per GPU of all ``gpus`` (idle ones count)."""
    step_s: float | None
    tokens_per_s_per_gpu: float | None
    mfu: float | None
    efficiency: float | None
    loss_term: str
    shares: dict[str, float]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


GAIN_TOL = 0.005
"""Efficiency above 1 + this is a gain over the first point: its column names the term
whose share shrank most."""


def gpu_counts(n_max: int, start: int = 8) -> list[int]:
    """Doublings from ``start`` (from 1 when N is below it) up to N, and N."""
    counts, n = [], start if n_max >= start else 1
    while n < n_max:
        counts.append(n)
        n *= 2
    counts.append(n_max)
    return counts


def scaling_curve(w: Workload, cal: Calibration, mode: str) -> list[ScalingPoint]:
    pts: list[ScalingPoint] = []
    base_tps: float | None = None
    base_shares: dict[str, float] = {}
    for n in gpu_counts(w.num_gpus):
        gbs = w.global_batch
        if mode == "weak" and n < w.num_gpus:
            exact = w.global_batch * n / w.num_gpus
            if exact < 1.0:
                # a batch rounded up to one sequence would make this point a strong-scaling
                # step from the next: weak scaling starts where a sequence fits
                why = f"none: the weak-scaling batch here is {exact:.3g} sequences, less than one"
                pts.append(ScalingPoint(n, None, why, None, None, None, None, None, "", {}))
                continue
            gbs = weak_batch(w.global_batch, n, w.num_gpus)
        wn = replace(w, num_gpus=n, global_batch=gbs, fabric=replace(w.fabric, total_gpus=n))
        try:
            # every GPU busy when some plan allows it
            res = search_plans(wn, cal, exact_gpus=True)
        except InputError as exc:
            pts.append(
                ScalingPoint(n, gbs, f"none: {exc.valid}", None, None, None, None, None, "", {})
            )
            continue
        e, i = res.estimate, res.best
        step = float(e.step_s[i])
        shares = {k.removesuffix("_s"): float(v[i]) / step for k, v in e.step.terms().items()}
        used = int(e.plans.gpus_used()[i])
        # per GPU of the whole count: GPUs the plan leaves idle are capacity lost too
        tps = float(e.tokens_per_s_per_gpu[i]) * used / n
        if base_tps is None:
            base_tps, base_shares = tps, shares
        grow = {k: shares[k] - base_shares.get(k, 0.0) for k in shares if k != "compute"}
        # faster per GPU than the first point (a plan that no longer recomputes, a smaller
        # bubble): name the term that shrank, not the one the shares push up
        gained = tps > base_tps * (1.0 + GAIN_TOL)
        term = (min if gained else max)(grow, key=grow.__getitem__)
        moved = grow[term]
        loss_txt = (
            f"{'gain: ' if gained else ''}{term.replace('_', ' ')} {100 * moved:+.1f} pts"
            if abs(moved) > 0.005 and (moved < 0) == gained
            else "-"
        )
        if used < n:
            loss_txt = f"{n - used} of {n} GPUs idle (no plan uses all)" + (
                "" if loss_txt == "-" else f"; {loss_txt}"
            )
        pts.append(
            ScalingPoint(
                n,
                gbs,
                e.plans.label(i),
                used,
                step,
                tps,
                float(e.mfu[i]) * used / n,
                tps / base_tps,
                loss_txt,
                shares,
            )
        )
    return pts
