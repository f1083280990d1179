"""A plan search as a self-contained HTML page: every plan that fits, its throughput against
its memory, coloured by parallel layout, with the ranked table and why the best wins.

The design space at a glance: which layouts reach the best throughput, how close the
runners-up are, and what memory each leaves free. plotly.js is inlined, so the page opens
offline (written by :func:`gpuscale.report.page.write_page`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from markupsafe import Markup

from gpuscale.report.page import check_target, template, write_page
from gpuscale.search.plans import SearchResult, explain
from gpuscale.units import GiB, fmt_bytes, fmt_time

PAGE = template(
    """{% extends "head" %}
{% block style %}td:nth-child(2), th:nth-child(2) { text-align: left; }{% endblock %}
{% block body %}
<p>{{ counts }}</p>
<p class="note">Each point is a plan that fits in memory: tokens/s per GPU it runs on against
its memory per GPU, coloured by its tensor- and pipeline-parallel degrees. The plans differ
further in data, context and expert parallelism, interleaving, micro-batch, recomputation
and optimizer sharding (hover for the whole plan). The dashed line is the GPU's memory.</p>
{{ figure }}
<h2>The fastest plans</h2>
<table><tr>{% for h in header %}<th>{{ h }}</th>{% endfor %}</tr>
{% for r in rows %}<tr>{% for c in r %}<td>{{ c }}</td>{% endfor %}</tr>
{% endfor %}</table>
<p>{{ why }}</p>
{% endblock %}
"""
)

MAX_POINTS = 20000
"""Plans drawn at most (the fastest first), to keep the page light."""


def search_figure(res: SearchResult) -> go.Figure:
    """Tokens/s per GPU against memory per GPU for the plans that fit (the fastest
    :data:`MAX_POINTS`), one trace per TP x PP layout, fastest layouts first."""
    e, p = res.estimate, res.estimate.plans
    idx = np.asarray(res.order[:MAX_POINTS], dtype=np.int64)
    layouts: dict[str, list[int]] = {}
    for i in idx:
        layouts.setdefault(f"TP{int(p.tp[i])} PP{int(p.pp[i])}", []).append(int(i))
    fig = go.Figure()
    for name, members in layouts.items():
        fig.add_trace(
            go.Scattergl(
                x=[float(e.memory.total[i]) / GiB for i in members],
                y=[float(e.tokens_per_s_per_gpu[i]) for i in members],
                mode="markers",
                name=name,
                marker={"size": 6, "opacity": 0.7},
                text=[p.label(i) for i in members],
                hovertemplate="%{text}<br>%{y:,.0f} tokens/s per GPU, %{x:.1f} GiB<extra></extra>",
            )
        )
    best = res.best
    fig.add_trace(
        go.Scatter(
            x=[float(e.memory.total[best]) / GiB],
            y=[float(e.tokens_per_s_per_gpu[best])],
            mode="markers",
            name="best plan",
            marker={"size": 16, "symbol": "star", "color": "#222222"},
            text=[p.label(best)],
            hovertemplate="best: %{text}<extra></extra>",
        )
    )
    cap = float(e.memory.capacity) / GiB
    fig.add_vline(x=cap, line_dash="dash", annotation_text=f"GPU memory {cap:.1f} GiB")
    fig.update_xaxes(title_text="memory per GPU (GiB)")
    fig.update_yaxes(title_text="tokens/s per GPU it runs on")
    fig.update_layout(height=650, legend={"title": {"text": "layout"}})
    return fig


def write_search_report(path: Path, res: SearchResult, top: int) -> None:
    """Write the HTML page of a plan search to ``path`` (whole, or not at all)."""
    check_target(path)  # before the page is built
    e = res.estimate
    w = e.workload
    header = ("#", "plan", "GPUs used", "step", "tokens/s/GPU used", "MFU", "memory/GPU")
    rows = [
        (
            str(r),
            e.plans.label(i),
            f"{int(e.plans.gpus_used()[i]):,}",
            fmt_time(float(e.step_s[i])),
            f"{e.tokens_per_s_per_gpu[i]:,.0f}",
            f"{100 * e.mfu[i]:.1f}%",
            fmt_bytes(float(e.memory.total[i])),
        )
        for r, i in enumerate(res.top(top), 1)
    ]
    shown = min(len(res.order), MAX_POINTS)
    html = PAGE.render(
        title=f"Parallelism plans for {w.model.name} on {w.num_gpus:,} x {w.gpu.name}",
        workload=(
            f"{w.model.name}, sequence {w.seq_len:,}, global batch {w.global_batch:,}, "
            f"{w.precision}, {w.system.name}."
        ),
        counts=(
            f"{len(res.order):,} of {res.evaluated:,} plans fit ({res.valid:,} valid); "
            f"the fastest {shown:,} are drawn."
        ),
        figure=Markup(search_figure(res).to_html(full_html=False, include_plotlyjs=True)),
        header=header,
        rows=rows,
        why=explain(res),
    )
    write_page(path, html)
