"""Parallelism plan search: enumerate every valid plan, evaluate all at once, rank.

The plans are :mod:`gpuscale.search.space`'s (every combination of the knobs not fixed);
the whole set is evaluated as arrays: memory for every valid plan, step time for those that
fit. A plan may leave GPUs idle when no exact factorisation exists (e.g. 5,128 GPUs with a
global batch of 2,520); ``gpus_used`` says how many it uses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.errors import InputError
from gpuscale.perf.memory import MemoryBreakdown, memory_breakdown
from gpuscale.perf.plan import RECOMPUTE, SHARDING, BoolArray, Plans, Workload
from gpuscale.perf.training import TrainingEstimate, estimate
from gpuscale.perf.validity import check_degrees, divisors, validity
from gpuscale.search.space import enumerate_plans
from gpuscale.units import GiB

__all__ = ["CHUNK", "LAYOUT", "SearchResult", "enumerate_plans", "same_layout", "search_plans"]


@dataclass(frozen=True)
class SearchResult:
    estimate: TrainingEstimate
    """The plans that fit in memory, unsorted (every valid plan when none fits and the
    search was asked to rank them anyway)."""
    order: np.ndarray
    """Indices into ``estimate`` of the plans that fit, fastest first."""
    evaluated: int
    """Plans enumerated and evaluated (valid or not)."""
    valid: int
    """Plans that passed the validity rules (their memory was evaluated)."""

    @property
    def best(self) -> int:
        return int(self.order[0])

    def top(self, n: int) -> list[int]:
        return [int(i) for i in self.order[:n]]

    def vs_best(self, i: int) -> float:
        """Plan ``i``'s step time over the best's, less one (0 for the best): the gap the
        explanation, the table's "vs #1" and the plan-ranking check measure."""
        step = self.estimate.step_s
        return float(step[i] / step[self.best] - 1.0)

    def ranks(self, n: int) -> list[str]:
        """The top ``n`` plans' ranks as shown: "=2" for each of plans that tie (the same step
        time to the microsecond and memory to the kilobyte, as the ranking rounds them): plans
        the model cannot tell apart."""
        e = self.estimate
        top = self.top(n)
        keys = [(round(float(e.step_s[i]), 6), round(float(e.memory.total[i]), -3)) for i in top]
        count = Counter(keys)
        first: dict[tuple[float, float], int] = {}
        for r, k in enumerate(keys, 1):
            first.setdefault(k, r)
        return [f"={first[k]}" if count[k] > 1 else str(r) for r, k in enumerate(keys, 1)]

    def runner_up(self) -> int | None:
        """The fastest plan whose parallel layout (degrees, micro-batch) differs from the best."""
        p = self.estimate.plans
        b = self.best
        for i in self.order[1:]:
            if not same_layout(p, int(i), b):
                return int(i)
        return int(self.order[1]) if len(self.order) > 1 else None

    def rank_of(self, i: int) -> int:
        """Plan ``i``'s place in the ranking, from 1."""
        return int(np.flatnonzero(self.order == i)[0]) + 1

    def even_twin(self, i: int) -> int | None:
        """The ranked plan that is plan ``i`` with its layers placed evenly (None when ``i``
        is even or its even twin is not ranked: it did not fit)."""
        p = self.estimate.plans
        if int(p.split[i]) == 0:
            return None
        same = np.ones(len(p), dtype=bool)
        for f in fields(p):
            if f.name != "split":
                same &= getattr(p, f.name) == getattr(p, f.name)[i]
        twins = np.flatnonzero(same & (p.split == 0))
        return int(twins[0]) if len(twins) else None


LAYOUT = ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs")
"""What makes a plan's parallel layout: its degrees, interleaving and micro-batch."""


def same_layout(p: Plans, i: int, j: int) -> bool:
    """Whether plans ``i`` and ``j`` share their parallel layout (:data:`LAYOUT`)."""
    return all(getattr(p, k)[i] == getattr(p, k)[j] for k in LAYOUT)


def search_plans(
    w: Workload,
    cal: Calibration,
    fixed: dict[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
    require_fit: bool = True,
    exact_gpus: bool = False,
    extra_dp: Collection[int] = (),
) -> SearchResult:
    """Evaluate every valid plan and rank those that fit by step time.

    ``require_fit=False`` ranks all plans when none fits (used to reproduce runs that did
    run); ``exact_gpus`` keeps only plans using every GPU when any such plan exists;
    ``extra_dp``: data-parallel degrees to try beside the search's own.
    """
    check_degrees(w, fixed or {})
    plans = enumerate_plans(w, fixed, extra_dp)
    evaluated = len(plans)
    if evaluated == 0:
        raise InputError("plan", _fixed_text(fixed), _no_plan_reason(w, fixed))
    ok, rules = validity(w, plans)
    if not ok.any():
        raise InputError("plan", _fixed_text(fixed), _no_plan_reason(w, fixed, rules))
    _check_shard_group(w, plans, ok, w.shard_group)
    if exact_gpus and (ok & (plans.gpus_used() == w.num_gpus)).any():
        ok &= plans.gpus_used() == w.num_gpus
    plans = plans.take(ok)
    valid = len(plans)
    # memory first: only a plan that fits needs its step time
    mems = [memory_breakdown(w, plans.take(idx), cal) for idx in _chunks(valid)]
    mem = mems[0] if len(mems) == 1 else _join_memory(mems)
    # partial recompute that recomputes no layer, or every layer, repeats the none / full plan
    # (which the search also holds unless the caller fixed the recompute mode)
    keep = np.ones(valid, dtype=bool)
    if (fixed or {}).get("recompute") is None:
        frac = mem.recompute_fraction
        keep &= ~((plans.recompute == 3) & ((frac <= 0.0) | (frac >= 1.0)))
    fits = mem.fits & keep
    if not fits.any():
        if require_fit:
            i = int(np.argmax(np.where(keep, mem.headroom, -np.inf)))
            short = -float(mem.headroom[i]) / GiB
            raise InputError(
                "gpus",
                w.num_gpus,
                f"too few for {w.model.key}: no plan fits in "
                f"{w.memory_capacity / GiB:.1f} GiB per GPU; the closest "
                f"({plans.label(i)}) is short by {short:.1f} GiB — add GPUs or use a "
                "larger-memory GPU",
            )
        fits = keep
    kept = np.flatnonzero(fits)
    chunks = []
    for idx in _chunks(len(kept)):
        sel = kept[idx]
        chunks.append(estimate(w, plans.take(sel), cal, _take_memory(mem, sel)))
        if progress is not None:
            progress(int(idx[-1]) + 1, len(kept))
    est = chunks[0] if len(chunks) == 1 else _combine(chunks)
    # fastest first; plans within a microsecond of each other, the one with less memory,
    # then the simpler one (fewer context-parallel ranks, then fewer pipeline stages)
    plans_e = est.plans
    order = np.lexsort(
        (plans_e.pp, plans_e.cp, np.round(est.memory.total, -3), np.round(est.step_s, 6))
    )
    return SearchResult(est, order, evaluated, valid)


CHUNK = 200_000
"""Plans evaluated per array pass, which bounds the search's memory."""


def _chunks(n: int) -> list[np.ndarray]:
    return [np.arange(a, min(a + CHUNK, n)) for a in range(0, n, CHUNK)]


def _rebuild(
    objs: list[Any], cls: Any, arrays: Callable[[list[np.ndarray]], np.ndarray], **extra: Any
) -> Any:
    """A ``cls`` dataclass whose every per-plan array is ``arrays`` of the objects' arrays
    (``np.concatenate`` to join chunks, an index to keep a subset), a field that is itself
    such a dataclass (a step's ``pace``) rebuilt the same way; ``extra`` fields as given."""
    cols: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in extra:
            continue
        values = [getattr(o, f.name) for o in objs]
        if is_dataclass(values[0]):
            cols[f.name] = _rebuild(values, type(values[0]), arrays)
        else:
            cols[f.name] = arrays(values)
    return cls(**cols, **extra)


def _take_memory(mem: MemoryBreakdown, idx: np.ndarray) -> MemoryBreakdown:
    """The memory breakdown of the plans at ``idx``."""
    out: MemoryBreakdown = _rebuild(
        [mem], MemoryBreakdown, lambda a: a[0][idx], capacity=mem.capacity
    )
    return out


def _join_memory(mems: list[MemoryBreakdown]) -> MemoryBreakdown:
    out: MemoryBreakdown = _rebuild(
        mems, MemoryBreakdown, np.concatenate, capacity=mems[0].capacity
    )
    return out


def _check_shard_group(w: Workload, plans: Plans, ok: BoolArray, group: int) -> None:
    """A fixed hybrid-sharding group that no valid plan's data-parallel ranks split into
    (every one would shard over all its ranks) is refused rather than read as a limit on
    data parallelism."""
    if not group or group >= w.num_gpus:
        return
    ranks = plans.dp[ok] * plans.cp[ok]
    if (ranks > group).any():
        return
    fit = [g for g in divisors(w.num_gpus)[:-1] if g > 1]
    raise InputError(
        "shard-group",
        group,
        f"a group some plan's dp x cp data-parallel ranks split into: on {w.num_gpus:,} GPUs "
        f"a divisor ({', '.join(map(str, fit[:8]))}{', ...' if len(fit) > 8 else ''}), "
        f"{w.num_gpus:,} or more for full sharding, or 0",
    )


def _fixed_text(fixed: dict[str, Any] | None) -> str:
    """The fixed knobs as a user gave them: recompute and sharding by name, not index."""
    names = {"recompute": RECOMPUTE, "sharding": SHARDING}

    def shown(k: str, v: Any) -> Any:
        return names[k][int(v)] if k in names and isinstance(v, int | np.integer) else v

    # a shard group of 0 (all data-parallel ranks) is no hybrid sharding: nothing to show
    given = {k: v for k, v in (fixed or {}).items() if v is not None and (v or k != "shard_group")}
    text = ", ".join(f"{k}={shown(k, v)}" for k, v in given.items())
    return text or "(free)"


def _no_plan_reason(
    w: Workload,
    fixed: dict[str, Any] | None,
    rules: list[tuple[np.ndarray, str]] | None = None,
) -> str:
    """Why no plan is valid: the rules every candidate breaks, else the ones most break."""
    where = (
        f"for {w.model.key} on {w.num_gpus} GPUs with global batch {w.global_batch} and "
        f"sequence {w.seq_len}"
    )
    fx = fixed or {}
    model_par = int(np.prod([int(fx.get(k) or 1) for k in ("tp", "pp", "cp")]))
    if rules is None and model_par > w.num_gpus:
        return f"no plan {where}: tp x pp x cp = {model_par} is more than the {w.num_gpus} GPUs"
    mbs = int(fx.get("mbs") or 0)
    dps = [int(fx["dp"])] if fx.get("dp") else range(1, w.num_gpus // model_par + 1)
    if rules is None and mbs and all(w.global_batch % (d * mbs) for d in dps):
        if fx.get("dp"):
            return (
                f"no plan {where}: dp x micro-batch = {fx['dp']} x {mbs} = {fx['dp'] * mbs} "
                f"does not divide the global batch {w.global_batch}"
            )
        return (
            f"no plan {where}: micro-batch {mbs} divides no data-parallel rank's share of the "
            f"global batch (dp from 1 to {w.num_gpus // model_par} with tp x pp x cp = "
            f"{model_par})"
        )
    if rules is None:
        # nothing to enumerate: the fixed degrees leave no split of the GPUs and the batch
        return (
            f"no plan {where}: the fixed degrees leave no data-parallel size that divides "
            "the GPUs and the global batch"
        )
    broken = [text for mask, text in rules if not mask.any()]
    if not broken:
        counts = sorted(((int((~mask).sum()), text) for mask, text in rules), reverse=True)
        broken = [text for n, text in counts if n > 0]
        return (
            f"no plan {where}: each candidate breaks at least one of: {'; '.join(broken[:3])}"
            + (f" (and {len(broken) - 3} more rules)" if len(broken) > 3 else "")
        )
    how = "the fixed knobs break" if fixed else "every plan breaks"
    return f"no plan {where}: {how}: {'; '.join(broken)}"


def _combine(chunks: list[TrainingEstimate]) -> TrainingEstimate:
    """One estimate of the chunks' plans, in order."""
    from gpuscale.perf.step import StepBreakdown

    cat = np.concatenate
    first = chunks[0]
    return TrainingEstimate(
        workload=first.workload,
        plans=_rebuild([c.plans for c in chunks], Plans, cat),
        memory=_join_memory([c.memory for c in chunks]),
        step=_rebuild([c.step for c in chunks], StepBreakdown, cat),
        step_s=cat([c.step_s for c in chunks]),
        tokens_per_s_per_gpu=cat([c.tokens_per_s_per_gpu for c in chunks]),
        model_tflops_per_gpu=cat([c.model_tflops_per_gpu for c in chunks]),
        mfu=cat([c.mfu for c in chunks]),
        cal=first.cal,
    )
