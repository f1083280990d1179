"""The defaults transformers' config classes give the keys a config.json may leave out, by
model_type, and whether a key the file gives as null takes the default too: filled in by
:func:`gpuscale.catalog.hf.load_hf_config` before any size is read, as transformers fills
them in when it builds the config. Step 3.5's and Gemma 4's tables stand beside the rest of
their readers (:mod:`gpuscale.catalog.hf_step`, :mod:`gpuscale.catalog.hf_gemma4`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuscale.catalog.hf_gemma4 import GEMMA4_DEFAULTS, GEMMA4_TYPES
from gpuscale.catalog.hf_step import STEP3P5_DEFAULTS

GEMMA3_DEFAULTS: dict[str, int] = {
    "vocab_size": 262208,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "max_position_embeddings": 131072,
    "sliding_window": 4096,
}
"""Gemma3TextConfig's defaults for the keys Google's multimodal files leave out of their
text_config (gemma-3-4b states no heads, gemma-3-12b no head_dim, none a vocabulary or a
context): transformers fills them in, so gpuscale does too."""
ERNIE_MOE_DEFAULTS: dict[str, int] = {
    "moe_num_experts": 64,
    "moe_k": 6,
    "moe_num_shared_experts": 2,
    "moe_intermediate_size": 1536,
    "moe_layer_start_index": 1,
}
"""Ernie4_5_MoeConfig's defaults for the MoE keys a file may leave out (transformers)."""
EXAONE_MOE_DEFAULTS: dict[str, int] = {
    "intermediate_size": 16384,
    "moe_intermediate_size": 1024,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "num_shared_experts": 1,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
}
"""ExaoneMoeConfig's defaults for the MoE keys a file may leave out (transformers; its
window's, 4096, in :func:`~gpuscale.catalog.hf_window.sliding_window`)."""

DEEPSEEK_V3_DEFAULTS: dict[str, int] = {
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "moe_intermediate_size": 2048,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
}
"""DeepseekV3Config's defaults for the MLA and MoE keys a file may leave out (transformers:
DeepSeek-V3's own sizes); a null q_lora_rank stays null (no query compression)."""
QWEN3_MOE_DEFAULTS: dict[str, int] = {
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 768,
    "decoder_sparse_step": 1,
}
"""Qwen3MoeConfig's defaults for the MoE keys a file may leave out (transformers)."""
CLASS_DEFAULTS: dict[str, tuple[Mapping[str, Any], bool]] = {
    # a key given as null stays null, and is read as no value (Gemma 3's sliding_window
    # null: no window; a required size null: an error naming it)
    "gemma3": (GEMMA3_DEFAULTS, False),
    "gemma3_text": (GEMMA3_DEFAULTS, False),
    "exaone_moe": (EXAONE_MOE_DEFAULTS, False),
    "step3p5": (STEP3P5_DEFAULTS, False),
    "deepseek_v3": (DEEPSEEK_V3_DEFAULTS, False),
    "qwen3_moe": (QWEN3_MOE_DEFAULTS, False),
    # every key given as null is read as left out, so the class's default fills it
    "ernie4_5_moe": (ERNIE_MOE_DEFAULTS, True),
    **dict.fromkeys(GEMMA4_TYPES, (GEMMA4_DEFAULTS, True)),
}
"""model_type -> (its config class's defaults, whether a key the file gives as null takes
the default). A model_type not listed takes no defaults here: its keys' defaults are the
reader's own (:class:`~gpuscale.catalog.hf_values.Ints`), which reads a null as no value."""


def with_class_defaults(cfg: dict[str, Any], model_type: str) -> dict[str, Any]:
    """``cfg`` with its model_type's config-class defaults (:data:`CLASS_DEFAULTS`) for the
    keys it leaves out; where nulls take the default, every key given as null is dropped
    first."""
    entry = CLASS_DEFAULTS.get(model_type)
    if entry is None:
        return cfg
    defaults, nulls_take_default = entry
    if nulls_take_default:
        cfg = {k: v for k, v in cfg.items() if v is not None}
    return {**defaults, **cfg}
