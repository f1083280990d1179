"""`gpuscale calibrate {training|collectives|inference|kernels|memory} --runs FILE [--out F]`.

Fits the model's constants to a file of runs (the user's own measurements, in the columns
`gpuscale validate` reads; a GPU's microbenchmarks as benchmarks/gpu_checks.py writes them),
prints the file's scores before and after and each constant's move, and writes ``CAL.json``
with the constants the fit started from and the fitted ones over them, which any command
then reads with ``--calibration CAL.json`` (gpuscale/calibrate/fitting.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuscale.calibrate.fitting import Fitted, check_runs, fit_runs, start_keys, write_out
from gpuscale.cli._common import KernelGpu, KernelRuns, SdpaBackend, _num, emit_json, err, out
from gpuscale.errors import InputError

app = typer.Typer(no_args_is_help=True)

Out = Annotated[
    Path | None,
    typer.Option(
        "--out",
        help="Calibration JSON to write the fitted constants into (created; or, when it "
        "exists, the fit starts from its constants and keeps them). Without it nothing is "
        "written.",
    ),
]
Constants = Annotated[
    str | None,
    typer.Option(
        "--constants",
        help="Comma-separated constants to fit (default: every one this kind of run fits).",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Write one JSON object to stdout.")]
Start = Annotated[
    Path | None,
    typer.Option(
        "--calibration",
        help="Calibration JSON to start from, over the shipped constants (and over --out's "
        "when that file exists).",
    ),
]

SCORE_NAMES = {
    "mape": "MAPE",
    "median_abs_error": "median |error|",
    "worst_abs_error": "worst |error|",
    "busbw_GBps_mape": "busbw MAPE (large messages)",
    "time_us_mape": "time MAPE (small messages)",
    "throughput_mape": "throughput MAPE",
    "ttft_mape": "TTFT MAPE",
    "tpot_itl_mape": "TPOT/ITL MAPE",
    "gemm_bf16_s_mape": "BF16 GEMM time MAPE",
    "gemm_fp8_s_mape": "FP8 GEMM time MAPE",
    "attention_s_mape": "attention time MAPE",
    "hbm_copy_s_mape": "HBM copy time MAPE",
    "peak_memory_gib_mape": "peak memory MAPE",
}


def _names(constants: str | None) -> list[str] | None:
    if constants is None:
        return None
    names = [c.strip() for c in constants.split(",") if c.strip()]
    if not names:
        raise InputError("--constants", constants, "comma-separated constant names")
    return names


def _calibrate(
    kind: str,
    runs: list[Path],
    dest: Path | None,
    constants: str | None,
    as_json: bool,
    calibration: Path | None,
    gpu: str | None = None,
    sdpa_backend: str | None = None,
) -> None:
    from gpuscale.validate.kernels import check_sdpa_backend

    said = _names(constants)
    check_sdpa_backend(sdpa_backend)
    check_runs(kind, runs, said)  # a missing file or an unknown name fails before the fit
    # so do an output it could not write and a start file that is not a calibration
    base = start_keys(dest, calibration)
    merged = dest is not None and dest.exists()  # the fit starts from its constants too
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    # the progress goes to stderr, and only to a terminal (a log gets the result alone)
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as bar:
        label = ", ".join(p.name for p in runs)
        task = bar.add_task(f"calibrating on {label}: pricing the runs")

        def step(evaluations: int, loss: float) -> None:
            bar.update(
                task,
                description=f"calibrating on {label}: {evaluations:,} evaluations, loss {loss:.4g}",
            )

        fitted = fit_runs(
            kind, runs, base, said, step, constants, gpu=gpu, sdpa_backend=sdpa_backend
        )
    if dest is not None:
        write_out(fitted, dest)
    if as_json:
        emit_json(fitted.to_json(dest))
        return
    _print(fitted, dest, calibration, merged)


def _origin(dest: Path | None, calibration: Path | None, merged: bool) -> str:
    """Where the fit started, in words."""
    parts = ["the shipped calibration"]
    if merged and dest is not None:
        parts.append(f"{dest}'s constants")
    if calibration is not None:
        parts.append(f"{calibration}'s")
    return ", then ".join(parts)


def _print(f: Fitted, dest: Path | None, calibration: Path | None, merged: bool) -> None:
    origin = _origin(dest, calibration, merged)
    out.print(
        f"[bold]{f.kind} constants fitted on {f.rows:,} scored row(s) of "
        f"{', '.join(map(str, f.runs))}[/bold] "
        f"(from {origin}; {f.evaluations:,} evaluations)"
    )
    scores = Table(title="the file's scores")
    for col in ("score", "before %", "after %"):
        scores.add_column(col, justify="left" if col == "score" else "right")
    for key, before in f.before.items():
        after = f.after.get(key)
        scores.add_row(
            SCORE_NAMES.get(key, key), f"{before:.2f}", "" if after is None else f"{after:.2f}"
        )
    out.print(scores)
    consts = Table(title="constants")
    for col in ("constant", "start", "fitted", "range", "note"):
        consts.add_column(col, justify="left" if col in ("constant", "note") else "right")
    for c in f.to_json(None)["constants"]:  # the rows the JSON gives, in words
        rng = f"{c['lower_bound']:.4g} - {c['upper_bound']:.4g}"
        if not c["informed"]:
            note = "no run depends on it: not fitted"
            consts.add_row(c["name"], _num(c["start"]), "", rng, note)
            continue
        note = f"at its {c['at_bound']} bound" if c["at_bound"] else ""
        consts.add_row(c["name"], _num(c["start"]), _num(c["fitted"]), rng, note)
    out.print(consts)
    notes = []
    if f.underdetermined():
        notes.append(
            f"{f.rows} scored row(s) for {len(f.informed)} fitted constants: the fit can match "
            "them without the constants meaning what they say. Add runs that differ in what "
            "each constant prices (sequence, micro-batch, model size, GPU count, message "
            "size), or fit fewer (--constants)."
        )
    if any(f.at_bound(n) for n in f.informed):
        notes.append(
            "A constant at a bound of its physical range is pushed there by something the "
            "model does not price for these runs; the others fitted with it absorb the rest."
        )
    if dest is None:
        notes.append("Nothing written: --out CAL.json stores the fitted constants.")
    else:
        held = len(f.written())
        notes.append(
            f"Wrote {held} constant(s) to {dest} (the {len(f.informed)} fitted over those the "
            f"fit started from); --calibration {dest} prices any command as the fit scored "
            "this file (the constants not in it keep their shipped values)."
        )
    for n in notes:
        out.print(n, soft_wrap=True)


def _command(kind: str, doc: str, runs_help: str) -> None:
    """Register ``gpuscale calibrate KIND`` (each kind has the same options)."""

    def command(
        runs: list[Path] = typer.Option(..., "--runs", help=runs_help),  # noqa: B008
        dest: Out = None,
        constants: Constants = None,
        json: Json = False,
        calibration: Start = None,
    ) -> None:
        _calibrate(kind, runs, dest, constants, json, calibration)

    command.__doc__ = doc
    app.command(kind)(command)


_VALIDATE_COLUMNS = "in the columns `gpuscale validate {}` reads (the option once)"
for _kind, _doc, _runs in (
    (
        "training",
        "Training steps (tokens/s or TFLOP/s per GPU): GEMM, attention and HBM efficiency, "
        "FP8 speed-up, overlaps and fixed costs.",
        "CSV of training runs " + _VALIDATE_COLUMNS.format("training"),
    ),
    (
        "collectives",
        "Collective benchmarks (nccl-tests style): link efficiencies and latencies.",
        "CSV of collective benchmarks "
        + _VALIDATE_COLUMNS.format("collectives")
        + ", or the JSON `gpuscale bench collectives --json` wrote",
    ),
    (
        "inference",
        "LLM serving results: inference GEMM, attention and HBM efficiency, overheads.",
        "CSV of serving results " + _VALIDATE_COLUMNS.format("inference"),
    ),
    (
        "memory",
        "Measured per-GPU peak memory of training runs: the factor on the activations "
        "(the allocator's margin and what the model does not count of the stack's "
        "activations) and the CUDA/NCCL workspace.",
        "CSV of measured peaks " + _VALIDATE_COLUMNS.format("memory"),
    ),
):
    _command(_kind, _doc, _runs)


@app.command("kernels")
def kernels(
    runs: KernelRuns,
    gpu: KernelGpu = None,
    sdpa_backend: SdpaBackend = None,
    dest: Out = None,
    constants: Constants = None,
    json: Json = False,
    calibration: Start = None,
) -> None:
    """A GPU's measured GEMMs, attention and copy: GEMM, FP8, attention, HBM constants."""
    _calibrate("kernels", runs, dest, constants, json, calibration, gpu, sdpa_backend)
