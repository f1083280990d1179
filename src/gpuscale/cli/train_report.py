"""How `gpuscale train` prints its results: one plan's memory and step breakdown, a ranked
search with the reason the best wins."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from gpuscale.calibrate import Calibration
from gpuscale.calibrate.accuracy import Band
from gpuscale.catalog import Model
from gpuscale.cli._common import emit_json, out
from gpuscale.errors import InputError
from gpuscale.export.megatron import megatron_args, megatron_json
from gpuscale.ops.reliability import FailurePolicy
from gpuscale.perf.memory import MEMORY_PARTS
from gpuscale.perf.plan import Workload
from gpuscale.perf.sharding import ShardGroups
from gpuscale.perf.storage import StoragePolicy
from gpuscale.perf.training import TrainingEstimate
from gpuscale.perf.transformer import active_param_count, mtp_param_count, param_count
from gpuscale.report.cells import (
    SHOWN,
    search_cells,
    search_header,
    term_label,
)
from gpuscale.search.explain import explain
from gpuscale.search.plans import SearchResult, search_plans
from gpuscale.units import fmt_bytes, fmt_count, fmt_rate, fmt_time

FIXED_NOTE_SHARE = 0.05
"""Share of the step above which the estimate says what its fixed overhead is."""

YEAR_S = 365.25 * 86400.0
NEVER_S = 100.0 * YEAR_S
"""A time to train with failures priced beyond which the figure is said as what it means:
failures and restarts leave the run almost no time to train."""


def model_line(m: Model) -> str:
    """Parameters and the structure that shapes the costs: blocks, MTP depths, window,
    sparse attention."""
    parts = [f"{param_count(m) / 1e9:,.1f} B parameters"]
    if m.is_moe:
        # active per token with the embedding tables counted (model cards differ: GPT-OSS's
        # 5.1 B leaves one out, Mixtral's 12.9 B keeps both)
        parts[0] += f" ({active_param_count(m) / 1e9:,.1f} B active, embeddings included)"
    if m.hybrid:
        mixer = "Gated DeltaNet" if m.gated_deltanet else "Mamba-2"
        attn = "gated attention" if m.attn_gate else "attention"
        kinds = ((mixer, "M"), (attn, "*"), ("MoE", "E"), ("MLP", "-"))
        counts = ", ".join(f"{m.pattern.count(c)} {n}" for n, c in kinds if c in m.pattern)
        parts.append(f"{m.layers} blocks: {counts}")
    else:
        parts.append(f"{m.layers} layers" + (f", {m.moe_layers} MoE" if m.is_moe else ""))
    if m.mtp_layers:
        # the MTP modules' weights (DeepSeek-V3's 14 B of its 685 B checkpoint) are counted
        # apart, as the model cards count the main model alone
        parts.append(
            f"{m.mtp_layers} MTP depth{'s' if m.mtp_layers > 1 else ''} "
            f"(+{mtp_param_count(m) / 1e9:,.1f} B parameters beside the shared embedding)"
        )
    if m.window_layers:
        kind = "window" if m.window_kind == "sliding" else "attention chunk"
        parts.append(f"{m.window_layers} layers with a {m.window}-token {kind}")
        x = m.window_attn
        if x is not None and x.heads != m.heads:  # Step 3.5: the windowed layers' own heads
            parts[-1] += (
                f" and {x.heads} query heads (the others {m.heads}), {x.kv_heads} KV heads of "
                f"{x.head_dim}"
            )
        elif x is not None:  # Gemma 4: their own KV heads and head size
            parts[-1] += (
                f", {x.kv_heads} KV heads of {x.head_dim} (the others {m.kv_heads} of {m.head_dim})"
            )
    if m.k_eq_v:
        where = "the full-attention layers" if m.window_attn is not None else "every layer"
        parts.append(f"K = V (one projection) in {where}")
    if m.compressed is not None:
        parts.append(_compressed_line(m))
    elif m.sparse is not None:
        parts.append(
            f"sparse attention over the top {m.sparse.topk:,} keys, chosen by "
            f"{m.sparse.indexers} indexers of {m.sparse.heads} x {m.sparse.head_dim}"
        )
    if m.residual_streams > 1:
        parts.append(f"{m.residual_streams} residual streams (hyper-connections)")
    return "; ".join(parts)


def _compressed_line(m: Model) -> str:
    """DeepSeek-V4's attention in words: the window, then the layers of each ratio."""
    c = m.compressed
    assert c is not None
    main = c.ratios[: m.layers]
    kinds = []
    for r in sorted(set(main) - {0}):
        n = main.count(r)
        if r == c.csa_ratio and m.sparse is not None:
            x = m.sparse
            kinds.append(
                f"in {n} the top {x.topk:,} entries of {r} tokens an indexer of {x.heads} x "
                f"{x.head_dim} picks (CSA)"
            )
        else:
            kinds.append(f"in {n} every entry of {r} tokens (HCA)")
    return f"attention to a {c.window}-token window in every layer, " + " and ".join(kinds)


def _storage_rows(t: Table, s: dict[str, Any], policy: StoragePolicy) -> None:
    """The checkpoint and data-loading rows of an estimate (perf/storage.py); with failures
    priced, the goodput row gives the checkpoints' share of wall time instead."""
    st = s["storage"]
    if st["checkpoint_bytes"] and policy.write_Bps:
        every, interval = st["checkpoint_every_steps"], st["checkpoint_interval_s"]
        per = st["checkpoint_per_step_s"]
        if policy.asynchronous:
            how = (
                f"set-up and copy to host memory, then {fmt_time(st['checkpoint_write_s'])} of "
                "background writing"
            )
            if st["checkpoint_wait_s"] > 0:
                how += (
                    f"; {fmt_time(st['checkpoint_wait_s'])} of the stall waits for the "
                    "previous write"
                )
        else:
            rate = st["checkpoint_bytes"] / st["checkpoint_write_s"]
            how = f"written synchronously at {fmt_rate(rate, 'B/s')}"
            if rate < policy.write_Bps * (1 - 1e-9):
                how += ", the GPUs' host links' pace"
        short = (
            " (the interval asked is shorter than a step)"
            if st["checkpoint_interval_below_step"]
            else " (the best interval for the failure rate)"
            if st["checkpoint_every_best"]
            else ""
        )
        share = (
            ""
            if "reliability" in s
            else f", {100 * per / (interval / every + per):.1f}% of training time"
        )
        t.add_row(
            "checkpoint",
            f"{fmt_bytes(st['checkpoint_bytes'], binary=False)} every {every:,} step"
            f"{'' if every == 1 else 's'} ({fmt_time(interval)}){short}: training stalls "
            f"{fmt_time(st['checkpoint_stall_s'])} each ({how}){share}",
        )
    if st["data_read_s"] is not None:
        exposed = st["data_exposed_s"]
        left = (
            f"{fmt_time(exposed)} a step beyond the step's own time"
            if exposed > 0
            else f"hidden behind the {fmt_time(s['step_time_s'])} step (read ahead)"
        )
        t.add_row(
            "data loading",
            f"{fmt_bytes(st['data_bytes_per_step'], binary=False)} of token ids a step, read "
            f"in {fmt_time(st['data_read_s'])}: {left}",
        )


def _reliability_rows(t: Table, s: dict[str, Any], failures: FailurePolicy) -> None:
    """The failure and goodput rows of an estimate (ops/reliability.py)."""
    r, st = s["reliability"], s["storage"]
    reload = st["checkpoint_reload_s"]
    parts = [f"relaunch {fmt_time(failures.restart_s)}"]
    parts.append(
        f"reload {fmt_time(reload)}" if reload is not None else "reload not priced (no read rate)"
    )
    lost, back = r["lost_work_per_failure_s"], r["restart_per_failure_s"]
    cost = (
        f"on average {fmt_time(lost)} of work since the last durable checkpoint and "
        f"{fmt_time(back)} of restart"
        if lost is not None and back is not None
        else (
            "the work of every interval: a restart takes longer than the time between failures"
            if r["restart_s"] > r["job_mtbf_s"]
            else "the work of every interval: failures come faster than an interval completes"
        )
    )
    t.add_row(
        "failures",
        f"one every {fmt_time(r['job_mtbf_s'])} on {r['gpus']:,} GPUs (GPU MTBF "
        f"{fmt_time(failures.gpu_mtbf_s)}); each costs {cost} (a restart takes "
        f"{fmt_time(r['restart_s'])}: {', '.join(parts)}; some failures cut one short)",
    )
    best = r["optimal_checkpoint_every_steps"]
    every = st["checkpoint_every_steps"]
    gain = r["optimal_goodput"] - r["goodput"]
    # a step as the interval counts it: with the data reading it does not hide
    step = s["step_time_s"] + st.get("data_exposed_s", 0.0)
    at = f"every {best:,} step{'' if best == 1 else 's'} ({fmt_time(best * step)})"
    if best == every or gain <= 0.0:
        hint = "no other interval does better"
    elif s.get("train_steps") and best >= s["train_steps"]:
        hint = f"the best interval is longer than the run's {s['train_steps']:,} steps"
    elif gain < SHOWN:
        hint = f"within 0.1% of the best interval, {at}"
    else:
        hint = f"saving {at} would give {100 * r['optimal_goodput']:.1f}%"
    t.add_row(
        "goodput",
        f"{100 * r['goodput']:.1f}% of wall time trains (checkpoints "
        f"{100 * r['checkpoint_share']:.1f}%, "
        + (
            f"data loading {100 * r['data_loading_share']:.1f}%, "
            if r["data_loading_share"] >= SHOWN
            else ""
        )
        + f"lost work {100 * r['lost_work_share']:.1f}%, "
        f"restarts {100 * r['restart_share']:.1f}%); {hint}",
    )


def _hybrid_shards(e: TrainingEstimate, i: int) -> str:
    """ ", states sharded over 8, 16 replicas" for a hybrid-sharded plan, else ""."""
    g = ShardGroups.of(e.workload, e.plans)
    replicas = float(g.dense_replicas[i])
    if replicas <= 1.0:
        return ""
    over = f"{g.dense[i]:.0f} rank{'' if g.dense[i] == 1 else 's'}"
    return f", states sharded over {over}, {replicas:.0f} replicas"


def print_estimate(
    e: TrainingEstimate,
    i: int,
    title: str,
    train_tokens: float | None,
    storage: StoragePolicy | None = None,
    failures: FailurePolicy | None = None,
    band: Band | None = None,
) -> None:
    s = e.summary(i, train_tokens, storage, failures)
    t = Table(title=title, show_header=False)
    t.add_column()
    t.add_column(overflow="fold")  # a pipeline layout is one long word: wrap it, do not cut
    t.add_row("model", model_line(e.workload.model))
    label = e.plans.label(i).replace(
        "rc:selective", f"rc:selective({','.join(s['recompute_modules'])})"
    )
    t.add_row(
        "plan",
        label + f"  ({s['gpus_used']} of {s['gpus']} GPUs, "
        f"{s['microbatches']} micro-batch{'' if s['microbatches'] == 1 else 'es'}"
        f"{_hybrid_shards(e, i)})",
    )
    mem = s["memory_bytes"]
    fit = (
        "fits"
        if s["fits"]
        else f"DOES NOT FIT (short by {fmt_bytes(mem['total'] - mem['capacity'])})"
    )
    room = e.workload.memory_headroom
    cap = fmt_bytes(mem["capacity"])
    if room > 0:
        whole = fmt_bytes(e.workload.gpu.memory_bytes)
        cap += f" ({whole} less a {100 * room:g} % headroom)"
    t.add_row("memory / GPU", f"{fmt_bytes(mem['total'])} of {cap}: {fit}")
    for k in MEMORY_PARTS:
        t.add_row(f"  {k}", fmt_bytes(mem[k]))
    t.add_row("step time", fmt_time(s["step_time_s"]))
    for k, v in s["step_time_breakdown_s"].items():
        if v > 0:
            t.add_row(
                f"  {term_label(k)}",
                f"{fmt_time(v)}  ({100 * v / s['step_time_s']:.1f}%)",
            )
    t.add_row("tokens/s per GPU", f"{s['tokens_per_s_per_gpu']:,.0f}")
    t.add_row(
        "model TFLOP/s per GPU",
        f"{s['model_tflops_per_gpu']:.1f}  ({s['model_flops_per_token'] / 1e9:,.1f} GFLOP a "
        "token: 3 x the forward's GEMMs, output layer included, and causal attention; no "
        "recomputation, Megatron-LM's count)",
    )
    again = s["hardware_flops_per_token"] - s["model_flops_per_token"]
    if again > 0:
        t.add_row(
            "hardware TFLOP/s",
            f"{s['hardware_tflops_per_gpu']:.1f} per GPU  (+{again / 1e9:,.1f} GFLOP a token "
            "that recomputation runs again; Megatron's TFLOP/s under recomputation count it, "
            "Narayanan et al. 2021)",
        )
    w = e.workload
    mfu = f"{100 * s['mfu']:.1f}% of {w.precision} dense peak"
    if w.precision in ("bf16", "fp16"):
        # what a GEMM can reach on this GPU, the bar an MFU is fairly compared with
        mfu += f" (its best GEMM reaches {100 * w.gpu.matmul_eff:.0f}%)"
    elif "bf16" in w.gpu.peak_tflops:
        # low-precision runs are often quoted against the bf16 peak: both, to compare
        bf16 = s["model_tflops_per_gpu"] * 1e12 / w.gpu.peak_flops("bf16")
        mfu += f"; {100 * bf16:.1f}% of the bf16 dense peak"
    t.add_row("MFU", mfu)
    if band is not None:
        t.add_row("expected error", band.line())
    mlm = megatron_args(e, i)
    t.add_row("Megatron-LM", mlm.line())
    if storage is not None:
        _storage_rows(t, s, storage)
    if failures is not None:
        _reliability_rows(t, s, failures)
    if train_tokens is not None and not s["fits"]:
        t.add_row("time to train", "none: the plan does not fit in memory")
    elif train_tokens is not None and s["time_to_train_s"] is None:
        t.add_row(
            "time to train",
            "never: failures come before the run can save and restart; save more often, "
            "faster, or on fewer nodes",
        )
    elif train_tokens is not None and "reliability" in s and s["time_to_train_s"] > NEVER_S:
        t.add_row(
            "time to train",
            f"more than {NEVER_S / YEAR_S:,.0f} years: "
            f"{100 * s['reliability']['goodput']:.2g}% of wall time trains; restart faster, "
            "or run on fewer GPUs",
        )
    elif train_tokens is not None:
        t.add_row(
            "time to train",
            f"{fmt_time(s['time_to_train_s'])} ({s['train_steps']:,} steps, "
            + (f"{s['checkpoints']:,} checkpoints, " if s.get("checkpoints") else "")
            + (
                f"~{s['failures']:,.0f} failure{'' if round(s['failures']) == 1 else 's'}, "
                if s.get("failures") is not None
                else ""
            )
            + f"{s['gpu_hours']:,.0f} GPU-hours of the "
            f"{s['gpus_used']:,} GPUs it uses"
            + (
                f", {s['gpu_hours_allocated']:,.0f} of all {s['gpus']:,}"
                if s["gpus_used"] < s["gpus"]
                else ""
            )
            + f", for {fmt_count(train_tokens)} tokens)",
        )
    out.print(t)
    notes = list(s.get("notes", []))
    fixed = s["step_time_breakdown_s"]["overhead_s"] / s["step_time_s"]
    if fixed >= FIXED_NOTE_SHARE:
        notes.append(
            f"fixed overhead ({100 * fixed:.0f} % of the step) is time the GPUs spend beyond "
            "their kernels' work, its constants fitted on measured runs: each layer's small "
            "kernels at their minimum time and launch, an MoE layer's router, token counts "
            "sent to the host and permutation, the framework's loop per micro-batch and "
            "per step, and the GPUs waiting on the host's launches where a micro-batch's "
            "kernels take less time than issuing them; --cuda-graphs prices a step replayed "
            "whole as CUDA graphs, without the host's part"
        )
    notes += [f"Megatron-LM flags: {n}" for n in mlm.notes]
    if train_tokens is not None and s["time_to_train_s"] is not None and failures is None:
        # what the time to train leaves out, and the flags that price it
        missing = "checkpoints or failures" if storage is None else "failures"
        notes.append(
            f"the time to train has no {missing} in it: --checkpoint-every with "
            "--storage-write-bw prices saves, --gpu-mtbf with --restart-time failures"
        )
    for note in notes:
        out.print(Text(f"note: {note}"))


def search_goodput(
    res: SearchResult, top: int, storage: StoragePolicy | None, failures: FailurePolicy | None
) -> dict[int, float]:
    """The top plans' goodput, by index, when failures are priced; else empty."""
    if storage is None or failures is None:
        return {}
    e = res.estimate
    return {
        i: e.summary(i, None, storage, failures)["reliability"]["goodput"] for i in res.top(top)
    }


def report_search(
    res: SearchResult,
    top: int,
    as_json: bool,
    tt: float | None,
    storage: StoragePolicy | None = None,
    failures: FailurePolicy | None = None,
    band: Band | None = None,
) -> None:
    e = res.estimate
    idx = res.top(top)
    why = explain(res)
    if as_json:
        emit_json(
            {
                "evaluated": res.evaluated,
                "valid": res.valid,
                "fitting": len(res.order),
                "why_best": why,
                "expected_error": band.to_dict() if band is not None else None,
                "plans": [
                    {
                        "rank": int(r.lstrip("=")),
                        "tied": r.startswith("="),  # same step time and memory as another
                        "label": e.plans.label(i),  # the plan as the table names it
                        "step_vs_best_pct": 100.0 * res.vs_best(i),
                        **e.summary(i, tt, storage, failures),
                        "megatron": megatron_json(e, i),
                    }
                    for r, i in zip(res.ranks(top), idx, strict=True)
                ],
            }
        )
        return
    ranks = res.ranks(top)
    t = Table(
        title=f"{len(res.order):,} of {res.valid:,} valid plans fit ({res.evaluated:,} tried); "
        f"top {len(idx)}",
        caption=(
            "vs #1: step time against the first plan's"
            + (
                "; =N: plans that tie (the same step time and memory), ranked N"
                if any(r.startswith("=") for r in ranks)
                else ""
            )
        ),
    )
    # with failures priced, each plan's goodput (its checkpoints at its own step count)
    good = search_goodput(res, top, storage, failures)
    for col in search_header(bool(good), res.estimate.workload.precision):
        t.add_column(
            col, justify="left" if col in ("plan", "largest term after compute") else "right"
        )
    for r, i in zip(ranks, idx, strict=True):
        t.add_row(*search_cells(res, i, r, good.get(i)))
    out.print(t)
    print_estimate(e, idx[0], "best plan", tt, storage, failures, band)
    out.print(why)


def best_fitting(w: Workload, cal: Calibration) -> dict[str, Any] | None:
    """The fastest plan of the workload that fits (gpuscale train search's best), or None
    when no plan on these GPUs fits."""
    try:
        res = search_plans(w, cal)
    except InputError:
        return None
    if len(res.order) == 0:
        return None
    i = res.best
    s = res.estimate.summary(i)
    return {
        "plan": s["plan"],
        "label": res.estimate.plans.label(i),
        "step_time_s": s["step_time_s"],
        "tokens_per_s_per_gpu": s["tokens_per_s_per_gpu"],
        "memory_bytes": s["memory_bytes"]["total"],
    }


def fit_hint(best: dict[str, Any] | None) -> str:
    if best is None:
        return (
            "no plan of this workload fits on these GPUs: more GPUs, a GPU with more "
            "memory, or a shorter sequence"
        )
    return (
        f"the fastest plan that fits is {best['label']} ({best['tokens_per_s_per_gpu']:,.0f} "
        f"tokens/s per GPU, {fmt_bytes(best['memory_bytes'])} a GPU); gpuscale train search "
        "ranks the others"
    )
