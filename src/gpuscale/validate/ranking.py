"""How well gpuscale ranks plans: pairs of measured runs of one job that differ in plan.

A plan search is only as good as the order it puts plans in. The absolute error of each
row (MAPE) does not say that: a model that is 10 % slow on every plan of a job ranks them
perfectly. Here every two scored rows of one job (for training rows, the same source,
stated precision, model, GPU and count, sequence, batch, network and compared figure:
:func:`gpuscale.validate.training_rows.job_key`) whose plans differ form a pair; the
pair is *ordered as measured* when the plan gpuscale predicts faster was measured
faster. Pairs are binned by the gap gpuscale predicts between the two plans, so the
table answers the search's question: when the best plan beats the runner-up by so
much, how often is it the faster one in fact?
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from itertools import combinations

import numpy as np

GAP_EDGES = (0.02, 0.05, 0.10, 0.20)
"""Edges of the predicted-gap bins (fractions): < 2 %, 2-5 %, 5-10 %, 10-20 %, >= 20 %."""


@dataclass(frozen=True)
class RankedRun:
    """One scored row as the ranking reads it."""

    id: str
    job: str
    plan: str
    predicted: float
    measured: float


@dataclass(frozen=True)
class GapBin:
    low: float
    high: float | None  # None: no upper edge
    pairs: int
    ordered: int

    @property
    def label(self) -> str:
        lo = f"{self.low * 100:g}"
        return f">= {lo} %" if self.high is None else f"{lo}-{self.high * 100:g} %"

    @property
    def share(self) -> float | None:
        return self.ordered / self.pairs if self.pairs else None


@dataclass(frozen=True)
class PlanRanking:
    jobs: int  # jobs with at least one pair
    pairs: int
    ordered: int
    median_ratio_error_pct: float
    """Median over the pairs of how far the predicted speed ratio of the two plans is from
    the measured one (the larger over the smaller, less one), in %."""
    bins: tuple[GapBin, ...]
    measured_ties: int  # pairs measured at the same figure: no order to get right
    predicted_ties: int  # pairs predicted at the same figure: no order given

    @property
    def share(self) -> float:
        return self.ordered / self.pairs

    def to_json(self) -> dict[str, object]:
        return {
            "jobs": self.jobs,
            "pairs": self.pairs,
            "ordered_as_measured": self.ordered,
            "share_ordered": self.share,
            "median_ratio_error_pct": self.median_ratio_error_pct,
            "measured_ties": self.measured_ties,
            "predicted_ties": self.predicted_ties,
            "by_predicted_gap": [
                {
                    "gap": b.label,
                    "low": b.low,
                    "high": b.high,
                    "pairs": b.pairs,
                    "ordered_as_measured": b.ordered,
                    "share_ordered": b.share,
                }
                for b in self.bins
            ],
        }


def _bin(gap: float) -> int:
    """Index of the bin a predicted gap (a fraction) falls in."""
    return int(np.searchsorted(GAP_EDGES, gap, side="right"))


def gap(a: float, b: float) -> float:
    """How much faster the faster of two figures is, as a fraction (120 and 100: 0.2),
    rounded to 12 decimals so that a gap on a bin's edge falls in the bin above it."""
    return round(max(a, b) / min(a, b) - 1.0, 12)


def _plans(rs: list[RankedRun]) -> list[RankedRun]:
    """One run per plan of a job: a plan measured more than once (repeat runs of one
    configuration) counts once, at the mean of its measurements, so that its pairs with
    the other plans are not counted twice."""
    by_plan: dict[str, list[RankedRun]] = {}
    for r in rs:
        by_plan.setdefault(r.plan, []).append(r)
    return [
        replace(same[0], measured=sum(r.measured for r in same) / len(same))
        for same in by_plan.values()
    ]


def plan_ranking(runs: Iterable[RankedRun]) -> PlanRanking | None:
    """Every pair of runs of one job with different plans, scored by whether the plan
    predicted faster was measured faster; None when no job has such a pair.

    The gap between two plans is the faster one's figure over the slower one's, less one
    (throughput or TFLOP/s, higher is faster). A pair measured at the same figure has no
    order to get right, and one predicted at the same figure gives none: both are left
    out and counted apart. The ratio error of a pair is how far the predicted speed ratio
    is from the measured one, the same whichever plan comes first.
    """
    jobs: dict[str, list[RankedRun]] = {}
    for r in runs:
        if r.predicted > 0 and r.measured > 0:
            jobs.setdefault(r.job, []).append(r)
    counts = [[0, 0] for _ in range(len(GAP_EDGES) + 1)]
    ratio_errors: list[float] = []
    measured_ties = predicted_ties = 0
    paired_jobs = 0
    for rs in jobs.values():
        paired = False
        for a, b in combinations(_plans(rs), 2):
            if a.measured == b.measured:
                measured_ties += 1
                continue
            if a.predicted == b.predicted:
                predicted_ties += 1
                continue
            paired = True
            c = counts[_bin(gap(a.predicted, b.predicted))]
            c[0] += 1
            c[1] += int((a.predicted > b.predicted) == (a.measured > b.measured))
            error = (a.predicted / b.predicted) / (a.measured / b.measured)
            ratio_errors.append(gap(error, 1.0) * 100.0)
        paired_jobs += paired
    if not ratio_errors:
        return None
    lows = (0.0, *GAP_EDGES)
    highs = (*GAP_EDGES, None)
    bins = tuple(GapBin(lo, hi, n, ok) for lo, hi, (n, ok) in zip(lows, highs, counts, strict=True))
    return PlanRanking(
        jobs=paired_jobs,
        pairs=sum(b.pairs for b in bins),
        ordered=sum(b.ordered for b in bins),
        median_ratio_error_pct=float(np.median(ratio_errors)),
        bins=bins,
        measured_ties=measured_ties,
        predicted_ties=predicted_ties,
    )
