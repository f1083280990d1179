"""A scaling point as the cells of a table row, shared by the terminal table and the HTML
page (no plotting here, so the terminal does not import plotly)."""

from __future__ import annotations

from gpuscale.search.scaling import ScalingPoint
from gpuscale.units import fmt_time


def scaling_header(run: bool) -> tuple[str, ...]:
    """Column names; ``run``: checkpoints (and failures) are priced, so goodput shows."""
    rate = ("GPUs", "batch", "best plan", "step", "tok/s/GPU", "MFU")
    return (*rate, *(("goodput",) if run else ()), "eff.", "vs previous point")


def scaling_cells(p: ScalingPoint, run: bool, none: str) -> tuple[str, ...]:
    """One point's cells; a count with no plan shows ``none`` in place of the plan."""
    if p.step_s is None:
        return (str(p.gpus), str(p.global_batch or "-"), none, *"-" * (6 if run else 5))
    return (
        str(p.gpus),
        str(p.global_batch),
        p.plan,
        fmt_time(p.step_s),
        f"{p.tokens_per_s_per_gpu:,.0f}",
        f"{100 * (p.mfu or 0.0):.1f}%",
        *((f"{100 * (p.goodput or 0.0):.1f}%",) if run else ()),
        f"{100 * (p.efficiency or 0.0):.1f}%",
        p.loss_term,
    )
