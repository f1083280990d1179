"""``gpuscale validate training``: predict published training runs and score the error.

Each row of ``shared/validation/training_runs.csv``'s schema maps to a :class:`Workload`
(model shape from the row, completed from the catalog), a GPU and its reference system,
and a plan: the row's stated degrees are fixed, unstated ones are chosen by gpuscale's own
plan search (and the row says so). The predicted figure follows the row's ``target`` and,
for TFLOP/s figures, its ``flop_convention``. How a row is read is
:mod:`.training_prepare`'s; this module chooses the plans, predicts and scores.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.catalog import catalog_key
from gpuscale.errors import InputError
from gpuscale.perf.flop_conventions import megatron_model_flops, megatron_sc21_flops
from gpuscale.perf.plan import Plans
from gpuscale.perf.training import estimate
from gpuscale.perf.transformer import (
    model_flops_per_token,
)
from gpuscale.search.plans import search_plans
from gpuscale.validate.numbers import num
from gpuscale.validate.report import (
    RowResult,
    ValidationReport,
    read_rows,
    signed_error_pct,
    unread_columns,
)
from gpuscale.validate.training_cells import COLUMNS, MEASURED, REQUIRED, read_target
from gpuscale.validate.training_model import UnsupportedRowError
from gpuscale.validate.training_prepare import PreparedRow, prepare, source_group
from gpuscale.validate.training_rows import config_key, job_key, model_kind

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
    used = int(plans.gpus_used()[0])
    if used < w.num_gpus:
        # the row's per-GPU figure counts every GPU it names; a plan on fewer prices another run
        fewer = (
            f"no plan runs the global batch of {w.global_batch:,} sequences on all "
            f"{w.num_gpus:,} GPUs (the fastest uses {used:,})"
        )
        if scored(pr):
            raise UnsupportedRowError(f"{fewer}: the row's per-GPU figure counts all of them")
        note = "; ".join(n for n in (note, fewer) if n)
    return plans, note


def scored(pr: PreparedRow) -> bool:
    """Whether a row's prediction is scored: not the ``excluded`` target, nor a FLOP rate
    counted by an unspecified convention (reported apart)."""
    if pr.target == "excluded":
        return False
    return not (pr.convention == "unspecified" and pr.target != "tokens_per_s_per_gpu")


def predict(pr: PreparedRow, plans: Plans, cal: Calibration) -> float:
    """The predicted figure a row's target compares, under the chosen plans: tokens/s per GPU for
    ``tokens_per_s_per_gpu`` (and ``excluded``); else TFLOP/s per GPU, FLOPs per step / step s /
    GPUs used, the FLOPs counted by the row's convention (Megatron SC21 HFU, Megatron model
    FLOPs with full or causal attention, else gpuscale's model FLOPs per token x tokens per
    step); for ``mfu`` that rate as a fraction of the GPU's peak FLOP/s at the precision."""
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
    """The training validation report of a CSV file: per row, the prediction of :func:`predict`
    for the row's plan (:func:`choose_plan`) against the measured figure and its signed error
    in percent; a row the model cannot price is skipped, one with the ``excluded`` target or an
    unspecified FLOP convention is reported but not scored."""
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
        status = "scored" if scored(pr) else "reported"
        if pr.target == "excluded":
            reason = "target 'excluded' (not a per-step figure)"
        elif not scored(pr):
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
                {
                    "plan": (plan := plans.label(0)),
                    "config": config_key(pr, plan, pred),
                    "job": job_key(pr, row),
                    "model": catalog_key(pr.workload.model),
                    "model_kind": model_kind(pr.workload.model),
                    "gpu_arch": pr.workload.gpu.arch,
                },
            )
        )
    return ValidationReport("training", rows, unread_columns(table, COLUMNS))
