"""How a published training row becomes a workload to predict.

:func:`prepare` reads a row of ``shared/validation/training_runs.csv``'s schema: the figure
it compares (its ``target`` and FLOP convention), the model, GPU, sizes and precision, the
software stack's kernels and the network it states; the degrees and settings it fixes are
read in :mod:`.training_plan`, and what it leaves unstated is chosen later by gpuscale's
plan search (:func:`.training.choose_plan`). A row gpuscale cannot model is skipped with
the reason. The rules are listed in ``validate/README.md``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from gpuscale.catalog import GPU, Model, System, system_for_gpu
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import MAX_GPUS, Workload
from gpuscale.perf.transformer import (
    model_flops_per_token,
)
from gpuscale.validate.numbers import count, positive
from gpuscale.validate.training_cells import (
    CONVENTIONS,
    MEASURED,
    TARGETS,
    read_gpu,
    read_precision,
    read_shard_group,
    read_target,
)
from gpuscale.validate.training_model import UnsupportedRowError, model_for
from gpuscale.validate.training_plan import stated_plan
from gpuscale.validate.training_rows import (
    batch_cell_in_tokens,
    nics_per_node,
    nvlink_domain,
    sizes_from_notes,
    zero3_gathers,
)
from gpuscale.validate.training_stack import (
    attention_kernel,
    cp_exchange,
    cuda_graphs,
    elementwise_kernels,
    ep_dispatch,
    grad_accumulation,
    loss_kernel,
    mentions,
    pp_transfers,
    stack_text,
)

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
    """The group a row's source belongs to: its text up to the first " (", comma, semicolon or
    URL, stripped and cut to 48 characters."""
    head = re.split(r" \(|,| https?://|;", source, maxsplit=1)[0]
    return head.strip()[:48]


FLOP_TARGETS = ("tflops_per_gpu", "mfu")
"""The targets that compare FLOP rates: TFLOP/s per GPU, and the same over the dense peak."""


@dataclass(frozen=True)
class Measurement:
    """What a row measured, as its cells give it."""

    target: str
    """The figure compared: the row's target, or for an ``excluded`` row the one it gives."""
    convention: str
    """How a TFLOP/s or MFU figure counts FLOPs (``unspecified`` when the cell is empty)."""
    excluded: bool
    """Reported, not scored."""
    value: float | None
    """The compared figure's cell; None where only the step time is given."""
    step_s: float | None
    """The measured step time, seconds."""

    @property
    def column(self) -> str:
        """The cell that gives the compared figure."""
        return MEASURED[self.target]


def _figure(row: dict[str, str], where: str) -> tuple[Measurement, list[str]]:
    """What a row measured, and the notes: the figure compared is its ``target``, or for a
    row reported but not scored (``excluded``) whichever figure it gives, or for a FLOP
    target whose figure is missing the other FLOP figure (said in the notes); an empty
    convention of a FLOP figure is ``unspecified``. A row with neither the figure nor a step
    time is skipped."""
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
        given = [k for k in FLOP_TARGETS if row.get(MEASURED[k], "").strip()]
        target = given[0] if given else target
    notes = []
    if target in FLOP_TARGETS and not row.get(MEASURED[target], "").strip():
        # a FLOP figure named, the other one given: the same figure over the dense peak
        other = FLOP_TARGETS[1 - FLOP_TARGETS.index(target)]
        if not excluded and row.get(MEASURED[other], "").strip():
            notes.append(f"target {target}, only {MEASURED[other]} given: compared as {other}")
            target = other
        elif not excluded and row.get("measured_step_time_s", "").strip():
            # only the step time: the tokens/s per GPU it gives (the same run's rate)
            notes.append(
                f"target {target}, only measured_step_time_s given: compared as tokens/s per GPU"
            )
            target = "tokens_per_s_per_gpu"
    if not conv and target in FLOP_TARGETS:
        conv = "unspecified"  # an empty cell: the source does not say how it counts
    measured = positive(row, MEASURED[target], where)
    percent = "%" in row["target"] and not row[MEASURED[target]].strip().endswith("%")
    if target == "mfu" and measured is not None and 1 < measured <= 100:
        # "MFU (%)" labels a column of percentages: 41 there is 0.41; and a bare 41, as no
        # run reaches more than its GPU's peak, is 41 % too
        notes.append(
            f"measured_mfu={measured:g} under the target label {row['target']!r}: %"
            if percent
            else f"measured_mfu={measured:g} read as {measured:g} % (a fraction of peak is "
            "at most 1)"
        )
        measured /= 100.0
    if target == "mfu" and measured is not None and measured > 1:
        raise UnsupportedRowError(
            f"measured_mfu={row['measured_mfu']!r}: a fraction of peak, at most 1 (0.45 for 45 %)"
        )
    step_s = positive(row, "measured_step_time_s", where)
    if measured is None and step_s is None:
        raise UnsupportedRowError(f"no {MEASURED[target]} value")
    return Measurement(target, conv, excluded, measured, step_s), notes


def _check_rate(rate: float, figure: str, gpu: GPU, precision: str) -> None:
    """A measured figure's FLOP/s per GPU must lie between MIN_MFU of the GPU's dense peak
    and the peak: beyond it, it is no per-GPU figure of this model; far under, its unit is
    likely another (milliseconds for seconds, a node's or a run's throughput)."""
    peak = gpu.peak_flops(precision)
    if rate > peak * (1.0 + 1e-9):
        raise UnsupportedRowError(
            f"{figure} means {rate / 1e12:,.0f} TFLOP/s per GPU, above {gpu.key}'s "
            f"{precision} dense peak of {peak / 1e12:,.0f}: not a per-GPU figure of this model"
        )
    if rate < MIN_MFU * peak:
        raise UnsupportedRowError(
            f"{figure} means {rate / 1e12:,.2f} TFLOP/s per GPU, under "
            f"{100 * MIN_MFU:g} % of {gpu.key}'s {precision} dense peak: check the "
            "column's unit (a step time in milliseconds, a throughput per node or per run)"
        )


def _gpu_and_model(row: dict[str, str], where: str, notes: list[str]) -> tuple[GPU, Model]:
    """The catalog GPU and the model a row names; the GPU's note goes first in ``notes``,
    the model's last. Parameter-efficient fine-tuning (PEFT named in the stack) is skipped."""
    gpu, gpu_note = read_gpu(row["gpu"])
    if mentions(stack_text(row), PEFT):
        raise UnsupportedRowError(
            "parameter-efficient fine-tuning (LoRA, adapters) is not modelled: its frozen "
            "weights take no weight gradients, optimizer state or gradient reduction"
        )
    model, model_notes = model_for(row, where)
    notes.extend(model_notes)
    if gpu_note:
        notes.insert(0, gpu_note)
    return gpu, model


@dataclass(frozen=True)
class RunShape:
    """The size of a row's run, as its cells and notes state it."""

    num_gpus: int
    seq_len: float
    global_batch: float
    """Sequences a step."""
    batch_assumed: bool
    """The global batch is not stated: DP x micro-batch, as if no gradient accumulation."""
    pp: int | None
    """The pipeline degree the row states (None: not stated)."""


def _run_shape(row: dict[str, str], where: str, notes: list[str]) -> RunShape:
    """The GPUs, sequence length and global batch of a row's run, and how they were read
    (to ``notes``): a batch cell in tokens is divided by the sequence; blank cells are
    filled from the notes, a blank batch by DP x micro-batch, a blank GPU count by the
    stated degrees (:func:`_gpus_from_degrees`). A row without all three is skipped, and so
    is a batch of more tokens than MAX_TOKENS_PER_STEP (a batch in tokens, not sequences)."""
    n_gpus = count(row, "num_gpus", where)
    seq_cell = count(row, "seq_len", where)
    in_tokens = batch_cell_in_tokens(row.get("global_batch_seqs", ""), seq_cell)
    if in_tokens is not None:
        notes.append(in_tokens[1])
    gbs_cell = in_tokens[0] if in_tokens else count(row, "global_batch_seqs", where)
    seq, gbs, from_notes = sizes_from_notes(row.get("notes", ""), seq_cell, gbs_cell)
    notes.extend(from_notes)
    dp_stated, mbs_stated = count(row, "dp", where), count(row, "micro_batch", where)
    batch_assumed = False
    if gbs is None and dp_stated is not None and mbs_stated is not None:
        batch_assumed = True
        gbs = dp_stated * mbs_stated
        notes.append("global batch not stated: dp x micro-batch (no gradient accumulation)")
    degrees = [count(row, k, where) for k in ("tp", "pp", "cp")]
    if n_gpus is None:
        n_gpus = _gpus_from_degrees(degrees, dp_stated, notes)
    if n_gpus is None or seq is None or gbs is None:
        sizes = (("GPU count", n_gpus), ("sequence length", seq), ("global batch", gbs))
        missing = [what for what, value in sizes if value is None]
        raise UnsupportedRowError(f"{' and '.join(missing)} not stated")
    if gbs * seq > MAX_TOKENS_PER_STEP and gbs >= seq:
        raise UnsupportedRowError(
            f"global_batch_seqs={gbs:,.0f} with seq_len={seq:,.0f} is {gbs * seq:,.0f} tokens "
            f"a step, beyond any published run's (at most {MAX_TOKENS_PER_STEP:,}); the cell "
            f"looks like a batch in tokens ({gbs:,.0f} tokens = {gbs / seq:,.6g} sequences): "
            "give it in sequences"
        )
    return RunShape(n_gpus, seq, gbs, batch_assumed, degrees[1])


def _gpus_from_degrees(degrees: list[int | None], dp: int | None, notes: list[str]) -> int | None:
    """A blank GPU count from the degrees a row states (``degrees``: TP, PP, CP): TP x PP x
    CP x DP, CP 1 when blank, where TP, PP and DP are stated (else None); more than
    MAX_GPUS is skipped."""
    if dp is None or None in degrees[:2]:
        return None
    # every degree stated: the GPUs are their product (CP 1 when blank)
    n_gpus = math.prod(d or 1 for d in degrees) * dp
    if n_gpus > MAX_GPUS:
        raise UnsupportedRowError(
            f"GPU count not stated, and tp x pp x cp x dp = {n_gpus:,} is more than {MAX_GPUS:,}"
        )
    notes.append(f"GPU count not stated: tp x pp x cp x dp = {n_gpus:,.0f}")
    return n_gpus


STEP_TPS_TOLERANCE = 0.05
"""How far a row's tokens/s per GPU and the one its step time gives may differ before the
row's reason says so (published figures are rounded, steps averaged differently)."""


def _measured(m: Measurement, run: RunShape, notes: list[str]) -> float:
    """The measured figure: the row's cell, or where only the step time is given, the
    tokens/s per GPU it gives, batch x sequence / (step time x GPUs), for a tokens/s (or
    excluded) row whose batch is stated."""
    if m.value is not None:
        if m.target == "tokens_per_s_per_gpu" and m.step_s and not run.batch_assumed:
            # the two figures of one run: say where they disagree (a typo, another run)
            implied = run.global_batch * run.seq_len / (m.step_s * run.num_gpus)
            if abs(implied / m.value - 1.0) > STEP_TPS_TOLERANCE:
                notes.append(
                    f"measured_step_time_s={m.step_s:g} gives {implied:,.0f} tokens/s per GPU "
                    f"(batch x sequence / (s x GPUs)), {100 * (implied / m.value - 1):+.0f} % "
                    f"from the measured {m.value:,.0f}: the tokens/s is compared"
                )
        return m.value
    if m.target not in ("tokens_per_s_per_gpu", "excluded") or not m.step_s:
        raise UnsupportedRowError(f"no {m.column} value")
    if run.batch_assumed:
        # the tokens a step trains are the row's figure: an assumed batch would make it
        raise UnsupportedRowError(
            "only a step time is measured and the global batch is not stated: its "
            "tokens/s per GPU cannot be derived"
        )
    # only the iteration time is given: the tokens it trains over its GPUs
    measured = run.global_batch * run.seq_len / (m.step_s * run.num_gpus)
    notes.append("tokens/s per GPU from the measured step time: batch x sequence / (s x GPUs)")
    return measured


def _check_figure(
    row: dict[str, str],
    m: Measurement,
    measured: float,
    model: Model,
    run: RunShape,
    gpu: GPU,
    precision: str,
) -> None:
    """The GPU must have a dense peak at the row's precision, and a tokens/s or TFLOP/s
    figure's FLOP rate per GPU must lie within :func:`_check_rate`'s bounds of it (tokens/s
    as the model FLOPs of the tokens; an MFU is at most 1, checked in :func:`_figure`)."""
    if precision not in gpu.peak_tflops:
        raise UnsupportedRowError(f"{gpu.key} has no {precision} peak in the catalog")
    if m.target == "mfu":
        return
    figure = (
        f"{m.column}={measured:g}"
        if row.get(m.column, "").strip()
        else f"measured_step_time_s={m.step_s:g} ({measured:,.0f} tokens/s per GPU)"
    )
    if m.target == "tflops_per_gpu":
        rate = measured * 1e12
    else:  # the model FLOPs of the tokens each GPU trains per second
        rate = measured * model_flops_per_token(model, int(run.seq_len), causal=True)
    _check_rate(rate, figure, gpu, precision)


def _workload(
    row: dict[str, str], model: Model, gpu: GPU, run: RunShape, precision: str, notes: list[str]
) -> Workload:
    """The workload of a row's run, with the kernels, MoE dispatch, gradient accumulation,
    pipeline transfers and FP8 parameter gathers its software stack names (the reasons to
    ``notes``: dispatch only for an MoE model, pipeline transfers unless PP is stated 1) on
    the system :func:`_system` reads and the hybrid shard group its sharding cell names."""
    (attention, why_a), (gathers, why_g) = attention_kernel(row, gpu.arch), zero3_gathers(row)
    (elementwise, why_e), (graphs, why_c) = elementwise_kernels(row), cuda_graphs(row)
    loss, why_l = loss_kernel(row)
    notes.extend(why for why in (why_a, why_g, why_e, why_l, why_c) if why)
    dispatch, why = ep_dispatch(row)
    if why and model.is_moe:
        notes.append(why)
    accumulation, why = grad_accumulation(row, precision)
    if why:
        notes.append(why)
    p2p, why = pp_transfers(row)
    if why and run.pp != 1:
        notes.append(why)
    cp_comm, why = cp_exchange(row)
    if why:
        notes.append(why)
    fp8_gather = precision in ("fp8", "fp4") and mentions(stack_text(row), FP8_PARAM_GATHER)
    if fp8_gather:
        notes.append("parameters gathered as FP8, no 16-bit weight copy, as the row names")
    system = _system(row, gpu, notes)
    shard_group, why = read_shard_group(row, system.gpus_per_node)
    if why:
        notes.append(why)
    return Workload(
        model,
        gpu,
        system,
        Fabric.from_system(system, run.num_gpus),
        run.num_gpus,
        int(run.seq_len),
        int(run.global_batch),
        precision,
        attention=attention,
        zero3_gathers=gathers,
        elementwise=elementwise,
        loss=loss,
        ep_dispatch=dispatch,
        fp8_param_gather=fp8_gather,
        cuda_graphs=graphs,
        grad_accumulation=accumulation,
        pp_p2p=p2p,
        cp_comm=cp_comm,
        shard_group=shard_group,
    )


def _system(row: dict[str, str], gpu: GPU, notes: list[str]) -> System:
    """The GPU's reference system with the NVLink domain and the scale-out NICs the row
    states (:func:`.training_rows.nvlink_domain`, :func:`.training_rows.nics_per_node`);
    the reasons to ``notes``."""
    system, why = nvlink_domain(row, system_for_gpu(gpu))
    if why:
        notes.append(why)
    links = nics_per_node(row, system.nic_gbps, system.gpus_per_node)
    if links is not None and links != (system.nics_per_node, system.nic_gbps):
        nics, gbps = links
        system = system.model_copy(update={"nics_per_node": nics, "nic_gbps": gbps})
        notes.append(f"scale-out: {nics} x {gbps:g} Gb/s NICs per node, as the row states")
    return system


def prepare(row: dict[str, str], where: str) -> PreparedRow:
    """A row as gpuscale predicts it: its workload, the plan it states, the figure compared
    and the reasons printed with it, in the order the rules apply (what was measured, the
    GPU and model, the run's size, the precision, the software stack, then the plan). The
    first rule a row breaks skips it with the reason (``UnsupportedRowError``; a malformed
    cell raises ``InputError``)."""
    m, notes = _figure(row, where)
    gpu, model = _gpu_and_model(row, where, notes)
    run = _run_shape(row, where, notes)
    measured = _measured(m, run, notes)
    precision = read_precision(row.get("precision", ""), gpu, notes)
    _check_figure(row, m, measured, model, run, gpu, precision)
    w = _workload(row, model, gpu, run, precision, notes)
    w, fixed, plan_notes = stated_plan(row, where, w, m.convention)
    return PreparedRow(
        row["id"],
        source_group(row["source"]),
        w,
        fixed,
        "excluded" if m.excluded else m.target,
        m.convention,
        measured,
        tuple(notes + plan_notes),
        m.target,
    )
