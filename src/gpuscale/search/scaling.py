"""Scaling curves: the best plan at each GPU count from 8 (from 1 below 8) to N, and where
efficiency goes.

Strong scaling keeps the global batch; weak scaling grows it with the GPU count (the batch
given is the one at the largest count; smaller counts get it scaled down proportionally,
see :func:`weak_batch`). Efficiency is tokens/s per GPU relative to the first point
where a plan fits. A count where nothing fits has no figures (None), only the reason.

With checkpoints (and failures) priced, the rate is the run's: the time each step's
checkpoint stall, exposed data loading and share of failures add per step is charged to
every GPU of the count, as terms ``checkpoints``, ``data_loading`` and ``failures``.

Where efficiency goes is read off GPU-time per token (GPU-seconds per training token over
every GPU of the count, the inverse of tokens/s per GPU), which is a sum of the step's
terms, each ``term_s x GPUs the plan uses / tokens per step``, and of the GPUs a plan
leaves idle, ``idle_gpus`` (``step x idle GPUs / tokens per step``). From one point to
another, the change in each term over the first point's total adds up to the change in
GPU-time per token, so the terms split a loss of efficiency (or a gain) exactly:
:func:`term_changes`. Each point names the terms that moved most since the previous point;
:func:`attribution` gives the same from the first point to the last.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.errors import InputError
from gpuscale.ops.reliability import FailurePolicy
from gpuscale.perf.plan import Workload
from gpuscale.perf.step import STEP_TERMS
from gpuscale.perf.storage import StoragePolicy
from gpuscale.perf.training import TrainingEstimate
from gpuscale.search.plans import SearchResult, search_plans


def weak_batch(batch: int, n: int, total: int) -> int:
    """The weak-scaling global batch at ``n`` of ``total`` GPUs: ``batch x n / total`` when
    that is whole, else that rounded to a multiple of a quarter of its largest power of two
    (341.3 -> 320 = 5 x 64), within 1/8 of proportional and rich in factors of two, so that
    it splits into data-parallel degrees and micro-batches as a real run's batch does.
    Below 4 sequences it is the nearest whole sequence, up to a third off proportional
    (1.31 -> 1): the point's tokens/s per GPU still counts the tokens it runs."""
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
    """The terms that moved most since the previous point that fits, in words."""
    shares: dict[str, float]
    """Each step term's share of the step."""
    gpu_s_per_token: dict[str, float]
    """Each step term's GPU-seconds per training token over all ``gpus``; with storage and
    failures priced, also ``checkpoints``, ``data_loading`` and ``failures``."""
    goodput: float | None = None
    """Share of wall time spent in steps, net of checkpoint stalls, exposed data loading
    and failures (None where they are not priced)."""
    plan_tokens_per_s_per_gpu: float | None = None
    """The best plan's tokens/s per GPU it uses, per step (``train estimate``'s figure)."""
    plan_mfu: float | None = None
    """The best plan's MFU per GPU it uses, per step (``train estimate``'s figure)."""

    def to_dict(self) -> dict[str, object]:
        """The point as JSON, its keys meaning what ``train estimate``'s mean: the step time
        ``step_time_s``; ``tokens_per_s_per_gpu`` and ``mfu`` the plan's, per GPU it uses
        and per step; ``net_tokens_per_s_per_gpu`` and ``net_mfu`` this point's over all
        its GPUs (idle ones count), net of checkpoints, data loading and failures where
        priced, which the efficiency compares."""
        d = asdict(self)
        net_tps, net_mfu = d.pop("tokens_per_s_per_gpu"), d.pop("mfu")
        tps, mfu = d.pop("plan_tokens_per_s_per_gpu"), d.pop("plan_mfu")
        out = {("step_time_s" if k == "step_s" else k): v for k, v in d.items()}
        return {
            **out,
            "tokens_per_s_per_gpu": tps,
            "mfu": mfu,
            "net_tokens_per_s_per_gpu": net_tps,
            "net_mfu": net_mfu,
        }


MOVE_TOL = 0.005
"""A term whose GPU-time per token moved by less than this share of the earlier point's
total is not named."""


def term_changes(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Each term's change in GPU-time per token from ``before`` to ``after``, over the
    total of ``before``. They sum to ``before``'s efficiency over ``after``'s, minus one."""
    total = sum(before.values())
    return {k: (after.get(k, 0.0) - before.get(k, 0.0)) / total for k in before | after}


def term_text(term: str, change: float) -> str:
    """A term's change as printed: "dp comm +4.0%"."""
    return f"{term.replace('_', ' ')} {100 * change:+.1f}%"


def describe_changes(changes: dict[str, float], most: int = 2) -> str:
    """The terms that moved most in the direction of the total change, largest first
    ("bubble +13.1%, dp comm +4.0%"; a gain in efficiency reads "gain: recompute -22.0%"),
    and the largest move against it where that is :data:`OFFSET_TOL` or more and a quarter
    of the first named ("gain: recompute -21.5%; offset by overhead +18.9%"). A total change
    under :data:`MOVE_TOL` is "no change", or "no net change" with the moves of
    :data:`OFFSET_TOL` or more that cancel (the first point, with nothing before it, shows
    "-"); past the first, terms under :data:`MOVE_TOL` are left out."""
    total = sum(changes.values())
    if abs(total) < MOVE_TOL:
        big = sorted(
            (k for k in changes if abs(changes[k]) >= OFFSET_TOL), key=lambda k: -abs(changes[k])
        )
        if not big:
            return "no change"
        return f"no net change: {', '.join(term_text(k, changes[k]) for k in big[:most])}"
    sign = 1.0 if total > 0 else -1.0
    moved = sorted((k for k in changes if sign * changes[k] > 0), key=lambda k: -sign * changes[k])
    named = moved[:1] + [k for k in moved[1:most] if sign * changes[k] > MOVE_TOL]
    text = ", ".join(term_text(k, changes[k]) for k in named)
    against = min(changes, key=lambda k: sign * changes[k])
    if -sign * changes[against] >= max(OFFSET_TOL, 0.25 * abs(changes[named[0]])):
        text += f"; offset by {term_text(against, changes[against])}"
    return text if total > 0 else f"gain: {text}"


OFFSET_TOL = 0.025
"""A term moving against the total change is named from this share of the earlier point's
GPU-time per token (a move that hides behind a larger one in the other direction)."""


def attribution(
    pts: list[ScalingPoint],
) -> tuple[ScalingPoint, ScalingPoint, dict[str, float]] | None:
    """The first and last points that fit, and each term's change in GPU-time per token
    between them (see :func:`term_changes`); None with fewer than two such points."""
    fit = [p for p in pts if p.gpu_s_per_token]
    if len(fit) < 2:
        return None
    return fit[0], fit[-1], term_changes(fit[0].gpu_s_per_token, fit[-1].gpu_s_per_token)


def gpu_counts(n_max: int, start: int = 8) -> list[int]:
    """Doublings from ``start`` (from 1 when N is below it) up to N, and N."""
    counts, n = [], start if n_max >= start else 1
    while n < n_max:
        counts.append(n)
        n *= 2
    counts.append(n_max)
    return counts


RUN_TERMS = ("checkpoints", "data_loading", "failures")
"""The GPU-time terms a point gains when the run's costs are priced (:func:`run_costs`)."""
TERMS = (
    *(name.removesuffix("_s") for name in STEP_TERMS),
    "idle_gpus",
    *RUN_TERMS,
)
"""Every GPU-time term a scaling point can hold, in the step breakdown's order."""


def run_costs(
    e: TrainingEstimate,
    i: int,
    storage: StoragePolicy | None,
    failures: FailurePolicy | None,
) -> dict[str, float] | None:
    """Seconds per step that plan ``i``'s checkpoints, exposed data loading and failures add
    to its wall time (each spent by every GPU); None when failures outrun saving and
    restarting."""
    if storage is None:
        return {}
    storage = e.resolve_storage(i, storage, failures)
    cost = e.storage(i, storage)
    out = {"checkpoints": cost.checkpoint_per_step_s, "data_loading": cost.data_exposed_s}
    if failures is not None and cost.checkpoint_every_steps:
        lost = e.reliability(i, storage, cost, failures).failure_share
        if lost >= 1.0:
            return None
        # of each second, ``lost`` goes to failures: t / (1 - lost) in all
        busy = float(e.step_s[i]) + cost.per_step_s
        out["failures"] = busy * lost / (1.0 - lost)
    return out


NET_CANDIDATES = 5
"""The fastest plans a point weighs by their net rate where the run's costs are priced."""

PLAN_KEYS = ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs", "sp", "recompute", "sharding", "split")
"""The plan columns by which a smaller point's best plan is found again at a larger one."""


def _plan_key(e: TrainingEstimate, i: int) -> tuple[int, ...]:
    return tuple(int(getattr(e.plans, k)[i]) for k in PLAN_KEYS)


def _best_net(
    res: SearchResult,
    n: int,
    storage: StoragePolicy | None,
    failures: FailurePolicy | None,
    earlier: set[tuple[int, ...]],
) -> tuple[int, dict[str, float] | None]:
    """The point's plan and its run costs (:func:`run_costs`): the fastest step where
    nothing else is priced; with checkpoints, data loading and failures, the one of the
    :data:`NET_CANDIDATES` fastest and the smaller points' best plans (``earlier``, by
    :data:`PLAN_KEYS`) that trains the most tokens a second over all ``n`` GPUs: a plan
    that leaves GPUs idle also fails less often, as failures strike the GPUs a job runs on."""
    e = res.estimate
    if storage is None:
        return res.best, run_costs(e, res.best, storage, failures)
    cands = [int(i) for i in res.order[:NET_CANDIDATES]]
    cols = [getattr(e.plans, k)[res.order] for k in PLAN_KEYS]
    for key in earlier:
        same = np.logical_and.reduce([c == v for c, v in zip(cols, key, strict=True)])
        cands += [int(res.order[j]) for j in np.flatnonzero(same)[:1]]
    best, best_rate, best_extra = res.best, -1.0, None
    for i in dict.fromkeys(cands):
        extra = run_costs(e, i, storage, failures)
        if extra is None:
            continue
        wall = float(e.step_s[i]) + sum(extra.values())
        rate = float(e.tokens_per_s_per_gpu[i]) * float(e.plans.gpus_used()[i]) / n
        rate *= float(e.step_s[i]) / wall
        if rate > best_rate * (1.0 + 1e-12):
            best, best_rate, best_extra = i, rate, extra
    return best, best_extra


def scaling_curve(
    w: Workload,
    cal: Calibration,
    mode: str,
    storage: StoragePolicy | None = None,
    failures: FailurePolicy | None = None,
) -> list[ScalingPoint]:
    """The best plan at each GPU count and its rates; with ``storage`` (and ``failures``),
    net of what checkpoints, data loading and failures cost the run."""
    pts: list[ScalingPoint] = []
    base_tps: float | None = None
    prev: dict[str, float] = {}
    best_plans: set[tuple[int, ...]] = set()  # the smaller points' best plans (PLAN_KEYS)
    for n in gpu_counts(w.num_gpus):
        gbs = w.global_batch
        if mode == "weak" and n < w.num_gpus:
            exact = w.global_batch * n / w.num_gpus
            if exact < 1.0:
                # a batch rounded up to one sequence would make this point a strong-scaling
                # step from the next: weak scaling starts where a sequence fits
                why = f"none: the weak-scaling batch here is {exact:.3g} sequences, less than one"
                pts.append(ScalingPoint(n, None, why, None, None, None, None, None, "", {}, {}))
                continue
            gbs = weak_batch(w.global_batch, n, w.num_gpus)
        wn = replace(w, num_gpus=n, global_batch=gbs, fabric=replace(w.fabric, total_gpus=n))
        try:
            # the fastest plan on n GPUs, whether or not it keeps all of them busy: the
            # ones it leaves idle are charged below (a batch of 1,000 runs faster on 500
            # of 512 GPUs than on a plan that splits it over all 512); the smaller points'
            # best plans among them (their data-parallel degrees searched), so that adding
            # GPUs never slows the best plan
            best_dp = {key[PLAN_KEYS.index("dp")] for key in best_plans}
            res = search_plans(wn, cal, extra_dp=best_dp)
        except InputError as exc:
            pts.append(
                ScalingPoint(n, gbs, f"none: {exc.valid}", None, None, None, None, None, "", {}, {})
            )
            continue
        e = res.estimate
        i, extra = _best_net(res, n, storage, failures, best_plans)
        best_plans.add(_plan_key(e, i))
        step = float(e.step_s[i])
        terms = {k.removesuffix("_s"): float(v[i]) for k, v in e.step.terms().items()}
        shares = {k: v / step for k, v in terms.items()}
        used = int(e.plans.gpus_used()[i])
        if extra is None:
            why = "none: failures come before the run can save and restart"
            pts.append(ScalingPoint(n, gbs, why, None, None, None, None, None, "", {}, {}, 0.0))
            continue
        wall = step + sum(extra.values())
        # per GPU of the whole count: GPUs the plan leaves idle are capacity lost too, and
        # so is the time every GPU spends saving, reading ahead of the step, or failing
        tps = float(e.tokens_per_s_per_gpu[i]) * used / n * step / wall
        # GPU-seconds per token of the GPUs the plan runs on, term by term, of the ones it
        # leaves idle for the whole step, and of every GPU for the run's other costs:
        # together 1 / (tokens/s per GPU of all n)
        tokens_step = gbs * w.seq_len
        gpu_s = {k: v * used / tokens_step for k, v in terms.items()}
        gpu_s["idle_gpus"] = step * (n - used) / tokens_step
        gpu_s |= {k: v * n / tokens_step for k, v in extra.items()}
        if base_tps is None:
            base_tps = tps
        loss_txt = describe_changes(term_changes(prev, gpu_s)) if prev else "-"
        prev = gpu_s
        if used < n:
            fill = bool((e.plans.gpus_used() == n).any())
            faster = "faster" if storage is None else "more tokens a second, net of its run costs,"
            why = f"{faster} than the plans using all" if fill else "no plan uses all"
            loss_txt = f"{n - used} of {n} GPUs idle ({why})" + (
                "" if loss_txt in ("-", "no change") else f"; {loss_txt}"
            )
        pts.append(
            ScalingPoint(
                n,
                gbs,
                e.plans.label(i),
                used,
                step,
                tps,
                float(e.mfu[i]) * used / n * step / wall,
                tps / base_tps,
                loss_txt,
                shares,
                gpu_s,
                step / wall if storage is not None else None,
                float(e.tokens_per_s_per_gpu[i]),
                float(e.mfu[i]),
            )
        )
    return pts
