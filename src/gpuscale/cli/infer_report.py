"""How `gpuscale infer` prints its results as text: one replica's memory, step times and
simulated serving (`infer estimate`), and the deployments `infer size` checked."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.table import Table

from gpuscale.cli._common import out

if TYPE_CHECKING:
    from gpuscale.perf.inference_size import SizingResult
    from gpuscale.perf.inference_step import StepBreakdown
    from gpuscale.perf.kv import MemoryPlan
    from gpuscale.sim.results import ServingResult


def gib(b: float) -> str:
    """A size in bytes as GiB (2^30 bytes) with two decimals: "1,024.00 GiB"."""
    return f"{b / 2**30:,.2f} GiB"


def ms(s: float) -> str:
    """Seconds as milliseconds, or as seconds from 10 s; "-" where there is no figure (no
    request emits a second token when each asks for one: no TPOT or ITL)."""
    if not math.isfinite(s):
        return "-"
    return f"{s:,.2f} s" if s >= 10.0 else f"{s * 1e3:,.2f} ms"


def print_estimate(
    title: str,
    mem: MemoryPlan,
    window_kind: str,
    steps: tuple[tuple[str, StepBreakdown], ...],
    mode: str,
    res: ServingResult,
    per_gpu: float,
) -> None:
    """`infer estimate`'s tables: memory per GPU of the replica ``title`` names, the time of
    each of ``steps`` by part, and the serving simulated under load ``mode``; then the
    throughput (``per_gpu`` output tokens/s per GPU)."""
    t = Table(title=title)
    t.add_column("memory per GPU")
    t.add_column("value", justify="right")
    for key, val in (
        ("weights", gib(mem.weights_bytes)),
        ("activation workspace + reserved", gib(mem.workspace_bytes)),
        ("KV pool", gib(mem.kv_pool_bytes)),
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
            f"{mem.window_tokens:,} tokens a sequence ({window_kind} window)"
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
    for name, b in steps:
        s.add_row(
            name,
            ms(b.gemm_s),
            ms(b.attention_s),
            ms(b.kv_read_s),
            ms(b.tp_comm_s),
            ms(b.pp_comm_s),
            ms(b.overhead_s),
            ms(b.total_s),
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
        r.add_row(name, ms(st.mean), ms(st.p50), ms(st.p99))
    out.print(r)
    out.print(
        f"throughput {res.output_tokens_per_s:,.0f} output tok/s "
        f"({per_gpu:,.0f} per GPU), "
        f"{res.requests_per_s:,.2f} req/s; mean batch {res.mean_batch:,.1f}"
    )


def print_size(res: SizingResult, notes: list[str]) -> None:
    """`infer size`'s answer: ``notes`` on the candidates, the best deployment, the ones
    checked by simulation and the best one's latency as the load grows."""
    b = res.best
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
        f"{ms(b.ttft_p99_s)}, p99 TPOT {ms(b.tpot_p99_s)}"
    )
    t = Table(
        title="candidates checked by simulation (in order of estimated cost)",
        caption="each row is the fewest replicas of one GPU and TP that meet the SLO, or the "
        "most tried; the search stops at the first candidate whose lowest possible cost is no "
        "less than the best found, so a GPU's other TP degrees may go unchecked: --gpus NAME "
        "sizes that GPU alone",
    )
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
            ms(cand.ttft_p99_s),
            ms(cand.tpot_p99_s),
            "yes" if cand.verified else "no",
        )
    out.print(t)
    k = Table(title=f"latency vs load: {b.gpu} TP{b.tp} x {b.replicas}")
    for c in ("offered req/s", "p99 TTFT", "p99 TPOT", "output tok/s", "meets SLO"):
        k.add_column(c, justify="right")
    for p in res.curve:
        k.add_row(
            f"{p.qps:,.2f}",
            ms(p.ttft_p99_s),
            ms(p.tpot_p99_s),
            f"{p.output_tokens_per_s:,.0f}",
            "yes" if p.meets_slo else "no",
        )
    out.print(k)
