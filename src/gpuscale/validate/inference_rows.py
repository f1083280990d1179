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

from gpuscale.catalog import Model, get_gpu, get_model
from gpuscale.errors import InputError
from gpuscale.perf.engines import ENGINES, EngineConfig
from gpuscale.perf.kv import precision_plan
from gpuscale.validate.numbers import count, positive
from gpuscale.validate.report import SkipRow, check_size

COLUMNS = (
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
"""The schema's columns gpuscale reads (shared/validation/README.md)."""
SCHEMA = (*COLUMNS, "engine_version", "params_b", "notes", "ttft_p99_ms", "tpot_itl_p99_ms")
"""All the schema's columns: the rest are its source's context, read where named."""
REQUIRED = (
    "id",
    "source",
    "engine",
    "model",
    "gpu",
    "tp",
    "input_len",
    "output_len",
    "batch_or_concurrency",
    "request_rate",
)
"""The key columns; the schema's others (precision, num_gpus, pp, the measured figures and
their statistics) read as empty when absent."""

OFFLINE_REQUESTS_MAX = 30000
"""trtllm-bench throughput runs queue 30,000 requests (perf-overview.md); rows that state a
count in their notes use it."""
ONLINE_REQUESTS = 500
"""Requests of an online row whose notes state no count: the TensorRT-LLM online-serving
table was "generated using version 0.14.0, with 500 requests" (perf-overview.md, v0.14)."""

SCORED_METRICS = ("throughput", "ttft", "tpot_itl")


# the engine limits an offline row's batch_or_concurrency cell may state
TOKENS_LIMIT = re.compile(r"max num tokens (\d+)")
BATCH_LIMIT = re.compile(r"max (?:runtime )?batch(?: size)?\s*[=:]?\s*(\d+)")
THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
"""A thousands separator inside a number ("1,024"), not a list's comma ("256, max")."""

PRECISION_SPELLINGS = (
    # (pattern, precision), first match wins, on the lower-cased cell
    (r"int4|awq|gptq|w4a16", "int4"),
    (r"nvfp4|\bfp4\b", "fp4"),
    (r"fp8|e4m3|w8a8", "fp8"),
    (r"bf16|bfloat16", "bf16"),
    (r"fp16|float16|half", "fp16"),
)
"""How serving tables spell the weight formats gpuscale models (AWQ and GPTQ are 4-bit
weight-only, W4A16; W8A8 with FP8 activations is FP8)."""


KV_PHRASE = re.compile(
    r"(?:w/|with)?\s*(?P<a>fp8|fp16|bf16|bfloat16|int8)[\s_-]*kv(?:[\s_-]*cache)?"
    r"|kv(?:[\s_-]*cache)?\s*(?:in|=|:)?\s*(?P<b>fp8|fp16|bf16|bfloat16|int8)"
)
"""A KV-cache format named beside the weights' ("fp8 kv cache", "KV cache: FP8")."""


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
    notes: tuple[str, ...] = ()
    """How the row was read where it does not say (printed as the scored row's reason)."""
    kv: str | None = None
    """The KV-cache format the row names apart from the weights' (None: the default)."""


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


def _length(row: dict[str, str], col: str) -> int:
    """A token length; an empty cell, text (a dataset named instead: variable lengths) or a
    number that is not a positive integer makes the row one gpuscale cannot model, naming
    the column."""
    text = row[col]
    if not text.strip():
        raise UnsupportedRowError(f"{col} not stated: a fixed number of tokens is modelled")
    if not _NUMBER.fullmatch(text):
        raise UnsupportedRowError(
            f"{col}={text!r}: not a number of tokens (a dataset's variable lengths are not "
            "modelled)"
        )
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
    # "TensorRT-LLM v0.12", "TRT-LLM", "trtllm-bench", "NVIDIA TensorRT LLM", "vLLM 0.6.3"
    low = re.sub(r"[\s_-]+", "", name.lower())
    if re.search(r"tensorrtllm|trtllm|fastertransformer", low):
        return ENGINES["trtllm"]
    if "vllm" in low:
        return ENGINES["vllm"]
    raise UnsupportedRowError(f"engine {name!r} not modelled")


def _check_size(cell: str, model: Model) -> None:
    """A stated size ("8", "8B", "~70") far from both the model's total and its active
    parameters (an MoE table may give either) skips the row; a cell that is no size is
    left unread (it decides nothing)."""
    m = re.fullmatch(r"~?\s*(\d+(?:\.\d+)?)\s*b?", cell.strip().lower())
    if m is None or float(m.group(1)) <= 0:
        return
    check_size(model, float(m.group(1)), repr(cell), model.key, active=True)


def _precision(cell: str, half: str, notes: list[str]) -> str:
    """The serving precision a row's cell names; empty: ``half`` (bf16 where the GPU has
    it), said in ``notes``."""
    text = KV_PHRASE.sub(" ", cell.strip().lower()).strip(" ,;/()+")
    if not text:
        notes.append(f"precision not stated: {half} assumed")
        return half
    for pattern, prec in PRECISION_SPELLINGS:
        if re.search(pattern, text):
            return prec
    return text  # refused by precision_plan with the valid ones


def _kv_precision(cell: str) -> str | None:
    """The KV-cache format a precision cell names apart from the weights' ("FP16 weights,
    FP8 KV cache"), or None."""
    m = KV_PHRASE.search(cell.lower())
    if m is None:
        return None
    fmt = m.group("a") or m.group("b") or ""
    return {"fp8": "fp8", "fp16": "fp16", "bf16": "bf16", "bfloat16": "bf16"}.get(fmt)


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


@dataclass(frozen=True)
class _Deployment:
    """What a row states of its deployment and lengths, with how it was read where it does
    not say; the load it runs is decided apart (:func:`_load_plan`)."""

    model: str
    gpu: str
    precision: str
    tp: int
    pp: int
    replicas: int
    input_len: int
    output_len: int
    notes: tuple[str, ...]
    kv: str | None

    def plan(self, engine: EngineConfig, mode: str, requests: int, rate: float = 0.0) -> RowPlan:
        """The row's plan: this deployment run by ``engine`` under a load."""
        return RowPlan(
            self.model,
            self.gpu,
            self.precision,
            engine,
            self.tp,
            self.pp,
            self.replicas,
            self.input_len,
            self.output_len,
            mode,
            requests,
            rate,
            self.notes,
            self.kv,
        )


def _plan_row(row: dict[str, str], where: str) -> RowPlan:
    """The measured figures are empty or positive, the engine is one gpuscale models, then
    the deployment, then the load."""
    for col in MEASURED:
        positive(row, col, where)
    eng = _engine(row["engine"])
    return _load_plan(row, where, eng, _deployment(row, where))


def _deployment(row: dict[str, str], where: str) -> _Deployment:
    """Model and GPU from the catalog, TP x PP and replicas, lengths and formats; a stated
    model size must agree with the catalog's."""
    try:
        model = get_model(row["model"])
        gpu = get_gpu(row["gpu"])
    except InputError as exc:
        raise UnsupportedRowError.not_in_catalog(exc.field, str(exc.value), exc) from None
    notes = row.get("notes", "").lower()
    if "attention-dp" in notes or "attention dp" in notes:
        raise UnsupportedRowError(
            "expert-parallel / attention-data-parallel MoE serving not modelled"
        )
    read: list[str] = []
    tp, pp, n_gpus = _parallelism(row, where, read)
    isl, osl = _length(row, "input_len"), _length(row, "output_len")
    half = "bf16" if "bf16" in gpu.peak_tflops else "fp16"
    prec = _precision(row.get("precision", ""), half, read)
    kv = _kv_precision(row.get("precision", ""))
    if kv is None and KV_PHRASE.search(row.get("precision", "").lower()):
        raise UnsupportedRowError(f"precision {row['precision']!r}: KV-cache format not modelled")
    try:
        precision_plan(gpu, prec, kv)
    except InputError as exc:
        raise UnsupportedRowError(str(exc)) from None
    _check_size(row.get("params_b", ""), model)
    replicas = n_gpus // (tp * pp)
    return _Deployment(model.key, gpu.key, prec, tp, pp, replicas, isl, osl, tuple(read), kv)


def _parallelism(row: dict[str, str], where: str, read: list[str]) -> tuple[int, int, int]:
    """(TP, PP, GPUs): TP must be stated; PP unstated is 1 (said in ``read`` where the row
    has more than one GPU); the GPUs, tp x pp unless stated, a whole number of replicas."""
    tp = count(row, "tp", where)
    if tp is None:
        raise UnsupportedRowError("tensor-parallel degree not stated")
    pp = count(row, "pp", where)
    if pp is None:
        pp = 1
        if tp > 1 or count(row, "num_gpus", where) not in (None, tp):
            read.append("pipeline parallel not stated: PP1")
    n_gpus = count(row, "num_gpus", where) or tp * pp
    if n_gpus % (tp * pp):
        raise UnsupportedRowError(
            f"num_gpus={row['num_gpus']!r}: not a multiple of tp x pp = {tp * pp}"
        )
    return tp, pp, n_gpus


def _load_plan(row: dict[str, str], where: str, eng: EngineConfig, dep: _Deployment) -> RowPlan:
    """The load a row runs: a static batch, offline (every request queued at once), a
    saturating stream, else an online one (:func:`_online_plan`). A request count the notes
    state ("3,000 requests") sizes offline and saturating runs."""
    rate = THOUSANDS.sub("", row["request_rate"].lower().strip())
    batch = THOUSANDS.sub("", row["batch_or_concurrency"].lower().strip())
    # a batch served at once: "static batch 64", "fixed batch 8"; with no request rate also
    # "batch size 64", "BS=64" (beside a rate, those are the engine's batch limit)
    m_static = re.match(r"(?:static|fixed)\s+batch(?:\s+size)?\s*[=:]?\s*(\d+)$", batch)
    if m_static is None and rate == "":
        m_static = re.match(r"(?:bs|batch(?:\s+size)?)\s*[=:]?\s*(\d+)$", batch)
    m_count = re.search(r"(\d[\d,]*) requests", row.get("notes", "").lower())
    if m_static:
        b = int(m_static.group(1))
        return dep.plan(_static_engine(row, eng, b, dep.input_len), "static", b)
    if (
        rate.startswith("inf (offline)")
        or rate == "offline"
        or (rate == "" and "max" in batch and row.get("metric_throughput_tokens_per_s"))
    ):
        e = _offline_engine(row, eng, batch)
        n = _requests(m_count, OFFLINE_REQUESTS_MAX)
        return dep.plan(e, "offline", min(n, OFFLINE_REQUESTS_MAX))
    if rate == "inf":
        n = min(_requests(m_count, ONLINE_REQUESTS), OFFLINE_REQUESTS_MAX)
        return dep.plan(eng, "saturate", n)
    return _online_plan(row, where, eng, dep, rate, batch)


def _static_engine(row: dict[str, str], eng: EngineConfig, b: int, isl: int) -> EngineConfig:
    """A static batch of ``b`` sequences (1 to OFFLINE_REQUESTS_MAX): the engine runs them
    whole, every prompt in one iteration, without chunked prefill."""
    if not 1 <= b <= OFFLINE_REQUESTS_MAX:
        raise UnsupportedRowError(
            f"batch_or_concurrency={row['batch_or_concurrency']!r}: a static batch of 1 "
            f"to {OFFLINE_REQUESTS_MAX:,} sequences"
        )
    return EngineConfig(
        name=eng.name + "-static",
        max_batch=b,
        max_num_tokens=max(b * isl, eng.max_num_tokens),
        chunked_prefill=False,
        mem_fraction=eng.mem_fraction,
        fraction_of_free=eng.fraction_of_free,
        block_tokens=eng.block_tokens,
        reserved_bytes=eng.reserved_bytes,
    )


def _offline_engine(row: dict[str, str], eng: EngineConfig, batch: str) -> EngineConfig:
    """The engine of an offline row, with the limits its batch_or_concurrency cell states
    ("max batch 512, max num tokens 2048"), each at least 1; the cell can only state engine
    limits: any other number in it (a batch, a concurrency) would be silently dropped."""
    m_tok = TOKENS_LIMIT.search(batch)
    m_b = BATCH_LIMIT.search(batch)
    other = BATCH_LIMIT.sub("", TOKENS_LIMIT.sub("", batch))
    if (
        re.search(r"\d", other)
        or (m_tok and int(m_tok.group(1)) < 1)
        or (m_b and int(m_b.group(1)) < 1)
    ):
        raise UnsupportedRowError(
            f"batch_or_concurrency={row['batch_or_concurrency']!r}: on an offline row, "
            "engine limits of at least 1 ('max batch 512, max num tokens 2048') or empty"
        )
    if not (m_tok or m_b):
        return eng
    return EngineConfig(
        name=eng.name,
        max_batch=int(m_b.group(1)) if m_b else eng.max_batch,
        max_num_tokens=int(m_tok.group(1)) if m_tok else eng.max_num_tokens,
        mem_fraction=eng.mem_fraction,
        fraction_of_free=eng.fraction_of_free,
        block_tokens=eng.block_tokens,
        reserved_bytes=eng.reserved_bytes,
    )


def _online_plan(
    row: dict[str, str], where: str, eng: EngineConfig, dep: _Deployment, rate: str, batch: str
) -> RowPlan:
    """An online load: Poisson arrivals at one positive, finite rate in req/s, split evenly
    over the replicas; with no rate, a closed loop of the concurrency the batch cell states
    (1 to OFFLINE_REQUESTS_MAX, four requests a client)."""
    m_rate = _NUMBER.match(rate)
    if m_rate and re.match(r"[,\-–]\s*\d", rate[m_rate.end() :]):
        raise UnsupportedRowError(
            f"request_rate={row['request_rate']!r}: one rate in req/s (a range or a decimal "
            "comma is not one)"
        )
    if m_rate:
        qps = float(m_rate.group(0))
        if not (math.isfinite(qps) and qps > 0):
            raise UnsupportedRowError(
                f"request_rate={row['request_rate']!r}: a positive, finite request rate"
            )
        return dep.plan(eng, "poisson", ONLINE_REQUESTS, qps / dep.replicas)
    if rate[:1] in tuple("+-.0123456789"):
        raise InputError(
            f"{where}:request_rate",
            row["request_rate"],
            "a request rate in req/s, inf, offline or an empty cell",
        )
    m_one = re.match(r"(\d+)\b", batch)
    if m_one and rate == "":
        if not 1 <= int(m_one.group(1)) <= OFFLINE_REQUESTS_MAX:
            raise UnsupportedRowError(
                f"batch_or_concurrency={row['batch_or_concurrency']!r}: a concurrency of 1 "
                f"to {OFFLINE_REQUESTS_MAX:,}"
            )
        clients = int(m_one.group(1))
        return dep.plan(eng, "closed", max(4, 4 * clients), float(clients))
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
