"""The hardware and model catalog: YAML data files with a ``source:`` per entry.

Adding a GPU, a system or a model is a data change in ``catalog/data/*.yaml``. Lookups
accept the catalog key (lower-case with dashes: ``a100-sxm-80gb``, ``llama3-70b``) or any
alias (the names used in published results, e.g. ``A100-SXM4-80GB``), case-insensitively;
a GPU also by a description that names exactly one part ("NVIDIA H100 80GB HBM3").
A model can also be a local Hugging Face ``config.json`` path (see :mod:`.hf`).
"""

from __future__ import annotations

import re
from pathlib import Path

from gpuscale.catalog._store import (
    E,
    _compact,
    _gpu_index,
    _model_index,
    _norm,
    _system_index,
    gpus,
    models,
    systems,
)
from gpuscale.catalog.gpu_names import _gpu_by_description, _tokens, _unknown_gpu, _word_fits
from gpuscale.catalog.schema import GPU, PRECISIONS, Model, System
from gpuscale.errors import InputError, unknown
from gpuscale.paths import path_kind

__all__ = [
    "GPU",
    "PRECISIONS",
    "Model",
    "System",
    "catalog_key",
    "get_gpu",
    "get_model",
    "get_system",
    "gpus",
    "models",
    "system_for_gpu",
    "systems",
]


def _lookup(name: str, entries: dict[str, E], index: dict[str, str], field: str) -> E:
    key = index.get(_norm(name)) or index.get(_compact(name))
    if key is None:
        raise unknown(field, name, entries)
    return entries[key]


_CLOUD = re.compile(r"^\s*(aws|amazon(\s+ec2)?|ec2|gcp|google\s+cloud|azure)\s+", re.IGNORECASE)
"""A cloud provider's name before an instance type."""


def get_gpu(name: str, field: str = "gpu") -> GPU:
    """A catalog GPU by key or alias, else by description (see :func:`_gpu_by_description`).

    A name that contradicts the part it spells is unknown: "AMD H100" (the compact form
    drops a leading maker's name) is not the NVIDIA H100. An unknown name is an
    :class:`InputError` that suggests the closest catalog keys (:func:`_unknown_gpu`).
    """
    index = _gpu_index()
    # a cloud's name before its instance type ("AWS p4de", "Google Cloud A3 Mega")
    for said in dict.fromkeys((name, _CLOUD.sub("", name))):
        key = index.get(_norm(said)) or index.get(_compact(said))
        if key is not None and not any(_word_fits(t, key) is False for t in _tokens(said)):
            return gpus()[key]
    key = _gpu_by_description(name)
    if key is None:
        raise _unknown_gpu(field, name)
    return gpus()[key]


def get_system(name: str, field: str = "system") -> System:
    """A catalog system (a reference node: its GPUs, NICs and NVLink domain) by key, name or
    alias, also in the spellings :func:`_compact` joins; an unknown name is an
    :class:`InputError` on ``field``."""
    return _lookup(name, systems(), _system_index(), field)


def get_model(name: str, field: str = "model") -> Model:
    """A catalog model by key/alias, or a local Hugging Face ``config.json`` path."""
    if not name.strip():
        raise InputError(field, name, "empty; give a catalog model or a config.json file")
    kind = path_kind(Path(name), field)
    if kind == "dir":  # a downloaded Hugging Face checkout's folder: its config.json
        config = Path(name) / "config.json"
        from_file = config.is_file()
    else:
        config = Path(name)
        from_file = name.endswith(".json") or kind != "missing"
    if from_file:
        from gpuscale.catalog.hf import load_hf_config

        return load_hf_config(config, field)
    try:
        return _lookup(name, models(), _model_index(), field)
    except InputError:
        # a Hugging Face repository id names the same model: "meta-llama/Llama-2-7b-hf",
        # "mistralai/Mixtral-8x7B-v0.1", "Qwen/Qwen2.5-7B-Instruct" (a tuned variant has the
        # base model's shape); so may a folder without a config.json that bears its name
        # the repository's own name first ("moonshotai/Kimi-K2-Thinking" is a catalog
        # alias), then without the suffixes of a tuning, release or format
        last = name.rstrip("/").rsplit("/", 1)[-1]
        for bare in dict.fromkeys((last, _HF_VARIANT.sub("", last))):
            if bare and bare != name:
                try:
                    return _lookup(bare, models(), _model_index(), field)
                except InputError:
                    pass
        if kind == "dir":
            raise InputError(
                field,
                name,
                "a directory without a config.json; give a catalog model or a config.json file",
            ) from None
        raise


def catalog_key(m: Model) -> str:
    """``m``'s catalog key where ``m`` is the catalog's model as it stands, else "" (a
    config.json in a folder of that name, a catalog model given other layers)."""
    return m.key if models().get(m.key) == m else ""


_HF_VARIANT = re.compile(
    r"([-_ ](hf|instruct|chat|base|it|thinking|fp8|bf16|v\d+(\.\d+)+|\d{4}|\d+k))+$",
    re.IGNORECASE,
)
"""Suffixes of a Hugging Face repository name that do not change the model's shape: a
tuning ("-Instruct", "-Thinking"), a version or release date ("-v0.1", "-0324", "-2507"),
the weights' format ("-FP8"), a context length ("Phi-3-mini-4k", "-128k")."""


def system_for_gpu(gpu: GPU) -> System:
    """The catalog system that houses ``gpu`` (its reference node or rack)."""
    for s in systems().values():
        if s.gpu == gpu.key:
            return s
    # GPUs without a reference chassis of their own: an 8-GPU PCIe server of their generation
    generic = "pcie-8gpu-gen5" if gpu.pcie_gen >= 5 else "pcie-8gpu-gen4"
    return systems()[generic]


def check_precision(
    gpu: GPU, precision: str, field: str = "precision", among: tuple[str, ...] = PRECISIONS
) -> None:
    """``precision`` is one of ``among`` (the precisions the caller runs in) and ``gpu``
    has tensor cores for it; the error lists the ones that are both."""
    ok = [p for p in among if p in gpu.peak_tflops]
    which = f"one of {', '.join(ok)}" if len(ok) > 1 else ", ".join(ok)
    if precision not in among:
        on = f" on the {gpu.key}" if len(ok) < len(among) else ""
        raise InputError(field, precision, f"{which}{on}")
    if precision not in gpu.peak_tflops:
        raise InputError(field, precision, f"{which} (the {gpu.key} has no {precision} peak)")
