"""How well gpuscale ranks plans: pairs of measured runs of one job that differ in plan.

A plan search is only as good as the order it puts plans in. The absolute error of each
row (MAPE) does not say that: a model that is 10 % slow on every plan of a job ranks them
perfectly. Here every two scored rows of one job (the same source, model, GPU and count,
sequence, batch, precision and compared figure, as :func:`ranking_key` is given them)
whose plans differ form a pair; the pair is *ordered as measured* when the plan gpuscale
predicts faster was measured faster. Pairs are binned by the gap gpuscale predicts between
the two plans, so the table answers the search's question: when the best plan beats the
runner-up by so much, how often is it the faster one in fact?
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
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
    median_ratio_error_pct: float  # |predicted ratio / measured ratio - 1|, median
    bins: tuple[GapBin, ...]
    measured_ties: int  # pairs measured at the same figure: no order to get right

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


def plan_ranking(runs: Iterable[RankedRun]) -> PlanRanking | None:
    """Every pair of runs of one job with different plans, scored by whether the plan
    predicted faster was measured faster; None when no job has two plans.

    The gap between two plans is the faster one's figure over the slower one's, less one
    (predicted figures: throughput or TFLOP/s, higher is faster). A pair gpuscale predicts
    at the same figure is not ordered; a pair measured at the same figure is left out.
    """
    jobs: dict[str, list[RankedRun]] = {}
    for r in runs:
        if r.predicted > 0 and r.measured > 0:
            jobs.setdefault(r.job, []).append(r)
    counts = [[0, 0] for _ in range(len(GAP_EDGES) + 1)]
    ratio_errors: list[float] = []
    ties = 0
    paired_jobs = 0
    for rs in jobs.values():
        paired = False
        for a, b in combinations(rs, 2):
            if a.plan == b.plan:
                continue
            measured = a.measured / b.measured
            if measured == 1.0:
                ties += 1
                continue
            paired = True
            predicted = a.predicted / b.predicted
            gap = math.exp(abs(math.log(predicted))) - 1.0
            c = counts[_bin(gap)]
            c[0] += 1
            c[1] += int((predicted > 1.0) == (measured > 1.0) and predicted != 1.0)
            ratio_errors.append(abs(predicted / measured - 1.0) * 100.0)
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
        measured_ties=ties,
    )
