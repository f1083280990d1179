"""The catalog's data: the YAML files loaded and validated once, and the indexes of the
names each entry answers to (its key, name and aliases, and their compact spellings)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import TypeVar

import yaml
from pydantic import ValidationError

from gpuscale.catalog.schema import GPU, Model, System

E = TypeVar("E", GPU, System, Model)


def _norm(name: str) -> str:
    return " ".join(name.strip().lower().split())


def _load(filename: str, cls: type[E]) -> dict[str, E]:
    text = resources.files("gpuscale.catalog").joinpath("data", filename).read_text()
    raw = yaml.safe_load(text)
    out: dict[str, E] = {}
    for key, body in raw.items():
        try:
            out[key] = cls.model_validate({**body, "key": key})
        except ValidationError as exc:  # a catalog data bug, not user input
            raise RuntimeError(f"catalog/data/{filename}: entry {key}: {exc}") from exc
    return out


def _compact(name: str) -> str:
    """A spelling-free form of a name: "LLaMA-2 70B", "Llama2_70b" and "llama2-70b" meet.

    Only case, spaces, dashes and underscores go (dots stay: "2.7b" is not "27b"), with a
    leading maker's name ("Meta-Llama-3.1-8B", "NVIDIA ...").
    """
    compact = re.sub(r"[\s_\-]+", "", name.lower())
    return re.sub(r"^(meta|nvidia|amd|mistralai)(?=.)", "", compact)


def _index(entries: dict[str, E]) -> dict[str, str]:
    idx: dict[str, str] = {}
    compact: dict[str, set[str]] = {}
    for key in entries:
        entry: GPU | System | Model = entries[key]
        names: list[str] = [key, entry.name, *entry.aliases]
        for name in names:
            idx[_norm(name)] = key
            compact.setdefault(_compact(name), set()).add(key)
    for c, keys in compact.items():  # a compact form two entries share names neither
        if len(keys) == 1:
            idx.setdefault(c, keys.pop())
    return idx


@cache
def gpus() -> dict[str, GPU]:
    """The catalog's GPUs by key, from ``data/gpus.yaml`` (read once)."""
    return _load("gpus.yaml", GPU)


@cache
def systems() -> dict[str, System]:
    """The catalog's reference systems by key, from ``data/systems.yaml`` (read once)."""
    return _load("systems.yaml", System)


@cache
def models() -> dict[str, Model]:
    """The catalog's models by key, from ``data/models.yaml`` (read once)."""
    return _load("models.yaml", Model)


@cache
def _gpu_index() -> dict[str, str]:
    return _index(gpus())


@cache
def _system_index() -> dict[str, str]:
    return _index(systems())


@cache
def _model_index() -> dict[str, str]:
    return _index(models())
