"""DeepSeek Sparse Attention (DSA: DeepSeek-V3.2, GLM-5): its indexer's weights, the
attention core over the top-k keys, the indexer's scoring over the whole context, its keys
in the KV cache, and the config.json keys that give them.

Reference count: transformers 5.25 building DeepseekV32ForCausalLM from the config below on
the meta device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_runner import read_config

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, get_system
from gpuscale.catalog.schema import Model, SparseAttention
from gpuscale.errors import InputError
from gpuscale.perf.comm.fabric import Fabric
from gpuscale.perf.flop_conventions import megatron_model_flops
from gpuscale.perf.inference import build_step_model
from gpuscale.perf.kernels import INDEXER_LOGIT_BYTES, attention_core_s
from gpuscale.perf.kv import kv_bytes_per_token, precision_plan
from gpuscale.perf.memory import activation_bytes_per_layer
from gpuscale.perf.plan import Plans, Workload
from gpuscale.perf.stage_params import params_per_gpu
from gpuscale.perf.transformer import (
    active_param_count,
    forward_flops_per_token,
    indexer_core_flops_per_token,
    keys_per_query,
    layer_shapes,
    mtp_param_count,
    param_count,
)

# https://huggingface.co/deepseek-ai/DeepSeek-V3.2-Exp/blob/main/config.json, the keys the
# reader uses (DeepSeek-V3's shape with its indexer)
DEEPSEEK_V32: dict[str, Any] = {
    "model_type": "deepseek_v32",
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "index_head_dim": 128,
    "index_n_heads": 64,
    "index_topk": 2048,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "tie_word_embeddings": False,
    "topk_group": 4,
    "v_head_dim": 128,
    "vocab_size": 129280,
}
INDEXER = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
"""One indexer's weights: wq_b from the 1,536-wide query latent to 64 heads of 128, wk from
the hidden state to one 128-wide key, the key's LayerNorm (weight and bias), weights_proj
from the hidden state to the 64 head weights."""


@pytest.fixture
def v32(tmp_path: Path) -> Model:
    return read_config(tmp_path, DEEPSEEK_V32)


def test_deepseek_v32_reads_its_indexer(v32: Model) -> None:
    assert v32.sparse == SparseAttention(topk=2048, heads=64, head_dim=128, layers=61, indexers=61)
    assert layer_shapes(v32).indexer == INDEXER == 13_959_424


def test_deepseek_v32_parameters_match_transformers(v32: Model) -> None:
    assert param_count(v32) == 671_877_929_216
    assert active_param_count(v32) == 38_403_807_488
    # DeepSeek-V3's count and one indexer in each of its 61 layers
    v3 = v32.model_copy(update={"sparse": None})
    assert param_count(v32) - param_count(v3) == 61 * INDEXER


def test_top_k_keys_per_query() -> None:
    m = get_model("deepseek-v3").model_copy(
        update={"sparse": SparseAttention(topk=2048, heads=64, head_dim=128, indexers=61)}
    )
    # a causal query sees min(i + 1, 2048) keys: s/2 up to 2,048 tokens
    assert keys_per_query(m, 1024) == 512.0
    # then 2048 - 2048^2 / (2 s): 1,536 at 4,096, 2,032 at 131,072
    assert keys_per_query(m, 4096) == 1536.0
    assert keys_per_query(m, 131072) == 2048 - 2048**2 / (2 * 131072)
    assert keys_per_query(m, 131072, causal=False) == 2048.0


def test_indexer_scoring_reads_the_whole_context(v32: Model) -> None:
    # 64 heads x (128 + 1) multiply-adds a key, over s/2 causal keys
    assert indexer_core_flops_per_token(v32, 4096) == 2 * 64 * 129 * 2048
    dense = v32.model_copy(update={"sparse": None})
    s = 4096
    qk, v = 128 * (128 + 64), 128 * 128
    core_cut = 61 * 2.0 * (s / 2 - 1536) * (qk + v)
    indexers = 61 * (2.0 * INDEXER + 2 * 64 * 129 * 2048)
    mtp = 2.0 * INDEXER + 2.0 * (s / 2 - 1536) * -(qk + v) + 2 * 64 * 129 * 2048
    got = forward_flops_per_token(v32, s) - forward_flops_per_token(dense, s)
    assert got == pytest.approx(indexers - core_cut + mtp, rel=1e-12)
    # at 128K tokens the top-k attention saves more than the indexer costs: 2.6x fewer FLOPs
    long = forward_flops_per_token(dense, 131072) / forward_flops_per_token(v32, 131072)
    assert 2.5 < long < 2.7


def test_megatron_count_takes_the_top_k_and_the_indexers(v32: Model) -> None:
    dense = v32.model_copy(update={"sparse": None})
    s = 4096
    diff = megatron_model_flops(v32, 1, s, causal=True) - megatron_model_flops(
        dense, 1, s, causal=True
    )
    per_layer = 2.0 * (INDEXER + 64 * 129 * 2048) - 2.0 * (2048 - 1536) * 128 * (192 + 128)
    # 3 x forward per token, 61 layers and the MTP depth (Megatron counts it as a layer)
    assert diff == pytest.approx(3.0 * s * 62 * per_layer, rel=1e-9)


def test_attention_kernel_adds_the_indexer(v32: Model) -> None:
    cal = default_calibration()
    gpu, sys = get_gpu("h100-sxm"), get_system("dgx-h100")
    dense = v32.model_copy(update={"sparse": None})

    def core(m: Model, s: int) -> tuple[float, float]:
        w = Workload(m, gpu, sys, Fabric.from_system(sys, 8), 8, s, 8, "bf16")
        one = np.array([1.0])
        f, b = attention_core_s(w, one, one * s, one, 989e12, 3.35e12, cal)
        return float(f[0]), float(b[0])

    s = 4096
    (fd, bd), (fs, bs) = core(dense, s), core(v32, s)
    rate = 989e12 * cal.attn_eff
    idx = s * 2 * 64 * 129 * (s / 2) / rate
    logits = INDEXER_LOGIT_BYTES * s * (s / 2) / 3.35e12
    assert fs == pytest.approx(fd * 1536 / 2048 + idx + logits, rel=1e-9)
    assert bs == pytest.approx(bd * 1536 / 2048 + 2 * idx, rel=1e-9)


def test_kv_cache_keeps_the_indexer_keys(v32: Model) -> None:
    dense = v32.model_copy(update={"sparse": None})
    # one FP8 key of 128 and its fp32 scale a layer, on every TP rank
    assert kv_bytes_per_token(v32, 1.0, tp=8) - kv_bytes_per_token(dense, 1.0, tp=8) == 61 * 132
    assert kv_bytes_per_token(dense, 1.0) == 61 * (512 + 64)


def test_glm5_layer_lists(tmp_path: Path) -> None:
    """GLM-5: ``mlp_layer_types`` says which layers are MoE; ``indexer_types`` which run an
    indexer of their own (``shared`` reuse a neighbour's top-k)."""
    layers = 8
    cfg = {
        **DEEPSEEK_V32,
        "model_type": "glm_moe_dsa",
        "num_hidden_layers": layers,
        "mlp_layer_types": ["dense"] * 3 + ["sparse"] * 5,
        "indexer_types": ["full", "shared", "shared", "shared"] * 2,
    }
    del cfg["first_k_dense_replace"], cfg["index_n_heads"]
    m = read_config(tmp_path, cfg)
    assert (m.first_dense_layers, m.moe_layers) == (3, 5)
    # GlmMoeDsaConfig's default indexer heads: 32
    assert m.sparse == SparseAttention(topk=2048, heads=32, head_dim=128, layers=8, indexers=2)
    bad = {**cfg, "indexer_types": ["full"] * 7 + ["local"]}
    with pytest.raises(InputError, match=r"indexer_types='local'.*full, shared"):
        read_config(tmp_path, bad, "bad")
    short = {**cfg, "mlp_layer_types": ["dense"] * 3}
    with pytest.raises(InputError, match=r"mlp_layer_types='3 entries'.*8 entries"):
        read_config(tmp_path, short, "short")


def test_sparse_attention_with_a_window_is_refused() -> None:
    m = get_model("gpt-oss-20b")
    with pytest.raises(ValueError, match=r"sparse .* with a window"):
        Model.model_validate(
            {**m.model_dump(), "sparse": {"topk": 2048, "heads": 64, "head_dim": 128}}
        )


def test_catalog_entry_is_the_config(v32: Model) -> None:
    names = {"key", "name", "source", "aliases"}
    assert get_model("DeepSeek-V3.2-Exp").model_dump(exclude=names) == v32.model_dump(exclude=names)


def test_indexer_weights_are_whole_on_every_tp_rank() -> None:
    gpu, sys = get_gpu("h100-sxm"), get_system("dgx-h100")
    v32 = get_model("deepseek-v3.2")
    dense = v32.model_copy(update={"sparse": None})
    plan = Plans.of(tp=8, ep=8, dp=8)

    def per_layer(m: Model) -> float:
        w = Workload(m, gpu, sys, Fabric.from_system(sys, 64), 64, 4096, 64, "bf16")
        return float(params_per_gpu(w, plan)[2][0])

    # one indexer a layer, not split by TP (the attention projections are)
    assert per_layer(v32) - per_layer(dense) == pytest.approx(INDEXER, rel=1e-12)


def test_glm5_is_glm_moe_dsa_with_its_config_class_defaults(tmp_path: Path) -> None:
    """GlmMoeDsaConfig's defaults are GLM-5's shape: a config.json giving them reads as the
    catalog entry, with the 743,911,199,232 parameters Megatron-Bridge's verification card
    counts for zai-org/GLM-5 reloaded in transformers, 40 B active without the embedding
    tables (GLM-5's card)."""
    cfg = {
        "model_type": "glm_moe_dsa",
        "vocab_size": 154880,
        "hidden_size": 6144,
        "intermediate_size": 12288,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 78,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "n_shared_experts": 1,
        "n_routed_experts": 256,
        "kv_lora_rank": 512,
        "q_lora_rank": 2048,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 192,
        "v_head_dim": 256,
        "num_experts_per_tok": 8,
        "max_position_embeddings": 202752,
        "mlp_layer_types": ["dense"] * 3 + ["sparse"] * 75,
        "num_nextn_predict_layers": 1,
    }
    m = read_config(tmp_path, cfg)
    names = {"key", "name", "source", "aliases"}
    assert get_model("GLM-5").model_dump(exclude=names) == m.model_dump(exclude=names)
    assert param_count(m) == 743_911_199_232
    embeddings = 2 * 154880 * 6144
    assert round((active_param_count(m) - embeddings) / 1e9) == 40


def test_glm52_shares_its_indexers() -> None:
    """GLM-5.2 (Megatron-Bridge's verification card: 743,377,000,704 parameters in
    transformers, 753,329,940,480 elements with the MTP layer) is GLM-5 with 21 of 78
    layers running an indexer of their own."""
    glm52, glm5 = get_model("GLM-5.2"), get_model("GLM-5")
    indexer = 2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32
    assert layer_shapes(glm52).indexer == indexer == 9_371_904
    assert param_count(glm5) - param_count(glm52) == 57 * indexer
    assert param_count(glm52) == 743_377_000_704
    # with the MTP layer: within 19,456 (its projection's norms and the like) of the card
    with_mtp = param_count(glm52) + mtp_param_count(glm52)
    assert abs(with_mtp - 753_329_940_480) < 20_000
    # the shared layers score nothing: 21 indexers' scoring per token
    dense_scoring = forward_flops_per_token(glm5, 4096) - forward_flops_per_token(glm52, 4096)
    assert dense_scoring == pytest.approx(57 * (2 * indexer + 2 * 32 * 129 * 2048), rel=1e-12)


def test_serving_caps_the_attention_at_top_k_and_reads_every_indexer_key() -> None:
    gpu = get_gpu("h200")
    cal = default_calibration()
    v32 = get_model("deepseek-v3.2")
    dense = v32.model_copy(update={"sparse": None})
    plan = precision_plan(gpu, "fp8")
    sm = build_step_model(v32, gpu, plan, 8, 1, cal, tokens_per_seq=65536)
    dm = build_step_model(dense, gpu, plan, 8, 1, cal, tokens_per_seq=65536)
    # the cache keeps every token: its MLA latent (FP8) and the indexer's FP8 keys
    assert sm.kv_bytes_per_ctx_token == dm.kv_bytes_per_ctx_token == 61 * (512 + 64)
    assert sm.index_bytes_per_ctx_token == 61 * 132
    # the indexer's 64 x (128 + 1) multiply-adds a pair in each of 61 layers, whole on every
    # TP rank, in FP8 at twice the 16-bit rate
    half = gpu.peak_flops("bf16") / gpu.peak_flops("fp8")
    assert sm.index_flops_per_pair == pytest.approx(61 * 2 * 64 * 129 * half)
    # a decode step of 16 sequences at 64K reads k = 2,048 latents each and all indexer keys
    ctx = 65536.0
    expect = (61 * 576 * 16 * 2048 + 61 * 132 * 16 * ctx) / sm.hbm_Bps
    assert sm.breakdown(0, 0, 0, 16, 16 * ctx).kv_read_s == pytest.approx(expect)
    assert sm.decode_time_s_vec(np.array([16]), np.array([ctx]))[0] == pytest.approx(
        sm.decode_time_s(16, ctx)
    )
    a, b = sm.decode_coeffs(16, 16 * ctx)
    assert a + b * 16 * ctx == pytest.approx(sm.decode_time_s(16, ctx))
    # a 64K prompt: the core's pairs capped at 2,048 a query (queries x k, which bounds the
    # per-query min(i, k) from above), the indexer's over all the causal pairs
    pairs = 65536 * 65537 / 2
    got = sm.breakdown(65536, pairs, 1, 0, 0).attention_s
    want = sm.attn_flops_per_pair * 2048 * 65536 + sm.index_flops_per_pair * pairs
    assert got == pytest.approx(want / sm.attn_rate_flops)


# https://huggingface.co/MiniMaxAI/MiniMax-M3/blob/main/config.json, its text_config's keys
# the reader uses; Megatron-Bridge's verification card counts 427,040,140,160 values, of
# which 426,174,572,928 are the language model's (the rest its vision encoder)
MINIMAX_M3_TEXT: dict[str, Any] = {
    "hidden_size": 6144,
    "intermediate_size": 3072,
    "num_hidden_layers": 60,
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 200064,
    "max_position_embeddings": 1048576,
    "hidden_act": "swigluoai",
    "tie_word_embeddings": False,
    "dense_intermediate_size": 12288,
    "shared_intermediate_size": 3072,
    "num_local_experts": 128,
    "num_experts_per_tok": 4,
    "n_shared_experts": 1,
    "moe_layer_freq": [0] * 3 + [1] * 57,
    "num_nextn_predict_layers": 1,
    "sparse_attention_config": {
        "use_sparse_attention": True,
        "sparse_index_dim": 128,
        "sparse_num_index_heads": 4,
        "sparse_topk_blocks": 16,
        "sparse_block_size": 128,
        "sparse_score_type": "max",
        "sparse_local_block": 1,
        "sparse_attention_freq": [0] * 3 + [1] * 57,
    },
}


def test_minimax_m3_block_sparse_attention(tmp_path: Path) -> None:
    cfg = {"model_type": "minimax_m3_vl", "text_config": MINIMAX_M3_TEXT}
    m = read_config(tmp_path, cfg)
    # 16 blocks of 128 keys (its local block among them) in 57 of 60 layers, an indexer of
    # 4 x 128 that takes the maximum over its heads (no head-weight projection)
    assert m.sparse == SparseAttention(
        topk=2048, heads=4, head_dim=128, layers=57, indexers=57, head_weights=False
    )
    assert layer_shapes(m).indexer == 6144 * 4 * 128 + 6144 * 128 + 2 * 128 == 3_932_416
    assert (m.first_dense_layers, m.moe_layers, m.dense_ffn_hidden) == (3, 57, 12288)
    assert m.gated_mlp and m.shared_ffn_hidden == 3072
    # the card's language model less what gpuscale leaves out: per-head Q and K norms
    # (2 x 128 a layer) and the router's expert-score bias (128 a MoE layer)
    assert param_count(m) == 426_174_572_928 - 60 * 256 - 57 * 128
    # the first three layers attend to every key: at 4K tokens, (3 x 2048 + 57 x 1536) / 60
    assert keys_per_query(m, 4096) == (3 * 2048 + 57 * 1536) / 60
    assert indexer_core_flops_per_token(m, 4096) == 2 * 4 * 128 * 2048
    bad = {**MINIMAX_M3_TEXT, "moe_layer_freq": [0, 1]}
    with pytest.raises(InputError, match=r"moe_layer_freq.*a list of 60 zeros and ones"):
        read_config(tmp_path, {"model_type": "minimax_m3_vl", "text_config": bad}, "bad")


def test_serving_caps_only_the_sparse_layers(tmp_path: Path) -> None:
    gpu = get_gpu("h200")
    m3 = read_config(tmp_path, {"model_type": "minimax_m3_vl", "text_config": MINIMAX_M3_TEXT})
    sm = build_step_model(m3, gpu, precision_plan(gpu, "fp8"), 8, 1, default_calibration())
    assert sm.sparse_share == 57 / 60
    # its indexer takes the maximum over its heads: 4 x 128 multiply-adds a pair, in FP8
    half = gpu.peak_flops("bf16") / gpu.peak_flops("fp8")
    assert sm.index_flops_per_pair == pytest.approx(57 * 2 * 4 * 128 * half)
    ctx = 65536.0
    read = (3 / 60) * 16 * ctx + (57 / 60) * 16 * 2048
    expect = sm.kv_bytes_per_ctx_token * read + sm.index_bytes_per_ctx_token * 16 * ctx
    assert sm.breakdown(0, 0, 0, 16, 16 * ctx).kv_read_s == pytest.approx(expect / sm.hbm_Bps)
    a, b = sm.decode_coeffs(16, 16 * ctx)
    assert a + b * 16 * ctx == pytest.approx(sm.decode_time_s(16, ctx))
    vec = sm.decode_time_s_vec(np.array([16]), np.array([ctx]))[0]
    assert vec == pytest.approx(sm.decode_time_s(16, ctx))


def test_activations_keep_the_selection_and_the_indexer_inputs() -> None:
    gpu, sys = get_gpu("h100-sxm"), get_system("dgx-h100")
    v32 = get_model("deepseek-v3.2")
    dense = v32.model_copy(update={"sparse": None})

    def per_layer(m: Model, tp: int) -> float:
        w = Workload(m, gpu, sys, Fabric.from_system(sys, 64), 64, 4096, 64, "bf16")
        return float(activation_bytes_per_layer(w, Plans.of(tp=tp, ep=8, dp=64 // tp))[0])

    # per token: 2,048 int32 indices, 64 x 128 16-bit queries, a 128-wide key, 64 fp32
    # head weights; whole on every TP rank
    per_token = 4 * 2048 + 2 * 64 * 128 + 2 * 128 + 4 * 64
    for tp in (1, 8):
        assert per_layer(v32, tp) - per_layer(dense, tp) == pytest.approx(4096 * per_token)


def test_minimax_m3_sparse_config_must_be_an_object(tmp_path: Path) -> None:
    text = {**MINIMAX_M3_TEXT, "sparse_attention_config": [1]}
    with pytest.raises(InputError, match=r"sparse_attention_config='\[1\]'.*an object"):
        read_config(tmp_path, {"model_type": "minimax_m3_vl", "text_config": text})
    off = {**MINIMAX_M3_TEXT["sparse_attention_config"], "use_sparse_attention": False}
    dense = read_config(tmp_path, {"model_type": "minimax_m3_vl", "text_config": {
        **MINIMAX_M3_TEXT, "sparse_attention_config": off}}, "dense")  # fmt: skip
    assert dense.sparse is None
