"""A plan search as a self-contained HTML page: every plan that fits, its throughput against
its memory, coloured by tensor-parallel degree, with the ranked table, why the best wins
and the best plan's Megatron-LM arguments.

The design space at a glance: which layouts reach the best throughput, how close the
runners-up are, and what memory each leaves free. plotly.js is inlined, so the page opens
offline (written by :func:`gpuscale.report.page.write_page`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from markupsafe import Markup
from plotly import colors

from gpuscale.calibrate.accuracy import Band
from gpuscale.export.megatron import megatron_args
from gpuscale.ops.reliability import FailurePolicy
from gpuscale.perf.memory import MEMORY_PARTS
from gpuscale.perf.storage import StoragePolicy
from gpuscale.report.cells import search_cells, search_header, term_label, time_to_train
from gpuscale.report.page import check_target, template, write_page
from gpuscale.search.explain import TIE_GAP, explain
from gpuscale.search.plans import SearchResult
from gpuscale.units import GiB, fmt_bytes, fmt_time

PAGE = template(
    """{% extends "head" %}
{% block style %}td:nth-child(2), th:nth-child(2) { text-align: left; }
pre { white-space: pre-wrap; }{% endblock %}
{% block body %}
<p>{{ counts }}</p>
<p class="note">Each point is a plan that fits in memory: its tokens/s per GPU, over every
GPU of the workload (GPUs a plan leaves idle count, so the fastest step is the highest
point), against its memory per GPU, coloured by tensor-parallel degree. The plans differ
further in pipeline, data, context and expert parallelism, interleaving, micro-batch,
recomputation and optimizer sharding (hover for the whole plan). The dashed line is the
memory a plan may use. The table's rates are per GPU the plan uses, as the terminal's;
"vs #1" is a plan's step time against the first's (a plan within
{{ tie_pct }} % of it is within gpuscale's plan-ranking error: measure the two against
each other).</p>
{{ figure }}
<h2>The fastest plans</h2>
<table><tr>{% for h in header %}<th>{{ h }}</th>{% endfor %}</tr>
{% for r in rows %}<tr>{% for c in r %}<td>{{ c }}</td>{% endfor %}</tr>
{% endfor %}</table>
<p class="note">"goodput" (when checkpoints and failures are priced): the share of wall time
spent in steps, net of checkpoint stalls and the work and restarts failures cost. "largest
term after compute": the step-time term other than compute that takes the most time, as a
share of the step (the breakdown of the best plan is below).</p>
<p>{{ why | code }}</p>
{% if band %}<p class="note">Expected error of each plan's predicted throughput (not of
the gaps between plans): {{ band | code }}.</p>
{% endif %}<h2>The best plan: {{ best }}</h2>
<p class="note">Memory per GPU (the fullest pipeline stage) and step time by term. Each
communication term is the time left exposed after what overlaps with compute.</p>
<table><tr><th>memory</th><th>per GPU</th></tr>
{% for name, value in memory %}<tr><td>{{ name }}</td><td>{{ value }}</td></tr>
{% endfor %}</table>
<table><tr><th>step term</th><th>time</th><th>share</th><th>what it is</th></tr>
{% for name, value, share, what in terms %}<tr><td>{{ name }}</td><td>{{ value }}</td>
<td>{{ share }}</td><td style="text-align: left">{{ what }}</td></tr>
{% endfor %}</table>
{% if train %}<p>{{ train }}</p>
{% endif %}<h2>The best plan in Megatron-LM</h2>
<p class="note">Its arguments to <code>{{ megatron_script }}</code> (the model's shape flags
come from its recipe):</p>
<pre>{{ megatron }}</pre>
{% for n in megatron_notes %}<p class="note">{{ n | code }}</p>
{% endfor %}
{% endblock %}
"""
)

MAX_POINTS = 20000
"""Plans drawn at most (the fastest first), to keep the page light."""


def _rate_all(res: SearchResult, i: int) -> float:
    """Tokens/s per GPU of all the workload's GPUs (idle ones count), the rate the plans
    are ranked by: the fastest step is the highest."""
    e = res.estimate
    return float(e.tokens_per_s_per_gpu[i]) * int(e.plans.gpus_used()[i]) / e.workload.num_gpus


def search_figure(res: SearchResult) -> go.Figure:
    """Tokens/s per GPU (of all GPUs) against memory per GPU for the plans that fit (the
    fastest :data:`MAX_POINTS`), one colour per tensor-parallel degree, the best on top."""
    e, p = res.estimate, res.estimate.plans
    idx = np.asarray(res.order[:MAX_POINTS], dtype=np.int64)
    groups: dict[int, list[int]] = {}
    for i in idx:
        groups.setdefault(int(p.tp[i]), []).append(int(i))
    fig = go.Figure()
    palette = colors.qualitative.Dark24
    for k, tp in enumerate(sorted(groups)):
        members = groups[tp]
        fig.add_trace(
            go.Scattergl(
                x=[float(e.memory.total[i]) / GiB for i in members],
                y=[_rate_all(res, i) for i in members],
                mode="markers",
                name=f"TP{tp}",
                marker={"size": 6, "opacity": 0.7, "color": palette[k % len(palette)]},
                text=[p.label(i) for i in members],
                hovertemplate="%{text}<br>%{y:,.0f} tokens/s per GPU, %{x:.1f} GiB<extra></extra>",
            )
        )
    best = res.best
    # WebGL points draw above SVG ones: the star is a WebGL trace, added last
    fig.add_trace(
        go.Scattergl(
            x=[float(e.memory.total[best]) / GiB],
            y=[_rate_all(res, best)],
            mode="markers",
            name="best plan",
            marker={"size": 18, "symbol": "star", "color": "#222222"},
            text=[p.label(best)],
            hovertemplate="best: %{text}<br>%{y:,.0f} tokens/s per GPU, %{x:.1f} GiB"
            "<extra></extra>",
        )
    )
    cap = float(e.memory.capacity) / GiB
    room = e.workload.memory_headroom
    label = f"usable memory {cap:.1f} GiB" + (
        f" ({e.workload.gpu.memory_bytes / GiB:.1f} less a {100 * room:g} % headroom)"
        if room > 0
        else ""
    )
    fig.add_vline(x=cap, line_dash="dash", annotation_text=label)
    fig.update_xaxes(title_text="memory per GPU (GiB)")
    fig.update_yaxes(title_text=f"tokens/s per GPU (of all {e.workload.num_gpus:,} GPUs)")
    fig.update_layout(height=650, legend={"title": {"text": "tensor parallel"}})
    return fig


def write_search_report(
    path: Path,
    res: SearchResult,
    top: int,
    good: dict[int, float] | None = None,
    band: Band | None = None,
    train_tokens: float | None = None,
    storage: StoragePolicy | None = None,
    failures: FailurePolicy | None = None,
) -> None:
    """Write the HTML page of a plan search to ``path`` (whole, or not at all); ``good``:
    the top plans' goodput, when failures are priced; ``band``: the expected error of
    such predictions (:mod:`gpuscale.calibrate.accuracy`)."""
    check_target(path)  # before the page is built
    e = res.estimate
    w = e.workload
    good = good or {}
    rows = [
        search_cells(res, i, r, good.get(i))
        for r, i in zip(res.ranks(top), res.top(top), strict=True)
    ]
    shown = min(len(res.order), MAX_POINTS)
    mlm = megatron_args(e, res.best)
    html = PAGE.render(
        title=f"Parallelism plans for {w.model.name} on {w.num_gpus:,} x {w.gpu.name}",
        workload=(
            f"{w.model.name}, sequence {w.seq_len:,}, global batch {w.global_batch:,}, "
            f"{w.precision}, {w.system.name}."
        ),
        counts=(
            f"{len(res.order):,} of {res.valid:,} valid plans fit ({res.evaluated:,} "
            f"tried); the fastest {shown:,} are drawn."
        ),
        figure=Markup(search_figure(res).to_html(full_html=False, include_plotlyjs=True)),
        header=search_header(bool(good), w.precision),
        rows=rows,
        why=explain(res),
        tie_pct=f"{TIE_GAP * 100:.0f}",
        megatron=mlm.line(),
        megatron_script=mlm.script,
        megatron_notes=list(mlm.notes),
        band=band.line() if band is not None else "",
        best=e.plans.label(res.best),
        memory=_memory_rows(res),
        terms=_term_rows(res),
        train=_train_line(res, train_tokens, storage, failures),
    )
    write_page(path, html)


TERM_MEANING = {
    "compute_s": "GEMMs and attention, forward and backward, on the slowest pipeline stage",
    "recompute_s": "the forward work activation recomputation runs again",
    "memory_bound_s": "norms, activations, residual adds, MoE token permutation: HBM-bound kernels",
    "quantise_s": "casting the GEMMs' inputs to FP8 or NVFP4",
    "tp_comm_s": "tensor-parallel collectives left exposed",
    "cp_comm_s": "context-parallel K/V exchange left exposed",
    "ep_comm_s": "expert-parallel token dispatch and combine left exposed",
    "pp_comm_s": "pipeline sends between stages left exposed",
    "bubble_s": "pipeline fill and drain: stages waiting for work",
    "dp_comm_s": "gradient reduction and parameter gathering left exposed",
    "optimizer_s": "the optimizer step over the GPU's share of the states",
    "grad_accum_s": "an fp32 pass over the gradients after each micro-batch (DeepSpeed's BF16 "
    "optimizer)",
    "overhead_s": "fixed costs: kernel launches, small kernels, the host's work per layer, "
    "micro-batch and step, and waiting on the host where it issues kernels slower than they run",
}
"""What each step-time term counts, as the page explains it."""


def _memory_rows(res: SearchResult) -> list[tuple[str, str]]:
    m, i = res.estimate.memory, res.best
    rows = [(k, fmt_bytes(float(getattr(m, k)[i]))) for k in MEMORY_PARTS]
    used = float(m.total[i])
    return [*rows, ("total", f"{fmt_bytes(used)} of {fmt_bytes(float(m.capacity))}")]


def _term_rows(res: SearchResult) -> list[tuple[str, str, str, str]]:
    e, i = res.estimate, res.best
    step = float(e.step_s[i])
    rows = [
        (term_label(k), fmt_time(float(v[i])), f"{100 * float(v[i]) / step:.1f}%", TERM_MEANING[k])
        for k, v in e.step.terms().items()
        if float(v[i]) > 0.0
    ]
    return [*rows, ("step", fmt_time(step), "100%", "")]


def _train_line(
    res: SearchResult,
    train_tokens: float | None,
    storage: StoragePolicy | None,
    failures: FailurePolicy | None,
) -> str:
    """The best plan's time to train on ``train_tokens``, its checkpoints and failures
    counted where priced, as the terminal says it (:func:`time_to_train`; "" without
    tokens)."""
    if train_tokens is None:
        return ""
    s = res.estimate.summary(res.best, train_tokens, storage, failures)
    return f"Time to train: {time_to_train(s, train_tokens)}."
