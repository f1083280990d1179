"""Google's Gemma 4 config.json (model_type ``gemma4``, its ``text_config``, or
``gemma4_text``) as transformers' Gemma4TextConfig and Gemma4TextDecoderLayer read it
(https://github.com/huggingface/transformers/blob/008e574391258935f3ecc3035c882e73bbcac419/src/transformers/models/gemma4/configuration_gemma4.py
and modeling_gemma4.py): the config class's defaults, its full-attention layers' own head
size (``global_head_dim``) and KV heads (``num_global_key_value_heads``, with
``attention_k_eq_v``: K and V from one projection), and the MoE block beside its dense MLP
(``enable_moe_block``). Only the text model: the vision and audio towers are not priced.
The small checkpoints' per-layer embeddings and shared KV layers are refused. Used by
:func:`gpuscale.catalog.hf.load_hf_config`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuscale.catalog.hf_values import Ints, where
from gpuscale.errors import InputError

GEMMA4_TYPES = ("gemma4", "gemma4_text")

GEMMA4_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_144,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 30,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "max_position_embeddings": 131_072,
    "sliding_window": 512,
    "hidden_size_per_layer_input": 256,
    "tie_word_embeddings": True,
}
"""Gemma4TextConfig's defaults for the keys a file may leave out or give as null
(``global_head_dim``: 512, read below)."""


def _full_kinds(layers: int) -> list[str]:
    """Gemma4TextConfig's ``layer_types`` without a list: every 6th layer full attention,
    and the last one whatever its place."""
    kinds = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(layers)]
    if kinds:
        kinds[-1] = "full_attention"
    return kinds


def gemma4_config(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    """A Gemma 4 text config (its :data:`GEMMA4_DEFAULTS` filled in, by
    :func:`~gpuscale.catalog.hf_defaults.with_class_defaults`) in the keys the reader
    knows: the model's attention shape is its full-attention layers' (``global_head_dim``;
    ``num_global_key_value_heads`` where ``attention_k_eq_v`` is on, as Gemma4TextConfig
    applies it), the sliding layers' own in ``attention_other_setting`` (read by
    :func:`~gpuscale.catalog.hf_window.window_attention`); with ``enable_moe_block`` every
    layer a MoE of ``num_experts`` experts of ``moe_intermediate_size``, top
    ``top_k_experts``, its dense MLP (``intermediate_size``) beside them read as a shared
    expert of that width (it runs on every token, as DeepSeek's does); without it the
    expert keys are ignored, as the model's code ignores them."""
    ints = Ints(cfg, path)
    if ints("hidden_size_per_layer_input"):
        raise InputError(
            f"{where(path)}:hidden_size_per_layer_input",
            cfg["hidden_size_per_layer_input"],
            "0: Gemma 4's per-layer embeddings (E2B, E4B; Gemma4TextConfig's default 256) "
            "are not modelled",
        )
    if ints("num_kv_shared_layers"):
        raise InputError(
            f"{where(path)}:num_kv_shared_layers",
            cfg["num_kv_shared_layers"],
            "0: layers that reuse an earlier layer's K and V are not modelled",
        )
    if cfg.get("use_bidirectional_attention") == "all":
        raise InputError(
            f"{where(path)}:use_bidirectional_attention",
            "all",
            "null or vision: bidirectional attention for text tokens is not modelled",
        )
    layers = ints("num_hidden_layers", minimum=1)
    kinds = cfg.get("layer_types")
    if kinds is None:
        kinds = _full_kinds(layers)
    elif isinstance(kinds, list) and kinds:
        kinds = [*kinds[:-1], "full_attention"]  # Gemma4TextConfig forces the last one full
    k_eq_v = ints.flag("attention_k_eq_v", False)
    sliding = {
        "num_attention_heads": ints("num_attention_heads", minimum=1),
        "num_key_value_heads": ints("num_key_value_heads", minimum=1),
        "head_dim": ints("head_dim", minimum=1),
    }
    full_kv = ints("num_global_key_value_heads") if k_eq_v else 0
    out = {
        **cfg,
        "layer_types": kinds,
        "head_dim": ints("global_head_dim", default=512) or sliding["head_dim"],
        "num_key_value_heads": full_kv or sliding["num_key_value_heads"],
        "attention_other_setting": sliding,
    }
    for key in ("num_experts", "moe_intermediate_size", "top_k_experts"):
        out.pop(key, None)
    if ints.flag("enable_moe_block", False):
        out |= {
            "num_experts": ints("num_experts", minimum=1),
            "num_experts_per_tok": ints("top_k_experts", minimum=1),
            "moe_intermediate_size": ints("moe_intermediate_size", minimum=1),
            "shared_expert_intermediate_size": ints("intermediate_size", minimum=1),
        }
    return out
