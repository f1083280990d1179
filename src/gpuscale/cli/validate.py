"""`gpuscale validate {training|inference|collectives} --runs FILE.csv [--json]`."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True)
