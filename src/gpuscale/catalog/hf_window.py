"""Reading a config.json's sliding windows: which attention layers see only the last
``sliding_window`` tokens, as the model's code reads the keys (used by
:func:`gpuscale.catalog.hf.load_hf_config`)."""

from __future__ import annotations

from typing import Any

from gpuscale.catalog.hf_values import Ints, where
from gpuscale.errors import InputError

WINDOW_KINDS = ("full_attention", "sliding_attention")
"""The ``layer_types`` gpuscale prices beside a sliding window (transformers knows more:
chunked_attention, hybrid_sliding, conv...)."""


def _window_kinds(cfg: dict[str, Any], ints: Ints, layers: int) -> list[str] | None:
    """``layer_types`` checked to be one of :data:`WINDOW_KINDS` per layer; None where the
    file gives no list."""
    kinds = cfg.get("layer_types")
    if not isinstance(kinds, list):
        return None
    field = f"{where(ints.path)}:layer_types"
    if len(kinds) != layers:
        raise InputError(field, f"{len(kinds)} entries", f"one per layer: {layers}")
    unknown = sorted({str(k) for k in kinds if k not in WINDOW_KINDS})
    if unknown:
        raise InputError(
            field, ", ".join(unknown), f"layers gpuscale models: {', '.join(WINDOW_KINDS)}"
        )
    return [str(k) for k in kinds]


def sliding_window(cfg: dict[str, Any], model_type: str, ints: Ints) -> tuple[int, int | None]:
    """(window, layers using it): from ``layer_types`` (GPT-OSS, Gemma) when listed, else
    Gemma 2's alternation, Gemma 3's and EXAONE-MoE's ``sliding_window_pattern``; with
    ``use_sliding_window: true`` the layers from ``max_window_layers`` on (Qwen2/3); every
    layer for Mistral unless turned off. Qwen's ``sliding_window`` alone is off. K-EXAONE
    (``exaone_moe``) may also list a window per layer, ``sliding_windows``."""
    layers = ints("num_hidden_layers", "n_layer", "num_layers")
    if model_type == "exaone_moe":
        _mtp_full_attention(cfg, ints)
        if cfg.get("sliding_windows") is not None:
            return _per_layer_windows(cfg, ints, layers)
    # ExaoneMoeConfig's sliding_window is 4096 where the file leaves it out (null: none)
    absent = model_type == "exaone_moe" and "sliding_window" not in cfg
    window = ints("sliding_window", default=4096 if absent else 0)
    if not window:
        return 0, None
    kinds = _window_kinds(cfg, ints, layers)
    if kinds is not None:
        return window, kinds.count("sliding_attention")
    if model_type == "gemma2":
        # Gemma2Config without layer_types: layer i slides when (i + 1) % 2, every other one
        return window, (layers + 1) // 2
    if model_type in ("gemma3", "gemma3_text", "exaone_moe"):
        # Gemma3TextConfig, ExaoneMoeConfig: every sliding_window_pattern-th layer is global,
        # the rest slide (default 6; EXAONE-MoE 4, "LLLG")
        pattern_default = 4 if model_type == "exaone_moe" else 6
        every = ints("sliding_window_pattern", default=pattern_default, minimum=1)
        return window, layers - layers // every
    use = ints.flag("use_sliding_window", model_type == "mistral")
    if use and model_type != "mistral":
        # Qwen2/3: layers from max_window_layers on use the window
        first = ints("max_window_layers")
        return window, max(layers - first, 0) if first else None
    if model_type == "mistral" and use:
        return window, None
    return 0, None


def _per_layer_windows(cfg: dict[str, Any], ints: Ints, layers: int) -> tuple[int, int | None]:
    """K-EXAONE's ``sliding_windows``: a window per layer, 0 for a full-attention one, as vLLM
    and Megatron-Bridge read it (transformers reads ``sliding_window`` and ``layer_types``,
    which the list must agree with). gpuscale models one window for all the sliding
    layers; a list of different sizes is refused."""
    field = f"{where(ints.path)}:sliding_windows"
    listed = cfg["sliding_windows"]
    if not isinstance(listed, list) or len(listed) != layers:
        got = f"{len(listed)} entries" if isinstance(listed, list) else str(listed)[:60]
        raise InputError(field, got, f"a list of {layers} windows, 0 for a full-attention layer")
    bad = [w for w in listed if type(w) is not int or w < 0]
    if bad:
        raise InputError(field, bad[0], "a window of 0 or more tokens (0: full attention)")
    kinds = _window_kinds(cfg, ints, layers)
    for i, (kind, w) in enumerate(zip(kinds or [], listed, strict=False)):
        if (w > 0) != (kind == "sliding_attention"):
            raise InputError(
                field,
                f"{w} at layer {i}",
                f"a window above 0 exactly where layer_types is sliding_attention ({kind})",
            )
    sizes = sorted({w for w in listed if w})
    if not sizes:
        return 0, None
    scalar = ints("sliding_window")
    if len(sizes) > 1 or scalar not in (0, sizes[0]):
        said = f" and sliding_window {scalar}" if scalar else ""
        raise InputError(
            field,
            ", ".join(map(str, sizes)) + said,
            "one window for every sliding layer: windows that differ are not modelled",
        )
    return sizes[0], layers - listed.count(0)


def _mtp_full_attention(cfg: dict[str, Any], ints: Ints) -> None:
    """K-EXAONE's ``mtp_layer_types``: gpuscale's MTP depth attends to the whole sequence
    (``full_attention``, K-EXAONE 236B-A23B's); a windowed one is refused rather than
    priced as full attention."""
    kinds = cfg.get("mtp_layer_types")
    if kinds is None:
        return
    if not isinstance(kinds, list) or any(k != "full_attention" for k in kinds):
        raise InputError(
            f"{where(ints.path)}:mtp_layer_types",
            str(kinds)[:60],
            "full_attention for every MTP layer: a windowed MTP layer is not modelled",
        )
