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
from gpuscale.cli.train_run_rows import reliability_rows, storage_rows, time_to_train_row
from gpuscale.errors import InputError
from gpuscale.export.megatron import megatron_args, megatron_json
from gpuscale.ops.reliability import FailurePolicy
from gpuscale.perf.memory import MEMORY_PARTS
from gpuscale.perf.plan import Workload
from gpuscale.perf.sharding import ShardGroups
from gpuscale.perf.storage import StoragePolicy
from gpuscale.perf.training import TrainingEstimate
from gpuscale.perf.training_notes import CP_EXCHANGES
from gpuscale.perf.transformer import active_param_count, mtp_param_count, param_count
from gpuscale.report.cells import (
    search_cells,
    search_header,
    term_label,
)
from gpuscale.search.explain import explain
from gpuscale.search.plans import SearchResult, search_plans
from gpuscale.units import fmt_bytes, fmt_time


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
    """Plan ``i`` of the estimate as a table under ``title``: the model, the plan, memory
    per GPU by part, step time by term, throughput and MFU, the expected error, its
    Megatron-LM flags, what checkpoints, data loading and failures cost where priced, and
    the time to train ``train_tokens``; then the notes on what the figures leave out."""
    s = e.summary(i, train_tokens, storage, failures)
    t = Table(title=title, show_header=False)
    t.add_column()
    t.add_column(overflow="fold")  # a pipeline layout is one long word: wrap it, do not cut
    _plan_rows(t, e, i, s)
    _step_rows(t, e.workload, s)
    if band is not None:
        t.add_row("expected error", band.line())
    mlm = megatron_args(e, i)
    t.add_row("Megatron-LM", mlm.line())
    if storage is not None:
        storage_rows(t, s, storage)
    if failures is not None:
        reliability_rows(t, s, failures)
    if train_tokens is not None:
        time_to_train_row(t, s, train_tokens)
    out.print(t)
    for note in _estimate_notes(s, mlm.notes, train_tokens, storage, failures):
        out.print(Text(f"note: {note}"))


def _plan_rows(t: Table, e: TrainingEstimate, i: int, s: dict[str, Any]) -> None:
    """The model, plan ``i`` (the GPUs it uses, its micro-batches, its hybrid sharding) and
    its memory per GPU against the capacity, by part."""
    t.add_row("model", model_line(e.workload.model))
    label = e.plans.label(i).replace(
        "rc:selective", f"rc:selective({','.join(s['recompute_modules'])})"
    )
    t.add_row(
        "plan",
        label + f"  ({s['gpus_used']} of {s['gpus']} GPUs, "
        f"{s['microbatches']:,} micro-batch{'' if s['microbatches'] == 1 else 'es'}"
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


def _step_rows(t: Table, w: Workload, s: dict[str, Any]) -> None:
    """The step time and its nonzero terms, tokens/s, the model's and the hardware's
    TFLOP/s per GPU, and the MFU."""
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
    t.add_row("MFU", _mfu_text(w, s))


def _mfu_text(w: Workload, s: dict[str, Any]) -> str:
    """The MFU against the dense peak of the workload's precision, with the share its best
    GEMM reaches (bf16, fp16) or the share of the bf16 peak (lower precisions)."""
    mfu = f"{100 * s['mfu']:.1f}% of {w.precision} dense peak"
    if w.precision in ("bf16", "fp16"):
        # what a GEMM can reach on this GPU, the bar an MFU is fairly compared with
        mfu += f" (its best GEMM reaches {100 * w.gpu.matmul_eff:.0f}%)"
    elif "bf16" in w.gpu.peak_tflops:
        # low-precision runs are often quoted against the bf16 peak: both, to compare
        bf16 = s["model_tflops_per_gpu"] * 1e12 / w.gpu.peak_flops("bf16")
        mfu += f"; {100 * bf16:.1f}% of the bf16 dense peak"
    return mfu


def _estimate_notes(
    s: dict[str, Any],
    megatron_notes: tuple[str, ...],
    train_tokens: float | None,
    storage: StoragePolicy | None,
    failures: FailurePolicy | None,
) -> list[str]:
    """The notes under an estimate's table: the estimate's own, the Megatron-LM flags' and
    what the time to train leaves out."""
    notes = list(s.get("notes", []))
    notes += [f"Megatron-LM flags: {n}" for n in megatron_notes]
    if train_tokens is not None and s["time_to_train_s"] is not None and failures is None:
        # what the time to train leaves out, and the flags that price it
        missing = "checkpoints or failures" if storage is None else "failures"
        notes.append(
            f"the time to train has no {missing} in it: --checkpoint-every with "
            "--storage-write-bw prices saves, --gpu-mtbf with --restart-time failures"
        )
    return notes


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
    compared: dict[str, float | None] | None = None,
) -> None:
    """Prints a plan search: the ``top`` plans that fit, ranked, with each one's step time against
    the best, memory and (with failures priced) goodput, then the best plan's breakdown and why
    it wins; with ``as_json`` the same as one JSON object (with the expected error band).
    ``compared``: each context-parallel exchange's best step (``--cp-comm best``), said too."""
    e = res.estimate
    idx = res.top(top)
    why = explain(res)
    if as_json:
        extra = {} if compared is None else {"cp_comm_compared": compared}
        emit_json(
            {
                **extra,
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
    if compared is not None:
        out.print(Text(exchanges_line(e.workload.cp_comm, compared)))


def exchanges_line(chosen: str, compared: dict[str, float | None]) -> str:
    """What ``--cp-comm best`` found: the exchange ranked and each one's fastest plan."""
    each = ", ".join(
        f"{CP_EXCHANGES[k]} {fmt_time(v) if v is not None else 'no plan that fits'}"
        for k, v in compared.items()
    )
    return (
        f"context-parallel exchange (--cp-comm best): the plans are ranked with "
        f"{CP_EXCHANGES[chosen]} (--cp-comm {chosen}), whose fastest plan is the fastest; "
        f"the fastest step with each: {each}"
    )


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
    """The hint printed when the plan does not fit: the fastest plan that does (its tokens/s
    per GPU and bytes a GPU), from ``best``, or, with none, more GPUs, more memory or a
    shorter sequence."""
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
