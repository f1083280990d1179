"""A scaling curve as a self-contained HTML page: efficiency (and goodput) against the GPU
count, and where each point's GPU-time per token goes, term by term. The page embeds
plotly.js, so it opens offline (written by :func:`gpuscale.report.page.write_page`).
"""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
from markupsafe import Markup
from plotly import colors
from plotly.subplots import make_subplots

from gpuscale.calibrate.accuracy import Band
from gpuscale.perf.plan import Workload
from gpuscale.report.cells import scaling_cells, scaling_header, scaling_summary
from gpuscale.report.page import check_target, template, write_page
from gpuscale.search.scaling import TERMS, ScalingPoint

PAGE = template(
    """{% extends "head" %}
{% block style %}
td:nth-child(3), td:last-child, th:nth-child(3), th:last-child { text-align: left; }
{% endblock %}
{% block body %}
<p class="note">Efficiency is tokens/s per GPU, over every GPU of the count, relative to the
first count where a plan fits. GPU-time per token is GPU-seconds per training token: the
step's terms times the GPUs the plan runs on, over the tokens of a step, plus the GPUs it
leaves idle{% if run %}, plus the time every GPU spends saving checkpoints, reading data
beyond the step and losing work to failures (goodput is the share of wall time in
steps){% endif %}. Their sum is the inverse of tokens/s per GPU, so the bars show where a
loss of efficiency comes from.{% if band %} Expected error of each point's predicted
throughput:
{{ band }}.{% endif %}</p>
{{ figure }}
{% for mode, rows in tables.items() %}
<h2>{{ mode }} scaling: the best plan at each count</h2>
<table><tr>{% for h in header %}<th>{{ h }}</th>{% endfor %}</tr>
{% for r in rows %}<tr>{% for c in r %}<td>{{ c }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% if summaries[mode] %}<p>{{ summaries[mode] }}</p>{% endif %}
{% endfor %}
{% endblock %}
"""
)


TERM_ORDER = TERMS
"""The GPU-time terms a scaling point can hold, in the order they stack."""
TERM_COLOURS = dict(zip(TERM_ORDER, colors.qualitative.Alphabet, strict=False))
"""One colour per term in every panel (plotly's 26-colour Alphabet palette)."""
LINE_COLOURS = {"efficiency": "#222222", "goodput": "#222222"}


def _rows(pts: list[ScalingPoint], run: bool) -> list[tuple[str, ...]]:
    return [scaling_cells(p, run, p.plan.removeprefix("none: ")) for p in pts]


def _line(x: list[int], y: list[float], name: str, first: bool, **style: object) -> go.Scatter:
    """A percentage against the GPU count, one legend entry across the modes' panels."""
    return go.Scatter(
        x=x,
        y=y,
        mode="lines+markers",
        name=name,
        legendgroup=name,
        showlegend=first,
        hovertemplate="%{x:,} GPUs: %{y:.1f}%<extra>" + name + "</extra>",
        **style,
    )


def scaling_figure(curves: dict[str, list[ScalingPoint]]) -> go.Figure:
    """For each mode: efficiency and goodput against GPUs, and GPU-time per token stacked
    by term (terms that are zero at every point left out)."""
    modes = list(curves)
    fig = make_subplots(
        rows=2,
        cols=len(modes),
        subplot_titles=[
            *(f"{m} scaling: efficiency" for m in modes),
            *(f"{m} scaling: GPU-time per token by term" for m in modes),
        ],
        vertical_spacing=0.14,
    )
    shown: set[str] = set()  # one legend entry per trace name, wherever it first appears
    for col, mode in enumerate(modes, start=1):
        pts = [p for p in curves[mode] if p.step_s is not None and p.gpu_s_per_token]
        x = [p.gpus for p in pts]
        eff = [100 * (p.efficiency or 0.0) for p in pts]
        lines = [("efficiency", eff, {"color": LINE_COLOURS["efficiency"]})]
        if any(p.goodput is not None for p in pts):
            good = [100 * (p.goodput or 0.0) for p in pts]
            lines.append(("goodput", good, {"color": LINE_COLOURS["goodput"], "dash": "dash"}))
        for name, y, style in lines:
            fig.add_trace(_line(x, y, name, name not in shown, line=style), 1, col)
            shown.add(name)
        terms = [t for t in TERM_ORDER if any(p.gpu_s_per_token.get(t, 0.0) > 0 for p in pts)]
        for term in terms:
            label = term.replace("_", " ")
            fig.add_trace(
                go.Bar(
                    x=[str(g) for g in x],
                    y=[1e6 * p.gpu_s_per_token.get(term, 0.0) for p in pts],
                    name=label,
                    legendgroup=term,
                    showlegend=term not in shown,
                    marker={"color": TERM_COLOURS[term]},
                    hovertemplate="%{x} GPUs: %{y:.2f} GPU-us per token<extra>"
                    + label
                    + "</extra>",
                ),
                row=2,
                col=col,
            )
            shown.add(term)
        fig.update_xaxes(title_text="GPUs", type="log", row=1, col=col)
        pct = "% (efficiency: of the first point" + (
            "; goodput: of wall time)" if len(lines) > 1 else ")"
        )
        fig.update_yaxes(title_text=pct, row=1, col=col)
        fig.update_xaxes(title_text="GPUs", type="category", row=2, col=col)
        fig.update_yaxes(title_text="GPU-microseconds per token", row=2, col=col)
    fig.update_layout(barmode="stack", height=900, legend={"title": {"text": "curve / term"}})
    return fig


BATCH_RULE = {
    "strong": "Strong scaling: a global batch of {b:,} sequences at every GPU count.",
    "weak": "Weak scaling: the global batch grows with the GPUs, {b:,} sequences at {n:,}.",
}


def write_scaling_report(
    path: Path,
    w: Workload,
    curves: dict[str, list[ScalingPoint]],
    band: Band | None = None,
) -> None:
    """Write the HTML page for ``curves`` to ``path`` (whole, or not at all); ``band``: the
    expected error of each point's prediction (:mod:`gpuscale.calibrate.accuracy`)."""
    check_target(path)  # before the page is built
    run = any(p.goodput is not None for pts in curves.values() for p in pts)
    fig = scaling_figure(curves)
    html = PAGE.render(
        title=f"Scaling of {w.model.name} on {w.gpu.name}",
        workload=(
            f"{w.model.name}, sequence {w.seq_len:,}, {w.precision}, {w.system.name}; "
            + " ".join(BATCH_RULE[m].format(b=w.global_batch, n=w.num_gpus) for m in curves)
        ),
        run=run,
        # plotly's own markup, with plotly.js inlined so that the page works offline
        figure=Markup(fig.to_html(full_html=False, include_plotlyjs=True)),
        header=scaling_header(run, w.precision),
        tables={m: _rows(pts, run) for m, pts in curves.items()},
        summaries={m: scaling_summary(pts) for m, pts in curves.items()},
        band=band.line() if band is not None else "",
    )
    write_page(path, html)
