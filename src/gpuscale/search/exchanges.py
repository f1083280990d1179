"""The plan search run once per context-parallel exchange (``train search --cp-comm best``).

Which exchange a context-parallel plan should run (Megatron's ``--cp-comm-type``: the ring,
Ulysses' all-to-alls or Llama 3's all-gather) depends on the plan: the ring hides its
transfers behind attention but merges partial results, the other two are exposed and
merge nothing, and the all-to-alls need whole heads on each CP rank. The search prices
every plan under one exchange (``Workload.cp_comm``); this module runs it under each and
keeps the ranking whose best plan is fastest, with each exchange's best step beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gpuscale.calibrate import Calibration
from gpuscale.errors import InputError
from gpuscale.perf.plan import CP_COMM, Workload
from gpuscale.search.plans import SearchResult, search_plans


def search_exchanges(
    w: Workload,
    cal: Calibration,
    fixed: dict[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[SearchResult, dict[str, float | None]]:
    """The search (:func:`~gpuscale.search.plans.search_plans`) under each exchange of
    :data:`~gpuscale.perf.plan.CP_COMM`: the result whose best fitting plan has the
    shortest step (the ring's on a tie), and each exchange's best step in seconds (None
    where no plan fits or none is valid with it). Raises the ring's error when no exchange
    has a valid plan."""
    results: dict[str, SearchResult] = {}
    first: InputError | None = None
    for kind in CP_COMM:
        try:
            results[kind] = search_plans(replace(w, cp_comm=kind), cal, fixed, progress=progress)
        except InputError as exc:
            first = first or exc
    if not results:
        assert first is not None
        raise first
    steps: dict[str, float | None] = {kind: None for kind in CP_COMM}
    for kind, res in results.items():
        if len(res.order):
            steps[kind] = float(res.estimate.step_s[res.best])
    timed = [k for k in CP_COMM if steps[k] is not None]
    chosen = min(timed, key=lambda k: steps[k] or 0.0) if timed else next(iter(results))
    return results[chosen], steps
