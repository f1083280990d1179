"""A scaling point as the cells of a table row, shared by the terminal table and the HTML
page (no plotting here, so the terminal does not import plotly)."""

from __future__ import annotations

from typing import Any

from gpuscale.search.plans import SearchResult
from gpuscale.search.scaling import ScalingPoint, attribution, term_text
from gpuscale.units import YEAR_S, fmt_bytes, fmt_count, fmt_time

SHOWN = 0.0005
"""The smallest change a term's share shows at one decimal of a percent."""


def mfu_column(precision: str) -> str:
    """The MFU column's name, with the dense peak it is a share of (an FP8 run's MFU is of
    the FP8 peak, half what the same speed is of the BF16 one)."""
    return f"MFU ({precision} peak)"


def scaling_header(run: bool, precision: str) -> tuple[str, ...]:
    """Column names; ``run``: checkpoints (and failures) are priced, so goodput shows, and
    the rates are net of that time (marked, since a search or an estimate gives them per
    step); ``precision``: the run's, whose dense peak MFU is a share of."""
    mfu = mfu_column(precision)
    rates = ("tok/s/GPU net", f"{mfu} net") if run else ("tok/s/GPU", mfu)
    return (
        "GPUs",
        "batch (seqs)",
        "best plan",
        "step",
        *rates,
        *(("goodput",) if run else ()),
        "eff.",
        "vs previous point",
    )


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


def scaling_summary(pts: list[ScalingPoint]) -> str | None:
    """Where efficiency went from the first point that fits to the last, by term: every
    term that shows at one decimal of a percent, and what the others and the rounding
    leave, so that the listed figures add up to the total as printed (None with fewer than
    two points that fit)."""
    span = attribution(pts)
    if span is None:
        return None
    first, last, changes = span
    costs = {k: v for k, v in changes.items() if v >= SHOWN}
    gains = {k: v for k, v in changes.items() if v <= -SHOWN}
    total = round(100 * sum(changes.values()), 1)
    listed = sum(round(100 * v, 1) for v in (*costs.values(), *gains.values()))
    rest = round(total - listed, 1)
    parts = [
        f"{label} " + ", ".join(term_text(k, v) for k, v in items)
        for label, items in (
            ("costs", sorted(costs.items(), key=lambda kv: -kv[1])),
            ("savings", sorted(gains.items(), key=lambda kv: kv[1])),
        )
        if items
    ]
    if rest:
        parts.append(f"other terms and rounding {rest:+.1f}%")
    return (
        f"From {first.gpus:,} to {last.gpus:,} GPUs, GPU-time per token changes "
        f"{total:+.1f}% (efficiency {100 * (last.efficiency or 0):.1f}%); by term, as a "
        f"share of the first point's: {'; '.join(parts) or 'no term moves'}{_peak(pts)}"
    )


def _peak(pts: list[ScalingPoint]) -> str:
    """Where a point between the first and the last gets the most tokens/s per GPU (the
    first is often a plan that barely fits, so efficiency above 100 % follows): that point,
    and the last point's throughput per GPU as a share of it; "" when the first or the
    last is the best."""
    fit = [p for p in pts if p.step_s is not None and p.tokens_per_s_per_gpu]
    if len(fit) < 3:
        return ""
    best = max(fit, key=lambda p: p.tokens_per_s_per_gpu or 0.0)
    if best is fit[0] or best is fit[-1]:
        return ""
    peak, last = best.tokens_per_s_per_gpu or 0.0, fit[-1].tokens_per_s_per_gpu or 0.0
    return (
        f". The most tokens/s per GPU is at {best.gpus:,} GPUs ({peak:,.0f}); "
        f"{fit[-1].gpus:,} GPUs reach {100 * last / peak:.1f}% of it"
    )


def search_header(good: bool, precision: str) -> tuple[str, ...]:
    """Column names of the ranked plans; ``good``: their goodput is priced; ``precision``:
    the run's, whose dense peak MFU is a share of."""
    rate = ("#", "plan", "GPUs used", "step", "vs #1", "tokens/s/GPU used", mfu_column(precision))
    return (*rate, *(("goodput",) if good else ()), "memory/GPU", "largest term after compute")


def search_cells(res: SearchResult, i: int, rank: str, good: float | None) -> tuple[str, ...]:
    """One ranked plan's cells (``good``: its goodput, None when not priced)."""
    e = res.estimate
    terms = {k: float(v[i]) for k, v in e.step.terms().items() if k != "compute_s"}
    worst = max(terms, key=lambda k: terms[k])
    return (
        rank,
        e.plans.label(i),
        str(int(e.plans.gpus_used()[i])),
        fmt_time(float(e.step_s[i])),
        "-" if i == res.best else f"{100 * res.vs_best(i):+.1f}%",
        f"{e.tokens_per_s_per_gpu[i]:,.0f}",
        f"{100 * e.mfu[i]:.1f}%",
        *((f"{100 * good:.1f}%",) if good is not None else ()),
        fmt_bytes(float(e.memory.total[i])),
        f"{term_label(worst)} {100 * terms[worst] / float(e.step_s[i]):.0f}%",
    )


def term_label(key: str) -> str:
    """A step term's name as the tables print it: ``tp_comm_s`` is "tp comm"; the host's and
    small kernels' fixed costs are "fixed overhead"."""
    return "fixed overhead" if key == "overhead_s" else key.removesuffix("_s").replace("_", " ")


NEVER_S = 100.0 * YEAR_S
"""A time to train with failures priced beyond which the figure is said as what it means:
failures and restarts leave the run almost no time to train."""


def fmt_hours(h: float) -> str:
    """GPU-hours as a count: whole hours with thousands grouped, two significant figures
    under ten ('0.52')."""
    return f"{h:,.0f}" if h >= 10 else f"{h:.2g}"


def time_to_train(s: dict[str, Any], train_tokens: float) -> str:
    """The time to train ``train_tokens`` of an estimate's summary ``s``, with its steps,
    checkpoints, failures and GPU-hours (of the GPUs the plan uses and, where it leaves
    some idle, of all); or why there is none: the plan does not fit, or failures leave the
    run no (or almost no) time to train. The terminal and the HTML page say the same."""
    if not s["fits"]:
        return "none: the plan does not fit in memory"
    if s["time_to_train_s"] is None:
        return (
            "never: failures come before the run can save and restart; save more often, "
            "faster, or on fewer nodes"
        )
    if "reliability" in s and s["time_to_train_s"] > NEVER_S:
        return (
            f"more than {NEVER_S / YEAR_S:,.0f} years: "
            f"{100 * s['reliability']['goodput']:.2g}% of wall time trains; restart faster, "
            "or run on fewer GPUs"
        )
    steps = int(s["train_steps"])
    return (
        f"{fmt_time(s['time_to_train_s'])} ({steps:,} step{'' if steps == 1 else 's'}, "
        + (f"{s['checkpoints']:,} checkpoints, " if s.get("checkpoints") else "")
        + (
            f"~{s['failures']:,.0f} failure{'' if round(s['failures']) == 1 else 's'}, "
            if s.get("failures") is not None
            else ""
        )
        + f"{fmt_hours(s['gpu_hours'])} GPU-hours of the {s['gpus_used']:,} GPUs it uses"
        + (
            f", {fmt_hours(s['gpu_hours_allocated'])} of all {s['gpus']:,}"
            if s["gpus_used"] < s["gpus"]
            else ""
        )
        + f", for {fmt_count(train_tokens)} tokens)"
    )
