"""Helpers shared by the test packages (``pythonpath = ["tests"]`` in pyproject.toml)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuscale.catalog import Model, get_model
from gpuscale.catalog.hf import load_hf_config
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


def read_config(tmp_path: Path, cfg: dict[str, Any], name: str = "m") -> Model:
    """A config.json written to ``tmp_path/name`` and read as gpuscale reads it."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    return load_hf_config(folder / "config.json")
