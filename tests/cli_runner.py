"""Helpers shared by the test packages (``pythonpath = ["tests"]`` in pyproject.toml)."""

from __future__ import annotations

import pytest

from gpuscale.catalog import get_model
from gpuscale.cli import main


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``gpuscale ARGS`` in-process: (exit code, stdout, stderr)."""
    code = 0
    try:
        main(args)
    except SystemExit as exc:
        code = int(exc.code or 0)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def embedding_matrices(key: str) -> int:
    """Parameters of a catalog model's V x h input embedding and, unless tied, its output
    head: what a published "non-embedding" count leaves out."""
    m = get_model(key)
    return m.vocab * m.hidden * (1 if m.tied_embeddings else 2)
