"""`gpuscale validate inference`: predict published serving results row by row.

Each row of the inference schema (shared/validation/README.md) becomes a deployment (model,
GPU, TP x PP, precision, engine defaults) and a workload, which the serving simulation runs:
- offline rows (``request_rate`` inf/offline, or a static batch): all requests queued at
  t = 0, scored on throughput as ``throughput_kind`` counts it (metric ``throughput``);
- online rows (a request rate, or batch 1 latency runs): Poisson arrivals at the rate (or
  one request at a time), scored on TTFT (``ttft``) and TPOT/ITL (``tpot_itl``) with the
  row's statistic (mean, median, p99).
Rows gpuscale cannot model are skipped with the reason. The three scores are reported
separately (``metric``); ``group`` is the metric and the source for the by-source table.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from gpuscale.calibrate import Calibration
from gpuscale.catalog import get_gpu, get_model
from gpuscale.errors import InputError
from gpuscale.perf.inference import build_step_model
from gpuscale.perf.kv import precision_plan
from gpuscale.perf.transformer import active_param_count
from gpuscale.sim.arrivals import Workload, concurrency, offline, poisson
from gpuscale.sim.results import ServingResult, Stat
from gpuscale.sim.serving import simulate
from gpuscale.validate.inference_rows import (
    MEASURED,
    REQUIRED,
    SCHEMA,
    RowPlan,
    UnsupportedRowError,
    plan_row,
    rejected,
)
from gpuscale.validate.numbers import positive
from gpuscale.validate.report import (
    RowResult,
    ValidationReport,
    read_rows,
    signed_error_pct,
    unread_columns,
)


def run_plan(p: RowPlan, cal: Calibration) -> ServingResult:
    """The simulated serving of a planned row; a deployment the model rejects (tp not
    dividing the heads, a sequence longer than the KV cache) raises
    :class:`UnsupportedRowError` naming the CSV column."""
    try:
        return _run_plan(p, cal)
    except InputError as exc:
        raise rejected(exc) from None


def _run_plan(p: RowPlan, cal: Calibration) -> ServingResult:
    model, gpu = get_model(p.model), get_gpu(p.gpu)
    prec = precision_plan(gpu, p.precision, p.kv)
    sm = build_step_model(
        model, gpu, prec, p.tp, p.pp, cal, p.engine, p.input_len + p.output_len, p.input_len
    )
    mem = sm.memory
    if not mem.fits and mem.kv_pool_bytes > 0:
        raise UnsupportedRowError(
            f"input_len + output_len = {p.input_len + p.output_len} tokens: one sequence "
            f"needs more than the {mem.kv_pool_bytes / 1e9:.1f} GB KV cache per GPU on "
            f"{gpu.key} at TP{p.tp} x PP{p.pp}"
        )
    if not mem.fits:
        raise UnsupportedRowError(
            f"does not fit: {mem.weights_bytes / 1e9:.1f} GB of weights per GPU leave "
            f"no KV cache on {gpu.key}"
        )
    lim = sm.limits()
    wl: Workload
    if p.mode in ("offline", "static", "saturate"):
        wl = offline(p.requests, p.input_len, p.output_len)
    elif p.mode == "poisson":
        wl = poisson(p.requests, p.rate, p.input_len, p.output_len, seed=0)
    else:
        wl = concurrency(p.requests, int(p.rate), p.input_len, p.output_len)
    return simulate(sm, lim, wl, cal.inf_request_overhead_s)


NO_KIND = "throughput_kind not stated: output_total"
STATS = "mean (avg, average), median (p50), p99"
"""The statistics a row's ttft_stat / tpot_itl_stat may name."""


STAT_WORDS = (
    (r"p99(?:\.\d|\d)|p9[0-8]\b|p95", None),  # a percentile the simulation does not report
    (r"p99", "p99"),
    (r"median|p50", "p50"),
    (r"mean|\bavg\b|average", "mean"),
)


def _pick(stat: Stat, which: str) -> float | None:
    """The statistic a cell names first ("mean (p99 in another column)" is the mean)."""
    w = which.lower()
    if (
        w.startswith("prefill latency")
        or w.startswith("decode latency")
        or w.startswith("reported")
        or w.startswith("single")
    ):
        return stat.mean
    hits = [(m.start(), name) for pat, name in STAT_WORDS for m in [re.search(pat, w)] if m]
    if not hits:
        return None
    name = min(hits, key=lambda h: h[0])[1]
    return None if name is None else {"p99": stat.p99, "p50": stat.p50, "mean": stat.mean}[name]


def weight_read_floor_s(p: RowPlan) -> float:
    """The least time a first token can take: each GPU reading its share of the weights a
    token uses (an MoE token's active experts only) from HBM once. A TTFT below it is in
    another unit; a TPOT is not checked (speculative decoding emits several tokens a
    step)."""
    model, gpu = get_model(p.model), get_gpu(p.gpu)
    prec = precision_plan(gpu, p.precision, p.kv)
    bytes_per = {"fp8": 1.0, "fp4": 0.5, "int4": 0.5}.get(prec.weights, 2.0)
    return active_param_count(model) * bytes_per / (p.tp * p.pp) / gpu.hbm_bw_Bps


def _short_source(src: str) -> str:
    s = src.split(";")[0].split(" http")[0].strip()
    return s[:70]


def validate_inference(path: Path, cal: Calibration) -> ValidationReport:
    """The inference validation report of a CSV file: each row's predicted and measured figures
    (:func:`validate_row`), and the columns no rule reads."""
    rows: list[RowResult] = []
    table = read_rows(path, REQUIRED)
    for lineno, row in table:
        rows.extend(validate_row(row, f"{path.name}:line {lineno}", cal))
    return InferenceReport("inference", rows, unread_columns(table, SCHEMA))


@dataclass(frozen=True)
class Measured:
    """A row's measured figures (None where the cell is empty)."""

    throughput: float | None
    """Tokens per second, as the row's ``throughput_kind`` counts them."""
    ttft_ms: float | None
    """Time to first token, milliseconds."""
    tpot_itl_ms: float | None
    """Time per output token or inter-token latency, milliseconds."""


@dataclass(frozen=True)
class Simulated:
    """A row's simulated serving, with what each of its results carries."""

    rid: str
    src: str
    """The row's source, shortened: the results' group."""
    plan: RowPlan
    res: ServingResult
    detail: dict[str, object]
    """The deployment and mean batch, shared by the row's scored results."""


def _ttft_unit_fault(row: dict[str, str], ttft_ms: float | None, plan: RowPlan) -> str | None:
    """Why a row's TTFT is in another unit, or None: under half the time each GPU takes to
    read its share of the weights once (:func:`weight_read_floor_s`)."""
    floor_ms = weight_read_floor_s(plan) * 1e3
    if ttft_ms is not None and ttft_ms < 0.5 * floor_ms:
        return (
            f"ttft_ms={row['ttft_ms']!r} is under half the {floor_ms:.3g} ms each GPU takes "
            "to read its weights once: check the column's unit (seconds in a ms column?)"
        )
    return None


def _predicted_throughput(kind: str, sim: Simulated) -> float | None:
    """Output tokens per second as a row's ``throughput_kind`` counts them, over all its
    replicas (``output_total``, also when unstated) or per GPU (``output_per_gpu``); None
    for a kind not modelled."""
    total = sim.res.output_tokens_per_s * sim.plan.replicas
    n_gpus = sim.plan.tp * sim.plan.pp * sim.plan.replicas
    if kind in ("output_total", ""):
        return total
    if kind == "output_per_gpu":
        return total / n_gpus
    return None


def _throughput_result(row: dict[str, str], measured: float, sim: Simulated) -> RowResult:
    """A row's throughput result: scored for an offline (or static, or saturating) run,
    reported but not scored for an online one, whose throughput follows the offered rate;
    skipped for a ``throughput_kind`` not modelled."""
    kind = re.sub(r"[\s-]+", "_", row.get("throughput_kind", "").strip().lower())
    pred = _predicted_throughput(kind, sim)
    group = f"throughput | {sim.src}"
    if pred is None:
        return RowResult.skip(
            sim.rid,
            f"throughput_kind {row.get('throughput_kind', '')!r} not modelled",
            measured,
            group,
            "throughput",
        )
    if sim.plan.mode in ("offline", "static", "saturate"):
        return RowResult(
            sim.rid,
            pred,
            measured,
            signed_error_pct(pred, measured),
            "scored",
            "; ".join([*sim.plan.notes, *([] if kind else [NO_KIND])]),
            group=group,
            metric="throughput",
            detail=sim.detail,
        )
    return RowResult(
        sim.rid,
        pred,
        measured,
        signed_error_pct(pred, measured),
        "reported",
        "online throughput follows the offered rate",
        group=group,
        metric="throughput_online",
    )


def _latency_results(row: dict[str, str], m: Measured, sim: Simulated) -> list[RowResult]:
    """A row's TTFT and TPOT/ITL results, each scored in milliseconds with the statistic
    its ``*_stat`` cell names (the mean when empty) and skipped for a statistic not
    modelled. A ``tpot_itl_stat`` naming ITL compares inter-token latency, otherwise time
    per output token."""
    out: list[RowResult] = []
    itl_stat = row.get("tpot_itl_stat", "")
    for measured, stat, which, metric in (
        (m.ttft_ms, sim.res.ttft_s, row.get("ttft_stat", ""), "ttft"),
        (
            m.tpot_itl_ms,
            sim.res.itl_s if "itl" in itl_stat.lower() else sim.res.tpot_s,
            itl_stat,
            "tpot_itl",
        ),
    ):
        if measured is None:
            continue
        pick = _pick(stat, which or "mean")
        said = [*sim.plan.notes, *([] if which else [f"{metric} statistic not stated: mean"])]
        if pick is None or math.isnan(pick):
            out.append(
                RowResult.skip(
                    sim.rid,
                    f"statistic {which!r} not modelled: one of {STATS}",
                    measured,
                    f"{metric} | {sim.src}",
                    metric,
                )
            )
            continue
        pred_ms = pick * 1e3
        out.append(
            RowResult(
                sim.rid,
                pred_ms,
                measured,
                signed_error_pct(pred_ms, measured),
                "scored",
                "; ".join(said),
                group=f"{metric} | {sim.src}",
                metric=metric,
                detail=sim.detail,
            )
        )
    return out


def validate_row(row: dict[str, str], where: str, cal: Calibration) -> list[RowResult]:
    """One serving row's results, one per figure it measures (throughput, then TTFT, then
    TPOT/ITL). The row is skipped, with one result grouped by its source, when a measured
    cell is malformed or all are empty, when it cannot be planned or simulated, or when its
    TTFT is in another unit."""
    rid, src = row["id"], _short_source(row["source"])
    try:
        m = Measured(*(positive(row, c, where) for c in MEASURED))
    except UnsupportedRowError as exc:
        return [RowResult.skip(rid, str(exc), group=src)]
    if m.throughput is None and m.ttft_ms is None and m.tpot_itl_ms is None:
        return [
            RowResult.skip(rid, "no measured throughput, TTFT or TPOT/ITL in the row", None, src)
        ]
    try:
        plan = plan_row(row, where)
        res = run_plan(plan, cal)
    except UnsupportedRowError as exc:
        return [RowResult.skip(rid, str(exc), group=src)]
    fault = _ttft_unit_fault(row, m.ttft_ms, plan)
    if fault is not None:
        return [RowResult.skip(rid, fault, m.ttft_ms, src)]
    detail: dict[str, object] = {
        "mode": plan.mode,
        "tp": plan.tp,
        "pp": plan.pp,
        "engine": plan.engine.name,
        "mean_batch": res.mean_batch,
    }
    sim = Simulated(rid, src, plan, res, detail)
    out = [] if m.throughput is None else [_throughput_result(row, m.throughput, sim)]
    return [*out, *_latency_results(row, m, sim)]


class InferenceReport(ValidationReport):
    """The validation report; a CSV row yields one result per metric it measures, so the
    JSON also counts distinct CSV rows (total and skipped)."""

    def to_json(self) -> dict[str, object]:
        d = super().to_json()
        d["skipped_rows"] = len({r.id for r in self.rows if r.status == "skipped"})
        d["rows_total"] = len({r.id for r in self.rows})
        return d
