"""How `gpuscale train scaling` reports its curves: each curve's table, why a count has no
plan, and where efficiency went from the first point that fits to the last; or the curves
and the workload they price as one JSON object."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.table import Table

from gpuscale.calibrate.accuracy import Band
from gpuscale.cli._common import out
from gpuscale.cli.train_workload import Resolved
from gpuscale.perf.plan import Workload
from gpuscale.report.cells import scaling_cells, scaling_header, scaling_summary
from gpuscale.search.scaling import ScalingPoint


def _weak_caption(pts: list[ScalingPoint]) -> str:
    """What weak scaling holds: the sequences a GPU, the same at every point or, where the
    batch rounds to whole sequences, their range."""
    per = [p.global_batch / p.gpus for p in pts if p.global_batch is not None]
    if not per:
        return ""
    same = max(per) - min(per) < 1e-9
    held = f"{per[-1]:.3g} a GPU at every point" if same else f"{min(per):.3g}-{max(per):.3g} a GPU"
    return (
        f" weak: the global batch grows with the GPUs, {pts[-1].global_batch or 0:,} "
        f"sequences at {pts[-1].gpus:,} GPUs ({held})."
    )


def _scaling_table(mode: str, w: Workload, pts: list[ScalingPoint]) -> Table:
    t = Table(
        title=f"{mode} scaling of {w.model.name} on {w.gpu.name}",
        caption="eff.: tokens/s per GPU vs the first point that fits. vs previous point: "
        "the terms whose GPU-time per token moved most, as a share of the previous "
        "point's GPU-time per token; where efficiency rose, gain: names the terms that shrank; "
        "offset by: the largest move the other way; no net change: moves that cancel."
        + (_weak_caption(pts) if mode == "weak" else "")
        + (
            " goodput: the share of wall time in steps, net of checkpoint stalls, exposed "
            "data loading and failures; the net tok/s/GPU and MFU, and eff., count that time (a "
            "search or an estimate gives them per step)."
            if any(p.goodput is not None for p in pts)
            else ""
        )
        + (
            " tok/s/GPU and MFU count every GPU of a point, the idle ones too (the JSON's "
            "net_tokens_per_s_per_gpu and net_mfu; its tokens_per_s_per_gpu and mfu, as a "
            "search's and an estimate's, are per GPU the plan uses)."
            if any(p.gpus_used is not None and p.gpus_used < p.gpus for p in pts)
            else ""
        )
        + (
            " eff. above 100 %: the point spends less GPU-time per token than the first "
            "(fewer pipeline-bubble, recompute, sharding or idle-GPU seconds a token); the "
            "gain: entries name the terms that shrank from one point to the next."
            if any((p.efficiency or 0.0) > 1.0 for p in pts)
            else ""
        ),
    )
    run = any(p.goodput is not None for p in pts)  # checkpoints (and failures) priced
    for col in scaling_header(run, w.precision):
        t.add_column(col, justify="left" if col in ("best plan", "vs previous point") else "right")
    for p in pts:
        # a count where nothing fits: the reason follows the table
        t.add_row(*scaling_cells(p, run, "none (see below)"))
    return t


def print_scaling(mode: str, w: Workload, pts: list[ScalingPoint]) -> None:
    """One scaling curve: the table, why a count has no plan, and where efficiency went
    from the first point that fits to the last."""
    out.print(_scaling_table(mode, w, pts))
    for p in pts:
        if p.step_s is None:
            out.print(f"  {p.gpus:,} GPUs: {p.plan.removeprefix('none: ')}")
    summary = scaling_summary(pts)
    if summary is not None:
        out.print(f"  {summary}")


def scaling_json(r: Resolved, curves: dict[str, list[ScalingPoint]], band: Band) -> dict[str, Any]:
    """The `--json` object: the workload the curves price (with its storage and failure
    policies, when given), then each curve's points."""
    w = r.workload
    # each point's predicted throughput carries the same expected error, and its MFU
    # the dense peak it is a share of, as train estimate's
    err = band.to_dict()
    peak = {"mfu_peak_tflops": w.gpu.peak_flops(w.precision) / 1e12}
    about = {
        "model": w.model.key,
        "gpu": w.gpu.key,
        "gpus": w.num_gpus,
        "seq_len": w.seq_len,
        "global_batch": w.global_batch,
        "precision": w.precision,
        "batch": "strong: global_batch at every point; weak: global_batch at the last "
        "point, in proportion to the GPUs before it",
    }
    if r.storage is not None:  # what the points' goodput and net rates were priced with
        about["storage"] = dataclasses.asdict(r.storage)
    if r.failures is not None:
        about["failures"] = dataclasses.asdict(r.failures)
    return {
        "workload": about,
        **{
            m: [{**p.to_dict(), **peak, "expected_error": err} for p in pts]
            for m, pts in curves.items()
        },
    }
