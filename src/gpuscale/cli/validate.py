"""`gpuscale validate {training|memory|inference|collectives|kernels} --runs FILE [--json]`.

The contract (shared/validation/README.md): predict every row, print per-row predicted,
measured and signed error, then rows scored / skipped (with reasons), MAPE, median and
worst absolute error; ``--json`` writes one JSON object to stdout.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuscale.cli._common import (
    Cal,
    KernelGpu,
    KernelRuns,
    SdpaBackend,
    load_calibration,
    print_validation,
)

if TYPE_CHECKING:
    from gpuscale.calibrate import Calibration
    from gpuscale.validate.report import ValidationReport

app = typer.Typer(no_args_is_help=True)

Runs = Annotated[
    list[Path],
    typer.Option(
        "--runs",
        help="CSV of published runs (validation schema); repeat to score several files as one.",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Write one JSON object to stdout.")]


@app.command("training")
def training(runs: Runs, json: Json = False, calibration: Cal = None) -> None:
    """Distributed LLM training runs: tokens/s per GPU or TFLOP/s per GPU per row's target."""
    from gpuscale.validate.training import validate_training

    _score_files(runs, validate_training, calibration, json)


@app.command("memory")
def memory(runs: Runs, json: Json = False, calibration: Cal = None) -> None:
    """Measured per-GPU peak memory of training runs against the memory model (the CSV's
    columns: see gpuscale/validate/memory.py; benchmarks/heldout/memory_published.csv)."""
    from gpuscale.validate.memory import validate_memory

    _score_files(runs, validate_memory, calibration, json)


@app.command("inference")
def inference(runs: Runs, json: Json = False, calibration: Cal = None) -> None:
    """LLM serving results: offline throughput, online TTFT and TPOT/ITL."""
    from gpuscale.validate.inference import validate_inference

    _score_files(runs, validate_inference, calibration, json)


def _score_files(
    runs: list[Path],
    validate: Callable[[Path, Calibration], ValidationReport],
    calibration: Path | None,
    as_json: bool,
) -> None:
    """Print the report of ``validate`` over every ``--runs`` file, scored as one."""
    from gpuscale.validate.report import merged_report

    cal = load_calibration(calibration)
    print_validation(merged_report(runs, lambda path: validate(path, cal)), as_json)


BenchRuns = Annotated[
    Path,
    typer.Option(
        "--runs",
        help="CSV of collective benchmarks (validation schema), or the JSON `gpuscale bench "
        "collectives --json` wrote.",
    ),
]


@app.command("collectives")
def collectives(runs: BenchRuns, json: Json = False, calibration: Cal = None) -> None:
    """Collective benchmarks (nccl-tests style): busbw for large messages, time for small."""
    from gpuscale.validate.collectives import validate_collectives

    print_validation(validate_collectives(runs, load_calibration(calibration)), json)


@app.command("kernels")
def kernels(
    runs: KernelRuns,
    gpu: KernelGpu = None,
    sdpa_backend: SdpaBackend = None,
    json: Json = False,
    calibration: Cal = None,
) -> None:
    """One GPU's measured GEMMs, attention and HBM copy against the kernel model (times)."""
    from gpuscale.validate.kernels import validate_kernels

    cal = load_calibration(calibration)
    print_validation(validate_kernels(runs, cal, gpu, sdpa_backend), json)
