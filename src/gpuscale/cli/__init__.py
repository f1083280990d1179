"""The ``gpuscale`` command. Thin: it parses, calls the library and prints.

Each command group lives in its own module and registers on :data:`app`. User errors
(:class:`gpuscale.errors.InputError`) become one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys

import typer
from rich.markup import escape

from gpuscale.cli import _common
from gpuscale.errors import InputError

app = typer.Typer(
    name="gpuscale",
    help="Model how GPU clusters turn GPUs into compute that AI workloads can use.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _register() -> None:
    from gpuscale.cli import bench, cluster, comm, export, infer, train, validate

    app.add_typer(train.app, name="train", help="Training: memory, step time, MFU, plans, scaling.")
    app.add_typer(infer.app, name="infer", help="Inference: latency, throughput, sizing at an SLO.")
    app.add_typer(comm.app, name="comm", help="Collective communication cost on a cluster.")
    app.add_typer(cluster.app, name="cluster", help="Cluster specs: topology, BOM, bandwidth.")
    app.add_typer(bench.app, name="bench", help="Benchmarks on real hardware (torch.distributed).")
    app.add_typer(export.app, name="export", help="Launch files for Slurm and Kubernetes.")
    app.add_typer(validate.app, name="validate", help="Score predictions against published runs.")


_register()


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning user errors into exit code 2 with one line.

    Typer runs in standalone mode, so it prints usage errors (unknown option, bad value)
    itself with exit code 2, whichever Click it is built on. A successful command returns
    normally, so that ``main([...])`` can be called from Python.
    """
    try:
        app(args=argv, prog_name="gpuscale")
    except InputError as exc:
        # the message quotes user input: print it as text, not as rich markup
        _common.err.print(
            f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True
        )
        sys.exit(2)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
