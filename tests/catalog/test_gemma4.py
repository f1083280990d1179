"""Gemma 4 (Google, model_type ``gemma4`` / ``gemma4_text``): its config.json read as
transformers' Gemma4TextConfig and Gemma4TextDecoderLayer build it, and the catalog entries.

Reference counts: transformers 5.25.0 building Gemma4ForCausalLM from the text configs below
on the meta device and summing ``numel`` over its parameters: 30,697,345,280 (31B) and
25,233,141,760 (26B-A4B). gpuscale leaves out, for every model, the per-head Q and K norm
weights (31B: 60 q_norm and 60 k_norm, 10 x 512 + 50 x 256 each, 35,840; 26B-A4B 17,920)
and Gemma's post-attention and post-MLP norms (2 h a layer: 645,120 and 168,960); in the
26B-A4B's MoE block also its three extra norms (3 h a layer, 253,440) and the router's scale
(h) and per-expert scale (E) vectors (30 x (2,816 + 128) = 88,320)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_runner import read_config

from gpuscale.catalog import get_model
from gpuscale.catalog.schema import Model
from gpuscale.errors import InputError
from gpuscale.perf.transformer import active_param_count, param_count

KINDS = ["sliding_attention"] * 5 + ["full_attention"]

# google/gemma-4-31B-it config.json (its text_config; rope_parameters, token ids and the
# vision tower's config are not read by gpuscale)
GEMMA4_31B: dict[str, Any] = {
    "architectures": ["Gemma4ForConditionalGeneration"],
    "model_type": "gemma4",
    "tie_word_embeddings": True,
    "vision_config": {"model_type": "gemma4_vision"},
    "text_config": {
        "model_type": "gemma4_text",
        "attention_k_eq_v": True,
        "enable_moe_block": False,
        "final_logit_softcapping": 30.0,
        "global_head_dim": 512,
        "head_dim": 256,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 5376,
        "hidden_size_per_layer_input": 0,
        "intermediate_size": 21504,
        "layer_types": KINDS * 10,
        "max_position_embeddings": 262144,
        "moe_intermediate_size": None,
        "num_attention_heads": 32,
        "num_experts": None,
        "num_global_key_value_heads": 4,
        "num_hidden_layers": 60,
        "num_key_value_heads": 16,
        "num_kv_shared_layers": 0,
        "sliding_window": 1024,
        "top_k_experts": None,
        "use_double_wide_mlp": False,
        "vocab_size": 262144,
    },
}
# google/gemma-4-26B-A4B-it's text_config
GEMMA4_26B: dict[str, Any] = {
    "model_type": "gemma4_text",
    "hidden_size": 2816,
    "num_hidden_layers": 30,
    "intermediate_size": 2112,
    "num_attention_heads": 16,
    "head_dim": 256,
    "global_head_dim": 512,
    "num_key_value_heads": 8,
    "num_global_key_value_heads": 2,
    "num_kv_shared_layers": 0,
    "layer_types": KINDS * 5,
    "sliding_window": 1024,
    "attention_k_eq_v": True,
    "enable_moe_block": True,
    "num_experts": 128,
    "top_k_experts": 8,
    "moe_intermediate_size": 704,
    "final_logit_softcapping": 30.0,
    "hidden_size_per_layer_input": 0,
    "use_double_wide_mlp": False,
    "use_bidirectional_attention": "vision",
    "tie_word_embeddings": True,
    "vocab_size": 262144,
    "vocab_size_per_layer_input": 262144,
    "max_position_embeddings": 262144,
}


def _shape(m: Model) -> tuple[object, ...]:
    return (
        m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.dense_ffn_hidden,
        m.vocab, m.tied_embeddings, m.max_seq, m.num_experts, m.top_k, m.shared_experts,
        m.shared_ffn_hidden, m.window, m.window_layers, m.window_attn, m.k_eq_v, m.moe_layers,
    )  # fmt: skip


def test_31b_reads_as_transformers_builds_it(tmp_path: Path) -> None:
    m = read_config(tmp_path, GEMMA4_31B, "gemma-4-31B-it")
    assert m.key == "gemma-4-31B-it"
    # the model's shape is the 10 full layers': 32 heads over 4 KV heads of 512, K = V
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.k_eq_v) == (
        60, 5376, 32, 4, 512, True
    )  # fmt: skip
    # the 50 sliding layers (window 1024): 32 heads over 16 KV heads of 256, K and V apart
    assert (m.window, m.window_layers) == (1024, 50)
    assert m.window_attn is not None
    x = m.window_attn
    assert (x.heads, x.kv_heads, x.head_dim, x.k_eq_v) == (32, 16, 256, False)
    assert (m.ffn_hidden, m.gated_mlp, m.vocab, m.tied_embeddings) == (21504, True, 262144, True)
    assert not m.is_moe and m.max_seq == 262144


def test_26b_a4b_reads_its_dense_mlp_beside_the_experts(tmp_path: Path) -> None:
    m = read_config(tmp_path, GEMMA4_26B)
    assert (m.heads, m.kv_heads, m.head_dim, m.k_eq_v) == (16, 2, 512, True)
    assert m.window_attn is not None
    assert (m.window_attn.kv_heads, m.window_attn.head_dim) == (8, 256)
    # every layer a MoE of 128 experts of 704, top-8, beside the dense MLP of 2112 that
    # every token runs (a shared MLP: 3 expert widths)
    assert (m.moe_layers, m.num_experts, m.top_k, m.ffn_hidden) == (30, 128, 8, 704)
    assert (m.shared_experts, m.shared_ffn_hidden) == (3, 2112)


@pytest.mark.parametrize(
    ("cfg", "reference", "left_out"),
    [
        (GEMMA4_31B, 30_697_345_280, 35_840 + 645_120),
        (GEMMA4_26B, 25_233_141_760, 17_920 + 168_960 + 253_440 + 88_320),
    ],
    ids=["31b", "26b-a4b"],
)
def test_parameter_counts_are_transformers_less_the_norms(
    tmp_path: Path, cfg: dict[str, Any], reference: int, left_out: int
) -> None:
    assert param_count(read_config(tmp_path, cfg)) == reference - left_out


def test_the_k_eq_v_projection_and_the_dense_mlp_by_hand(tmp_path: Path) -> None:
    h = 5376
    full = h * 32 * 512 + h * 4 * 512 + 32 * 512 * h  # q, one K = V, o
    sliding = h * 32 * 256 + 2 * h * 16 * 256 + 32 * 256 * h
    body = 10 * full + 50 * sliding + 60 * (3 * h * 21504 + 2 * h) + h
    assert param_count(read_config(tmp_path, GEMMA4_31B)) == body + 262144 * h
    h = 2816
    full = h * 16 * 512 + h * 2 * 512 + 16 * 512 * h
    sliding = h * 16 * 256 + 2 * h * 8 * 256 + 16 * 256 * h
    moe = 128 * 3 * h * 704 + 3 * h * 2112 + h * 128  # experts, the dense MLP, the router
    active = 8 * 3 * h * 704 + 3 * h * 2112 + h * 128
    rest = 5 * full + 25 * sliding + 30 * 2 * h + h + 262144 * h
    m = read_config(tmp_path, GEMMA4_26B, "26b")
    assert param_count(m) == rest + 30 * moe
    assert active_param_count(m) == rest + 30 * active == 3_822_001_920


@pytest.mark.parametrize(
    ("key", "cfg"), [("Gemma 4 31B", GEMMA4_31B), ("google/gemma-4-26b-a4b-it", GEMMA4_26B)]
)
def test_catalog_entries_are_the_configs(tmp_path: Path, key: str, cfg: dict[str, Any]) -> None:
    entry = get_model(key)
    assert _shape(entry) == _shape(read_config(tmp_path, cfg))
    assert "huggingface.co/google/gemma-4-" in entry.source
    assert get_model("gemma-4-31b-it").key == "gemma4-31b"


@pytest.mark.parametrize(
    ("change", "key", "needs"),
    [
        ({"hidden_size_per_layer_input": 256}, "hidden_size_per_layer_input", "per-layer"),
        ({"hidden_size_per_layer_input": None}, "hidden_size_per_layer_input", "per-layer"),
        ({"num_kv_shared_layers": 20}, "num_kv_shared_layers", "reuse an earlier layer"),
        ({"use_bidirectional_attention": "all"}, "use_bidirectional_attention", "bidirectional"),
    ],
)
def test_the_small_models_extras_are_refused(
    tmp_path: Path, change: dict[str, Any], key: str, needs: str
) -> None:
    text = {k: v for k, v in GEMMA4_26B.items() if k not in change or change[k] is not None}
    text |= {k: v for k, v in change.items() if v is not None}
    with pytest.raises(InputError, match=needs) as err:
        read_config(tmp_path, text)
    assert key in str(err.value)


def test_defaults_as_gemma4textconfig_sets_them(tmp_path: Path) -> None:
    # no layer_types: every 6th layer and the last full; no num_global_key_value_heads and
    # no K = V: the full layers keep num_key_value_heads, with global_head_dim 512
    cfg = {
        "model_type": "gemma4_text",
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "hidden_size_per_layer_input": 0,
        "num_global_key_value_heads": 1,
    }
    m = read_config(tmp_path, cfg)
    assert (m.window, m.window_layers) == (512, 6)  # layers 5 and 7 full
    assert (m.kv_heads, m.head_dim, m.k_eq_v, m.vocab, m.tied_embeddings) == (
        2, 512, False, 262144, True
    )  # fmt: skip
    assert m.window_attn is not None and m.window_attn.head_dim == 256
    # the expert keys without enable_moe_block are not read
    m = read_config(tmp_path, {**cfg, "num_experts": 8, "top_k_experts": 2}, "two")
    assert not m.is_moe
