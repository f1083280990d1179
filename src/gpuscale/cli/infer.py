"""`gpuscale infer estimate | size`: LLM serving latency, throughput, memory and sizing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from gpuscale.cli._common import Cal, emit_json, err, load_calibration, out
from gpuscale.errors import InputError

if TYPE_CHECKING:
    from gpuscale.catalog import Model
    from gpuscale.perf.kv import MemoryPlan

DEFAULT_GPUS = ("h100-sxm", "h200", "b200")
"""`infer size` candidates when --gpus is not given (those without a price are skipped)."""

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
        f"sequence needs {_gib(need)} of KV cache per GPU, the pool beside the weights holds "
        f"{_gib(mem.kv_pool_bytes)} ({where}); shorten --input-len/--output-len or raise "
        "--tp/--pp",
    )


def _gib(b: float) -> str:
    return f"{b / 2**30:,.2f} GiB"


def _ms(s: float) -> str:
    return f"{s * 1e3:,.2f} ms"


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
        int,
        typer.Option("--requests", help="Requests simulated (qps/concurrency; up to 1,000,000)."),
    ] = 2000,
    engine: Engine = "trtllm",
    json: Json = False,
    calibration: Cal = None,
) -> None:
    """Memory, step-time breakdown and simulated TTFT/TPOT/ITL and throughput of one replica."""
    from gpuscale.catalog import get_gpu, get_model
    from gpuscale.perf.engines import get_engine
    from gpuscale.perf.inference import build_step_model
    from gpuscale.perf.kv import precision_plan
    from gpuscale.sim.arrivals import Workload, check_qps, check_requests, poisson
    from gpuscale.sim.arrivals import concurrency as closed
    from gpuscale.sim.arrivals import offline as all_at_once
    from gpuscale.sim.serving import simulate

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
    for n, v in (("input-len", input_len), ("output-len", output_len), ("tp", tp), ("pp", pp)):
        _positive(n, v)
    # bounded before the simulation allocates its arrays of requests
    for flag, count in (("concurrency", concurrency), ("offline", offline), ("requests", requests)):
        if count is not None:
            check_requests(flag, count)
    if qps is not None:
        check_qps(qps)
    cal = load_calibration(calibration)
    m, g = get_model(model), get_gpu(gpu)
    pplan = precision_plan(g, precision, kv_precision)
    eng = get_engine(engine)
    sm = build_step_model(m, g, pplan, tp, pp, cal, eng, input_len + output_len, input_len)
    mem = sm.memory
    _sequence_fits(mem, m, input_len, output_len, f"{m.key} at TP{tp} x PP{pp} on {g.key}")
    if not mem.fits:
        raise InputError(
            "tp",
            tp,
            f"{m.key} at {precision} needs {_gib(mem.weights_bytes)} of "
            f"weights per GPU at TP{tp} x PP{pp}, leaving no KV cache on {g.key} "
            f"({_gib(g.memory_bytes)}); raise --tp/--pp or lower --precision",
        )
    wl: Workload
    if offline is not None:
        wl = all_at_once(offline, input_len, output_len)
        mode = f"offline {offline} requests"
    elif qps is not None:
        wl = poisson(requests, qps, input_len, output_len, seed=0)
        mode = f"Poisson {qps:g} req/s, {requests} requests"
    else:
        assert concurrency is not None
        wl = closed(max(requests, concurrency), concurrency, input_len, output_len)
        mode = f"concurrency {concurrency}, {max(requests, concurrency)} requests"
    res = simulate(sm, sm.limits(), wl, cal.inf_request_overhead_s)
    _warn_context(m, input_len, output_len)
    pf = sm.breakdown(float(input_len), input_len * (input_len + 1) / 2.0, 1, 0, 0.0)
    dbatch = max(1, min(round(res.mean_batch), mem.max_seqs))
    dec = sm.breakdown(0.0, 0.0, 0, dbatch, dbatch * (input_len + output_len / 2.0))
    doc: dict[str, Any] = {
        "model": m.key,
        "gpu": g.key,
        "tp": tp,
        "pp": pp,
        "engine": eng.name,
        "precision": {"weights": pplan.weights, "compute": pplan.compute, "kv": pplan.kv},
        "input_len": input_len,
        "output_len": output_len,
        "load": mode,
        "memory_per_gpu": mem.to_dict(),
        "prefill_step_batch1": pf.to_dict(),
        "decode_step": {"batch": dbatch, **dec.to_dict()},
        "serving": res.to_dict(),
        "output_tokens_per_s_per_gpu": res.output_tokens_per_s / (tp * pp),
    }
    if json:
        emit_json(doc)
        return
    t = Table(
        title=f"{m.name} on {tp * pp}x {g.name} (TP{tp} PP{pp}, {pplan.weights} weights, "
        f"{pplan.kv} KV, {eng.name})"
    )
    t.add_column("memory per GPU")
    t.add_column("value", justify="right")
    for key, val in (
        ("weights", _gib(mem.weights_bytes)),
        ("activation workspace + reserved", _gib(mem.workspace_bytes)),
        ("KV pool", _gib(mem.kv_pool_bytes)),
        ("KV per token", f"{mem.kv_bytes_per_token / 1024:,.1f} KiB"),
        (
            f"KV per sequence of {mem.tokens_per_seq:,} tokens",
            f"{mem.kv_bytes_per_seq / 2**20:,.1f} MiB",
        ),
        ("KV blocks", f"{mem.kv_blocks:,} x {mem.block_tokens} tokens"),
        ("max sequences", f"{mem.max_seqs:,} (KV allows {mem.kv_limited_seqs:,})"),
    ):
        t.add_row(key, val)
    if mem.window_tokens:
        t.caption = (
            f"{mem.window_share:.0%} of the attention layers keep at most "
            f"{mem.window_tokens:,} tokens a sequence ({m.window_kind} window)"
        )
    out.print(t)
    s = Table(title="step time breakdown")
    for c in (
        "step",
        "GEMM",
        "attention",
        "KV read",
        "TP comm",
        "PP comm",
        "overhead",
        "total",
        "GEMM bound",
    ):
        s.add_column(c, justify="right")
    for name, b in ((f"prefill {input_len} tok", pf), (f"decode batch {dbatch}", dec)):
        s.add_row(
            name,
            _ms(b.gemm_s),
            _ms(b.attention_s),
            _ms(b.kv_read_s),
            _ms(b.tp_comm_s),
            _ms(b.pp_comm_s),
            _ms(b.overhead_s),
            _ms(b.total_s),
            b.bound,
        )
    out.print(s)
    r = Table(title=f"simulated serving: {mode}")
    for c in ("metric", "mean", "p50", "p99"):
        r.add_column(c, justify="right")
    for name, st in (
        ("TTFT", res.ttft_s),
        ("TPOT", res.tpot_s),
        ("ITL", res.itl_s),
        ("end-to-end", res.e2e_s),
    ):
        r.add_row(name, _ms(st.mean), _ms(st.p50), _ms(st.p99))
    out.print(r)
    out.print(
        f"throughput {res.output_tokens_per_s:,.0f} output tok/s "
        f"({doc['output_tokens_per_s_per_gpu']:,.0f} per GPU), "
        f"{res.requests_per_s:,.2f} req/s; mean batch {res.mean_batch:,.1f}"
    )


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
            help="Comma-separated GPU types, all priced (ranked by cost) or none (ranked by "
            "GPU count); default " + ",".join(DEFAULT_GPUS) + ", those priced.",
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
    from gpuscale.catalog import get_gpu, get_model
    from gpuscale.perf.engines import get_engine
    from gpuscale.perf.inference_size import Slo, load_prices, size
    from gpuscale.sim.arrivals import check_qps
    from gpuscale.units import parse_quantity

    slo = Slo(
        parse_quantity(ttft_p99, "seconds", "ttft-p99"),
        parse_quantity(tpot_p99, "seconds", "tpot-p99"),
    )
    check_qps(qps)
    for flag, length in (("input-len", input_len), ("output-len", output_len)):
        _positive(flag, length)
    # a time target is quoted as typed ('1us', not 1e-06)
    for n, typed, v in (
        ("ttft-p99", ttft_p99, slo.ttft_p99_s),
        ("tpot-p99", tpot_p99, slo.tpot_p99_s),
    ):
        if not v > 0:
            raise InputError(n, typed, "a positive time, e.g. 2s or 50ms")
    cal = load_calibration(calibration)
    price_map = load_prices(prices)
    priced_in = f"--prices {prices}" if prices is not None else "the shipped prices.yaml"
    unpriced: list[str] = []
    notes: list[str] = []
    if gpus is not None:
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
                f"no price in {priced_in} for {', '.join(missing)}: ranked by GPU count, "
                "no cost shown"
            )
    else:
        gl = [get_gpu(x) for x in DEFAULT_GPUS]
        notes.append(
            f"candidates: {', '.join(DEFAULT_GPUS)} (the default; --gpus names other catalog GPUs)"
        )
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
    b = res.best
    if json:
        emit_json(
            {
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
        )
        return
    cost = (
        ""
        if b.usd_per_hour is None
        else (
            f", {b.usd_per_hour:,.2f} USD/h, {b.usd_per_million_output_tokens:,.3f} USD per 1M "
            f"output tokens"
        )
    )
    for note in notes:
        out.print(f"note: {note}", highlight=False, soft_wrap=True)
    out.print(
        f"[bold]best:[/] {b.gpu} {b.precision} TP{b.tp} x {b.replicas} replicas = "
        f"{b.gpus} GPUs, utilization {b.utilization:.0%}{cost}; simulated p99 TTFT "
        f"{_ms(b.ttft_p99_s)}, p99 TPOT {_ms(b.tpot_p99_s)}"
    )
    t = Table(title="candidates checked by simulation (in order of estimated cost)")
    for c in (
        "GPU",
        "TP",
        "replicas",
        "GPUs",
        "USD/h",
        "USD/1M out tok",
        "util",
        "p99 TTFT",
        "p99 TPOT",
        "meets SLO",
    ):
        t.add_column(c, justify="right")
    for cand in res.considered:
        t.add_row(
            cand.gpu,
            str(cand.tp),
            str(cand.replicas),
            str(cand.gpus),
            "" if cand.usd_per_hour is None else f"{cand.usd_per_hour:,.2f}",
            ""
            if cand.usd_per_million_output_tokens is None
            else f"{cand.usd_per_million_output_tokens:,.3f}",
            f"{cand.utilization:.0%}",
            _ms(cand.ttft_p99_s),
            _ms(cand.tpot_p99_s),
            "yes" if cand.verified else "no",
        )
    out.print(t)
    k = Table(title=f"latency vs load: {b.gpu} TP{b.tp} x {b.replicas}")
    for c in ("offered req/s", "p99 TTFT", "p99 TPOT", "output tok/s", "meets SLO"):
        k.add_column(c, justify="right")
    for p in res.curve:
        k.add_row(
            f"{p.qps:,.2f}",
            _ms(p.ttft_p99_s),
            _ms(p.tpot_p99_s),
            f"{p.output_tokens_per_s:,.0f}",
            "yes" if p.meets_slo else "no",
        )
    out.print(k)
