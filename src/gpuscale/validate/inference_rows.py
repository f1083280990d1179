"""How a published serving row becomes a deployment and a workload.

A row of the inference schema (shared/validation/README.md) names an engine, a model, a GPU,
TP x PP, a precision, lengths and a load; :func:`plan_row` turns it into a :class:`RowPlan`
(offline, static-batch, saturating, Poisson or closed-loop load) or skips it with the
column that makes it one gpuscale cannot model.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from gpuscale.catalog import get_gpu, get_model
from gpuscale.errors import InputError
from gpuscale.perf.inference import ENGINES, EngineConfig
from gpuscale.perf.kv import precision_plan
from gpuscale.validate.report import SkipRow, count, positive

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


def rejected(exc: InputError) -> UnsupportedRowError:
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
        raise rejected(exc) from None


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
