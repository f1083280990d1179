"""Read a local Hugging Face ``config.json`` into a catalog :class:`Model` (no hub access)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuscale.catalog.schema import MLA, Mamba, Model
from gpuscale.errors import InputError

_GATED_ACTS = {"silu", "swiglu", "gelu_pytorch_tanh_gated", "geglu"}
_BLOCK_TYPES = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
"""Nemotron-H ``layers_block_type`` names and their hybrid-pattern letters."""


def _hybrid(cfg: dict[str, Any], path: Path) -> tuple[str, Mamba | None]:
    """Layer pattern and Mamba-2 sizes of a hybrid config (Nemotron-H ``nemotron_h``)."""
    pattern = cfg.get("hybrid_override_pattern") or ""
    blocks = cfg.get("layers_block_type")
    if not pattern and isinstance(blocks, list):
        unknown = [b for b in blocks if b not in _BLOCK_TYPES]
        if unknown:
            raise InputError(
                f"{path.name}:layers_block_type", unknown[0], f"one of {', '.join(_BLOCK_TYPES)}"
            )
        pattern = "".join(_BLOCK_TYPES[b] for b in blocks)
    if not isinstance(pattern, str):
        raise InputError(f"{path.name}:hybrid_override_pattern", pattern, "a string of M * - E")
    if "M" not in pattern:
        return pattern, None
    try:
        mamba = Mamba(
            heads=int(cfg["mamba_num_heads"]),
            head_dim=int(cfg["mamba_head_dim"]),
            state=int(_first(cfg, "ssm_state_size", "state_size", default=128)),
            groups=int(_first(cfg, "n_groups", default=1)),
            conv_kernel=int(_first(cfg, "conv_kernel", default=4)),
            chunk=int(_first(cfg, "chunk_size", default=128)),
        )
    except KeyError as exc:
        raise InputError(
            f"{path.name}:{exc.args[0]}", None, "required for Mamba blocks (a positive integer)"
        ) from exc
    except (TypeError, ValueError, ValidationError) as exc:
        raise InputError(f"{path.name}:mamba", None, f"invalid Mamba sizes ({exc})") from exc
    return pattern, mamba


def _first(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if n in cfg and cfg[n] is not None:
            return cfg[n]
    return default


def _sliding_window(cfg: dict[str, Any], model_type: str) -> tuple[int, int | None]:
    """(window, layers using it): from ``layer_types`` (GPT-OSS, Gemma) when listed; with
    ``use_sliding_window: true`` the layers from ``max_window_layers`` on (Qwen2/3); every
    layer for Mistral unless turned off. Qwen's ``sliding_window`` alone is off."""
    window = int(cfg.get("sliding_window") or 0)
    if not window:
        return 0, None
    kinds = cfg.get("layer_types")
    if isinstance(kinds, list):
        return window, sum(1 for k in kinds if k == "sliding_attention")
    if cfg.get("use_sliding_window") is True:
        # Qwen2/3: layers from max_window_layers on use the window
        first = int(cfg.get("max_window_layers") or 0)
        layers = int(_first(cfg, "num_hidden_layers", "n_layer", "num_layers", default=0))
        return window, max(layers - first, 0) if first else None
    if model_type == "mistral" and cfg.get("use_sliding_window") is not False:
        return window, None
    return 0, None


def load_hf_config(path: Path, field: str = "model") -> Model:
    """Map the usual config.json keys (llama, mistral, mixtral, qwen, deepseek, gpt2, opt...)."""
    if not path.is_file():
        raise InputError(
            field, str(path), "no such file; give a catalog model or a config.json path"
        )
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(field, str(path), f"not a readable JSON file ({exc})") from exc
    if not isinstance(cfg, dict):
        raise InputError(field, str(path), "config.json must hold a JSON object")
    text = cfg.get("text_config")
    if isinstance(text, dict) and "hidden_size" not in cfg:
        # a multimodal config (Llama 4): the language model's shape is its text_config
        cfg = {**text, "model_type": text.get("model_type", cfg.get("model_type", ""))}
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model")
    heads = _first(cfg, "num_attention_heads", "n_head")
    vocab = _first(cfg, "vocab_size")
    for key, val in (
        ("num_hidden_layers", layers),
        ("hidden_size", hidden),
        ("num_attention_heads", heads),
        ("vocab_size", vocab),
    ):
        if not isinstance(val, int) or val <= 0:
            raise InputError(f"{path.name}:{key}", val, "a positive integer is required")
    act = str(
        _first(cfg, "hidden_act", "activation_function", "mlp_hidden_act", default="gelu")
    ).lower()
    model_type = str(cfg.get("model_type", ""))
    gated = act in _GATED_ACTS or model_type in (
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen3",
        "qwen3_moe",
        "deepseek_v3",
        "gpt_oss",
    )
    experts = int(_first(cfg, "num_local_experts", "n_routed_experts", "num_experts", default=1))
    ffn_dense = _first(
        cfg, "intermediate_size_mlp", "intermediate_size", "ffn_dim", "n_inner", default=4 * hidden
    )
    # Llama 4: intermediate_size is the experts' width, intermediate_size_mlp the dense one
    ffn_moe = _first(cfg, "moe_intermediate_size", "intermediate_size", default=ffn_dense)
    mla = None
    if cfg.get("kv_lora_rank"):
        mla = MLA(
            q_lora_rank=int(cfg.get("q_lora_rank") or 0),
            kv_lora_rank=int(cfg["kv_lora_rank"]),
            qk_nope_head_dim=int(cfg.get("qk_nope_head_dim", 128)),
            qk_rope_head_dim=int(cfg.get("qk_rope_head_dim", 64)),
            v_head_dim=int(cfg.get("v_head_dim", 128)),
        )
    learned = model_type in ("gpt2", "opt", "gpt_bigcode")
    pattern, mamba = _hybrid(cfg, path)
    shared = int(_first(cfg, "n_shared_experts", default=0) or 0)
    if model_type == "llama4_text" and experts > 1:
        shared = 1  # every Llama 4 MoE layer adds one shared expert of the experts' width
    shared_ffn = cfg.get("moe_shared_expert_intermediate_size")
    if experts > 1 and shared_ffn:
        # shared experts given with their own width: count them in routed-expert units
        # (Nemotron 3: one shared expert of 2 x the routed width = 2 units)
        shared = max(round(max(shared, 1) * int(shared_ffn) / int(ffn_moe)), 1)
    window, window_layers = _sliding_window(cfg, model_type)
    position = "learned" if learned else ("alibi" if model_type == "bloom" else "rope")
    if model_type == "nemotron_h":
        position = "none"  # Nemotron-H attention layers use no position embedding
    body: dict[str, Any] = {
        "key": path.stem,
        "name": f"{model_type or 'model'} from {path}",
        "source": f"local Hugging Face config {path}",
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "kv_heads": int(_first(cfg, "num_key_value_heads", default=heads)),
        "head_dim": int(_first(cfg, "head_dim", default=0) or 0),
        "ffn_hidden": int(ffn_moe if experts > 1 else ffn_dense),
        "dense_ffn_hidden": int(ffn_dense),
        "gated_mlp": gated,
        "vocab": vocab,
        "max_seq": int(_first(cfg, "max_position_embeddings", "n_positions", default=2048)),
        "position": position,
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", learned)),
        "num_experts": experts,
        "top_k": int(_first(cfg, "num_experts_per_tok", "experts_per_token", default=1)),
        "shared_experts": shared,
        "first_dense_layers": int(_first(cfg, "first_k_dense_replace", default=0) or 0),
        "moe_layer_step": int(_first(cfg, "interleave_moe_layer_step", default=1) or 1),
        "mla": mla,
        "pattern": pattern,
        "mamba": mamba,
        "moe_latent": int(_first(cfg, "moe_latent_size", default=0) or 0),
        "window": window,
        "window_layers": window_layers,
        "mtp_layers": int(_first(cfg, "num_nextn_predict_layers", default=0) or 0),
    }
    try:
        return Model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "config"
        raise InputError(f"{path.name}:{loc}", err.get("input"), err["msg"]) from exc
