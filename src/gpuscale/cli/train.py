"""`gpuscale train estimate | search | scaling`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.progress import Progress
from rich.text import Text

from gpuscale.calibrate import Calibration
from gpuscale.calibrate.accuracy import band_for
from gpuscale.cli._common import Cal, emit_json, load_calibration, out
from gpuscale.cli.train_estimate import check_plan_flags, data_parallel_degree, estimate_summary
from gpuscale.cli.train_flags import chosen_sharding, fixed_knobs, given_at, workload_flags
from gpuscale.cli.train_options import (
    AccumOpt,
    AsyncCkptOpt,
    AttnOpt,
    CkptEveryOpt,
    CpCommOpt,
    CudaGraphsOpt,
    DispatchOpt,
    ElemOpt,
    Fp8GatherOpt,
    GathersOpt,
    GbsOpt,
    GpuOpt,
    GpusOpt,
    HeadroomOpt,
    HtmlOpt,
    JsonOpt,
    LossOpt,
    ModelOpt,
    ModulesOpt,
    MtbfOpt,
    MtpOpt,
    PpP2pOpt,
    PpSplitOpt,
    PrecOpt,
    ReadBwOpt,
    RestartOpt,
    SeqOpt,
    ShardGroupOpt,
    SysOpt,
    TokensOpt,
    WorkloadOpt,
    WriteBwOpt,
)
from gpuscale.cli.train_report import fit_hint, print_estimate, report_search, search_goodput
from gpuscale.cli.train_scaling_report import print_scaling, scaling_json
from gpuscale.cli.train_workload import Resolved, resolve
from gpuscale.errors import InputError
from gpuscale.perf.plan import PP_SPLITS, Plans, Workload
from gpuscale.perf.training import estimate
from gpuscale.perf.validity import check_plan
from gpuscale.search.exchanges import search_exchanges
from gpuscale.search.plans import SearchResult, search_plans
from gpuscale.search.scaling import ScalingPoint, scaling_curve

app = typer.Typer(no_args_is_help=True)


@app.command("estimate")
def estimate_cmd(
    workload: WorkloadOpt = None,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    gpus: GpusOpt = None,
    seq_len: SeqOpt = None,
    global_batch: GbsOpt = None,
    precision: PrecOpt = None,
    attention: AttnOpt = None,
    zero3_gathers: GathersOpt = None,
    grad_accumulation: AccumOpt = None,
    pp_p2p: PpP2pOpt = None,
    cp_comm: CpCommOpt = None,
    pp_split: PpSplitOpt = None,
    elementwise: ElemOpt = None,
    ep_dispatch: DispatchOpt = None,
    recompute_modules: ModulesOpt = None,
    fp8_param_gather: Fp8GatherOpt = None,
    cuda_graphs: CudaGraphsOpt = None,
    loss: LossOpt = None,
    memory_headroom: HeadroomOpt = None,
    shard_group: ShardGroupOpt = None,
    system: SysOpt = None,
    mtp: MtpOpt = None,
    tp: Annotated[int, typer.Option("--tp", help="Tensor parallel degree.")] = 1,
    pp: Annotated[int, typer.Option("--pp", help="Pipeline parallel degree.")] = 1,
    vpp: Annotated[
        int, typer.Option("--vpp", help="Virtual pipeline chunks (interleaved 1F1B).")
    ] = 1,
    cp: Annotated[int, typer.Option("--cp", help="Context parallel degree.")] = 1,
    ep: Annotated[int, typer.Option("--ep", help="Expert parallel degree.")] = 1,
    dp: Annotated[
        int | None,
        typer.Option(
            "--dp",
            help="Data parallel degree (default: GPUs / (tp x pp x cp)); a smaller one leaves "
            "GPUs idle, as a plan the search picks may.",
        ),
    ] = None,
    mbs: Annotated[int, typer.Option("--mbs", help="Micro-batch size.")] = 1,
    recompute: Annotated[
        str,
        typer.Option(
            "--recompute",
            help="none (default, as Megatron-LM), selective, full, or partial (recompute just "
            "enough to fit in memory).",
        ),
    ] = "none",
    zero: Annotated[
        str | None,
        typer.Option(
            "--zero",
            help="Optimizer sharding: none, zero1, zero2, zero3 or fsdp (ZeRO-3), dist-opt "
            "(as --dist-opt).",
        ),
    ] = None,
    dist_opt: Annotated[
        bool, typer.Option("--dist-opt", help="Megatron distributed optimizer.")
    ] = False,
    sp: Annotated[
        bool | None,
        typer.Option("--sp/--no-sp", help="Sequence parallelism (default: on with TP > 1)."),
    ] = None,
    tp_overlap: Annotated[
        bool, typer.Option("--tp-overlap", help="Overlap TP comm with GEMMs.")
    ] = False,
    tokens: TokensOpt = None,
    checkpoint_every: CkptEveryOpt = None,
    storage_write_bw: WriteBwOpt = None,
    storage_read_bw: ReadBwOpt = None,
    async_checkpoint: AsyncCkptOpt = None,
    gpu_mtbf: MtbfOpt = None,
    restart_time: RestartOpt = None,
    json: JsonOpt = False,
    calibration: Cal = None,
) -> None:
    """Memory, step-time breakdown, tokens/s, TFLOP/s and MFU of one plan."""
    r = resolve(workload, workload_flags(locals()), tokens)
    w = r.workload
    sharding = chosen_sharding(zero, dist_opt) or "none"
    with r.naming_file_values():
        check_plan_flags(r, sharding, sp, tp, sharding_defaulted=zero is None and not dist_opt)
        fx = fixed_knobs(
            r, tp, pp, vpp, cp, ep, mbs, recompute, sharding, tp > 1 and sp is not False
        )
        dp = data_parallel_degree(r, dp, tp, pp, cp)
        # a placement of layers on stages needs stages: one stage holds them all
        split = PP_SPLITS.index(w.pp_split) if pp > 1 else 0
        plan = Plans.of(dp=dp, tp_overlap=tp_overlap, split=split, **fx)
        plan = plan.sharded_over(w.shard_group)
        check_plan(w, plan)
    cal = load_calibration(calibration)
    e = estimate(w, plan, cal)
    summary, band = estimate_summary(r, e, cal)
    if json:
        emit_json(summary)
        return
    title = f"{w.model.name} on {w.num_gpus} x {w.gpu.name}"
    print_estimate(e, 0, title, r.train_tokens, r.storage, r.failures, band)
    if not summary["fits"]:
        out.print(Text(f"hint: {fit_hint(summary['best_fitting_plan'])}"))


@app.command("search")
def search_cmd(
    workload: WorkloadOpt = None,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    gpus: GpusOpt = None,
    seq_len: SeqOpt = None,
    global_batch: GbsOpt = None,
    precision: PrecOpt = None,
    attention: AttnOpt = None,
    zero3_gathers: GathersOpt = None,
    grad_accumulation: AccumOpt = None,
    pp_p2p: PpP2pOpt = None,
    cp_comm: CpCommOpt = None,
    pp_split: PpSplitOpt = None,
    elementwise: ElemOpt = None,
    ep_dispatch: DispatchOpt = None,
    recompute_modules: ModulesOpt = None,
    fp8_param_gather: Fp8GatherOpt = None,
    cuda_graphs: CudaGraphsOpt = None,
    loss: LossOpt = None,
    memory_headroom: HeadroomOpt = None,
    shard_group: ShardGroupOpt = None,
    system: SysOpt = None,
    mtp: MtpOpt = None,
    tp: Annotated[int | None, typer.Option("--tp", help="Fix TP (else searched).")] = None,
    pp: Annotated[int | None, typer.Option("--pp", help="Fix PP.")] = None,
    vpp: Annotated[int | None, typer.Option("--vpp", help="Fix VPP.")] = None,
    cp: Annotated[int | None, typer.Option("--cp", help="Fix CP.")] = None,
    ep: Annotated[int | None, typer.Option("--ep", help="Fix EP.")] = None,
    mbs: Annotated[int | None, typer.Option("--mbs", help="Fix micro-batch.")] = None,
    recompute: Annotated[
        str | None,
        typer.Option("--recompute", help="Fix recompute mode: none, selective, full or partial."),
    ] = None,
    zero: Annotated[
        str | None,
        typer.Option(
            "--zero",
            help="Fix the optimizer sharding: none, dist-opt (Megatron's distributed "
            "optimizer), zero1, zero2, zero3 or fsdp.",
        ),
    ] = None,
    dist_opt: Annotated[
        bool, typer.Option("--dist-opt", help="Fix Megatron's distributed optimizer.")
    ] = False,
    top: Annotated[int, typer.Option("--top", help="Plans to show.")] = 5,
    tokens: TokensOpt = None,
    checkpoint_every: CkptEveryOpt = None,
    storage_write_bw: WriteBwOpt = None,
    storage_read_bw: ReadBwOpt = None,
    async_checkpoint: AsyncCkptOpt = None,
    gpu_mtbf: MtbfOpt = None,
    restart_time: RestartOpt = None,
    html: HtmlOpt = None,
    json: JsonOpt = False,
    calibration: Cal = None,
) -> None:
    """Every valid plan, ranked by step time among those that fit; the best explained."""
    # --cp-comm best: the search under each context-parallel exchange (search/exchanges.py)
    each_exchange = cp_comm is not None and cp_comm.strip().lower() == "best"
    if each_exchange:
        cp_comm = None
    r = resolve(workload, workload_flags(locals()), tokens)
    w, tt = r.workload, r.train_tokens
    if top < 1:
        raise InputError("top", top, "a positive integer")
    if html is not None:
        from gpuscale.report.page import check_target

        check_target(html)  # before the search runs
    cal = load_calibration(calibration)
    with r.naming_file_values():
        fx = fixed_knobs(
            r, tp, pp, vpp, cp, ep, mbs, recompute, chosen_sharding(zero, dist_opt), None
        )
        # a bar is for a person watching
        res, compared = _searched(w, cal, fx, each_exchange, not json and out.is_terminal)
    band = band_for(w.model, w.gpu, cal)
    if html is not None:
        from gpuscale.report.search import write_search_report

        good = search_goodput(res, top, r.storage, r.failures)
        write_search_report(html, res, top, good, band, tt, r.storage, r.failures)
    report_search(res, top, json, tt, r.storage, r.failures, band, compared)
    if html is not None and not json:
        out.print(Text(f"wrote {html}"))


def _searched(
    w: Workload, cal: Calibration, fx: dict[str, Any], each_exchange: bool, bar: bool
) -> tuple[SearchResult, dict[str, float | None] | None]:
    """The plan search (under each context-parallel exchange with ``each_exchange``: its
    ranking and each exchange's fastest step), with a progress bar where ``bar``."""

    def run(tick: Callable[[int, int], None] | None) -> tuple[SearchResult, Any]:
        if each_exchange:
            return search_exchanges(w, cal, fx, progress=tick)
        return search_plans(w, cal, fx, progress=tick), None

    if not bar:
        return run(None)
    with Progress(transient=True, console=out) as prog:
        task = prog.add_task("evaluating plans", total=None)

        def tick(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total)

        return run(tick)


@app.command("scaling")
def scaling_cmd(
    workload: WorkloadOpt = None,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    gpus: Annotated[
        int | None,
        typer.Option("--gpus", help="Largest GPU count (curve from 8, or from 1 below 8)."),
    ] = None,
    seq_len: SeqOpt = None,
    global_batch: GbsOpt = None,
    precision: PrecOpt = None,
    attention: AttnOpt = None,
    zero3_gathers: GathersOpt = None,
    grad_accumulation: AccumOpt = None,
    pp_p2p: PpP2pOpt = None,
    cp_comm: CpCommOpt = None,
    pp_split: PpSplitOpt = None,
    elementwise: ElemOpt = None,
    ep_dispatch: DispatchOpt = None,
    recompute_modules: ModulesOpt = None,
    fp8_param_gather: Fp8GatherOpt = None,
    cuda_graphs: CudaGraphsOpt = None,
    loss: LossOpt = None,
    memory_headroom: HeadroomOpt = None,
    shard_group: ShardGroupOpt = None,
    system: SysOpt = None,
    mtp: MtpOpt = None,
    mode: Annotated[
        str,
        typer.Option("--mode", help="strong (fixed batch), weak (batch grows with GPUs) or both."),
    ] = "both",
    checkpoint_every: CkptEveryOpt = None,
    storage_write_bw: WriteBwOpt = None,
    storage_read_bw: ReadBwOpt = None,
    async_checkpoint: AsyncCkptOpt = None,
    gpu_mtbf: MtbfOpt = None,
    restart_time: RestartOpt = None,
    html: HtmlOpt = None,
    json: JsonOpt = False,
    calibration: Cal = None,
) -> None:
    """Scaling efficiency from 8 GPUs to N with the best plan at each point."""
    modes = _scaling_modes(mode)
    r = resolve(workload, workload_flags(locals()), None)
    if html is not None:
        from gpuscale.report.page import check_target
        from gpuscale.report.scaling import write_scaling_report

        check_target(html)  # before the curves are computed
    w = r.workload
    cal = load_calibration(calibration)
    curves = {m: scaling_curve(w, cal, m, r.storage, r.failures) for m in modes}
    _check_some_plan_fits(r, curves)
    band = band_for(w.model, w.gpu, cal)
    if html is not None:
        write_scaling_report(html, w, curves, band)
    if json:
        emit_json(scaling_json(r, curves, band))
        return
    for m, pts in curves.items():
        print_scaling(m, w, pts)
    out.print(Text(f"note: expected error of each point: {band.line()}"))
    if html is not None:
        out.print(Text(f"wrote {html}"))


def _scaling_modes(mode: str) -> tuple[str, ...]:
    """The curves --mode asks for: strong, weak, or both (strong first)."""
    if mode.strip().lower() not in ("strong", "weak", "both"):
        raise InputError("mode", mode, "strong, weak or both")
    mode = mode.strip().lower()
    return ("strong", "weak") if mode == "both" else (mode,)


def _check_some_plan_fits(r: Resolved, curves: dict[str, list[ScalingPoint]]) -> None:
    """Refuse a workload where no plan fits at any GPU count of any curve, naming why: the
    failure rate when the plans fit but the run cannot save and restart, else why the last
    count of the first curve has no plan."""
    if not all(p.step_s is None for pts in curves.values() for p in pts):
        return
    gpus = r.workload.num_gpus
    last = next(iter(curves.values()))[-1]
    failing = all("failures come" in p.plan for pts in curves.values() for p in pts)
    if failing and r.failures is not None:  # plans fit; the failure rate is the problem
        raise InputError(
            r.where("gpu_mtbf"),
            f"{r.failures.gpu_mtbf_s:g} s",
            f"a GPU MTBF the run outlasts: from 8 to {gpus:,} GPUs, failures come before "
            f"the run can save and restart (save more often, or check "
            f"{given_at(r, 'gpu_mtbf')} and {given_at(r, 'restart_time')})",
        )
    raise InputError(
        r.where("gpus"),
        gpus,
        f"a count where some plan fits; at {gpus:,} GPU{'' if gpus == 1 else 's'}, "
        + last.plan.removeprefix("none: "),
    )
