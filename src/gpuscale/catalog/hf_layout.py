"""Reading a config.json's layer layout: which layers are Mamba, attention or MoE, and
whether the embeddings are tied, each as the model's transformers code reads the keys
(used by :func:`gpuscale.catalog.hf.load_hf_config`; the sliding windows are read in
:mod:`gpuscale.catalog.hf_window`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuscale.catalog.hf_values import Ints, where
from gpuscale.catalog.model_parts import CompressedAttention, Mamba, SparseAttention
from gpuscale.errors import InputError

_TIED_DEFAULT: dict[str, bool] = {
    # the config class sets tie_word_embeddings=False (transformers
    # models/<type>/configuration_<type>.py)
    **dict.fromkeys(
        (
            "llama", "llama4", "llama4_text", "mistral", "mixtral", "qwen2", "qwen2_moe",
            "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_neox", "phi3",
            "gpt_oss", "nemotron_h", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text",
            "kimi_k2", "deepseek_v32", "glm4", "glm4_moe", "minimax_m2", "olmo2", "olmo3",
            "olmoe", "seed_oss", "hunyuan_v1_dense", "hunyuan_v1_moe", "exaone4", "dots1",
            "ministral", "granite", "granitemoe", "granitemoehybrid", "apertus", "glm_moe_dsa",
            "minimax_m3_vl", "deepseek_v4", "exaone_moe",
        ),
        False,
    ),
    # the text model of Qwen3-VL: tied as the whole model's config says, whose class
    # (Qwen3VLConfig, Qwen3VLMoeConfig) defaults to False
    **dict.fromkeys(("qwen3_vl_text", "qwen3_vl_moe_text"), False),
    # True: Ernie4_5Config, Ernie4_5_MoeConfig, SmolLM3Config, GemmaConfig, Gemma2Config,
    # Gemma3TextConfig, Gemma4TextConfig, GPTBigCodeConfig and MptConfig set it; GPT2Config,
    # OPTConfig, BloomConfig, FalconConfig and Gemma3Config leave it to PretrainedConfig,
    # whose default is True (transformers 4.x PretrainedConfig)
    **dict.fromkeys(
        (
            "ernie4_5_moe", "gemma", "gemma2", "gemma3", "gemma3_text", "gemma4", "gemma4_text",
            "gpt2", "opt", "bloom",
            "falcon", "mpt", "gpt_bigcode", "ernie4_5", "smollm3",
        ),
        True,
    ),
}  # fmt: skip
"""``tie_word_embeddings`` where config.json leaves it out: the default of the model_type's
config class, which transformers uses for a missing key. For a model_type not listed the
key is required (an error names it), not guessed."""
_BLOCK_TYPES = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
"""Nemotron-H ``layers_block_type`` names and their hybrid-pattern letters."""


MAMBA_KEYS = {
    "heads": "mamba_num_heads",
    "head_dim": "mamba_head_dim",
    "state": "ssm_state_size",
    "groups": "n_groups",
    "conv_kernel": "conv_kernel",
    "chunk": "chunk_size",
}
"""config.json keys of the mixer sizes (Nemotron-H)."""
GDN_KEYS = {
    "heads": "linear_num_value_heads",
    "head_dim": "linear_value_head_dim",
    "state": "linear_key_head_dim",
    "groups": "linear_num_key_heads",
    "conv_kernel": "linear_conv_kernel_dim",
}
"""config.json keys of a Gated DeltaNet's sizes (Qwen3-Next, Qwen3.5)."""


def _mixer(path: Path, keys: dict[str, str], **sizes: Any) -> Mamba:
    """A hybrid's mixer sizes as the schema takes them; a size it refuses is a one-line
    error naming the file's key (``keys``: schema field -> config.json key)."""
    try:
        return Mamba(**sizes)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else ""
        where_key = f"{where(path)}:{keys.get(field, field)}"
        raise InputError(where_key, err.get("input"), err["msg"]) from exc


def _hybrid(cfg: dict[str, Any], path: Path, ints: Ints) -> tuple[str, Mamba | None]:
    """Layer pattern and Mamba-2 sizes of a hybrid config (Nemotron-H ``nemotron_h``)."""
    pattern = cfg.get("hybrid_override_pattern") or ""
    blocks = cfg.get("layers_block_type")
    if not pattern and isinstance(blocks, list):
        unknown = [b for b in blocks if not isinstance(b, str) or b not in _BLOCK_TYPES]
        if unknown:
            raise InputError(
                f"{where(path)}:layers_block_type", unknown[0], f"one of {', '.join(_BLOCK_TYPES)}"
            )
        pattern = "".join(_BLOCK_TYPES[b] for b in blocks)
    if not isinstance(pattern, str):
        raise InputError(f"{where(path)}:hybrid_override_pattern", pattern, "a string of M * - E")
    if "M" not in pattern:
        return pattern, None
    for key in ("mamba_num_heads", "mamba_head_dim"):
        if cfg.get(key) is None:
            raise InputError(f"{where(path)}:{key}", None, "required for Mamba blocks (an integer)")
    mamba = _mixer(
        path,
        MAMBA_KEYS,
        heads=ints("mamba_num_heads", minimum=1),
        head_dim=ints("mamba_head_dim", minimum=1),
        state=ints("ssm_state_size", "state_size", default=128, minimum=1),
        groups=ints("n_groups", default=1, minimum=1),
        conv_kernel=ints("conv_kernel", default=4, minimum=1),
        chunk=ints("chunk_size", default=128, minimum=1),
    )
    return pattern, mamba


def _tied(cfg: dict[str, Any], model_type: str, path: Path, ints: Ints) -> bool:
    """``tie_word_embeddings``, or where it is absent the default of the model_type's config
    class; an unknown model_type without the key is an error naming it (tied or not moves
    the count by vocab x hidden, 0.8 B for Gemma-7B)."""
    if cfg.get("tie_word_embeddings") is not None:
        return ints.flag("tie_word_embeddings", False)
    if model_type in _TIED_DEFAULT:
        return _TIED_DEFAULT[model_type]
    raise InputError(
        f"{where(path)}:tie_word_embeddings",
        None,
        f"absent, with no known default for model_type {model_type or '(none)'!r}: add true "
        "or false (PretrainedConfig's default is true)",
    )


def _moe_layout(cfg: dict[str, Any], path: Path, ints: Ints, layers: int) -> tuple[int, int]:
    """(first dense layers, MoE layer step) that give the MoE layer count the file's keys
    set, following each family's modeling code: DeepSeek's ``first_k_dense_replace`` and
    ``moe_layer_freq`` (layer i is MoE when i >= k and i % freq == 0), Qwen2/3-MoE's
    ``decoder_sparse_step`` and ``mlp_only_layers`` (MoE when (i + 1) % step == 0 and i is
    not listed), ERNIE 4.5's ``moe_layer_start_index``, ``moe_layer_end_index`` (-1: the
    last layer) and ``moe_layer_interval`` (MoE when start <= i <= end and (i + 1) %
    interval == 0), Llama 4's ``interleave_moe_layer_step`` (or its ``moe_layers`` list).
    Only the count matters to gpuscale's per-layer averages. GLM-5's ``mlp_layer_types``
    (``dense`` or ``sparse`` per layer) says it directly."""
    kinds = _kind_list(cfg, path, "mlp_layer_types", layers, ("dense", "sparse"))
    if kinds is not None:
        return layers - kinds.count("sparse"), 1
    flags = _flag_list(cfg, path, "moe_layer_freq", layers)  # MiniMax M3: 1 for a MoE layer
    if flags is not None:
        return layers - sum(flags), 1
    first = ints("first_k_dense_replace")
    if first > layers:
        raise InputError(
            f"{where(path)}:first_k_dense_replace",
            first,
            f"at most num_hidden_layers ({layers}): the dense layers before the MoE ones",
        )
    start = ints("moe_layer_start_index")
    last = cfg.get("moe_layer_end_index")
    if isinstance(last, int) and not isinstance(last, bool) and last < -1:
        raise InputError(
            f"{where(path)}:moe_layer_end_index", last, "a layer index, or -1 for the last layer"
        )
    end = layers - 1 if last == -1 else ints("moe_layer_end_index", default=layers - 1)
    freq = ints("moe_layer_freq", default=1, minimum=1)
    step = ints(
        "decoder_sparse_step",
        "interleave_moe_layer_step",
        "moe_layer_interval",
        default=1,
        minimum=1,
    )
    only = set(_layer_list(cfg, path, "mlp_only_layers", layers))
    # a null list is transformers' default layout (Llama4TextConfig)
    if cfg.get("moe_layers") is not None:
        moe = set(_layer_list(cfg, path, "moe_layers", layers))
    else:
        span = range(max(first, start), min(end, layers - 1) + 1)
        moe = {i for i in span if i % freq == 0 and (i + 1) % step == 0} - only
    count = len(moe)
    if count == (layers - first) // step:
        return first, step
    return layers - count, 1  # any other layout: the same count as leading dense layers


def _kind_list(
    cfg: dict[str, Any], path: Path, key: str, layers: int, allowed: tuple[str, ...]
) -> list[str] | None:
    """A list of one kind per layer, each among ``allowed``; None where the key is absent."""
    kinds = cfg.get(key)
    if kinds is None:
        return None
    field, each = f"{where(path)}:{key}", f"each one of {', '.join(allowed)}"
    if not isinstance(kinds, list) or len(kinds) != layers:
        got = f"{len(kinds)} entries" if isinstance(kinds, list) else str(kinds)[:60]
        raise InputError(field, got, f"a list of {layers} entries, {each}")
    unknown = sorted({str(k) for k in kinds if k not in allowed})
    if unknown:
        raise InputError(field, unknown[0], each)
    return [str(k) for k in kinds]


def _flag_list(cfg: dict[str, Any], path: Path, key: str, layers: int) -> list[int] | None:
    """A list of 0 or 1 per layer; None where the key is absent or not a list."""
    flags = cfg.get(key)
    if not isinstance(flags, list):
        return None
    ok = len(flags) == layers and all(type(f) is int and f in (0, 1) for f in flags)
    if not ok:
        raise InputError(f"{where(path)}:{key}", flags, f"a list of {layers} zeros and ones")
    return [int(f) for f in flags]


def _layer_list(cfg: dict[str, Any], path: Path, key: str, layers: int) -> list[int]:
    """A list of layer indices (0 .. layers - 1), each checked."""
    val = cfg.get(key)
    if val is None:
        return []
    ok = isinstance(val, list) and all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in val
    )
    if not ok:
        raise InputError(
            f"{where(path)}:{key}", val, f"a list of layer indices from 0 to {layers - 1}"
        )
    return list(val)


GDN_TYPES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
"""model_types whose linear-attention layers are Gated DeltaNet mixers read from the
``linear_*`` keys (Qwen3-Next; Qwen3.5 text configs name theirs the same way)."""


def gated_deltanet_layout(
    cfg: dict[str, Any], path: Path, ints: Ints, layers: int, moe: bool
) -> tuple[str, Mamba] | None:
    """The hybrid pattern and mixer sizes of a model whose layers are a Gated DeltaNet or a
    softmax attention followed by an MLP or a MoE (Qwen3-Next: three linear-attention layers
    to one full-attention layer), or None for a model without linear-attention layers.

    A layer is linear attention where ``layer_types`` says ``linear_attention``, or, without
    that list, unless (i + 1) is a multiple of ``full_attention_interval`` (default 4:
    Qwen3NextConfig); its MLP is a MoE when (i + 1) is a multiple of ``decoder_sparse_step``
    and i is not in ``mlp_only_layers`` (Qwen3NextDecoderLayer). Each layer becomes two
    blocks of the pattern: ``M`` or ``*``, then ``E`` or ``-``."""
    kinds = cfg.get("layer_types")
    model_type = str(cfg.get("model_type", ""))
    linear = isinstance(kinds, list) and "linear_attention" in kinds
    if not (linear or model_type in GDN_TYPES):
        return None
    if isinstance(kinds, list):
        read = ("linear_attention", "full_attention")
        listed = _kind_list(cfg, path, "layer_types", layers, read) or []
        is_linear = [k == "linear_attention" for k in listed]
    else:
        every = ints("full_attention_interval", default=4, minimum=1)
        is_linear = [(i + 1) % every != 0 for i in range(layers)]
    if not any(is_linear):
        return None  # every layer softmax attention: a transformer
    sizes = (
        "linear_num_value_heads",
        "linear_num_key_heads",
        "linear_value_head_dim",
        "linear_key_head_dim",
    )
    for key in sizes:
        if cfg.get(key) is None:
            raise InputError(
                f"{where(path)}:{key}",
                None,
                "required for Gated DeltaNet (linear-attention) layers: an integer",
            )
    step = ints("decoder_sparse_step", default=1, minimum=1)
    dense = set(_layer_list(cfg, path, "mlp_only_layers", layers))
    pattern = "".join(
        ("M" if lin else "*") + ("E" if moe and (i + 1) % step == 0 and i not in dense else "-")
        for i, lin in enumerate(is_linear)
    )
    mixer = _mixer(
        path,
        GDN_KEYS,
        rule="gated_delta",
        heads=ints("linear_num_value_heads", minimum=1),
        head_dim=ints("linear_value_head_dim", minimum=1),
        state=ints("linear_key_head_dim", minimum=1),
        groups=ints("linear_num_key_heads", minimum=1),
        conv_kernel=ints("linear_conv_kernel_dim", default=4, minimum=1),
        chunk=64,
    )
    if mixer.heads % mixer.groups:
        raise InputError(
            f"{where(path)}:linear_num_key_heads",
            mixer.groups,
            f"a divisor of linear_num_value_heads ({mixer.heads}): value heads share key heads",
        )
    return pattern, mixer


GRANITE_HYBRID_KEYS = {
    "heads": "mamba_n_heads",
    "head_dim": "mamba_d_head",
    "state": "mamba_d_state",
    "groups": "mamba_n_groups",
    "conv_kernel": "mamba_d_conv",
    "chunk": "mamba_chunk_size",
}
"""config.json keys of a Granite 4.0-H hybrid's Mamba-2 sizes (``granitemoehybrid``)."""
_GRANITE_MIXERS = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*"}
"""Granite 4.0-H ``layer_types`` (transformers 4 spelling, then 5) and their pattern letters."""


def granite_hybrid_layout(
    cfg: dict[str, Any], path: Path, ints: Ints, layers: int, moe: bool
) -> tuple[str, Mamba]:
    """The hybrid pattern and Mamba-2 sizes of an IBM Granite 4.0-H model
    (``granitemoehybrid``): each layer a Mamba-2 or an attention mixer as ``layer_types``
    lists (all Mamba-2 without the list: GraniteMoeHybridConfig's default), then the MoE
    with its shared MLP, or the shared MLP alone without experts
    (GraniteMoeHybridDecoderLayer); two blocks of the pattern per layer, ``M`` or ``*``,
    then ``E`` or ``-``. Mamba sizes default as GraniteMoeHybridConfig does (state 256,
    chunk 256, expand 2, head dimension d_inner / heads)."""
    key = "layer_types" if "layer_types" in cfg else "layers_block_type"
    kinds = _kind_list(cfg, path, key, layers, tuple(_GRANITE_MIXERS)) or ["mamba"] * layers
    pattern = "".join(_GRANITE_MIXERS[k] + ("E" if moe else "-") for k in kinds)
    inner = ints("mamba_expand", default=2, minimum=1) * ints("hidden_size", minimum=1)
    heads = ints("mamba_n_heads", default=128, minimum=1)
    if cfg.get("mamba_d_head") == "auto":
        head_dim = inner // heads
    else:
        head_dim = ints("mamba_d_head", default=inner // heads, minimum=1)
    if heads * head_dim != inner:
        raise InputError(
            f"{where(path)}:mamba_d_head",
            head_dim,
            f"mamba_expand x hidden_size / mamba_n_heads = {inner} / {heads} (the mixer's width)",
        )
    mixer = _mixer(
        path,
        GRANITE_HYBRID_KEYS,
        heads=heads,
        head_dim=head_dim,
        state=ints("mamba_d_state", default=256, minimum=1),
        groups=ints("mamba_n_groups", default=1, minimum=1),
        conv_kernel=ints("mamba_d_conv", default=4, minimum=1),
        chunk=ints("mamba_chunk_size", default=256, minimum=1),
    )
    return pattern, mixer


DSA_TYPES: dict[str, int] = {"deepseek_v32": 64, "glm_moe_dsa": 32}
"""model_types whose attention is DeepSeek Sparse Attention, with their config class's
default indexer heads (DeepseekV32Config, GlmMoeDsaConfig; both default to index_topk 2048
and index_head_dim 128)."""


def sparse_attention(
    cfg: dict[str, Any], path: Path, ints: Ints, model_type: str, layers: int
) -> SparseAttention | None:
    """DeepSeek Sparse Attention's sizes: ``index_topk``, ``index_n_heads``,
    ``index_head_dim``, and which layers run an indexer of their own where
    ``indexer_types`` lists ``full`` (its own) or ``shared`` (reusing another layer's
    selection) per layer; None for a model without DSA."""
    nested = cfg.get("sparse_attention_config")
    if nested is not None and not isinstance(nested, dict):
        raise InputError(
            f"{where(path)}:sparse_attention_config", str(nested)[:60], "an object of sparse_* keys"
        )
    if nested is not None and Ints(nested, path).flag("use_sparse_attention", False):
        return _block_sparse_attention(nested, path, layers)
    if model_type not in DSA_TYPES and cfg.get("index_topk") is None:
        return None
    kinds = _kind_list(cfg, path, "indexer_types", layers, ("full", "shared"))
    indexers = layers if kinds is None else kinds.count("full")
    return SparseAttention(
        topk=ints("index_topk", default=2048, minimum=1),
        heads=ints("index_n_heads", default=DSA_TYPES.get(model_type, 64), minimum=1),
        head_dim=ints("index_head_dim", default=128, minimum=1),
        indexers=indexers,
    )


def _block_sparse_attention(nested: dict[str, Any], path: Path, layers: int) -> SparseAttention:
    """MiniMax M3's ``sparse_attention_config``: each query attends to its top
    ``sparse_topk_blocks`` blocks of ``sparse_block_size`` keys (its local block among
    them), in the layers ``sparse_attention_freq`` marks 1, each with an indexer of
    ``sparse_num_index_heads`` x ``sparse_index_dim`` that takes the maximum over its heads
    (MiniMaxM3VLIndexer: no head-weight projection)."""
    sub = Ints(nested, path)
    marked = _flag_list(nested, path, "sparse_attention_freq", layers)
    sparse = layers if marked is None else sum(marked)
    return SparseAttention(
        topk=sub("sparse_topk_blocks", minimum=1) * sub("sparse_block_size", minimum=1),
        heads=sub("sparse_num_index_heads", minimum=1),
        head_dim=sub("sparse_index_dim", minimum=1),
        layers=sparse,
        indexers=sparse,
        head_weights=False,
    )


V4_KINDS = ("sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention")
"""DeepSeek-V4's ``layer_types``: the window alone, CSA, HCA."""


def compressed_attention(
    cfg: dict[str, Any], path: Path, ints: Ints, layers: int, mtp: int
) -> tuple[CompressedAttention, SparseAttention | None, int]:
    """DeepSeek-V4's attention (DeepseekV4Config): its ratio per layer from
    ``compress_ratios`` (0, 4, 128 per layer, then the MTP depths'), or from ``layer_types``
    with ``compress_rates`` (default CSA 4, HCA 128), or the config class's default
    schedule (two HCA layers, then CSA and HCA alternating); the CSA layers' indexer
    (``index_topk``, ``index_n_heads``, ``index_head_dim``); and ``hc_mult``, the residual
    streams of its hyper-connections."""
    rates = cfg.get("compress_rates")
    if rates is not None and not (
        isinstance(rates, dict) and all(type(v) is int and v > 0 for v in rates.values())
    ):
        raise InputError(
            f"{where(path)}:compress_rates", str(rates)[:60], "an object of positive integers"
        )
    rates = rates or {}
    csa = int(rates.get(V4_KINDS[1], ints("compress_rate_csa", default=4, minimum=1)))
    hca = int(rates.get(V4_KINDS[2], ints("compress_rate_hca", default=128, minimum=1)))
    listed = cfg.get("compress_ratios")
    kinds = _kind_list(cfg, path, "layer_types", layers, V4_KINDS)
    if listed is not None:
        ok = isinstance(listed, list) and all(type(r) is int and r >= 0 for r in listed)
        if not ok or len(listed) < layers:
            got = f"{len(listed)} entries" if isinstance(listed, list) else str(listed)[:60]
            raise InputError(
                f"{where(path)}:compress_ratios",
                got,
                f"a list of {layers} ratios (0 or more), one per layer, then one per MTP depth",
            )
        ratios = list(listed[: layers + mtp])
    elif kinds is not None:
        ratios = [{V4_KINDS[0]: 0, V4_KINDS[1]: csa, V4_KINDS[2]: hca}[k] for k in kinds]
    else:  # DeepseekV4Config's default schedule
        ratios = [hca] * min(layers, 2) + [csa if i % 2 else hca for i in range(layers - 2)]
    sparse = None
    if csa in ratios[:layers]:
        sparse = SparseAttention(
            topk=ints("index_topk", default=512, minimum=1),
            heads=ints("index_n_heads", default=64, minimum=1),
            head_dim=ints("index_head_dim", default=128, minimum=1),
        )
    attn = CompressedAttention(
        q_lora_rank=ints("q_lora_rank", default=1024, minimum=1),
        o_groups=ints("o_groups", default=8, minimum=1),
        o_lora_rank=ints("o_lora_rank", default=1024, minimum=1),
        window=ints("sliding_window", default=128, minimum=1),
        ratios=ratios,
        csa_ratio=csa,
    )
    return attn, sparse, ints("hc_mult", default=4, minimum=1)
