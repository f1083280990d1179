"""`gpuscale train estimate | search | scaling`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress
from rich.text import Text

from gpuscale.catalog import get_gpu, get_model, get_system, system_for_gpu
from gpuscale.catalog.schema import GPU
from gpuscale.cli._common import Cal, emit_json, load_calibration, out
from gpuscale.cli.train_options import (
    AttnOpt,
    DispatchOpt,
    ElemOpt,
    Fp8GatherOpt,
    GathersOpt,
    GbsOpt,
    GpuOpt,
    GpusOpt,
    HeadroomOpt,
    JsonOpt,
    ModelOpt,
    ModulesOpt,
    MtpOpt,
    PrecOpt,
    SeqOpt,
    SysOpt,
    TokensOpt,
)
from gpuscale.cli.train_report import (
    best_fitting,
    fit_hint,
    print_estimate,
    print_scaling,
    report_search,
)
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import (
    RECOMPUTE,
    SHARDING,
    Plans,
    Workload,
    check_degrees,
    check_plan,
)
from gpuscale.perf.recompute import DEFAULT_MODULES, parse_modules
from gpuscale.perf.training import estimate
from gpuscale.search.plans import search_plans
from gpuscale.search.scaling import scaling_curve
from gpuscale.spec import load_training_job
from gpuscale.units import parse_quantity

app = typer.Typer(no_args_is_help=True)


def _mount(g: GPU) -> str:
    """How a GPU sits in its system: on a baseboard (SXM/OAM), as a superchip, or a card."""
    ff = g.form_factor.lower()
    if "superchip" in ff:
        return "superchip"
    return "PCIe card" if ff.startswith("pcie") else "baseboard module"


def _workload(
    model: str,
    gpu: str,
    gpus: int,
    seq_len: int,
    global_batch: int,
    precision: str,
    system: str | None,
    attention: str | None = None,
    zero3_gathers: str = "coalesced",
    elementwise: str = "fused",
    mtp: int | None = None,
    ep_dispatch: str = "hierarchical",
    recompute_modules: str | None = None,
    fp8_param_gather: bool = False,
    memory_headroom: float | None = None,
) -> Workload:
    g = get_gpu(gpu)
    if attention is None:
        # no flash kernel runs on Volta (FlashAttention needs Ampere or later): Megatron's
        # softmax path there, the fastest fused kernel elsewhere
        attention = "unfused" if g.arch == "volta" else "fused"
    # an explicit --system may house a GPU other than its reference one, of its generation
    # and mount (an H200 in a DGX H100 chassis), not one of another generation (an A100 in
    # a GB200 NVL72 rack) or mount (a GB200 superchip on an HGX B200 baseboard); a generic
    # PCIe server takes any PCIe card
    s = get_system(system) if system else system_for_gpu(g)
    if system:
        home = get_gpu(s.gpu)
        generic = s.key.startswith("pcie-") and _mount(g) == "PCIe card"
        if not generic and (home.arch != g.arch or _mount(home) != _mount(g)):
            raise InputError(
                "system",
                system,
                f"a system for {g.arch} GPUs as a {_mount(g)} like {g.key}; {s.key} houses "
                f"{home.arch} GPUs as a {_mount(home)} ({home.key})",
            )
    m = get_model(model)
    if mtp is not None:
        if mtp < 0:
            raise InputError("mtp", mtp, "a number of MTP depths, 0 or more")
        sets = min(m.mtp_weight_sets or mtp, mtp) if m.mtp_layers else mtp
        m = m.model_copy(update={"mtp_layers": mtp, "mtp_weight_sets": sets})
    return Workload(
        m,
        g,
        s,
        Fabric.from_system(s, gpus),
        gpus,
        seq_len,
        global_batch,
        precision.strip().lower(),  # "FP8" as papers write it
        attention=attention,
        zero3_gathers=zero3_gathers,
        elementwise=elementwise,
        ep_dispatch=ep_dispatch,
        fp8_param_gather=fp8_param_gather,
        memory_headroom=0.0 if memory_headroom is None else memory_headroom,
        recompute_modules=(
            parse_modules(recompute_modules.split(","))
            if recompute_modules is not None
            else DEFAULT_MODULES
        ),
    )


def _modules_text(value: str | list[str] | None) -> str | None:
    """A workload file's module list, as the flag spells it (comma-separated)."""
    return ",".join(value) if isinstance(value, list) else value


def _fixed(
    w: Workload,
    tp: int | None,
    pp: int | None,
    vpp: int | None,
    cp: int | None,
    ep: int | None,
    mbs: int | None,
    recompute: str | None,
    sharding: str | None,
    sp: bool | None,
    modules: str | None = None,
) -> dict[str, Any]:
    """The plan knobs the user fixed; ``modules`` is the --recompute-modules text when given,
    which only a selective recompute uses."""
    fx: dict[str, Any] = {"tp": tp, "pp": pp, "vpp": vpp, "cp": cp, "ep": ep, "mbs": mbs, "sp": sp}
    check_degrees(w, fx)  # before any product or array of them
    if recompute is not None:
        if recompute not in RECOMPUTE:
            raise InputError("recompute", recompute, f"one of {', '.join(RECOMPUTE)}")
        fx["recompute"] = RECOMPUTE.index(recompute)
        if modules is not None and recompute != "selective":
            raise InputError(
                "recompute-modules",
                modules,
                f"--recompute selective (--recompute {recompute} recomputes no module selectively)",
            )
    if sharding is not None:
        if sharding not in SHARDING:
            raise InputError("zero", sharding, f"one of {', '.join(SHARDING)}")
        fx["sharding"] = SHARDING.index(sharding)
    return {k: v for k, v in fx.items() if v is not None}


TOKENS_VALID = "a count with a decimal prefix, e.g. 15T or 2e12"


def _tokens(tokens: str | None) -> float | None:
    if tokens is None:
        return None
    text = tokens.strip()
    if text[-1:] in ("B", "b") and text[-2:-1].isdigit():
        text = text[:-1] + "G"  # "300B tokens" means billions here, not bytes
    if text[-1:] in ("m", "g", "t") and text[-2:-1].isdigit():
        text = text[:-1] + text[-1].upper()  # 15t, 300m: counts, never milli-tokens
    if text[-1:] == "i":  # 15Ti: a binary prefix counts bytes, never tokens
        raise InputError("tokens", tokens, TOKENS_VALID)
    try:
        v = parse_quantity(text, "number", "tokens")
    except InputError as exc:
        if not exc.valid.startswith("expected a number"):
            raise  # a number, but not a usable one (1e400): its own reason
        raise InputError("tokens", tokens, TOKENS_VALID) from None
    if v <= 0:
        raise InputError("tokens", tokens, "a positive count, e.g. 15T or 2e12")
    return v


@app.command("estimate")
def estimate_cmd(
    model: ModelOpt,
    gpu: GpuOpt,
    gpus: GpusOpt,
    seq_len: SeqOpt = 2048,
    global_batch: GbsOpt = 512,
    precision: PrecOpt = "bf16",
    attention: AttnOpt = None,
    zero3_gathers: GathersOpt = "coalesced",
    elementwise: ElemOpt = "fused",
    ep_dispatch: DispatchOpt = "hierarchical",
    recompute_modules: ModulesOpt = None,
    fp8_param_gather: Fp8GatherOpt = False,
    memory_headroom: HeadroomOpt = None,
    system: SysOpt = None,
    mtp: MtpOpt = None,
    tp: Annotated[int, typer.Option("--tp", help="Tensor parallel degree.")] = 1,
    pp: Annotated[int, typer.Option("--pp", help="Pipeline parallel degree.")] = 1,
    vpp: Annotated[
        int, typer.Option("--vpp", help="Virtual pipeline chunks (interleaved 1F1B).")
    ] = 1,
    cp: Annotated[int, typer.Option("--cp", help="Context parallel degree.")] = 1,
    ep: Annotated[int, typer.Option("--ep", help="Expert parallel degree.")] = 1,
    mbs: Annotated[int, typer.Option("--mbs", help="Micro-batch size.")] = 1,
    recompute: Annotated[
        str,
        typer.Option(
            "--recompute",
            help="none, selective, full, or partial (recompute just enough to fit in memory).",
        ),
    ] = "selective",
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
        bool, typer.Option("--sp/--no-sp", help="Sequence parallelism (with TP > 1).")
    ] = True,
    tp_overlap: Annotated[
        bool, typer.Option("--tp-overlap", help="Overlap TP comm with GEMMs.")
    ] = False,
    tokens: TokensOpt = None,
    json: JsonOpt = False,
    calibration: Cal = None,
) -> None:
    """Memory, step-time breakdown, tokens/s, TFLOP/s and MFU of one plan."""
    w = _workload(
        model,
        gpu,
        gpus,
        seq_len,
        global_batch,
        precision,
        system,
        attention,
        zero3_gathers,
        elementwise,
        mtp,
        ep_dispatch,
        recompute_modules,
        fp8_param_gather,
        memory_headroom,
    )
    if zero is not None and dist_opt:
        raise InputError("zero", zero, "give either --zero or --dist-opt, not both")
    sharding = "dist-opt" if dist_opt else (zero or "none")
    if sharding == "fsdp":
        sharding = "zero3"
    fx = _fixed(w, tp, pp, vpp, cp, ep, mbs, recompute, sharding, sp and tp > 1, recompute_modules)
    if gpus % (tp * pp * cp):
        raise InputError(
            "tp*pp*cp", tp * pp * cp, f"must divide --gpus {gpus} (tp={tp}, pp={pp}, cp={cp})"
        )
    dp = gpus // (tp * pp * cp)
    plan = Plans.of(dp=dp, tp_overlap=tp_overlap, **fx)
    check_plan(w, plan)
    cal = load_calibration(calibration)
    e = estimate(w, plan, cal)
    tt = _tokens(tokens)
    summary = e.summary(0, tt)
    if not summary["fits"]:
        summary["best_fitting_plan"] = best_fitting(w, cal)
    if json:
        emit_json(summary)
        return
    print_estimate(e, 0, f"{w.model.name} on {gpus} x {w.gpu.name}", tt)
    if not summary["fits"]:
        out.print(Text(f"hint: {fit_hint(summary['best_fitting_plan'])}"))


@app.command("search")
def search_cmd(
    workload: Annotated[
        Path | None,
        typer.Option("--workload", help="Training job YAML (examples/workloads/); flags override."),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Catalog model or config.json.")
    ] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="Catalog GPU.")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", help="Number of GPUs.")] = None,
    seq_len: Annotated[int | None, typer.Option("--seq-len", help="Sequence length.")] = None,
    global_batch: Annotated[
        int | None, typer.Option("--global-batch", help="Sequences per step.")
    ] = None,
    precision: Annotated[
        str | None, typer.Option("--precision", help="bf16, fp16, fp8, fp4.")
    ] = None,
    attention: Annotated[
        str | None, typer.Option("--attention", help="fused, flash2 or unfused.")
    ] = None,
    zero3_gathers: Annotated[
        str | None, typer.Option("--zero3-gathers", help="coalesced or per-param.")
    ] = None,
    elementwise: Annotated[
        str | None, typer.Option("--elementwise", help="fused or eager.")
    ] = None,
    ep_dispatch: Annotated[
        str | None, typer.Option("--ep-dispatch", help="hierarchical or all_to_all.")
    ] = None,
    recompute_modules: ModulesOpt = None,
    fp8_param_gather: Annotated[
        bool | None,
        typer.Option("--fp8-param-gather/--no-fp8-param-gather", help="FP8 parameter gathers."),
    ] = None,
    memory_headroom: HeadroomOpt = None,
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
    json: JsonOpt = False,
    calibration: Cal = None,
) -> None:
    """Every valid plan, ranked by step time among those that fit; the best explained."""
    job = load_training_job(workload) if workload is not None else None

    def pick(flag: Any, key: str, default: Any = None) -> Any:
        if flag is not None:
            return flag
        if job is not None and getattr(job, key) is not None:
            return getattr(job, key)
        if default is None:
            raise InputError(key.replace("_", "-"), None, "required (a flag or --workload)")
        return default

    flags = {
        "model": model,
        "gpu": gpu,
        "gpus": gpus,
        "seq_len": seq_len,
        "global_batch": global_batch,
        "precision": precision,
        "system": system,
        "attention": attention,
        "zero3_gathers": zero3_gathers,
        "elementwise": elementwise,
        "ep_dispatch": ep_dispatch,
        "recompute_modules": recompute_modules,
        "mtp": mtp,
        "fp8_param_gather": fp8_param_gather,
        "memory_headroom": memory_headroom,
    }
    try:
        w = _workload(
            pick(model, "model"),
            pick(gpu, "gpu"),
            pick(gpus, "gpus"),
            pick(seq_len, "seq_len", 2048),
            pick(global_batch, "global_batch", 512),
            pick(precision, "precision", "bf16"),
            system if system is not None else (job.system if job else None),
            attention if attention is not None else (job.attention if job else None),
            pick(zero3_gathers, "zero3_gathers", "coalesced"),
            pick(elementwise, "elementwise", "fused"),
            mtp if mtp is not None else (job.mtp if job else None),
            pick(ep_dispatch, "ep_dispatch", "hierarchical"),
            recompute_modules
            if recompute_modules is not None
            else _modules_text(job.recompute_modules if job else None),
            pick(fp8_param_gather, "fp8_param_gather", False),
            pick(memory_headroom, "memory_headroom", 0.0),
        )
    except InputError as exc:
        key = exc.field.replace("-", "_")
        if workload is None or key not in flags or flags[key] is not None:
            raise
        # the value came from the workload file: say which file
        raise InputError(f"{workload.name}:{key}", exc.value, exc.valid) from None
    tokens_from_file = tokens is None and job is not None and job.tokens is not None
    try:
        tt = _tokens(job.tokens if tokens_from_file and job is not None else tokens)
    except InputError as exc:
        if not tokens_from_file or workload is None:
            raise
        raise InputError(f"{workload.name}:tokens", exc.value, exc.valid) from None
    if top < 1:
        raise InputError("top", top, "a positive integer")
    if zero is not None and dist_opt:
        raise InputError("zero", zero, "give either --zero or --dist-opt, not both")
    shard = "dist-opt" if dist_opt else ("zero3" if zero == "fsdp" else zero)
    modules_text = (
        recompute_modules
        if recompute_modules is not None
        else _modules_text(job.recompute_modules if job else None)
    )
    fx = _fixed(w, tp, pp, vpp, cp, ep, mbs, recompute, shard, None, modules_text)
    cal = load_calibration(calibration)
    if json:
        res = search_plans(w, cal, fx)
    else:
        with Progress(transient=True, console=out) as prog:
            task = prog.add_task("evaluating plans", total=None)

            def tick(done: int, total: int) -> None:
                prog.update(task, completed=done, total=total)

            res = search_plans(w, cal, fx, progress=tick)
    report_search(res, top, json, tt)


@app.command("scaling")
def scaling_cmd(
    model: ModelOpt,
    gpu: GpuOpt,
    gpus: Annotated[
        int, typer.Option("--gpus", help="Largest GPU count (curve from 8, or from 1 below 8).")
    ],
    seq_len: SeqOpt = 2048,
    global_batch: GbsOpt = 512,
    precision: PrecOpt = "bf16",
    attention: AttnOpt = None,
    zero3_gathers: GathersOpt = "coalesced",
    elementwise: ElemOpt = "fused",
    ep_dispatch: DispatchOpt = "hierarchical",
    recompute_modules: ModulesOpt = None,
    fp8_param_gather: Fp8GatherOpt = False,
    memory_headroom: HeadroomOpt = None,
    system: SysOpt = None,
    mtp: MtpOpt = None,
    mode: Annotated[
        str,
        typer.Option("--mode", help="strong (fixed batch), weak (batch grows with GPUs) or both."),
    ] = "both",
    json: JsonOpt = False,
    calibration: Cal = None,
) -> None:
    """Scaling efficiency from 8 GPUs to N with the best plan at each point."""
    if mode not in ("strong", "weak", "both"):
        raise InputError("mode", mode, "strong, weak or both")
    w = _workload(
        model,
        gpu,
        gpus,
        seq_len,
        global_batch,
        precision,
        system,
        attention,
        zero3_gathers,
        elementwise,
        mtp,
        ep_dispatch,
        recompute_modules,
        fp8_param_gather,
        memory_headroom,
    )
    cal = load_calibration(calibration)
    modes = ("strong", "weak") if mode == "both" else (mode,)
    curves = {m: scaling_curve(w, cal, m) for m in modes}
    if all(p.step_s is None for pts in curves.values() for p in pts):
        last = curves[modes[0]][-1]
        raise InputError(
            "gpus",
            gpus,
            f"a count where some plan fits; at {gpus:,} GPUs, {last.plan.removeprefix('none: ')}",
        )
    if json:
        emit_json({m: [p.to_dict() for p in pts] for m, pts in curves.items()})
        return
    for m, pts in curves.items():
        print_scaling(m, w, pts)
