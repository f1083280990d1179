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


def _hybrid(cfg: dict[str, Any], path: Path, ints: _Ints) -> tuple[str, Mamba | None]:
    """Layer pattern and Mamba-2 sizes of a hybrid config (Nemotron-H ``nemotron_h``)."""
    pattern = cfg.get("hybrid_override_pattern") or ""
    blocks = cfg.get("layers_block_type")
    if not pattern and isinstance(blocks, list):
        unknown = [b for b in blocks if not isinstance(b, str) or b not in _BLOCK_TYPES]
        if unknown:
            raise InputError(
                f"{path.name}:layers_block_type", unknown[0], f"one of {', '.join(_BLOCK_TYPES)}"
            )
        pattern = "".join(_BLOCK_TYPES[b] for b in blocks)
    if not isinstance(pattern, str):
        raise InputError(f"{path.name}:hybrid_override_pattern", pattern, "a string of M * - E")
    if "M" not in pattern:
        return pattern, None
    for key in ("mamba_num_heads", "mamba_head_dim"):
        if cfg.get(key) is None:
            raise InputError(f"{path.name}:{key}", None, "required for Mamba blocks (an integer)")
    try:
        mamba = Mamba(
            heads=ints("mamba_num_heads", minimum=1),
            head_dim=ints("mamba_head_dim", minimum=1),
            state=ints("ssm_state_size", "state_size", default=128, minimum=1),
            groups=ints("n_groups", default=1, minimum=1),
            conv_kernel=ints("conv_kernel", default=4, minimum=1),
            chunk=ints("chunk_size", default=128, minimum=1),
        )
    except ValidationError as exc:
        raise InputError(f"{path.name}:mamba", None, f"invalid Mamba sizes ({exc})") from exc
    return pattern, mamba


def _first(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if n in cfg and cfg[n] is not None:
            return cfg[n]
    return default


class _Ints:
    """Integer keys of one config file, each checked and named in the error it raises."""

    def __init__(self, cfg: dict[str, Any], path: Path) -> None:
        self.cfg, self.path = cfg, path

    def __call__(self, *names: str, default: int = 0, minimum: int = 0) -> int:
        for n in names:
            val = self.cfg.get(n)
            if val is None:
                continue
            # JSON true/false are not sizes; 32.0 is accepted as 32
            ok = not isinstance(val, bool) and (
                isinstance(val, int) or (isinstance(val, float) and val.is_integer())
            )
            if not ok or int(val) < minimum:
                raise InputError(f"{self.path.name}:{n}", val, f"an integer of at least {minimum}")
            return int(val)
        return default

    def flag(self, name: str, default: bool) -> bool:
        """A true/false key: JSON true or false only ("false" as a string is an error)."""
        val = self.cfg.get(name)
        if val is None:
            return default
        if not isinstance(val, bool):
            raise InputError(f"{self.path.name}:{name}", val, "true or false (JSON booleans)")
        return val


def _sliding_window(cfg: dict[str, Any], model_type: str, ints: _Ints) -> tuple[int, int | None]:
    """(window, layers using it): from ``layer_types`` (GPT-OSS, Gemma) when listed; with
    ``use_sliding_window: true`` the layers from ``max_window_layers`` on (Qwen2/3); every
    layer for Mistral unless turned off. Qwen's ``sliding_window`` alone is off."""
    window = ints("sliding_window")
    if not window:
        return 0, None
    kinds = cfg.get("layer_types")
    if isinstance(kinds, list):
        return window, sum(1 for k in kinds if k == "sliding_attention")
    use = ints.flag("use_sliding_window", model_type == "mistral")
    if use and model_type != "mistral":
        # Qwen2/3: layers from max_window_layers on use the window
        first = ints("max_window_layers")
        layers = ints("num_hidden_layers", "n_layer", "num_layers")
        return window, max(layers - first, 0) if first else None
    if model_type == "mistral" and use:
        return window, None
    return 0, None


def load_hf_config(path: Path, field: str = "model") -> Model:
    """Map the usual config.json keys (llama, mistral, mixtral, qwen, deepseek, gpt2, opt...)."""
    if not path.is_file():
        raise InputError(
            field, str(path), "no such file; give a catalog model or a config.json path"
        )
    try:
        cfg = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(field, str(path), f"not a readable JSON file ({exc})") from exc
    if not isinstance(cfg, dict):
        raise InputError(field, str(path), "config.json must hold a JSON object")
    text = cfg.get("text_config")
    if isinstance(text, dict) and "hidden_size" not in cfg:
        # a multimodal config (Llama 4): the language model's shape is its text_config
        cfg = {**text, "model_type": text.get("model_type", cfg.get("model_type", ""))}
    ints = _Ints(cfg, path)
    required = (
        ("num_hidden_layers", "n_layer", "num_layers"),
        ("hidden_size", "n_embd", "d_model"),
        ("num_attention_heads", "n_head"),
        ("vocab_size",),
    )
    for names in required:
        if _first(cfg, *names) is None:
            raise InputError(f"{path.name}:{names[0]}", None, "required (a positive integer)")
    layers, hidden, heads, vocab = (ints(*names, minimum=1) for names in required)
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
    experts = ints("num_local_experts", "n_routed_experts", "num_experts", default=1, minimum=1)
    ffn_dense = ints(
        "intermediate_size_mlp",
        "intermediate_size",
        "ffn_dim",
        "n_inner",
        default=4 * hidden,
        minimum=1,
    )
    # Llama 4: intermediate_size is the experts' width, intermediate_size_mlp the dense one
    ffn_moe = ints("moe_intermediate_size", "intermediate_size", default=ffn_dense, minimum=1)
    mla = None
    if ints("kv_lora_rank"):
        mla = MLA(
            q_lora_rank=ints("q_lora_rank"),
            kv_lora_rank=ints("kv_lora_rank"),
            qk_nope_head_dim=ints("qk_nope_head_dim", default=128),
            qk_rope_head_dim=ints("qk_rope_head_dim", default=64),
            v_head_dim=ints("v_head_dim", default=128, minimum=1),
        )
        if mla.qk_nope_head_dim + mla.qk_rope_head_dim == 0:
            raise InputError(
                f"{path.name}:qk_nope_head_dim",
                0,
                "qk_nope_head_dim + qk_rope_head_dim at least 1 (a query/key head dimension)",
            )
    learned = model_type in ("gpt2", "opt", "gpt_bigcode")
    pattern, mamba = _hybrid(cfg, path, ints)
    shared = ints("n_shared_experts")
    if model_type == "llama4_text" and experts > 1:
        shared = 1  # every Llama 4 MoE layer adds one shared expert of the experts' width
    # Nemotron 3 / Megatron spelling, and Qwen2-MoE's (Qwen1.5-MoE: one shared expert of 5632)
    shared_ffn = ints("moe_shared_expert_intermediate_size", "shared_expert_intermediate_size")
    if experts > 1 and shared_ffn:
        # shared experts given with their own width: count them in routed-expert units
        # (Nemotron 3: one shared expert of 2 x the routed width = 2 units)
        shared = max(round(max(shared, 1) * shared_ffn / ffn_moe), 1)
    window, window_layers = _sliding_window(cfg, model_type, ints)
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
        "kv_heads": ints("num_key_value_heads", default=heads, minimum=1),
        "head_dim": ints("head_dim"),
        "ffn_hidden": ffn_moe if experts > 1 else ffn_dense,
        "dense_ffn_hidden": ffn_dense,
        "gated_mlp": gated,
        "vocab": vocab,
        "max_seq": ints("max_position_embeddings", "n_positions", default=2048, minimum=1),
        "position": position,
        "tied_embeddings": ints.flag("tie_word_embeddings", learned),
        "num_experts": experts,
        "top_k": ints("num_experts_per_tok", "experts_per_token", default=1, minimum=1),
        "shared_experts": shared,
        # group-limited routing (DeepSeek-V2/V3): n_group groups, topk_group of them a token
        "route_groups": ints("n_group", default=1, minimum=1),
        "route_topk_groups": ints("topk_group"),
        "first_dense_layers": ints("first_k_dense_replace"),
        "moe_layer_step": ints("interleave_moe_layer_step", default=1, minimum=1),
        "mla": mla,
        "pattern": pattern,
        "mamba": mamba,
        "moe_latent": ints("moe_latent_size"),
        "window": window,
        "window_layers": window_layers,
        "mtp_layers": ints("num_nextn_predict_layers"),
    }
    try:
        return Model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        if err["loc"]:
            loc = ".".join(str(p) for p in err["loc"])
            raise InputError(f"{path.name}:{loc}", err.get("input"), err["msg"]) from exc
        # a whole-model check (e.g. top_k above the expert count): its message names the keys
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise InputError(field, str(path), f"inconsistent shape: {msg}") from exc
