"""Read a local Hugging Face ``config.json`` into a catalog :class:`Model` (no hub access)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuscale.catalog.hf_defaults import with_class_defaults
from gpuscale.catalog.hf_gemma4 import GEMMA4_TYPES, gemma4_config
from gpuscale.catalog.hf_layout import (
    GDN_TYPES,
    _hybrid,
    _moe_layout,
    _tied,
    gated_deltanet_layout,
    granite_hybrid_layout,
    sparse_attention,
)
from gpuscale.catalog.hf_mlp import gated_mlp, mlp_widths, routed_top_k, shared_experts
from gpuscale.catalog.hf_step import mtp_blocks, step3p5_config
from gpuscale.catalog.hf_values import FIELD_KEYS, Ints, first_of, snapshot_name, where
from gpuscale.catalog.hf_window import attention_windows, mtp_slides
from gpuscale.catalog.model_parts import MLA, Mamba
from gpuscale.catalog.schema import Model
from gpuscale.errors import InputError
from gpuscale.spec.files import read_json

UNREAD_TYPES = {
    "jamba": "Jamba's interleaved attention, Mamba and MoE periods are not read; the "
    "Nemotron-H hybrids (hybrid_override_pattern) are",
    "mamba": "a pure Mamba-1 model has no attention to read; the Nemotron-H hybrids are",
    "mamba2": "a pure Mamba-2 model is not read; the Nemotron-H hybrids are",
    "falcon_mamba": "a pure Mamba model has no attention to read",
    "minimax": "MiniMax's lightning (linear) attention layers are not modelled",
    "kimi_linear": "Kimi Linear's KDA (linear attention) layers are not modelled",
    "falcon_h1": "Falcon-H1 runs attention and a Mamba-2 mixer side by side in every layer "
    "(a parallel hybrid), which is not modelled; the Nemotron-H and Granite 4.0-H hybrids "
    "(one mixer a layer) are",
    "bamba": "Bamba's Mamba-2 layers (attn_layer_indices) are not read; the Nemotron-H and "
    "Granite 4.0-H hybrids are",
    "zamba": "Zamba's shared attention blocks are not modelled",
    "zamba2": "Zamba2's shared attention blocks are not modelled",
    "lfm2": "LFM2's short-convolution layers are not modelled",
    "lfm2_moe": "LFM2's short-convolution layers are not modelled",
    "recurrent_gemma": "RecurrentGemma's recurrent (RG-LRU) blocks are not modelled",
    "rwkv": "RWKV's recurrence has no attention to read",
    "gemma3n": "Gemma 3n's per-layer embeddings, AltUp and LAuReL blocks are not modelled",
    "gemma3n_text": "Gemma 3n's per-layer embeddings, AltUp and LAuReL blocks are not modelled",
    "gemma4_unified": "Gemma 4 12B's unified multimodal layout (gemma4_unified) is not read; "
    "the Gemma 4 31B and 26B-A4B text models (gemma4, gemma4_text) are",
    "kimi_k3": "Kimi K3's KDA linear attention, latent MoE and attention-residual banks are "
    "not modelled",
}
"""model_types whose layer layout config.json gives in keys gpuscale does not read: refused
by name rather than read as a transformer of the wrong shape."""


def _refuse_unread(path: Path, model_type: object) -> None:
    """An error naming a model_type whose layers gpuscale does not model (UNREAD_TYPES)."""
    if isinstance(model_type, str) and model_type in UNREAD_TYPES:
        raise InputError(
            f"{where(path)}:model_type",
            model_type,
            f"a model_type gpuscale reads: {UNREAD_TYPES[model_type]}",
        )


def _read_config(path: Path, field: str) -> dict[str, Any]:
    """The JSON object of ``path``; for a multimodal config (Llama 4, Gemma 3: no
    ``hidden_size`` of its own) the language model's shape is its ``text_config``, with the
    keys the whole model states once (``tie_word_embeddings``) and its model_type (the
    whole model's where the text_config names none). A whole model whose model_type is in
    :data:`UNREAD_TYPES` is refused by that name."""
    cfg = read_json(path, field, "a catalog model or a config.json path")
    if not isinstance(cfg, dict):
        raise InputError(field, str(path), "config.json must hold a JSON object")
    _refuse_unread(path, cfg.get("model_type"))  # a multimodal wrapper's, then its text's
    text = cfg.get("text_config")
    if not isinstance(text, dict) or "hidden_size" in cfg:
        return cfg
    top = {k: cfg[k] for k in ("tie_word_embeddings",) if k in cfg}
    return {**top, **text, "model_type": text.get("model_type", cfg.get("model_type", ""))}


def _supported_type(cfg: dict[str, Any], path: Path) -> str:
    """The config's model_type (a name; empty where the file gives none), refusing the
    layers gpuscale does not model rather than reading them as softmax attention: the
    model_types of :data:`UNREAD_TYPES`, ``linear_attention`` layers other than Gated
    DeltaNet's (Qwen3-Next, with its ``linear_*`` sizes) and Granite 4.0-H's Mamba-2 ones,
    HunYuan's cross-layer attention (``use_cla``: layers share the K and V of a
    neighbour) and MiniMax-01's lightning attention (MiniMaxM2DecoderLayer's
    ``attn_type_list``: 1 is softmax attention, 0 lightning)."""
    model_type = cfg.get("model_type", "")
    if not isinstance(model_type, str):
        raise InputError(f"{where(path)}:model_type", str(model_type)[:60], "a name (llama, qwen3)")
    _refuse_unread(path, model_type)
    kinds = cfg.get("layer_types")
    if kinds is not None and not isinstance(kinds, list):
        raise InputError(
            f"{where(path)}:layer_types", str(kinds)[:60], "a list of kinds, one per layer"
        )
    granite = model_type == "granitemoehybrid"  # its Mamba-2 layers may be linear_attention
    gdn_keys = "linear_num_value_heads" in cfg or model_type in GDN_TYPES
    if isinstance(kinds, list) and "linear_attention" in kinds and not (gdn_keys or granite):
        raise InputError(
            f"{where(path)}:layer_types",
            "linear_attention",
            "softmax attention layers, or Gated DeltaNet ones with their linear_* sizes "
            "(Qwen3-Next): other linear-attention layers are not modelled",
        )
    if model_type.startswith("hunyuan") and cfg.get("use_cla") is True:
        raise InputError(
            f"{where(path)}:use_cla",
            True,
            "false: cross-layer attention (K and V shared between layers) is not modelled",
        )
    lightning = cfg.get("attn_type_list")
    if model_type == "minimax_m2" and isinstance(lightning, list) and 0 in lightning:
        raise InputError(
            f"{where(path)}:attn_type_list",
            0,
            "1 for every layer (softmax attention): lightning attention is not modelled",
        )
    return model_type


def _class_config(cfg: dict[str, Any], path: Path, model_type: str) -> dict[str, Any]:
    """The config as its model_type's transformers config class holds it: the class's
    defaults for the keys the file leaves out
    (:func:`~gpuscale.catalog.hf_defaults.with_class_defaults`), Step 3.5's and Gemma 4's
    own keys in the ones the reader knows (Gemma 4: the text model only; its vision and
    audio towers are not priced)."""
    cfg = with_class_defaults(cfg, model_type)
    if model_type == "step3p5":
        return step3p5_config(cfg, path)
    if model_type in GEMMA4_TYPES:
        return gemma4_config(cfg, path)
    return cfg


def load_hf_config(path: Path, field: str = "model") -> Model:
    """Map the usual config.json keys (llama, mistral, mixtral, qwen, deepseek, gemma, gpt2,
    opt...). Whether the MLP is gated and, where the key is absent, whether the embeddings
    are tied follow the model_type as transformers does
    (:data:`~gpuscale.catalog.hf_mlp._GATED_MLP`,
    :data:`~gpuscale.catalog.hf_layout._TIED_DEFAULT`)."""
    cfg = _read_config(path, field)
    model_type = _supported_type(cfg, path)
    cfg = _class_config(cfg, path, model_type)
    ints = Ints(cfg, path)
    layers, hidden, heads, vocab = _required_sizes(ints)
    gated = gated_mlp(cfg, path, model_type)
    experts, ffn_dense, ffn_moe = mlp_widths(ints, model_type, hidden, gated)
    mla = _mla(ints)
    pattern, mamba, blocks = _mixer_layout(cfg, ints, model_type, layers, experts > 1)
    # Qwen3-Next's and Qwen3.5's softmax attention gates its output (Qwen3NextAttention:
    # q_proj is 2 x wide; Qwen3.5 configs say so in attn_output_gate)
    attn_gate = ints.flag("attn_output_gate", model_type in GDN_TYPES)
    if blocks:
        layers = len(pattern)  # a mixer block and an MLP/MoE block for each layer
    shared, shared_ffn = shared_experts(ints, model_type, experts, ffn_dense, ffn_moe)
    mtp_layers = ints("num_nextn_predict_layers", "mtp_num_hidden_layers")
    windows = attention_windows(cfg, ints, model_type, layers, mtp_layers)
    kv_heads = _kv_heads(cfg, ints, model_type, heads)
    first_dense, moe_step = (0, 1)  # a hybrid pattern says which blocks are MoE
    if experts > 1 and not blocks:
        first_dense, moe_step = _moe_layout(cfg, path, ints, layers)
    body: dict[str, Any] = {
        **_names(path, model_type),
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "ffn_hidden": ffn_moe if experts > 1 else ffn_dense,
        "dense_ffn_hidden": ffn_dense,
        "gated_mlp": gated,
        "vocab": vocab,
        "position": _position(cfg, model_type),
        "num_experts": experts,
        "top_k": routed_top_k(cfg, path, ints, model_type, experts),
        "shared_experts": shared,
        "shared_ffn_hidden": shared_ffn,
        "first_dense_layers": first_dense,
        "moe_layer_step": moe_step,
        "mla": mla,
        "attn_gate": attn_gate,
        "pattern": pattern,
        "mamba": mamba,
        "mtp_layers": mtp_layers,
        **windows,
        **_single_keys(cfg, ints, model_type),
        **_family_features(cfg, ints, model_type, layers, bool(windows["window"]), mtp_layers),
    }
    return _validated(body, path, field, ints)


def _required_sizes(ints: Ints) -> tuple[int, int, int, int]:
    """(layers, hidden size, attention heads, vocabulary), each required, under the first
    of its keys the file gives (GPT-2's n_layer, n_embd, n_head; num_layers, d_model), and
    positive; the layers are kept in ``ints`` for the per-layer lists read after them."""
    required = (
        ("num_hidden_layers", "n_layer", "num_layers"),
        ("hidden_size", "n_embd", "d_model"),
        ("num_attention_heads", "n_head"),
        ("vocab_size",),
    )
    for names in required:
        if first_of(ints.cfg, *names) is None:
            raise InputError(
                f"{where(ints.path)}:{names[0]}", None, "required (a positive integer)"
            )
    layers, hidden, heads, vocab = (ints(*names, minimum=1) for names in required)
    ints.layers = layers
    return layers, hidden, heads, vocab


def _mla(ints: Ints) -> MLA | None:
    """DeepSeek-V2/V3's multi-head latent attention where ``kv_lora_rank`` is set (with
    DeepseekV3Config's head dimensions where the file leaves them out: 128 nope, 64 rope,
    128 value); None without it."""
    if not ints("kv_lora_rank"):
        return None
    mla = MLA(
        q_lora_rank=ints("q_lora_rank"),
        kv_lora_rank=ints("kv_lora_rank"),
        qk_nope_head_dim=ints("qk_nope_head_dim", default=128),
        qk_rope_head_dim=ints("qk_rope_head_dim", default=64),
        v_head_dim=ints("v_head_dim", default=128, minimum=1),
    )
    if mla.qk_nope_head_dim + mla.qk_rope_head_dim == 0:
        raise InputError(
            f"{where(ints.path)}:qk_nope_head_dim",
            0,
            "qk_nope_head_dim + qk_rope_head_dim at least 1 (a query/key head dimension)",
        )
    return mla


def _mixer_layout(
    cfg: dict[str, Any], ints: Ints, model_type: str, layers: int, moe: bool
) -> tuple[str, Mamba | None, bool]:
    """(hybrid pattern, mixer sizes, whether the pattern has a block for every mixer and
    every MLP/MoE): Nemotron-H's pattern of Mamba, attention, MLP and MoE layers
    (:func:`~gpuscale.catalog.hf_layout._hybrid`); for Gated DeltaNet and Granite 4.0-H
    models each layer a mixer block and an MLP/MoE block, the pattern then holding twice
    the layers (:func:`~gpuscale.catalog.hf_layout.gated_deltanet_layout`,
    :func:`~gpuscale.catalog.hf_layout.granite_hybrid_layout`)."""
    path = ints.path
    blocks: tuple[str, Mamba] | None
    if model_type == "granitemoehybrid":
        blocks = granite_hybrid_layout(cfg, path, ints, layers, moe)
        pattern, mamba = "", None
    else:
        pattern, mamba = _hybrid(cfg, path, ints)
        blocks = gated_deltanet_layout(cfg, path, ints, layers, moe)
    if blocks is None:
        return pattern, mamba, False
    return blocks[0], blocks[1], True


def _kv_heads(cfg: dict[str, Any], ints: Ints, model_type: str, heads: int) -> int:
    """The KV heads (grouped-query attention), one per query head where the file gives
    none. Falcon: ``num_kv_heads`` (``n_head_kv`` in RW), or one KV head when
    ``multi_query`` (7B); with ``new_decoder_architecture`` ``num_kv_heads`` names the
    groups, and without it there is one per head."""
    mq = 1 if model_type == "falcon" and cfg.get("multi_query") is True else heads
    if model_type == "falcon" and cfg.get("new_decoder_architecture") is True:
        mq = heads
    return ints(
        "num_key_value_heads", "num_kv_heads", "n_head_kv", "num_attention_groups",
        default=mq, minimum=1,
    )  # fmt: skip


def _position(cfg: dict[str, Any], model_type: str) -> str:
    """The position encoding: learned for GPT-2, OPT and GPTBigCode, ALiBi for BLOOM, none
    for Nemotron-H's attention layers and for Granite 4.0-H unless
    ``position_embedding_type`` is rope (GraniteMoeHybridModel), else RoPE."""
    if model_type in ("gpt2", "opt", "gpt_bigcode"):
        return "learned"
    if model_type == "nemotron_h":
        return "none"
    if model_type == "granitemoehybrid" and cfg.get("position_embedding_type") != "rope":
        return "none"
    return "alibi" if model_type == "bloom" else "rope"


def _names(path: Path, model_type: str) -> dict[str, str]:
    """The catalog key, name and source of a config file: a snapshot's config.json is
    named after its model (falcon-7b/config.json), any other file by its stem."""
    return {
        "key": snapshot_name(path) or path.stem,
        "name": f"{model_type or 'model'} from {path}",
        "source": f"local Hugging Face config {path}",
    }


def _single_keys(cfg: dict[str, Any], ints: Ints, model_type: str) -> dict[str, Any]:
    """The fields read from one key each: head_dim (0: hidden / heads), the context
    (default 2048), tied embeddings (:func:`~gpuscale.catalog.hf_layout._tied`),
    group-limited routing (DeepSeek-V2/V3: ``n_group`` groups, ``topk_group`` of them a
    token) and the experts' latent width (``moe_latent_size``)."""
    return {
        "head_dim": ints("head_dim", minimum=1),
        "max_seq": ints("max_position_embeddings", "n_positions", default=2048, minimum=1),
        "tied_embeddings": _tied(cfg, model_type, ints.path, ints),
        "route_groups": ints("n_group", default=1, minimum=1),
        "route_topk_groups": ints("topk_group"),
        "moe_latent": ints("moe_latent_size"),
    }


def _family_features(
    cfg: dict[str, Any], ints: Ints, model_type: str, layers: int, windowed: bool, mtp: int
) -> dict[str, Any]:
    """The fields a few families set: Step 3.5's head-wise output gate (g_proj), on unless
    the file turns it off (as vLLM reads it; transformers' Step3p7Attention builds one
    whatever the file says); Gemma 4's full-attention layers without v_proj (V from K's
    projection); whether the MTP layers slide (:func:`~gpuscale.catalog.hf_window.mtp_slides`,
    where the model has a window); DeepSeek Sparse Attention
    (:func:`~gpuscale.catalog.hf_layout.sparse_attention`; DeepSeek-V4's indexer is read with
    its compressed attention); the MTP depth's blocks; and hidden-state dropout."""
    fields: dict[str, Any] = {
        "head_gate": model_type == "step3p5" and ints.flag("use_head_wise_attn_gate", True),
        "k_eq_v": model_type in GEMMA4_TYPES and ints.flag("attention_k_eq_v", False),
        "mtp_window": windowed and mtp_slides(cfg, ints),
    }
    if model_type != "deepseek_v4":
        fields["sparse"] = sparse_attention(cfg, ints.path, ints, model_type, layers)
    return {
        **fields,
        "mtp_pattern": mtp_blocks(cfg, ints.path, model_type, mtp),
        "dropout": ints.trains_with_dropout(),
    }


def _validated(body: dict[str, Any], path: Path, field: str, ints: Ints) -> Model:
    """The catalog Model of ``body``; a value the schema refuses is an error naming the
    file's key, not the catalog's field (hidden_size or n_embd, not hidden), and a
    whole-model check (e.g. top_k above the expert count) names its fields as the file's
    keys."""
    try:
        return Model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        if err["loc"]:
            first = FIELD_KEYS.get(str(err["loc"][0]))
            loc = ints.found.get(first, first) if first else ".".join(map(str, err["loc"]))
            raise InputError(f"{where(path)}:{loc}", err.get("input"), err["msg"]) from exc
        msg = str(err["msg"]).removeprefix("Value error, ")
        for fld, first in FIELD_KEYS.items():
            msg = re.sub(rf"\b{fld}=", f"{ints.found.get(first, first)}=", msg)
        raise InputError(field, str(path), f"inconsistent shape: {msg}") from exc
