"""``gpuscale validate training``: predict published training runs and score the error.

Each row of ``shared/validation/training_runs.csv``'s schema maps to a :class:`Workload`
(model shape from the row, completed from the catalog), a GPU and its reference system,
and a plan: the row's stated degrees are fixed, unstated ones are chosen by gpuscale's own
plan search (and the row says so). The predicted figure follows the row's ``target`` and,
for TFLOP/s figures, its ``flop_convention``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.catalog import system_for_gpu
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import RECOMPUTE, SHARDING, Plans, Workload
from gpuscale.perf.recompute import op_sac_modelled
from gpuscale.perf.training import estimate
from gpuscale.perf.transformer import (
    megatron_model_flops,
    megatron_sc21_flops,
    model_flops_per_token,
)
from gpuscale.search.plans import search_plans
from gpuscale.validate.report import (
    RowResult,
    ValidationReport,
    count,
    num,
    positive,
    read_rows,
    signed_error_pct,
    unread_columns,
)
from gpuscale.validate.training_cells import (
    COLUMNS,
    CONVENTIONS,
    FALSY,
    MEASURED,
    REQUIRED,
    TARGETS,
    TRUTHY,
    read_gpu,
    read_precision,
    read_recompute,
    read_recompute_modules,
    read_shard_group,
    read_sharding,
    read_target,
)
from gpuscale.validate.training_model import UnsupportedRowError, model_for
from gpuscale.validate.training_rows import (
    absent_degrees,
    config_key,
    megatron_split,
    nics_per_node,
    pipeline_schedule,
    sizes_from_notes,
    zero3_gathers,
)
from gpuscale.validate.training_stack import (
    attention_kernel,
    cuda_graphs,
    elementwise_kernels,
    ep_dispatch,
    mentions,
    stack_text,
)

__all__ = [
    "REQUIRED",
    "PreparedRow",
    "UnsupportedRowError",
    "choose_plan",
    "predict",
    "prepare",
    "source_group",
    "validate_training",
]

HFU_RATIO_FULL_RECOMPUTE = 1.2
"""Hardware-over-model FLOPs ratio above which a run is taken to recompute fully (full
recomputation adds one forward, 4/3 of the model FLOPs)."""
HFU_RATIO_MAX = 1.6
"""Above it the two figures disagree (4/3 plus the attention and vocabulary terms a FLOP
count may add or leave out): no recompute is read from them."""
MIN_MFU = 0.01
"""A measured figure under this share of the GPU's dense peak is taken to be in another
unit: published LLM training runs sit at 10-60 % of peak."""


@dataclass(frozen=True)
class PreparedRow:
    """A row turned into a workload, a (partly) fixed plan and what to compare."""

    id: str
    group: str
    workload: Workload
    fixed: dict[str, Any]
    target: str
    convention: str
    measured: float
    notes: tuple[str, ...]
    figure: str = ""
    """What is compared, in the targets' terms: the target, or for an ``excluded`` row the
    figure it gives (tokens/s, TFLOP/s or MFU)."""

    @property
    def compared(self) -> str:
        return self.figure or self.target


PEFT = r"\b(q?lora|peft|adapter[- ](tuning|fine-tuning)|prefix[- ]tuning)\b"
"""Names of parameter-efficient fine-tuning in a row's stack text."""

FP8_PARAM_GATHER = r"fp[48][_ -]param[_ -]gather|float8[_ -]all[_ -]gather"
"""How a row names low-precision parameter gathers (Megatron's --fp8-param-gather and
--fp4-param-gather, torchao's enable_fsdp_float8_all_gather)."""

MAX_TOKENS_PER_STEP = 2**27
"""Tokens a step above which a row's global batch is read as tokens, not sequences: twice
DeepSeek-V3's 15,360 x 4,096 = 63 M (arXiv 2412.19437), the largest batch we know of."""


def source_group(source: str) -> str:
    head = re.split(r" \(|,| https?://|;", source, maxsplit=1)[0]
    return head.strip()[:48]


def prepare(row: dict[str, str], where: str) -> PreparedRow:
    target = read_target(row["target"])
    if target not in TARGETS:
        raise InputError(f"{where}:target", row["target"], f"one of {', '.join(TARGETS)}")
    conv = row.get("flop_convention", "").strip().lower()
    if conv not in CONVENTIONS:
        raise InputError(
            f"{where}:flop_convention", conv, f"one of {', '.join(c for c in CONVENTIONS if c)}"
        )
    excluded = target == "excluded"
    if excluded and not row.get(MEASURED[target], "").strip():
        # reported, not scored: with whichever figure the row gives, in its own terms (from
        # here on ``target`` is the figure compared)
        given = [k for k in ("tflops_per_gpu", "mfu") if row.get(MEASURED[k], "").strip()]
        target = given[0] if given else target
    if not conv and target in ("tflops_per_gpu", "mfu"):
        conv = "unspecified"  # an empty cell: the source does not say how it counts
    measured_col = MEASURED[target]
    measured = positive(row, measured_col, where)
    if target == "mfu" and measured is not None and measured > 1:
        raise UnsupportedRowError(
            f"measured_mfu={row['measured_mfu']!r}: a fraction of peak, at most 1 (0.45 for 45 %)"
        )
    step_s = positive(row, "measured_step_time_s", where)
    if measured is None and step_s is None:
        raise UnsupportedRowError(f"no {measured_col} value")
    gpu, gpu_note = read_gpu(row["gpu"])
    text = stack_text(row)
    if mentions(text, PEFT):
        raise UnsupportedRowError(
            "parameter-efficient fine-tuning (LoRA, adapters) is not modelled: its frozen "
            "weights take no weight gradients, optimizer state or gradient reduction"
        )
    model, notes = model_for(row, where)
    if gpu_note:
        notes.insert(0, gpu_note)
    n_gpus = count(row, "num_gpus", where)
    seq, gbs, from_notes = sizes_from_notes(
        row.get("notes", ""), count(row, "seq_len", where), count(row, "global_batch_seqs", where)
    )
    notes.extend(from_notes)
    dp_stated, mbs_stated = count(row, "dp", where), count(row, "micro_batch", where)
    if gbs is None and dp_stated is not None and mbs_stated is not None:
        gbs = dp_stated * mbs_stated
        notes.append("global batch not stated: dp x micro-batch (no gradient accumulation)")
    if n_gpus is None or seq is None or gbs is None:
        raise UnsupportedRowError("GPU count, sequence length or global batch not stated")
    if gbs * seq > MAX_TOKENS_PER_STEP and gbs >= seq:
        raise UnsupportedRowError(
            f"global_batch_seqs={gbs:,.0f} with seq_len={seq:,.0f} is {gbs * seq:,.0f} tokens "
            f"a step, beyond any published run's (at most {MAX_TOKENS_PER_STEP:,}); the cell "
            f"looks like a batch in tokens ({gbs:,.0f} tokens = {gbs / seq:,.6g} sequences): "
            "give it in sequences"
        )
    if measured is None:
        if target not in ("tokens_per_s_per_gpu", "excluded") or not step_s:
            raise UnsupportedRowError(f"no {measured_col} value")
        # only the iteration time is given: the tokens it trains over its GPUs
        measured = gbs * seq / (step_s * n_gpus)
        notes.append("tokens/s per GPU from the measured step time: batch x sequence / (s x GPUs)")
    precision = read_precision(row.get("precision", ""), gpu, notes)
    if precision not in gpu.peak_tflops:
        raise UnsupportedRowError(f"{gpu.key} has no {precision} peak in the catalog")
    # a figure beyond the GPU's dense peak is no per-GPU measurement of this model (an MFU
    # cannot be: it is at most 1, checked above)
    if target != "mfu":
        if target == "tflops_per_gpu":
            rate, figure = measured * 1e12, f"{measured_col}={measured:g}"
        else:  # the model FLOPs of the tokens each GPU trains per second
            rate = measured * model_flops_per_token(model, int(seq), causal=True)
            figure = (
                f"{measured_col}={measured:g}"
                if row.get(measured_col, "").strip()
                else f"measured_step_time_s={step_s:g} ({measured:,.0f} tokens/s per GPU)"
            )
        if rate > gpu.peak_flops(precision) * (1.0 + 1e-9):
            raise UnsupportedRowError(
                f"{figure} means {rate / 1e12:,.0f} TFLOP/s per GPU, above {gpu.key}'s "
                f"{precision} dense peak of {gpu.peak_flops(precision) / 1e12:,.0f}: not a "
                "per-GPU figure of this model"
            )
        if rate < MIN_MFU * gpu.peak_flops(precision):
            raise UnsupportedRowError(
                f"{figure} means {rate / 1e12:,.2f} TFLOP/s per GPU, under "
                f"{100 * MIN_MFU:g} % of {gpu.key}'s {precision} dense peak: check the "
                "column's unit (a step time in milliseconds, a throughput per node or per run)"
            )
    (attention, why_a), (gathers, why_g) = attention_kernel(row, gpu.arch), zero3_gathers(row)
    (elementwise, why_e), (graphs, why_c) = elementwise_kernels(row), cuda_graphs(row)
    notes.extend(why for why in (why_a, why_g, why_e, why_c) if why)
    dispatch, why = ep_dispatch(row)
    if why and model.is_moe:
        notes.append(why)
    fp8_gather = precision in ("fp8", "fp4") and mentions(text, FP8_PARAM_GATHER)
    if fp8_gather:
        notes.append("parameters gathered as FP8, no 16-bit weight copy, as the row names")
    system = system_for_gpu(gpu)
    nics = nics_per_node(row, system.nic_gbps, system.gpus_per_node)
    if nics is not None and nics != system.nics_per_node:
        system = system.model_copy(update={"nics_per_node": nics})
        nic = f"{system.nic_gbps:g} Gb/s"
        notes.append(f"scale-out: {nics} x {nic} NICs per node, as the row states")
    shard_group, why = read_shard_group(row, system.gpus_per_node)
    if why:
        notes.append(why)
    w = Workload(
        model,
        gpu,
        system,
        Fabric.from_system(system, int(n_gpus)),
        int(n_gpus),
        int(seq),
        int(gbs),
        precision,
        attention=attention,
        zero3_gathers=gathers,
        elementwise=elementwise,
        ep_dispatch=dispatch,
        fp8_param_gather=fp8_gather,
        cuda_graphs=graphs,
        shard_group=shard_group,
    )
    fixed: dict[str, Any] = {}
    for col, key in (
        ("tp", "tp"),
        ("pp", "pp"),
        ("dp", "dp"),
        ("cp", "cp"),
        ("ep", "ep"),
        ("vpp", "vpp"),
        ("micro_batch", "mbs"),
    ):
        v = count(row, col, where)
        if v is not None:
            fixed[key] = v
    model_par = math.prod(int(fixed.get(k, 1)) for k in ("tp", "pp", "cp"))
    if "dp" not in fixed and n_gpus % model_par:
        raise UnsupportedRowError(
            f"tp x pp x cp = {model_par:,} GPUs "
            + ("is more than" if model_par > n_gpus else "does not divide")
            + f" the row's num_gpus={n_gpus:,}: no whole number of data-parallel replicas"
        )
    notes.extend(absent_degrees(row.get("notes", ""), fixed))
    if "dp" in fixed and "tp" not in fixed and "pp" not in fixed:
        split = megatron_split(w, fixed)
        if split is not None:
            fixed["tp"], fixed["pp"] = split
            notes.append(
                f"TP/PP split not stated: TP{split[0]} PP{split[1]}, tensor parallel up to the "
                "node and pipeline across nodes (Narayanan et al. SC'21, takeaway 1)"
            )
    notes.extend(pipeline_schedule(row, fixed, int(gbs)))
    sp = row.get("seq_parallel", "").lower()
    if sp:
        if sp not in TRUTHY + FALSY:
            raise UnsupportedRowError(
                f"seq_parallel={row['seq_parallel']!r}: one of {', '.join(TRUTHY + FALSY)}"
            )
        fixed["sp"] = sp in TRUTHY
        if fixed["sp"] and fixed.get("tp") == 1:
            # Megatron switches it off ("Disabling sequence parallelism because tensor model
            # parallel size is 1"): a table's SP column may be ticked for every row
            fixed["sp"] = False
            notes.append("sequence parallelism stated with TP 1: off, as Megatron turns it off")
    elif attention == "unfused":
        fixed["sp"] = False
        notes.append("sequence parallelism not stated: off, as in Megatron's unfused-attention era")
    titan_tp = "torchtitan" in text and int(fixed.get("tp", 1)) > 1
    if titan_tp and "sp" not in fixed:
        # torchtitan's TP plan shards the norms over the sequence (SequenceParallel)
        fixed["sp"] = True
        notes.append("sequence parallelism: on, as torchtitan's TP plan shards the norms")
    if titan_tp:
        # its TP collectives overlap the matmuls only with AsyncTP (micro-pipelined, through
        # symmetric memory); plain TP runs them in turn
        fixed["tp_overlap"] = mentions(text, r"async[ -]?tp")
        notes.append(
            "TP communication overlapped with the matmuls (AsyncTP)"
            if fixed["tp_overlap"]
            else "TP communication not overlapped (torchtitan without AsyncTP)"
        )
    rc = read_recompute(row.get("recompute", ""))
    if not rc and conv == "megatron_sc21_hfu":
        rc = "full"
        notes.append("full recompute: the SC'21 FLOP convention counts a full recomputation")
    tf_meas = num(row, "measured_tflops_per_gpu", where)
    tok_meas = num(row, "measured_tokens_per_s_per_gpu", where)
    if not rc and tf_meas and tok_meas:
        # the row's own two figures: TFLOP/s above the model-FLOPs rate by a third means the
        # source counted a recomputed forward pass (HFU), i.e. the run recomputed fully
        ratio = tf_meas * 1e12 / (tok_meas * model_flops_per_token(model, int(seq), causal=False))
        if HFU_RATIO_FULL_RECOMPUTE < ratio <= HFU_RATIO_MAX:
            rc = "full"
            notes.append(f"full recompute: reported TFLOP/s are {ratio:.2f}x the model-FLOPs rate")
        elif ratio > HFU_RATIO_MAX:
            notes.append(
                f"the reported TFLOP/s are {ratio:.2f}x the model-FLOPs rate of its tokens/s, "
                "more than any recomputation adds: recompute not inferred from them"
            )
    if not rc and re.search(
        r"activation checkpointing on|full (activation )?recompute",
        row.get("notes", ""),
        re.IGNORECASE,
    ):
        rc = "full"
        notes.append("full recompute as stated in the notes")
    if rc:
        fixed["recompute"] = RECOMPUTE.index(rc)
    modules = read_recompute_modules(row.get("recompute", ""))
    if rc == "selective" and modules is None and "torchtitan" in text:
        # torchtitan's selective checkpointing is per operator by default
        # (selective_ac_option = "op"), not Megatron's attention-core recompute
        modules = ("ops",) if op_sac_modelled(w.model) else None
    if rc == "selective" and modules is not None and modules != w.recompute_modules:
        w = replace(w, recompute_modules=modules)
        notes.append(
            "selective recompute per operator, torchtitan's default (every other matmul's "
            "output kept)"
            if modules == ("ops",)
            else f"selective recompute of {', '.join(modules)} (Megatron-Core modules)"
        )
    sharding = read_sharding(row.get("dist_optimizer_or_zero", ""))
    if sharding is not None:
        fixed["sharding"] = sharding
    elif re.search(r"megatron-bridge|nemo", row["source"].lower()):
        # the performance recipes run Megatron's distributed optimizer with gradients reduced
        # in bf16 (ddp.grad_reduce_in_fp32 = False): ZeRO-1's memory and traffic
        fixed["sharding"] = SHARDING.index("zero1")
        notes.append("sharding: Megatron's distributed optimizer, bf16 gradient reduction")
    recipes = re.search(r"megatron-bridge|nemo", row["source"].lower())
    if recipes and int(fixed.get("tp", 1)) > 1 and fixed.get("sp") is not False:
        # the performance recipes overlap TP communication with the GEMMs whenever TP > 1
        # (tp_comm_overlap: Transformer Engine's userbuffers, under sequence parallelism)
        fixed["tp_overlap"] = True
        notes.append("TP communication overlapped with GEMMs (the recipes' tp_comm_overlap)")
    free = [k for k in ("tp", "pp", "dp", "mbs", "recompute", "sharding") if k not in fixed]
    if free:
        notes.append(f"not stated, chosen by gpuscale's plan search: {', '.join(free)}")
    return PreparedRow(
        row["id"],
        source_group(row["source"]),
        w,
        fixed,
        "excluded" if excluded else target,
        conv,
        measured,
        tuple(notes),
        target,
    )


def choose_plan(pr: PreparedRow, cal: Calibration) -> tuple[Plans, str]:
    """The row's plan: its stated degrees, the rest from the search (fastest that fits)."""
    w, fx = pr.workload, pr.fixed
    if all(k in fx for k in ("tp", "pp", "dp")):
        stated = {k: fx[k] for k in ("tp", "pp", "dp", "cp") if k in fx}
        used = int(np.prod(list(stated.values())))
        if used != w.num_gpus:
            # fewer: the row's per-GPU figure and the plan's would count different GPUs
            raise UnsupportedRowError(
                f"stated {'x'.join(stated)} = {'x'.join(map(str, stated.values()))} = {used} "
                f"GPUs, {'more' if used > w.num_gpus else 'fewer'} than num_gpus "
                f"({w.num_gpus}): the row's degrees and GPU count do not go together"
            )
    try:
        res = search_plans(w, cal, fx, require_fit=False, exact_gpus=True)
    except InputError as exc:
        raise UnsupportedRowError(f"stated plan is not valid here: {exc}") from None
    i = res.best
    plans = res.estimate.plans.take(np.array([i]))
    note = "" if res.estimate.memory.fits[i] else "predicted memory exceeds capacity"
    return plans, note


def predict(pr: PreparedRow, plans: Plans, cal: Calibration) -> float:
    w = pr.workload
    e = estimate(w, plans, cal)
    step = float(e.step_s[0])
    used = float(plans.gpus_used()[0])
    if pr.compared in ("tokens_per_s_per_gpu", "excluded"):
        return float(e.tokens_per_s_per_gpu[0])
    if pr.convention == "megatron_sc21_hfu":
        flops = megatron_sc21_flops(w.model, w.global_batch, w.seq_len)
    elif pr.convention in ("megatron_model_full_attn", "megatron_model_causal"):
        flops = megatron_model_flops(
            w.model, w.global_batch, w.seq_len, causal=pr.convention == "megatron_model_causal"
        )
    else:
        flops = model_flops_per_token(w.model, w.seq_len) * w.tokens_per_step
    tflops = flops / step / used / 1e12
    if pr.compared == "mfu":
        return tflops * 1e12 / w.gpu.peak_flops(w.precision)
    return tflops


def validate_training(path: Path, cal: Calibration) -> ValidationReport:
    rows: list[RowResult] = []
    table = read_rows(path, REQUIRED)
    for lineno, row in table:
        where = f"{path.name}:line {lineno}"
        rid = row["id"] or f"line {lineno}"
        target = read_target(row["target"])
        try:
            try:
                pr = prepare(row, where)
                plans, note = choose_plan(pr, cal)
                pred = predict(pr, plans, cal)
            except InputError as exc:
                if exc.field.startswith(f"{path.name}:"):
                    raise  # a malformed cell: the file is wrong, not just this row
                # a well-formed value the model refuses (a sequence beyond any run, ...)
                raise UnsupportedRowError(str(exc)) from None
        except UnsupportedRowError as why:
            try:  # the figure the row's target compares, where it can be read
                measured = num(row, MEASURED.get(target, ""), where)
            except InputError:
                measured = None
            rows.append(
                RowResult.skip(rid, str(why), measured, source_group(row["source"]), target)
            )
            continue
        reason = "; ".join([*pr.notes, note] if note else pr.notes)
        status = "scored"
        if pr.target == "excluded":
            status, reason = "reported", "target 'excluded' (not a per-step figure)"
        elif pr.convention == "unspecified" and pr.target != "tokens_per_s_per_gpu":
            status = "reported"
            reason = "FLOP convention unspecified: gpuscale's model FLOPs used, not scored"
        rows.append(
            RowResult(
                rid,
                pred,
                pr.measured,
                signed_error_pct(pred, pr.measured),
                status,
                reason,
                pr.group,
                pr.target,
                {"plan": (plan := plans.label(0)), "config": config_key(pr, plan, pred)},
            )
        )
    return ValidationReport("training", rows, unread_columns(table, COLUMNS))
