"""Reading a config.json's sliding windows: which attention layers see only the last
``sliding_window`` tokens (or, in Llama 4, attend within chunks), as the model's code reads
the keys, and where the windowed layers (and MTP layers) have a shape of their own (Step
3.5); used by :func:`gpuscale.catalog.hf.load_hf_config`."""

from __future__ import annotations

from typing import Any

from gpuscale.catalog.hf_layout import compressed_attention
from gpuscale.catalog.hf_values import Ints, where
from gpuscale.catalog.model_parts import WindowAttention
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
    layer for Mistral, Mixtral, Phi-3 and StarCoder2 (:data:`EVERY_LAYER`) unless turned
    off. Qwen's ``sliding_window`` alone is off. K-EXAONE
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
    every_layer = model_type in EVERY_LAYER
    use = ints.flag("use_sliding_window", every_layer)
    if use and not every_layer:
        # Qwen2/3: layers from max_window_layers on use the window
        first = ints("max_window_layers")
        return window, max(layers - first, 0) if first else None
    if every_layer and use:
        return window, None
    return 0, None


EVERY_LAYER = ("mistral", "mixtral", "phi3", "starcoder2")
"""model_types whose attention applies ``sliding_window`` in every layer when the file sets
it (transformers' MistralAttention, MixtralAttention, Phi3Attention, Starcoder2Attention:
Phi-3-mini-4k's 2,047 tokens)."""


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
    """K-EXAONE's ``mtp_layer_types``: its MTP depth read as attending to the whole sequence
    (``full_attention``, K-EXAONE 236B-A23B's); a windowed one, with a window of its own in
    ``mtp_sliding_windows``, is refused rather than priced as full attention."""
    kinds = cfg.get("mtp_layer_types")
    if kinds is None:
        return
    if not isinstance(kinds, list) or any(k != "full_attention" for k in kinds):
        raise InputError(
            f"{where(ints.path)}:mtp_layer_types",
            str(kinds)[:60],
            "full_attention for every MTP layer: K-EXAONE's windowed MTP layers "
            "(mtp_sliding_windows) are not read",
        )


def mtp_slides(cfg: dict[str, Any], ints: Ints) -> bool:
    """Whether Step 3.5's MTP layers are sliding-window ones (``mtp_layer_types`` all
    ``sliding_attention``; all ``full_attention``, or no list: no). One kind for every MTP
    layer: gpuscale prices the depths alike."""
    kinds = cfg.get("mtp_layer_types")
    if kinds is None:
        return False
    if not isinstance(kinds, list) or len({*kinds}) != 1 or kinds[0] not in WINDOW_KINDS:
        raise InputError(
            f"{where(ints.path)}:mtp_layer_types",
            str(kinds)[:60],
            "one kind for every MTP layer: full_attention or sliding_attention",
        )
    return bool(kinds[0] == "sliding_attention")


_OTHER_KEYS = {
    "heads": ("num_attention_heads",),
    "kv_heads": ("num_attention_groups", "num_key_value_heads"),
    "head_dim": ("head_dim", "true_head_dim"),
}
"""``attention_other_setting``'s keys of each WindowAttention size, first the one read."""


def window_attention(cfg: dict[str, Any], ints: Ints, windowed: int) -> WindowAttention | None:
    """Step 3.5's ``attention_other_setting``: the sliding layers' query heads
    (``num_attention_heads``), KV heads (``num_attention_groups``) and ``head_dim``, as
    vLLM's Step3p5DecoderLayer, Megatron-Bridge's Step35Bridge and llama.cpp's converter read
    them (transformers reads the heads alone); a size it leaves out is the model's. None
    without the setting, or without sliding layers for it to shape; sliding layers whose
    config gives no ``sliding_window`` (full attention with the other shape) are refused."""
    other = cfg.get("attention_other_setting")
    field = f"{where(ints.path)}:attention_other_setting"
    if other is None:
        return None
    if not isinstance(other, dict):
        raise InputError(field, str(other)[:60], "an object: num_attention_heads, head_dim...")
    kind = other.get("attention_type", "sliding_attention")
    if kind != "sliding_attention":
        raise InputError(
            f"{field}.attention_type", kind, "sliding_attention (the windowed layers' shape)"
        )
    sizes: dict[str, int] = {}
    found: dict[str, str] = {}
    for size, keys in _OTHER_KEYS.items():
        key = next((k for k in keys if other.get(k) is not None), keys[0])
        val = other.get(key)
        if val is None:
            continue
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise InputError(f"{field}.{key}", val, "an integer of at least 1")
        sizes[size], found[size] = val, key
    kinds = cfg.get("layer_types")
    if not windowed:
        if isinstance(kinds, list) and "sliding_attention" in kinds:
            raise InputError(
                f"{where(ints.path)}:sliding_window",
                None,
                "a window for the sliding_attention layers attention_other_setting shapes "
                "(full-attention layers of another shape are not modelled)",
            )
        return None
    heads = sizes.get("heads", ints("num_attention_heads"))
    kv = sizes.get("kv_heads", 0)
    if kv and heads % kv:
        raise InputError(
            f"{field}.{found['kv_heads']}",
            kv,
            f"a divisor of the sliding layers' {heads} query heads (grouped-query attention)",
        )
    return WindowAttention(**sizes)


def attention_windows(
    cfg: dict[str, Any], ints: Ints, model_type: str, layers: int, mtp_layers: int
) -> dict[str, Any]:
    """The Model's window fields: the sliding window (:func:`sliding_window`) and the shape
    of its layers (:func:`window_attention`), else Llama 4's chunks (:func:`_chunk_layers`);
    DeepSeek-V4's window, compressors and indexer belong to its own attention
    (:func:`~gpuscale.catalog.hf_layout.compressed_attention`: ``compressed``, ``sparse``,
    ``residual_streams``)."""
    fields: dict[str, Any] = {"compressed": None, "residual_streams": 1}
    if model_type == "deepseek_v4":
        attn, sparse, streams = compressed_attention(cfg, ints.path, ints, layers, mtp_layers)
        fields = {"compressed": attn, "sparse": sparse, "residual_streams": streams}
        window, window_layers = 0, None
    else:
        window, window_layers = sliding_window(cfg, model_type, ints)
    windowed = layers if window and window_layers is None else int(window_layers or 0)
    fields["window_attn"] = window_attention(cfg, ints, windowed)
    window_kind = "sliding"
    chunk = ints("attention_chunk_size")
    if chunk and not window:
        window, window_kind = chunk, "chunked"
        window_layers = _chunk_layers(cfg, ints, layers)
    return {**fields, "window": window, "window_layers": window_layers, "window_kind": window_kind}


def _chunk_layers(cfg: dict[str, Any], ints: Ints, layers: int) -> int:
    """Llama 4's layers that attend within ``attention_chunk_size`` chunks: the RoPE layers
    (``no_rope_layers`` 1), or without that list all but every ``no_rope_layer_interval``-th
    layer (default 4), which attends globally."""
    every = ints("no_rope_layer_interval", default=4, minimum=1)
    rope = cfg.get("no_rope_layers")
    if rope is None or rope == []:  # an empty list is Llama4TextConfig's default too
        return sum(1 for i in range(layers) if (i + 1) % every)
    if (
        isinstance(rope, list)
        and len(rope) == layers
        and all(type(x) is int and x in (0, 1) for x in rope)
    ):
        return sum(rope)
    raise InputError(
        f"{where(ints.path)}:no_rope_layers", rope, f"a list of {layers} zeros and ones"
    )
