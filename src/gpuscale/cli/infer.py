"""`gpuscale infer estimate | size`: LLM serving latency, throughput, memory and sizing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuscale.catalog.gpu_names import family_default
from gpuscale.cli._common import Cal, emit_json, err, load_calibration
from gpuscale.cli.infer_report import gib, print_estimate, print_size
from gpuscale.errors import InputError

if TYPE_CHECKING:
    from gpuscale.catalog import Model
    from gpuscale.catalog.schema import GPU
    from gpuscale.perf.inference_size import SizingResult, Slo
    from gpuscale.perf.inference_step import StepBreakdown, StepModel
    from gpuscale.perf.kv import MemoryPlan
    from gpuscale.sim.arrivals import Workload
    from gpuscale.sim.results import ServingResult

DEFAULT_GPUS = ("h100-sxm", "h200", "b200")
"""`infer size` candidates when --gpus is not given (those without a price are skipped)."""
DEFAULT_REQUESTS = 2000
"""Requests a --qps or --concurrency simulation runs where --requests is not given."""

app = typer.Typer(no_args_is_help=True)

Json = Annotated[bool, typer.Option("--json", help="Write one JSON object to stdout.")]
Engine = Annotated[str, typer.Option("--engine", help="Engine defaults: trtllm or vllm.")]


def _positive(name: str, v: float | None) -> None:
    if v is not None and not v > 0:
        raise InputError(name, v, "a positive number")


def _warn_context(m: Model, input_len: int, output_len: int) -> None:
    """One stderr line when a request is longer than the model's context window (the model
    does not treat ``max_seq`` as a hard limit: the estimate extrapolates)."""
    total = input_len + output_len
    if total > m.max_seq:
        err.print(
            f"[yellow]warning:[/] input-len {input_len} + output-len {output_len} = {total} "
            f"tokens exceed {m.key}'s context window (max_seq {m.max_seq}); the estimate "
            "extrapolates beyond it",
            highlight=False,
            soft_wrap=True,
        )


def _note_queue(concurrency: int | None, mem: MemoryPlan) -> None:
    """One stderr line when a closed loop keeps more requests in flight than the replica
    runs sequences at once (its KV cache's, or its engine's batch limit where lower): the
    others wait in its queue, and TTFT counts the wait."""
    if concurrency is None or concurrency <= mem.max_seqs:
        return
    why = (
        "the replica's KV cache holds"
        if mem.max_seqs >= mem.kv_limited_seqs
        else "the engine runs at once (its batch limit; the KV cache holds "
        f"{mem.kv_limited_seqs:,})"
    )
    err.print(
        f"note: --concurrency {concurrency:,} is more than the {mem.max_seqs:,} sequences {why}: "
        f"{concurrency - mem.max_seqs:,} requests at a time wait in its queue, and TTFT counts "
        "the wait",
        highlight=False,
        soft_wrap=True,
    )


def _note_sparse(m: Model) -> None:
    """One stderr line for a DeepSeek Sparse Attention model (DeepSeek-V4's compressed
    attention too): how its attention is priced, and the assumption (the indexer whole on
    every TP rank) that makes TP cost more."""
    if m.sparse is None:
        return
    if m.compressed is not None:
        c = m.compressed
        what = (
            f"{m.key}'s attention: every layer keeps its last {c.window} tokens; its "
            f"compressed layers keep one entry per {c.csa_ratio} tokens (CSA, reading the top "
            f"{m.sparse.topk:,} an indexer picks after scoring all of them in FP8) or per "
            "more (HCA, reading all); the cache, the indexer and the windows are priced "
            "whole on every TP rank (one shared K = V head)"
        )
    else:
        what = (
            f"{m.key}'s sparse attention: each query attends to its top {m.sparse.topk:,} "
            "keys, chosen by an indexer that scores every earlier key in FP8 and reads all "
            "its keys, priced whole on every TP rank (as vLLM and SGLang run it); the KV "
            "cache keeps every token"
        )
    err.print(f"[yellow]note:[/] {what}", highlight=False, soft_wrap=True)


def _sequence_fits(mem: MemoryPlan, m: Model, input_len: int, output_len: int, where: str) -> None:
    """An :class:`InputError` naming input-len when the weights fit but one sequence of
    input-len + output-len tokens does not fit in the KV cache left beside them."""
    if mem.fits or mem.kv_pool_bytes <= 0:
        return
    total = input_len + output_len
    need = mem.kv_bytes_per_seq
    beyond = f", beyond {m.key}'s max_seq of {m.max_seq}" if total > m.max_seq else ""
    raise InputError(
        "input-len",
        input_len,
        f"input-len {input_len} + output-len {output_len} = {total:,} tokens{beyond}: one "
        f"sequence needs {gib(need)} of KV cache per GPU, the pool beside the weights holds "
        f"{gib(mem.kv_pool_bytes)} ({where}); shorten --input-len/--output-len or raise "
        "--tp/--pp",
    )


@app.command("estimate")
def estimate(
    model: Annotated[str, typer.Option("--model", help="Catalog model or HF config.json.")],
    gpu: Annotated[str, typer.Option("--gpu", help="Catalog GPU, e.g. h100-sxm.")],
    input_len: Annotated[int, typer.Option("--input-len", help="Prompt tokens per request.")],
    output_len: Annotated[int, typer.Option("--output-len", help="Output tokens per request.")],
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option("--pp", help="Pipeline-parallel degree.")] = 1,
    precision: Annotated[
        str, typer.Option("--precision", help="bf16, fp16, fp8, fp4 or int4 (W4A16).")
    ] = "bf16",
    kv_precision: Annotated[
        str | None,
        typer.Option(
            "--kv-precision", help="KV-cache precision (default: fp8 for fp8/fp4 weights)."
        ),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", help="Closed loop: in flight (up to 1,000,000).")
    ] = None,
    qps: Annotated[
        float | None, typer.Option("--qps", help="Poisson arrival rate, req/s (up to 1e7).")
    ] = None,
    offline: Annotated[
        int | None, typer.Option("--offline", help="N requests queued at t = 0 (up to 1,000,000).")
    ] = None,
    requests: Annotated[
        int | None,
        typer.Option(
            "--requests",
            help="Requests simulated with --qps or --concurrency (up to 1,000,000, at least "
            "--concurrency; default 2,000 or --concurrency where more); --offline N simulates "
            "its N.",
        ),
    ] = None,
    engine: Engine = "trtllm",
    json: Json = False,
    calibration: Cal = None,
) -> None:
    """Memory, step-time breakdown and simulated TTFT/TPOT/ITL and throughput of one replica."""
    from gpuscale.catalog import get_gpu, get_model
    from gpuscale.perf.engines import get_engine
    from gpuscale.perf.inference import build_step_model
    from gpuscale.perf.kv import precision_plan
    from gpuscale.sim.serving import simulate

    requests = _check_load(input_len, output_len, tp, pp, concurrency, qps, offline, requests)
    cal = load_calibration(calibration)
    m, g = get_model(model), get_gpu(gpu)
    said = family_default(gpu, g)
    if said is not None:
        err.print(f"note: {said}", highlight=False, soft_wrap=True)
    pplan = precision_plan(g, precision, kv_precision)
    eng = get_engine(engine)
    sm = build_step_model(m, g, pplan, tp, pp, cal, eng, input_len + output_len, input_len)
    _check_replica_fits(sm, precision, input_len, output_len)
    wl, mode = _arrivals(input_len, output_len, concurrency, qps, offline, requests)
    res = simulate(sm, sm.limits(), wl, cal.inf_request_overhead_s)
    _warn_context(m, input_len, output_len)
    _note_sparse(m)
    _note_queue(concurrency, sm.memory)
    pf, dbatch, dec = _typical_steps(sm, res, input_len, output_len)
    doc = _estimate_doc(sm, input_len, output_len, mode, (pf, dbatch, dec), res)
    if json:
        emit_json(doc)
        return
    print_estimate(
        f"{m.name} on {tp * pp}x {g.name} (TP{tp} PP{pp}, {pplan.weights} weights, "
        f"{pplan.kv} KV, {eng.name})",
        sm.memory,
        m.window_kind,
        ((f"prefill {input_len} tok", pf), (f"decode batch {dbatch}", dec)),
        mode,
        res,
        doc["output_tokens_per_s_per_gpu"],
    )


def _check_load(
    input_len: int,
    output_len: int,
    tp: int,
    pp: int,
    concurrency: int | None,
    qps: float | None,
    offline: int | None,
    requests: int | None,
) -> int:
    """Refuse a request shape, a replica or a load `infer estimate` cannot simulate (exactly
    one of --concurrency, --qps and --offline; counts bounded before the simulation
    allocates its arrays of requests); the requests to simulate."""
    from gpuscale.sim.arrivals import check_qps, check_requests

    modes = [x is not None for x in (concurrency, qps, offline)]
    if sum(modes) != 1:
        raise InputError(
            "load",
            "/".join(
                n for n, m in zip(("--concurrency", "--qps", "--offline"), modes, strict=True) if m
            )
            or "none",
            "exactly one of --concurrency N, --qps R, --offline N",
        )
    if offline is not None and requests is not None:
        raise InputError(
            "requests", requests, f"not given with --offline, which simulates its {offline}"
        )
    if concurrency is not None and requests is not None and requests < concurrency:
        raise InputError(
            "requests",
            requests,
            f"at least --concurrency ({concurrency}): a closed loop keeps that many requests "
            "in flight",
        )
    if requests is None:
        requests = max(DEFAULT_REQUESTS, concurrency or 0)
    for n, v in (("input-len", input_len), ("output-len", output_len), ("tp", tp), ("pp", pp)):
        _positive(n, v)
    for flag, count in (("concurrency", concurrency), ("offline", offline), ("requests", requests)):
        if count is not None:
            check_requests(flag, count)
    if qps is not None:
        check_qps(qps)
    return requests


def _check_replica_fits(sm: StepModel, precision: str, input_len: int, output_len: int) -> None:
    """Refuse a replica whose weights leave no KV cache on its GPUs, or whose KV cache beside
    them cannot hold one sequence of input-len + output-len tokens."""
    m, g, tp, pp, mem = sm.model, sm.gpu, sm.tp, sm.pp, sm.memory
    _sequence_fits(mem, m, input_len, output_len, f"{m.key} at TP{tp} x PP{pp} on {g.key}")
    if not mem.fits:
        raise InputError(
            "tp",
            tp,
            f"{m.key} at {precision} needs {gib(mem.weights_bytes)} of "
            f"weights per GPU at TP{tp} x PP{pp}, leaving no KV cache on {g.key} "
            f"({gib(g.memory_bytes)}); raise --tp/--pp or lower --precision",
        )


def _arrivals(
    input_len: int,
    output_len: int,
    concurrency: int | None,
    qps: float | None,
    offline: int | None,
    requests: int,
) -> tuple[Workload, str]:
    """The requests the load flag asks for (all queued at once, Poisson arrivals at --qps,
    or a closed loop of --concurrency in flight) and the load in words."""
    from gpuscale.sim.arrivals import concurrency as closed
    from gpuscale.sim.arrivals import offline as all_at_once
    from gpuscale.sim.arrivals import poisson

    if offline is not None:
        return all_at_once(offline, input_len, output_len), f"offline {offline} requests"
    if qps is not None:
        wl = poisson(requests, qps, input_len, output_len, seed=0)
        return wl, f"Poisson {qps:g} req/s, {requests} requests"
    assert concurrency is not None
    wl = closed(requests, concurrency, input_len, output_len)
    return wl, f"concurrency {concurrency}, {requests} requests"


def _typical_steps(
    sm: StepModel, res: ServingResult, input_len: int, output_len: int
) -> tuple[StepBreakdown, int, StepBreakdown]:
    """Two steps the report breaks down: one prompt's prefill alone, and a decode step at
    the simulation's mean batch (as many sequences as the KV cache holds at most) halfway
    through their outputs, with that batch."""
    pf = sm.breakdown(float(input_len), input_len * (input_len + 1) / 2.0, 1, 0, 0.0)
    dbatch = max(1, min(round(res.mean_batch), sm.memory.max_seqs))
    dec = sm.breakdown(0.0, 0.0, 0, dbatch, dbatch * (input_len + output_len / 2.0))
    return pf, dbatch, dec


def _estimate_doc(
    sm: StepModel,
    input_len: int,
    output_len: int,
    mode: str,
    steps: tuple[StepBreakdown, int, StepBreakdown],
    res: ServingResult,
) -> dict[str, Any]:
    """`infer estimate`'s JSON object: the replica, the request shape and load, memory per
    GPU, the prefill and decode steps (``steps``: prefill, decode batch, decode) and the
    simulated serving, with its output tokens/s per GPU."""
    pf, dbatch, dec = steps
    p = sm.precision
    return {
        "model": sm.model.key,
        "gpu": sm.gpu.key,
        "tp": sm.tp,
        "pp": sm.pp,
        "engine": sm.engine.name,
        "precision": {"weights": p.weights, "compute": p.compute, "kv": p.kv},
        "input_len": input_len,
        "output_len": output_len,
        "load": mode,
        "memory_per_gpu": sm.memory.to_dict(),
        "prefill_step_batch1": pf.to_dict(),
        "decode_step": {"batch": dbatch, **dec.to_dict()},
        "serving": res.to_dict(),
        "output_tokens_per_s_per_gpu": res.output_tokens_per_s / (sm.tp * sm.pp),
    }


@app.command("size")
def size_cmd(
    model: Annotated[str, typer.Option("--model", help="Catalog model or HF config.json.")],
    qps: Annotated[float, typer.Option("--qps", help="Target request rate, req/s (up to 1e7).")],
    input_len: Annotated[int, typer.Option("--input-len", help="Prompt tokens per request.")],
    output_len: Annotated[int, typer.Option("--output-len", help="Output tokens per request.")],
    ttft_p99: Annotated[str, typer.Option("--ttft-p99", help="p99 TTFT target, e.g. 2s.")],
    tpot_p99: Annotated[str, typer.Option("--tpot-p99", help="p99 TPOT target, e.g. 50ms.")],
    gpus: Annotated[
        str | None,
        typer.Option(
            "--gpus",
            help="Comma-separated GPU types. Deployments are ranked by cost where every one "
            "has a price (built in or --prices), by GPU count where none has; default "
            + ",".join(DEFAULT_GPUS)
            + ", those priced.",
        ),
    ] = None,
    precision: Annotated[
        str, typer.Option("--precision", help="auto (fp8 where supported) or a format.")
    ] = "auto",
    prices: Annotated[
        Path | None, typer.Option("--prices", help="YAML: GPU -> USD per GPU-hour.")
    ] = None,
    engine: Engine = "trtllm",
    json: Json = False,
    calibration: Cal = None,
) -> None:
    """The cheapest deployment (GPU type, TP, replicas) meeting p99 TTFT and TPOT targets."""
    from gpuscale.catalog import get_model
    from gpuscale.perf.engines import get_engine
    from gpuscale.perf.inference_size import load_prices, size

    slo = _check_targets(qps, input_len, output_len, ttft_p99, tpot_p99)
    cal = load_calibration(calibration)
    price_map = load_prices(prices)
    priced_in = f"--prices {prices}" if prices is not None else "the shipped prices.yaml"
    unpriced: list[str] = []
    if gpus is not None:
        gl, notes = _named_candidates(gpus, price_map, priced_in)
    else:
        gl, unpriced, notes = _default_candidates(prices, price_map, priced_in)
    m = get_model(model)
    res = size(
        m,
        qps,
        input_len,
        output_len,
        slo,
        gl,
        cal,
        price_map,
        precision=precision,
        engine=get_engine(engine),
    )
    _warn_context(m, input_len, output_len)
    _note_sparse(m)
    if json:
        emit_json(_size_doc(m.key, qps, input_len, output_len, slo, unpriced, priced_in, res))
        return
    print_size(res, notes)


def _check_targets(
    qps: float, input_len: int, output_len: int, ttft_p99: str, tpot_p99: str
) -> Slo:
    """The p99 TTFT and TPOT targets, refused (as typed: '1us', not 1e-06) unless positive
    times, after the request rate and lengths."""
    from gpuscale.perf.inference_size import Slo
    from gpuscale.sim.arrivals import check_qps
    from gpuscale.units import parse_quantity

    slo = Slo(
        parse_quantity(ttft_p99, "seconds", "ttft-p99"),
        parse_quantity(tpot_p99, "seconds", "tpot-p99"),
    )
    check_qps(qps)
    for flag, length in (("input-len", input_len), ("output-len", output_len)):
        _positive(flag, length)
    for n, typed, v in (
        ("ttft-p99", ttft_p99, slo.ttft_p99_s),
        ("tpot-p99", tpot_p99, slo.tpot_p99_s),
    ):
        if not v > 0:
            raise InputError(n, typed, "a positive time, e.g. 2s or 50ms")
    return slo


def _named_candidates(
    gpus: str, price_map: dict[str, float], priced_in: str
) -> tuple[list[GPU], list[str]]:
    """The GPUs --gpus names and the notes on them: all priced (ranked by cost) or none
    (ranked by GPU count); some priced and some not cannot be compared, and are refused."""
    from gpuscale.catalog import get_gpu

    notes: list[str] = []
    gl = [get_gpu(x.strip(), field="gpus") for x in gpus.split(",") if x.strip()]
    if not gl:
        raise InputError("gpus", gpus, "a comma-separated list of catalog GPUs")
    missing = [g.key for g in gl if g.key not in price_map]
    if missing and len(missing) < len(gl):
        # costs of the priced GPUs cannot be compared with no cost at all
        it = "it" if len(missing) == 1 else "them"
        raise InputError(
            "gpus",
            ",".join(missing),
            f"no USD per GPU-hour price in {priced_in}, which prices the other GPUs; "
            f"add {it} to --prices or drop {it} from --gpus",
        )
    if missing:
        notes.append(
            f"no price in {priced_in} for {', '.join(missing)}: ranked by GPU count, no cost shown"
        )
    return gl, notes


def _default_candidates(
    prices: Path | None, price_map: dict[str, float], priced_in: str
) -> tuple[list[GPU], list[str], list[str]]:
    """The default candidates that have a price, those skipped for want of one, and the
    notes on them; refused when none is priced."""
    from gpuscale.catalog import get_gpu

    gl = [get_gpu(x) for x in DEFAULT_GPUS]
    notes = [
        f"candidates: {', '.join(DEFAULT_GPUS)} (the default; --gpus names other catalog GPUs)"
    ]
    unpriced = [g.key for g in gl if g.key not in price_map]
    gl = [g for g in gl if g.key in price_map]
    if unpriced:
        notes.append(
            f"skipped (no price in {priced_in}; add them to --prices to compare them): "
            + ", ".join(unpriced)
        )
    if not gl:
        raise InputError(
            "--prices",
            str(prices),
            f"prices none of the default candidates {', '.join(DEFAULT_GPUS)}; price "
            "them or name priced GPUs with --gpus",
        )
    return gl, unpriced, notes


def _size_doc(
    model: str,
    qps: float,
    input_len: int,
    output_len: int,
    slo: Slo,
    unpriced: list[str],
    priced_in: str,
    res: SizingResult,
) -> dict[str, Any]:
    """`infer size`'s JSON object: the model's catalog key (as `infer estimate` gives it),
    the load and targets asked for, the default GPUs skipped
    for want of a price, the best deployment, those checked and the best one's latency as
    the load grows."""
    b = res.best
    return {
        "model": model,
        "qps": qps,
        "input_len": input_len,
        "output_len": output_len,
        "slo": {"ttft_p99_s": slo.ttft_p99_s, "tpot_p99_s": slo.tpot_p99_s},
        "skipped_gpus": {g: f"no price in {priced_in}" for g in unpriced},
        "ranked_by": "usd_per_hour" if b.usd_per_hour is not None else "gpus",
        "best": b.__dict__,
        "considered": [c.__dict__ for c in res.considered],
        "curve": [p.__dict__ for p in res.curve],
    }
