"""The ``gpuscale`` command. Thin: it parses, calls the library and prints.

Each command group lives in its own module and registers on :data:`app`. User errors
(:class:`gpuscale.errors.InputError`) become one line on stderr and exit code 2.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from typing import Any

import typer
from rich.markup import escape

from gpuscale.cli import _common
from gpuscale.errors import InputError

try:  # Typer 0.2x vendors its Click
    from typer._click import exceptions as cx
except ImportError:  # pragma: no cover - Typer built on the Click package
    from click import exceptions as cx  # type: ignore[no-redef]

# Click 8.2+ (and Typer's vendored Click) signal a bare group this way; Click 8.1 exits 0
_NO_ARGS_IS_HELP: tuple[type[BaseException], ...] = tuple(
    c for c in (getattr(cx, "NoArgsIsHelpError", None),) if isinstance(c, type)
)

app = typer.Typer(
    name="gpuscale",
    help="Model how GPU clusters turn GPUs into compute that AI workloads can use.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(shown: bool) -> None:
    if shown:
        from gpuscale import __version__

        typer.echo(f"gpuscale {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    pass


def _register() -> None:
    from gpuscale.cli import bench, calibrate, cluster, comm, export, infer, train, validate

    app.add_typer(train.app, name="train", help="Training: memory, step time, MFU, plans, scaling.")
    app.add_typer(infer.app, name="infer", help="Inference: latency, throughput, sizing at an SLO.")
    app.add_typer(comm.app, name="comm", help="Collective communication cost on a cluster.")
    app.add_typer(cluster.app, name="cluster", help="Cluster specs: topology, BOM, bandwidth.")
    app.add_typer(bench.app, name="bench", help="Real hardware: collectives, storage.")
    app.add_typer(export.app, name="export", help="Launch files for Slurm and Kubernetes.")
    app.add_typer(validate.app, name="validate", help="Score predictions against published runs.")
    app.add_typer(
        calibrate.app, name="calibrate", help="Fit the models' constants to your own runs."
    )


_register()


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning user errors into exit code 2 with one line.

    Click runs outside its standalone mode so that its usage errors (an unknown option, a
    value of the wrong type, a missing option) come here and are printed as one line, as
    gpuscale's own input errors are, rather than as a framed usage box. A successful command
    returns normally, so that ``main([...])`` can be called from Python.
    """
    try:
        _check_option_values(sys.argv[1:] if argv is None else argv)
        rc = app(args=argv, prog_name="gpuscale", standalone_mode=False)
    except InputError as exc:
        _error(str(exc))
    except _NO_ARGS_IS_HELP:
        sys.exit(2)  # a bare group: Typer has printed its help
    except cx.UsageError as exc:
        # "Invalid value for '--gpus': ... (got 'abc')": the field, what is valid and the
        # value, on one line, and where the valid commands and options are listed
        where = f" (see: {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        _error(" ".join(exc.format_message().split()) + _given(exc) + where)
    except typer.Abort:
        _common.err.print("aborted")
        sys.exit(130)
    except OSError as exc:
        if exc.errno not in _OUTPUT_ERRORS:
            raise
        # the output could not be written (a full disk, a closed pipe): say so on one
        # line, and keep Python's exit-time flush of the same output quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        _common.err.print(f"error: the output could not be written: {exc.strerror}")
        sys.exit(1)
    if isinstance(rc, int) and rc != 0:
        sys.exit(rc)  # a command that exits non-zero (typer.Exit) keeps its status


_OUTPUT_ERRORS = (errno.ENOSPC, errno.EPIPE, errno.EFBIG, errno.EIO, errno.EDQUOT)
"""Errors of writing the output, not of the command's input."""
_GROUPED = re.compile(r"[+-]?[\d.]*\d_[\d_.]*([eE][+-]?\d+)?")
"""A number with ``_`` between digits, which Click's int() and float() read as Python does
(8_0 is 80)."""
_NUMERIC = ("integer", "float", "integer range", "float range")
"""The names of Click's number types."""


def _is_number(param: Any) -> bool:
    """Whether a command's option takes an int or a float (Typer's own option class, or
    Click's)."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if annotation is not None:
        return annotation in (int, float)
    return getattr(getattr(param, "type", None), "name", "") in _NUMERIC


def _check_option_values(args: list[str]) -> None:
    """A number option given as ``--gpus 8_0`` is a typo more often than digit grouping:
    refused, naming the option, rather than read as 80. Text options (a path, a name) may
    hold any ``_``. An option given an empty value is refused too."""
    cmd: Any = typer.main.get_command(app)
    words = [a for a in args if not a.startswith("-")]
    # the groups whose options read an empty value as their default or as the current
    # directory (bench checks its own, with messages of its own)
    modelling = bool(words) and words[0] in ("train", "validate", "infer", "export")
    while hasattr(cmd, "commands") and words and words[0] in cmd.commands:
        cmd = cmd.commands[words.pop(0)]
    params = getattr(cmd, "params", ())
    numeric = {opt for p in params if _is_number(p) for opt in p.opts}
    # options that take a value (not on/off flags): an empty one is refused, not read as
    # the option's default or as the current directory
    valued = {
        opt
        for p in params
        if not getattr(p, "is_flag", False) and not getattr(p, "count", False)
        for opt in getattr(p, "opts", ())
        if opt.startswith("-")
    }
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if not eq:
            before = args[i - 1] if i else ""
            flag, value = ("" if "=" in before else before), arg
        if flag in numeric and _GROUPED.fullmatch(value):
            raise InputError(flag.lstrip("-"), value, "digits only, without _ between them")
        if modelling and flag in valued and not value.strip() and (eq or i):
            raise InputError(flag.lstrip("-"), value, f"empty: give a value (see {flag} in --help)")


def _error(message: str) -> None:
    # the message quotes user input: print it as text, not as rich markup
    _common.err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    sys.exit(2)


def _given(exc: BaseException) -> str:
    """The value a type check refused, when the error does not quote it (Typer's pydantic
    coercion keeps it in the cause)."""
    errors = getattr(exc.__cause__, "errors", None)
    if callable(errors):
        found = errors()
        if found and "input" in found[0]:
            return f" (got {found[0]['input']!r})"
    return ""
