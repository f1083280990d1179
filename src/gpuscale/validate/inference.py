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
from gpuscale.perf.inference import ENGINES, EngineConfig, build_step_model
from gpuscale.perf.kv import precision_plan
from gpuscale.sim.serving import (
    EngineLimits,
    ServingResult,
    Stat,
    Workload,
    concurrency,
    offline,
    poisson,
    simulate,
)
from gpuscale.validate.report import (
    RowResult,
    SkipRow,
    ValidationReport,
    count,
    positive,
    read_rows,
    signed_error_pct,
)

REQUIRED = (
    "id",
    "source",
    "engine",
    "model",
    "precision",
    "gpu",
    "num_gpus",
    "tp",
    "pp",
    "input_len",
    "output_len",
    "batch_or_concurrency",
    "request_rate",
    "metric_throughput_tokens_per_s",
    "ttft_ms",
    "tpot_or_itl_ms",
    "throughput_kind",
    "ttft_stat",
    "tpot_itl_stat",
)

OFFLINE_REQUESTS_MAX = 30000
"""trtllm-bench throughput runs queue 30,000 requests (perf-overview.md); rows that state a
count in their notes use it."""
ONLINE_REQUESTS = 500
"""Requests of an online row whose notes state no count: the TensorRT-LLM online-serving
table was "generated using version 0.14.0, with 500 requests" (perf-overview.md, v0.14)."""

SCORED_METRICS = ("throughput", "ttft", "tpot_itl")


@dataclass(frozen=True)
class RowPlan:
    model: str
    gpu: str
    precision: str
    engine: EngineConfig
    tp: int
    pp: int
    replicas: int
    input_len: int
    output_len: int
    mode: str  # offline | static | poisson | closed | saturate
    requests: int
    rate: float = 0.0


UnsupportedRowError = SkipRow
"""A row gpuscale does not model: the message is the reason."""


MEASURED = ("metric_throughput_tokens_per_s", "ttft_ms", "tpot_or_itl_ms")
"""The measured columns; each must be empty or a finite positive number."""

_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")

FIELD_COLUMNS = {
    "tp": "tp",
    "pp": "pp",
    "max_batch": "batch_or_concurrency",
    "max_num_tokens": "batch_or_concurrency",
    "concurrency": "batch_or_concurrency",
    "qps": "request_rate",
    "input-len": "input_len",
    "output-len": "output_len",
    "input-len + output-len": "input_len + output_len",
    "offline": "notes (requests)",
    "requests": "notes (requests)",
}
"""The CSV column behind each field a prediction can reject (its reason names the column)."""


def _length(row: dict[str, str], col: str) -> int | None:
    """A token length: None for a dataset named instead (variable lengths); a number that is
    not a positive integer makes the row one gpuscale cannot model, naming the column."""
    text = row[col]
    if not _NUMBER.fullmatch(text):
        return None
    v = float(text)
    if not (math.isfinite(v) and v >= 1 and v == int(v)):
        raise UnsupportedRowError(f"{col}={text!r}: must be a positive number of tokens")
    return int(v)


def _rejected(exc: InputError) -> UnsupportedRowError:
    """A prediction's rejection of a row's deployment, naming the CSV column behind it."""
    col = FIELD_COLUMNS.get(exc.field)
    if col is None:
        return UnsupportedRowError(f"stated deployment is not valid here: {exc}")
    return UnsupportedRowError(f"{col}={exc.value!r}: {exc.valid}")


def _engine(name: str) -> EngineConfig:
    low = name.lower()
    if low.startswith("tensorrt-llm") or low.startswith("fastertransformer"):
        return ENGINES["trtllm"]
    if low.startswith("vllm"):
        return ENGINES["vllm"]
    raise UnsupportedRowError(f"engine {name!r} not modelled")


def plan_row(row: dict[str, str], where: str) -> RowPlan:
    """The deployment and workload a row describes (raises :class:`UnsupportedRowError`,
    naming the column, for a row gpuscale cannot model; :class:`InputError` naming file,
    line and column for a malformed cell)."""
    try:
        return _plan_row(row, where)
    except InputError as exc:
        if exc.field.startswith(f"{where}:"):
            raise
        raise _rejected(exc) from None


def _plan_row(row: dict[str, str], where: str) -> RowPlan:
    for col in MEASURED:
        positive(row, col, where)
    eng = _engine(row["engine"])
    try:
        model = get_model(row["model"])
        gpu = get_gpu(row["gpu"])
    except InputError as exc:
        raise UnsupportedRowError(f"{exc.field} {exc.value!r} not in the catalog") from None
    notes = row.get("notes", "").lower()
    if "attention-dp" in notes or "attention dp" in notes:
        raise UnsupportedRowError(
            "expert-parallel / attention-data-parallel MoE serving not modelled"
        )
    tp = count(row, "tp", where)
    if tp is None:
        raise UnsupportedRowError("tensor-parallel degree not stated")
    pp = count(row, "pp", where) or 1
    n_gpus = count(row, "num_gpus", where) or tp * pp
    if n_gpus % (tp * pp):
        raise UnsupportedRowError(
            f"num_gpus={row['num_gpus']!r}: not a multiple of tp x pp = {tp * pp}"
        )
    isl, osl = _length(row, "input_len"), _length(row, "output_len")
    if isl is None or osl is None:
        raise UnsupportedRowError("variable-length dataset: input/output lengths not given")
    prec = (row["precision"] or "bf16").lower()
    try:
        precision_plan(gpu, prec)
    except InputError as exc:
        raise UnsupportedRowError(str(exc)) from None
    rate = row["request_rate"].lower()
    batch = row["batch_or_concurrency"].lower()
    m_static = re.match(r"static batch (\d+)", batch)
    m_count = re.search(r"(\d[\d,]*) requests", notes)
    replicas = n_gpus // (tp * pp)
    base = dict(
        model=model.key,
        gpu=gpu.key,
        precision=prec,
        tp=tp,
        pp=pp,
        replicas=replicas,
        input_len=isl,
        output_len=osl,
    )
    if m_static:
        b = int(m_static.group(1))
        if b < 1:
            raise UnsupportedRowError(
                f"batch_or_concurrency={row['batch_or_concurrency']!r}: a static batch of at "
                "least 1"
            )
        static = EngineConfig(
            name=eng.name + "-static",
            max_batch=b,
            max_num_tokens=max(b * isl, eng.max_num_tokens),
            chunked_prefill=False,
            mem_fraction=eng.mem_fraction,
            fraction_of_free=eng.fraction_of_free,
            block_tokens=eng.block_tokens,
            reserved_bytes=eng.reserved_bytes,
        )
        return RowPlan(engine=static, mode="static", requests=b, **base)  # type: ignore[arg-type]
    if (
        rate.startswith("inf (offline)")
        or rate == "offline"
        or (rate == "" and "max" in batch and row["metric_throughput_tokens_per_s"])
    ):
        e = eng
        m_tok = re.search(r"max num tokens (\d+)", batch)
        m_b = re.search(r"max batch (\d+)", batch)
        if m_tok or m_b:
            if (m_tok and int(m_tok.group(1)) < 1) or (m_b and int(m_b.group(1)) < 1):
                raise UnsupportedRowError(
                    f"batch_or_concurrency={row['batch_or_concurrency']!r}: engine limits of "
                    "at least 1"
                )
            e = EngineConfig(
                name=eng.name,
                max_batch=int(m_b.group(1)) if m_b else eng.max_batch,
                max_num_tokens=int(m_tok.group(1)) if m_tok else eng.max_num_tokens,
                mem_fraction=eng.mem_fraction,
                fraction_of_free=eng.fraction_of_free,
                block_tokens=eng.block_tokens,
                reserved_bytes=eng.reserved_bytes,
            )
        n = _requests(m_count, OFFLINE_REQUESTS_MAX)
        return RowPlan(engine=e, mode="offline", requests=min(n, OFFLINE_REQUESTS_MAX), **base)  # type: ignore[arg-type]
    if rate == "inf":
        n = _requests(m_count, ONLINE_REQUESTS)
        return RowPlan(engine=eng, mode="saturate", requests=n, **base)  # type: ignore[arg-type]
    m_rate = _NUMBER.match(rate)
    if m_rate:
        qps = float(m_rate.group(0))
        if not (math.isfinite(qps) and qps > 0):
            raise UnsupportedRowError(
                f"request_rate={row['request_rate']!r}: a positive, finite request rate"
            )
        return RowPlan(
            engine=eng,
            mode="poisson",
            requests=ONLINE_REQUESTS,
            rate=qps / replicas,
            **base,  # type: ignore[arg-type]
        )
    if rate[:1] in tuple("+-.0123456789"):
        raise InputError(
            f"{where}:request_rate",
            row["request_rate"],
            "a request rate in req/s, inf, offline or an empty cell",
        )
    m_one = re.match(r"(\d+)\b", batch)
    if m_one and rate == "":
        if int(m_one.group(1)) < 1:
            raise UnsupportedRowError(
                f"batch_or_concurrency={row['batch_or_concurrency']!r}: a concurrency of at least 1"
            )
        return RowPlan(
            engine=eng,
            mode="closed",
            requests=max(4, 4 * int(m_one.group(1))),
            rate=float(m_one.group(1)),
            **base,  # type: ignore[arg-type]
        )
    raise UnsupportedRowError(
        f"load not understood (request_rate={row['request_rate']!r}, "
        f"batch_or_concurrency={row['batch_or_concurrency']!r})"
    )


def _requests(m_count: re.Match[str] | None, default: int) -> int:
    """The request count the notes state ("3,000 requests"), else ``default``."""
    if m_count is None:
        return default
    n = int(m_count.group(1).replace(",", ""))
    if n < 1:
        raise UnsupportedRowError(f"notes state {m_count.group(0)!r}: at least 1 request")
    return n


def run_plan(p: RowPlan, cal: Calibration) -> ServingResult:
    """The simulated serving of a planned row; a deployment the model rejects (tp not
    dividing the heads, a sequence longer than the KV cache) raises
    :class:`UnsupportedRowError` naming the CSV column."""
    try:
        return _run_plan(p, cal)
    except InputError as exc:
        raise _rejected(exc) from None


def _run_plan(p: RowPlan, cal: Calibration) -> ServingResult:
    model, gpu = get_model(p.model), get_gpu(p.gpu)
    prec = precision_plan(gpu, p.precision)
    sm = build_step_model(
        model, gpu, prec, p.tp, p.pp, cal, p.engine, tokens_per_seq=p.input_len + p.output_len
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
    lim = EngineLimits(
        p.engine.max_batch,
        p.engine.max_num_tokens,
        sm.memory.kv_blocks,
        sm.memory.block_tokens,
        p.engine.chunked_prefill,
    )
    wl: Workload
    if p.mode in ("offline", "static", "saturate"):
        wl = offline(p.requests, p.input_len, p.output_len)
    elif p.mode == "poisson":
        wl = poisson(p.requests, p.rate, p.input_len, p.output_len, seed=0)
    else:
        wl = concurrency(p.requests, int(p.rate), p.input_len, p.output_len)
    return simulate(sm, lim, wl, cal.inf_request_overhead_s)


def _pick(stat: Stat, which: str) -> float | None:
    w = which.lower()
    if (
        w in ("mean", "itl_mean", "tpot_mean")
        or w.startswith("prefill latency")
        or w.startswith("decode latency")
        or w.startswith("reported")
        or w.startswith("single")
    ):
        return stat.mean
    if "median" in w or "p50" in w:
        return stat.p50
    if "p99" in w:
        return stat.p99
    return None


def _short_source(src: str) -> str:
    s = src.split(";")[0].split(" http")[0].strip()
    return s[:70]


def validate_inference(path: Path, cal: Calibration) -> ValidationReport:
    rows: list[RowResult] = []
    for lineno, row in read_rows(path, REQUIRED):
        rows.extend(validate_row(row, f"{path.name}:line {lineno}", cal))
    return InferenceReport("inference", rows)


def validate_row(row: dict[str, str], where: str, cal: Calibration) -> list[RowResult]:
    rid, src = row["id"], _short_source(row["source"])
    try:
        measured_tp, measured_ttft, measured_itl = (positive(row, c, where) for c in MEASURED)
    except UnsupportedRowError as exc:
        return [RowResult(rid, None, None, None, "skipped", str(exc), group=src)]
    if measured_tp is None and measured_ttft is None and measured_itl is None:
        return [
            RowResult(
                rid,
                None,
                None,
                None,
                "skipped",
                "no measured throughput, TTFT or TPOT/ITL in the row",
                group=src,
            )
        ]
    try:
        plan = plan_row(row, where)
        res = run_plan(plan, cal)
    except UnsupportedRowError as exc:
        return [RowResult(rid, None, None, None, "skipped", str(exc), group=src)]
    out: list[RowResult] = []
    detail: dict[str, object] = {
        "mode": plan.mode,
        "tp": plan.tp,
        "pp": plan.pp,
        "engine": plan.engine.name,
        "mean_batch": res.mean_batch,
    }
    if measured_tp is not None:
        kind = row["throughput_kind"].lower()
        total = res.output_tokens_per_s * plan.replicas
        n_gpus = plan.tp * plan.pp * plan.replicas
        pred: float | None
        if kind in ("output_total", ""):
            pred = total
        elif kind == "output_per_gpu":
            pred = total / n_gpus
        else:
            pred = None
        if pred is None:
            out.append(
                RowResult(
                    f"{rid}",
                    None,
                    measured_tp,
                    None,
                    "skipped",
                    f"throughput_kind {row['throughput_kind']!r} not modelled",
                    group=f"throughput | {src}",
                    metric="throughput",
                )
            )
        elif plan.mode in ("offline", "static", "saturate"):
            out.append(
                RowResult(
                    rid,
                    pred,
                    measured_tp,
                    signed_error_pct(pred, measured_tp),
                    "scored",
                    group=f"throughput | {src}",
                    metric="throughput",
                    detail=detail,
                )
            )
        else:
            out.append(
                RowResult(
                    rid,
                    pred,
                    measured_tp,
                    signed_error_pct(pred, measured_tp),
                    "reported",
                    "online throughput follows the offered rate",
                    group=f"throughput | {src}",
                    metric="throughput_online",
                )
            )
    for measured, stat, which, metric in (
        (measured_ttft, res.ttft_s, row["ttft_stat"], "ttft"),
        (
            measured_itl,
            res.itl_s if "itl" in row["tpot_itl_stat"].lower() else res.tpot_s,
            row["tpot_itl_stat"],
            "tpot_itl",
        ),
    ):
        if measured is None:
            continue
        pick = _pick(stat, which or "mean")
        if pick is None or math.isnan(pick):
            out.append(
                RowResult(
                    rid,
                    None,
                    measured,
                    None,
                    "skipped",
                    f"statistic {which!r} not modelled",
                    group=f"{metric} | {src}",
                    metric=metric,
                )
            )
            continue
        pred_ms = pick * 1e3
        out.append(
            RowResult(
                rid,
                pred_ms,
                measured,
                signed_error_pct(pred_ms, measured),
                "scored",
                group=f"{metric} | {src}",
                metric=metric,
                detail=detail,
            )
        )
    return out


class InferenceReport(ValidationReport):
    """The validation report; a CSV row yields one result per metric it measures, so the
    JSON also counts distinct CSV rows (total and skipped)."""

    def to_json(self) -> dict[str, object]:
        d = super().to_json()
        d["skipped_rows"] = len({r.id for r in self.rows if r.status == "skipped"})
        d["rows_total"] = len({r.id for r in self.rows})
        return d
