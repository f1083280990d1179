"""The hardware and model catalog: YAML data files with a ``source:`` per entry.

Adding a GPU, a system or a model is a data change in ``catalog/data/*.yaml``. Lookups
accept the catalog key (lower-case with dashes: ``a100-sxm-80gb``, ``llama3-70b``) or any
alias (the names used in published results, e.g. ``A100-SXM4-80GB``), case-insensitively;
a GPU also by a description that names exactly one part ("NVIDIA H100 80GB HBM3").
A model can also be a local Hugging Face ``config.json`` path (see :mod:`.hf`).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import ValidationError

from gpuscale.catalog.schema import GPU, PRECISIONS, Model, System
from gpuscale.errors import InputError, unknown

__all__ = [
    "GPU",
    "PRECISIONS",
    "Model",
    "System",
    "get_gpu",
    "get_model",
    "get_system",
    "gpus",
    "models",
    "system_for_gpu",
    "systems",
]

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
    return _load("gpus.yaml", GPU)


@cache
def systems() -> dict[str, System]:
    return _load("systems.yaml", System)


@cache
def models() -> dict[str, Model]:
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


def _lookup(name: str, entries: dict[str, E], index: dict[str, str], field: str) -> E:
    key = index.get(_norm(name)) or index.get(_compact(name))
    if key is None:
        raise unknown(field, name, entries)
    return entries[key]


def get_gpu(name: str, field: str = "gpu") -> GPU:
    """A catalog GPU by key or alias, else by description (see :func:`_gpu_by_description`)."""
    try:
        return _lookup(name, gpus(), _gpu_index(), field)
    except InputError:
        key = _gpu_by_description(name)
        if key is None:
            raise
        return gpus()[key]


_FORMS = ("pcie", "nvl")


def _gpu_by_description(name: str) -> str | None:
    """The one catalog GPU a free-text name describes, or None when it is not exactly one.

    Published tables write the same part many ways ("NVIDIA H100 80GB HBM3", "H100 SXM5",
    "A100-SXM4-80GB (DGX A100)"). The name must contain a family token (the first part of a
    catalog key: h100, a100, mi300x, ...); a form factor (PCIe, NVL; SXM otherwise) and a
    memory size ("80GB", "80 GB") narrow it; what is left must be a single entry or the
    family's own alias (``H100`` is the SXM5 80 GB part).
    """
    tokens = [t for t in re.split(r"[^a-z0-9]+", name.lower()) if t]
    families = {k.split("-")[0] for k in gpus()} - {"rtx"}  # a product line, not a part
    family = next((t for t in tokens if t in families), None)
    if family is None:
        return None
    cands = [k for k in gpus() if k.split("-")[0] == family]
    sizes = [int(m.group(1)) for m in re.finditer(r"(\d+) ?gb?\b", name.lower())]
    if sizes:
        gap = {k: abs(gpus()[k].hbm_gb - sizes[0]) for k in cands}
        cands = [k for k in cands if gap[k] <= 0.1 * sizes[0] and gap[k] == min(gap.values())]
    form = next((t for t in tokens if t in _FORMS), None)
    if form is not None:
        cands = [k for k in cands if form in k]
    else:  # SXM/OAM unless the name says PCIe or NVL
        cands = [k for k in cands if not any(f in k for f in _FORMS)] or cands
    if len(cands) == 1:
        return cands[0]
    default = _gpu_index().get(family)
    return default if default in cands else None


def get_system(name: str, field: str = "system") -> System:
    return _lookup(name, systems(), _system_index(), field)


def get_model(name: str, field: str = "model") -> Model:
    """A catalog model by key/alias, or a local Hugging Face ``config.json`` path."""
    if Path(name).is_dir():
        raise InputError(field, name, "a directory; give a catalog model or a config.json file")
    if name.endswith(".json") or Path(name).is_file():
        from gpuscale.catalog.hf import load_hf_config

        return load_hf_config(Path(name), field)
    try:
        return _lookup(name, models(), _model_index(), field)
    except InputError:
        # a Hugging Face repository id names the same model: "meta-llama/Llama-2-7b-hf",
        # "mistralai/Mixtral-8x7B-v0.1", "Qwen/Qwen2.5-7B-Instruct" (a tuned variant has the
        # base model's shape)
        bare = _HF_VARIANT.sub("", name.rsplit("/", 1)[-1])
        if bare and bare != name:
            try:
                return _lookup(bare, models(), _model_index(), field)
            except InputError:
                pass
        raise


_HF_VARIANT = re.compile(r"([-_ ](hf|instruct|chat|base|it|v\d+(\.\d+)+))+$", re.IGNORECASE)
"""Suffixes of a Hugging Face repository name that do not change the model's shape."""


def system_for_gpu(gpu: GPU) -> System:
    """The catalog system that houses ``gpu`` (its reference node or rack)."""
    for s in systems().values():
        if s.gpu == gpu.key:
            return s
    # GPUs without a reference chassis of their own: an 8-GPU PCIe server of their generation
    generic = "pcie-8gpu-gen5" if gpu.pcie_gen >= 5 else "pcie-8gpu-gen4"
    return systems()[generic]


def check_precision(gpu: GPU, precision: str, field: str = "precision") -> None:
    if precision not in PRECISIONS:
        raise InputError(field, precision, f"one of {', '.join(PRECISIONS)}")
    if precision not in gpu.peak_tflops:
        raise InputError(field, precision, f"{gpu.key} supports {', '.join(gpu.peak_tflops)}")
