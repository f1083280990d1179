"""Shared CLI helpers: consoles, JSON output, calibration option, validation printing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuscale.calibrate import Calibration, default_calibration
from gpuscale.validate.report import (
    TWIN_LIMIT,
    TWIN_TOLERANCE,
    RowResult,
    ValidationReport,
    strict_json,
)

PIPED_WIDTH = 200
"""Columns of the tables when stdout is not a terminal and COLUMNS is not set."""

Cal = Annotated[
    Path | None, typer.Option("--calibration", help="Calibration JSON (default: the fitted one).")
]
# a GPU's measured kernels, shared by `validate kernels` and `calibrate kernels`
KernelRuns = Annotated[
    list[Path],
    typer.Option(
        "--runs",
        help="JSON written by benchmarks/gpu_checks.py on one GPU (repeat for more files).",
    ),
]
KernelGpu = Annotated[
    str | None,
    typer.Option("--gpu", help="Catalog GPU measured (default: the device the files name)."),
]
SdpaBackend = Annotated[
    str | None,
    typer.Option(
        "--sdpa-backend",
        help="The backend SDPA's default ran, for files that do not record it: "
        "cudnn_attention, flash_attention, efficient_attention or math.",
    ),
]
# nccl-tests' size sweep and element type, shared by `comm estimate` and `bench collectives`
MinBytes = Annotated[
    str, typer.Option("-b", "--minbytes", help="Smallest message size (bytes; 8, 1K, 1M).")
]
MaxBytes = Annotated[str, typer.Option("-e", "--maxbytes", help="Largest message size (bytes).")]
StepFactor = Annotated[
    float, typer.Option("-f", "--stepfactor", help="Size multiplier between rows (> 1).")
]
Datatype = Annotated[
    str,
    typer.Option(
        "-d", "--datatype", help="Element type, as nccl-tests -d: float32, bfloat16, int8, ..."
    ),
]

out = Console(soft_wrap=False)
err = Console(stderr=True)
if not out.is_terminal and "COLUMNS" not in os.environ:
    # output piped to a file or a log is read there: lay tables out wide instead of cutting
    # their cells at rich's 80-column default (COLUMNS still sets the width)
    out.width = PIPED_WIDTH


def emit_json(obj: Any) -> None:
    """Write one JSON object to stdout (no rich markup; strict JSON, see strict_json)."""
    print(strict_json(obj))


def load_calibration(path: Path | None) -> Calibration:
    """The calibration a command prices with: the shipped one, or the JSON file ``--calibration``
    names."""
    return default_calibration() if path is None else Calibration.load(path)


def _num(x: float) -> str:
    """A figure to four significant digits, whole numbers with separators (18,070)."""
    short = f"{x:.4g}"  # rounded first: 999.97 is 1,000
    return f"{x:,.0f}" if abs(float(short)) >= 1000 else short


def print_validation(report: ValidationReport, as_json: bool) -> None:
    """Per-row table then summary, or the JSON object of the validation contract; exit
    status 1 when no row could be scored (each row's reason is printed)."""
    _print_validation(report, as_json)
    if report.rows and not report.scored:
        where = "JSON's rows" if as_json else "table"
        err.print(
            f"error: no row was scored ({len(report.skipped)} skipped, "
            f"{len(report.rows) - len(report.skipped)} reported): each row's reason is in the "
            f"{where}",
            soft_wrap=True,
        )
        raise typer.Exit(1)


def _print_validation(report: ValidationReport, as_json: bool) -> None:
    if as_json:
        print(report.dumps())
        return
    t = Table(title=f"gpuscale validate {report.kind}", show_lines=False)
    for col in ("id", "metric", "predicted", "measured", "error %", "status / reason"):
        t.add_column(
            col, justify="right" if col in ("predicted", "measured", "error %") else "left"
        )
    for r in report.rows:
        t.add_row(
            Text(r.id),
            Text(r.metric),
            "" if r.predicted is None else _num(r.predicted),
            "" if r.measured is None else _num(r.measured),
            "" if r.error_pct is None else f"{r.error_pct:+.1f}",
            Text(r.status if not r.reason else f"{r.status}: {r.reason}"),
        )
    out.print(t)
    out.print(_grouped_table(report, "by source (scored rows)", "source", report.by_group()))
    if kinds := report.by_model_kind():
        title = "by kind of model (scored rows)"
        out.print(_grouped_table(report, title, "model", kinds, signed=True))
    for metric, rows in sorted(report.by_metric().items()):
        ms = report.stats(rows)
        out.print(
            f"{metric}: {len(rows)} scored rows, MAPE {ms['mape_pct']:.2f} %, "
            f"median |error| {ms['median_abs_error_pct']:.2f} %, "
            f"worst |error| {ms['max_abs_error_pct']:.2f} %"
        )
    s = report.stats()
    n_rep = sum(1 for r in report.rows if r.status == "reported")
    mape = "n/a" if s["mape_pct"] is None else f"{s['mape_pct']:.2f} %"
    med = "n/a" if s["median_abs_error_pct"] is None else f"{s['median_abs_error_pct']:.2f} %"
    worst = "n/a" if s["max_abs_error_pct"] is None else f"{s['max_abs_error_pct']:.2f} %"
    n_rows = len({r.id for r in report.rows})
    # a row can carry several measured figures (throughput, TTFT, TPOT), each scored apart
    whole = (
        f"{len(report.rows)} rows"
        if n_rows == len(report.rows)
        else f"{len(report.rows)} figures from {n_rows} rows"
    )
    out.print(
        f"scored {len(report.scored)}, skipped {len(report.skipped)}, reported (not scored) "
        f"{n_rep} of {whole}; MAPE {mape}, median |error| {med}, worst |error| {worst}"
    )
    if report.unread_columns:
        out.print(
            Text(
                f"note: column(s) {', '.join(report.unread_columns)} are not in the "
                f"{report.kind} schema and were not read; a misspelt column's values count "
                "as not stated"
            )
        )
    for tw in report.twins():
        listed = ", ".join(f"{i} {_num(m)}" for i, m in zip(tw.ids, tw.measured, strict=True))
        out.print(
            Text(
                f"note: {listed} ({tw.metric}) are one configuration as gpuscale reads them, "
                f"measured {tw.ratio:.2f} x apart: no single prediction is within "
                f"{TWIN_TOLERANCE * 100:.0f} % of each (they would have to be at most "
                f"{TWIN_LIMIT:.2f} x apart); the rows differ in something gpuscale does not read "
                "(a software release, a setting such as token dropping), or one is in error"
            )
        )
    _print_ranking(report)


def _grouped_table(
    report: ValidationReport,
    title: str,
    first: str,
    groups: dict[str, list[RowResult]],
    signed: bool = False,
) -> Table:
    """A summary table of scored rows by group: rows, MAPE, median and worst |error| (and,
    with ``signed``, the mean signed error)."""
    t = Table(title=title)
    cols = (first, "rows", "MAPE %", "median |err| %", "max |err| %")
    for col in (*cols, *(("mean signed %",) if signed else ())):
        t.add_column(col, justify="left" if col == first else "right")
    for name, rows in sorted(groups.items()):
        s = report.stats(rows)
        t.add_row(
            Text(name),
            str(len(rows)),
            f"{s['mape_pct']:.1f}",
            f"{s['median_abs_error_pct']:.1f}",
            f"{s['max_abs_error_pct']:.1f}",
            *((f"{s['mean_signed_error_pct']:+.1f}",) if signed else ()),
        )
    return t


def _print_ranking(report: ValidationReport) -> None:
    """The plan-ranking table: pairs of runs of one job that differ in plan."""
    rk = report.plan_ranking()
    if rk is None:
        return
    t = Table(title="plan ranking: runs of one job, two plans")
    for col in ("predicted gap", "pairs", "ordered as measured"):
        t.add_column(col, justify="left" if col == "predicted gap" else "right")
    for b in rk.bins:
        t.add_row(b.label, str(b.pairs), "-" if b.share is None else f"{b.share * 100:.0f} %")
    t.add_row("all", str(rk.pairs), f"{rk.share * 100:.0f} %")
    out.print(t)
    ties = "".join(
        f"; {_count(n, 'pair')} {what} equal left out"
        for n, what in ((rk.measured_ties, "measured"), (rk.predicted_ties, "predicted"))
        if n
    )
    out.print(
        Text(
            f"{_count(rk.pairs, 'pair')} of scored runs of one job (same source, precision, "
            f"network, model, GPU and count, sequence and batch) with different plans, from "
            f"{_count(rk.jobs, 'job')}: the plan gpuscale predicts faster was measured faster "
            f"in {rk.ordered} ({rk.share * 100:.0f} %); median error of the predicted speed "
            f"ratio between two plans {rk.median_ratio_error_pct:.1f} %{ties}"
        )
    )


def _count(n: int, noun: str) -> str:
    """ "1 pair", "2 pairs"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
