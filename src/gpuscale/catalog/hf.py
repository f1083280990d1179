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
    compressed_attention,
    gated_deltanet_layout,
    granite_hybrid_layout,
    sparse_attention,
)
from gpuscale.catalog.hf_step import mtp_blocks, step3p5_config
from gpuscale.catalog.hf_values import FIELD_KEYS, Ints, first_of, snapshot_name, where
from gpuscale.catalog.hf_window import mtp_slides, sliding_window, window_attention
from gpuscale.catalog.model_parts import MLA, Mamba
from gpuscale.catalog.schema import Model
from gpuscale.errors import InputError
from gpuscale.spec.files import read_json

_GATED_ACTS = {"silu", "swiglu", "gelu_pytorch_tanh_gated", "geglu"}
"""Activations read as a gated MLP when the model_type is not in :data:`_GATED_MLP`."""
_GATED_MLP: dict[str, bool] = {
    # gate, up and down projections: LlamaMLP, MistralMLP, Qwen2MLP, Qwen3MLP, DeepseekV2MLP,
    # DeepseekV3MLP, GemmaMLP/Gemma2MLP/Gemma3MLP (GeGLU: gelu_pytorch_tanh(gate) x up),
    # Llama4TextMLP, Qwen3NextMLP, the MLPs of GLM-4/4.5, OLMo 2/3, SmolLM3, Seed-OSS, Hunyuan,
    # EXAONE 4, dots.llm1, Ministral and Granite; Phi3MLP and Glm4MLP fuse gate and up
    # (gate_up_proj); the experts of Mixtral, Qwen2-MoE, Qwen3-MoE, GPT-OSS, Llama 4, MiniMax-M2,
    # Granite, EXAONE-MoE (K-EXAONE) and Step 3.5 (Step3p7MLP, Step3p7Experts) hold gate and
    # up as well; Kimi K2 is DeepSeek-V3's architecture
    **dict.fromkeys(
        (
            "llama", "llama4_text", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3",
            "qwen3_moe", "gemma", "gemma2", "gemma3", "gemma3_text", "deepseek_v2",
            "deepseek_v3", "phi3", "gpt_oss", "ernie4_5", "ernie4_5_moe", "qwen3_next",
            "qwen3_5_text", "qwen3_5_moe_text", "kimi_k2", "deepseek_v32", "glm4", "glm4_moe",
            "minimax_m2", "olmo2", "olmo3", "olmoe", "smollm3", "seed_oss", "hunyuan_v1_dense",
            "hunyuan_v1_moe", "qwen3_vl_text", "qwen3_vl_moe_text", "exaone4", "dots1",
            "ministral", "granite", "granitemoe", "granitemoehybrid", "ernie4_5", "glm_moe_dsa",
            "minimax_m3_vl", "deepseek_v4", "exaone_moe", "step3p5", "gemma4", "gemma4_text",
        ),
        True,
    ),
    # one up and one down projection: GPT2MLP (c_fc, c_proj), GPTNeoXMLP and BloomMLP and
    # FalconMLP (dense_h_to_4h, dense_4h_to_h), OPT's decoder layer (fc1, fc2), MptMLP
    # (up_proj, down_proj), GPTJMLP (fc_in, fc_out), GPTBigCodeMLP (c_fc, c_proj),
    # NemotronHMLP (up_proj, relu2, down_proj), ApertusMLP (up_proj, xIELU, down_proj)
    **dict.fromkeys(
        (
            "gpt2", "gpt_neox", "opt", "bloom", "falcon", "mpt", "gptj", "gpt_bigcode",
            "nemotron_h", "apertus",
        ),
        False,
    ),
}  # fmt: skip
"""Whether a model_type's MLP is gated: in Hugging Face transformers this is fixed by the
architecture (the MLP class in ``models/<type>/modeling_<type>.py``), not by the activation
name (Gemma's GeGLU is ``gelu`` or ``gelu_pytorch_tanh``)."""


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


def load_hf_config(path: Path, field: str = "model") -> Model:
    """Map the usual config.json keys (llama, mistral, mixtral, qwen, deepseek, gemma, gpt2,
    opt...). Whether the MLP is gated and, where the key is absent, whether the embeddings
    are tied follow the model_type as transformers does (:data:`_GATED_MLP`,
    :data:`~gpuscale.catalog.hf_layout._TIED_DEFAULT`)."""
    cfg = read_json(path, field, "a catalog model or a config.json path")
    if not isinstance(cfg, dict):
        raise InputError(field, str(path), "config.json must hold a JSON object")
    _refuse_unread(path, cfg.get("model_type"))  # a multimodal wrapper's, then its text's
    text = cfg.get("text_config")
    if isinstance(text, dict) and "hidden_size" not in cfg:
        # a multimodal config (Llama 4, Gemma 3): the language model's shape is its
        # text_config; a key the whole model states once (tie_word_embeddings) still holds
        top = {k: cfg[k] for k in ("tie_word_embeddings",) if k in cfg}
        cfg = {**top, **text, "model_type": text.get("model_type", cfg.get("model_type", ""))}
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
        # HunYuan's cross-layer attention: layers share the K and V of a neighbour
        raise InputError(
            f"{where(path)}:use_cla",
            True,
            "false: cross-layer attention (K and V shared between layers) is not modelled",
        )
    lightning = cfg.get("attn_type_list")
    if model_type == "minimax_m2" and isinstance(lightning, list) and 0 in lightning:
        # MiniMaxM2DecoderLayer: 1 = softmax attention; MiniMax-01's 0 = lightning attention
        raise InputError(
            f"{where(path)}:attn_type_list",
            0,
            "1 for every layer (softmax attention): lightning attention is not modelled",
        )
    # the config class's defaults for the keys the file leaves out
    cfg = with_class_defaults(cfg, model_type)
    if model_type == "step3p5":
        cfg = step3p5_config(cfg, path)
    if model_type in GEMMA4_TYPES:
        # the text model only: Gemma 4's vision and audio towers are not priced
        cfg = gemma4_config(cfg, path)
    ints = Ints(cfg, path)
    required = (
        ("num_hidden_layers", "n_layer", "num_layers"),
        ("hidden_size", "n_embd", "d_model"),
        ("num_attention_heads", "n_head"),
        ("vocab_size",),
    )
    for names in required:
        if first_of(cfg, *names) is None:
            raise InputError(f"{where(path)}:{names[0]}", None, "required (a positive integer)")
    layers, hidden, heads, vocab = (ints(*names, minimum=1) for names in required)
    ints.layers = layers
    gated = _GATED_MLP.get(model_type)
    if gated is None:
        # an architecture not in the table: judge by the activation's name, which the file
        # must then give (a gated MLP holds half as many weights again)
        act_keys = ("hidden_act", "hidden_activation", "activation_function", "mlp_hidden_act")
        act = first_of(cfg, *act_keys)
        if act is None:
            raise InputError(
                f"{where(path)}:hidden_act",
                None,
                f"required for a model_type gpuscale does not know ({model_type or '(none)'}): "
                "the MLP's activation, silu for a gated (SwiGLU) MLP, gelu for an ungated one",
            )
        gated = str(act).lower() in _GATED_ACTS
    # Granite 4.0-H without experts (num_local_experts 0) runs its shared MLP alone
    experts = max(
        ints(
            "num_local_experts",
            "n_routed_experts",
            "num_experts",
            "moe_num_experts",
            default=1,
            minimum=0 if granite else 1,
        ),
        1,
    )
    # GPT-2's n_inner left out is 4 x hidden; a gated MLP's width has no such rule (Llama's
    # config class defaults to 11008 at any hidden size), so its config must state it
    ffn_dense = ints(
        "intermediate_size_mlp",
        "dense_intermediate_size",  # MiniMax M3's dense layers (its experts: intermediate_size)
        "intermediate_size",
        "ffn_dim",
        "n_inner",
        "moe_intermediate_size",
        default=0 if gated else 4 * hidden,
        minimum=1,
        per_layer=True,
    )
    if granite:
        # GraniteMoeHybridDecoderLayer: the shared MLP (shared_intermediate_size, default
        # 1024) is the dense MLP, intermediate_size the routed experts' width
        ffn_dense = ints("shared_intermediate_size", default=1024, minimum=1)
    if ffn_dense == 0:
        raise InputError(
            f"{where(path)}:intermediate_size",
            None,
            "required for a gated (SwiGLU-style) MLP: a positive integer, the MLP's width",
        )
    # Llama 4: intermediate_size is the experts' width, intermediate_size_mlp the dense one
    ffn_moe = ints(
        "moe_intermediate_size", "intermediate_size", default=ffn_dense, minimum=1, per_layer=True
    )
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
                f"{where(path)}:qk_nope_head_dim",
                0,
                "qk_nope_head_dim + qk_rope_head_dim at least 1 (a query/key head dimension)",
            )
    learned = model_type in ("gpt2", "opt", "gpt_bigcode")
    pattern, mamba = ("", None) if granite else _hybrid(cfg, path, ints)
    if granite:
        gdn: tuple[str, Mamba] | None = granite_hybrid_layout(cfg, path, ints, layers, experts > 1)
    else:
        gdn = gated_deltanet_layout(cfg, path, ints, layers, experts > 1)
    # Qwen3-Next's and Qwen3.5's softmax attention gates its output (Qwen3NextAttention:
    # q_proj is 2 x wide; Qwen3.5 configs say so in attn_output_gate)
    attn_gate = ints.flag("attn_output_gate", model_type in GDN_TYPES)
    if gdn is not None:
        # Gated DeltaNet and Granite 4.0-H models: each layer a mixer block and an MLP/MoE
        # block
        pattern, mamba = gdn
        layers = len(pattern)
    shared = ints("n_shared_experts", "moe_num_shared_experts", "num_shared_expert", per_layer=True)
    if model_type == "llama4_text" and experts > 1:
        shared = 1  # every Llama 4 MoE layer adds one shared expert of the experts' width
    if model_type == "exaone_moe":
        # ExaoneMoeSparseMoEBlock: one shared MLP of num_shared_experts x the experts' width
        shared = ints("num_shared_experts")
    # Nemotron 3 / Megatron spelling, Qwen2-MoE's (Qwen1.5-MoE: one shared expert of 5632),
    # Granite 4.0-H's shared MLP beside its experts
    shared_ffn = ints(
        "moe_shared_expert_intermediate_size",
        "shared_expert_intermediate_size",
        "shared_intermediate_size",  # Granite 4.0-H, MiniMax M3
        "share_expert_dim",  # Step 3.5: one shared expert of this width
    )
    if model_type == "hunyuan_v1_moe":
        # HunYuanMoEV1Moe: a shared MLP of the dense width (intermediate_size) beside the
        # experts in every layer
        shared_ffn = ffn_dense
    if experts > 1 and shared_ffn:
        # shared experts given with their own width: their count in routed-expert units
        # (Nemotron 3: one shared expert of 2 x the routed width = 2 units) and their width
        shared_ffn = max(shared, 1) * shared_ffn
        shared = max(round(shared_ffn / ffn_moe), 1)
    else:
        shared_ffn = 0  # the schema's default: shared x the routed width
    mtp_layers = ints("num_nextn_predict_layers", "mtp_num_hidden_layers")
    compressed, streams = None, 1
    if model_type == "deepseek_v4":
        # DeepSeek-V4: its window, compressors and indexer belong to its own attention
        compressed, v4_sparse, streams = compressed_attention(cfg, path, ints, layers, mtp_layers)
        window, window_layers = 0, None
    else:
        window, window_layers = sliding_window(cfg, model_type, ints)
    windowed = layers if window and window_layers is None else int(window_layers or 0)
    window_attn = window_attention(cfg, ints, windowed)
    window_kind = "sliding"
    chunk = ints("attention_chunk_size")
    if chunk and not window:
        # Llama 4: the RoPE layers (no_rope_layers 1) attend within chunks, every
        # no_rope_layer_interval-th layer (default 4) globally
        window, window_kind = chunk, "chunked"
        every = ints("no_rope_layer_interval", default=4, minimum=1)
        rope = cfg.get("no_rope_layers")
        if rope is None or rope == []:  # an empty list is Llama4TextConfig's default too
            window_layers = sum(1 for i in range(layers) if (i + 1) % every)
        elif (
            isinstance(rope, list)
            and len(rope) == layers
            and all(type(x) is int and x in (0, 1) for x in rope)
        ):
            window_layers = sum(rope)
        else:
            raise InputError(
                f"{where(path)}:no_rope_layers", rope, f"a list of {layers} zeros and ones"
            )
    # Falcon: num_kv_heads (n_head_kv in RW), or one KV head when multi_query (7B)
    mq = 1 if model_type == "falcon" and cfg.get("multi_query") is True else heads
    if model_type == "falcon" and cfg.get("new_decoder_architecture") is True:
        mq = heads  # num_kv_heads names the groups; without it, one per head
    kv_heads = ints(
        "num_key_value_heads", "num_kv_heads", "n_head_kv", "num_attention_groups",
        default=mq, minimum=1,
    )  # fmt: skip
    first_dense, moe_step = (0, 1)  # a hybrid pattern says which blocks are MoE
    if experts > 1 and gdn is None:
        first_dense, moe_step = _moe_layout(cfg, path, ints, layers)
    position = "learned" if learned else ("alibi" if model_type == "bloom" else "rope")
    if model_type == "nemotron_h":
        position = "none"  # Nemotron-H attention layers use no position embedding
    if granite and cfg.get("position_embedding_type") != "rope":
        position = "none"  # GraniteMoeHybridModel: RoPE only with position_embedding_type rope
    top_k_keys = ("num_experts_per_tok", "experts_per_token", "moe_k", "moe_topk", "moe_top_k")
    if experts > 1 and first_of(cfg, *top_k_keys) is None:
        raise InputError(
            f"{where(path)}:num_experts_per_tok",
            None,
            f"required for a mixture of {experts} experts: how many experts each token is "
            "routed to (a positive integer)",
        )
    top_k = ints(*top_k_keys, default=1, minimum=1, per_layer=True)
    if granite and experts == 1:
        top_k = 1  # a Granite 4.0-H without experts keeps the family's num_experts_per_tok
    # a snapshot's config.json is named after its model (falcon-7b/config.json)
    folder = snapshot_name(path)
    body: dict[str, Any] = {
        "key": folder or path.stem,
        "name": f"{model_type or 'model'} from {path}",
        "source": f"local Hugging Face config {path}",
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": ints("head_dim"),
        "ffn_hidden": ffn_moe if experts > 1 else ffn_dense,
        "dense_ffn_hidden": ffn_dense,
        "gated_mlp": gated,
        "vocab": vocab,
        "max_seq": ints("max_position_embeddings", "n_positions", default=2048, minimum=1),
        "position": position,
        "tied_embeddings": _tied(cfg, model_type, path, ints),
        "num_experts": experts,
        "top_k": top_k,
        "shared_experts": shared,
        "shared_ffn_hidden": shared_ffn,
        # group-limited routing (DeepSeek-V2/V3): n_group groups, topk_group of them a token
        "route_groups": ints("n_group", default=1, minimum=1),
        "route_topk_groups": ints("topk_group"),
        "first_dense_layers": first_dense,
        "moe_layer_step": moe_step,
        "mla": mla,
        "attn_gate": attn_gate,
        "pattern": pattern,
        "mamba": mamba,
        "moe_latent": ints("moe_latent_size"),
        "window": window,
        "window_layers": window_layers,
        "window_kind": window_kind,
        "window_attn": window_attn,
        # Step 3.5's head-wise output gate (g_proj), on unless the file turns it off (as
        # vLLM reads it; transformers' Step3p7Attention builds one whatever the file says)
        "head_gate": model_type == "step3p5" and ints.flag("use_head_wise_attn_gate", True),
        # Gemma 4's full-attention layers: no v_proj, V from K's projection
        "k_eq_v": model_type in GEMMA4_TYPES and ints.flag("attention_k_eq_v", False),
        "mtp_window": bool(window) and mtp_slides(cfg, ints),
        "sparse": (
            v4_sparse
            if compressed is not None
            else sparse_attention(cfg, path, ints, model_type, layers)
        ),
        "compressed": compressed,
        "residual_streams": streams,
        "mtp_layers": mtp_layers,
        "mtp_pattern": mtp_blocks(cfg, path, model_type, mtp_layers),
        "dropout": ints.trains_with_dropout(),
    }
    try:
        return Model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        if err["loc"]:
            # the file's key, not the catalog's field: hidden_size (or n_embd), not hidden
            first = FIELD_KEYS.get(str(err["loc"][0]))
            loc = ints.found.get(first, first) if first else ".".join(map(str, err["loc"]))
            raise InputError(f"{where(path)}:{loc}", err.get("input"), err["msg"]) from exc
        # a whole-model check (e.g. top_k above the expert count): its message names the
        # fields, said here as the file's keys
        msg = str(err["msg"]).removeprefix("Value error, ")
        for fld, first in FIELD_KEYS.items():
            msg = re.sub(rf"\b{fld}=", f"{ints.found.get(first, first)}=", msg)
        raise InputError(field, str(path), f"inconsistent shape: {msg}") from exc
