"""config.json files of 2025-2026 families: IBM Granite 4.0-H (a Mamba-2 hybrid whose layers
are a mixer then a MoE with a shared MLP), Tencent Hunyuan-A13B (per-layer MoE lists),
model types whose MLP and tied embeddings the reader must know without an activation key
(Kimi K2), and architectures refused by name rather than read as a transformer of the wrong
shape (Falcon-H1's parallel hybrid, LFM2's convolutions, MiniMax's lightning attention).

Reference counts: transformers 5.25 building each model on the meta device
(``AutoModelForCausalLM.from_config``), summing ``numel`` over its parameters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_runner import read_config

from gpuscale.catalog import get_model
from gpuscale.catalog.schema import Model
from gpuscale.errors import InputError
from gpuscale.perf.transformer import active_param_count, param_count

_GRANITE_ATTENTION = (5, 15, 25, 35)
"""The attention layers of Granite 4.0-H Tiny and Small (the other 36 are Mamba-2)."""

# https://huggingface.co/ibm-granite/granite-4.0-h-tiny/blob/main/config.json, the keys the
# reader uses; IBM's model card: 7 B parameters, 1 B active
GRANITE_H_TINY: dict[str, Any] = {
    "model_type": "granitemoehybrid",
    "hidden_act": "silu",
    "hidden_size": 1536,
    "num_hidden_layers": 40,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "intermediate_size": 512,
    "shared_intermediate_size": 1024,
    "num_local_experts": 64,
    "num_experts_per_tok": 6,
    "vocab_size": 100352,
    "tie_word_embeddings": True,
    "mamba_d_state": 128,
    "mamba_n_groups": 1,
    "mamba_n_heads": 48,
    "mamba_d_head": 64,
    "mamba_expand": 2,
    "mamba_d_conv": 4,
    "mamba_chunk_size": 256,
    "max_position_embeddings": 131072,
    "position_embedding_type": "nope",
    "layer_types": ["attention" if i in _GRANITE_ATTENTION else "mamba" for i in range(40)],
}
# https://huggingface.co/ibm-granite/granite-4.0-h-small/blob/main/config.json: 32 B, 9 B
# active (model card); its shared MLP (1,536) is twice the routed experts' width (768)
GRANITE_H_SMALL: dict[str, Any] = {
    **GRANITE_H_TINY,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 768,
    "shared_intermediate_size": 1536,
    "num_local_experts": 72,
    "num_experts_per_tok": 10,
    "mamba_n_heads": 128,
}
# https://huggingface.co/tencent/Hunyuan-A13B-Instruct/blob/main/config.json: MoE sizes as
# one value per layer; 80 B parameters, 13 B active (model card)
HUNYUAN_A13B: dict[str, Any] = {
    "model_type": "hunyuan_v1_moe",
    "hidden_act": "silu",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 3072,
    "vocab_size": 128167,
    "max_position_embeddings": 32768,
    "num_experts": 64,
    "moe_intermediate_size": [3072] * 32,
    "moe_topk": [8] * 32,
    "num_shared_expert": [1] * 32,
    "use_mixed_mlp_moe": True,
    "use_qk_norm": True,
    "tie_word_embeddings": True,
}


def _shape(m: Model) -> dict[str, Any]:
    """A model's fields but its names (which follow the config's folder)."""
    return m.model_dump(exclude={"key", "name", "source"})


def test_granite_h_tiny_is_a_mamba_hybrid_with_shared_mlps(tmp_path: Path) -> None:
    m = read_config(tmp_path, GRANITE_H_TINY)
    assert m.pattern == "".join(("*" if i in _GRANITE_ATTENTION else "M") + "E" for i in range(40))
    assert (m.attn_layers, m.mamba_layers, m.moe_layers) == (4, 36, 40)
    assert m.mamba is not None and m.mamba.rule == "ssd"
    assert (m.mamba.heads, m.mamba.head_dim, m.mamba.state, m.mamba.chunk) == (48, 64, 128, 256)
    assert (m.ffn_hidden, m.shared_experts, m.shared_ffn_hidden) == (512, 2, 1024)
    assert m.position == "none"  # position_embedding_type nope
    assert (param_count(m), active_param_count(m)) == (6_939_037_248, 1_465_470_528)


def test_granite_h_small_matches_transformers_and_the_card(tmp_path: Path) -> None:
    m = read_config(tmp_path, GRANITE_H_SMALL)
    assert (param_count(m), active_param_count(m)) == (32_207_337_984, 8_803_121_664)
    assert round(param_count(m) / 1e9) == 32 and round(active_param_count(m) / 1e9) == 9


def test_granite_layer_kinds_in_transformers_5_spelling(tmp_path: Path) -> None:
    five = {"mamba": "linear_attention", "attention": "full_attention"}
    cfg = {**GRANITE_H_SMALL, "layer_types": [five[k] for k in GRANITE_H_SMALL["layer_types"]]}
    assert _shape(read_config(tmp_path, cfg)) == _shape(
        read_config(tmp_path, GRANITE_H_SMALL, "four")
    )


def test_granite_without_experts_runs_its_shared_mlp_as_the_dense_one(tmp_path: Path) -> None:
    m = read_config(tmp_path, {**GRANITE_H_TINY, "num_local_experts": 0})
    assert not m.is_moe and m.pattern.count("-") == 40 and m.dense_ffn_hidden == 1024
    h, inner, state, heads = 1536, 3072, 128, 48
    conv = inner + 2 * state  # x, B and C (one group)
    mamba = h * (inner + conv + heads) + conv * 4 + conv + 3 * heads + inner + inner * h
    attention = 2 * h * 1536 + 2 * h * 4 * 128
    mlp = 3 * h * 1024
    # tied embedding, final norm, 36 Mamba-2 and 4 attention mixers, 40 MLPs, 2 norms a layer
    total = 100352 * h + h + 36 * mamba + 4 * attention + 40 * (mlp + 2 * h)
    assert param_count(m) == total == 895_307_328  # transformers' count too


def test_granite_mamba_head_dim_must_fill_the_mixer(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"mamba_d_head.*3072 / 48"):
        read_config(tmp_path, {**GRANITE_H_TINY, "mamba_d_head": 32})


def test_hunyuan_per_layer_lists(tmp_path: Path) -> None:
    m = read_config(tmp_path, HUNYUAN_A13B)
    assert (m.num_experts, m.top_k, m.ffn_hidden, m.shared_ffn_hidden) == (64, 8, 3072, 3072)
    # transformers counts 80,393,183,232 and 12,747,448,320: the difference is its per-head
    # query and key norms (use_qk_norm: 2 x 128 weights a layer), which gpuscale leaves out
    qk_norms = 32 * 2 * 128
    assert param_count(m) == 80_393_183_232 - qk_norms
    assert active_param_count(m) == 12_747_448_320 - qk_norms


def test_hunyuan_cross_layer_attention_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"use_cla=True.*cross-layer attention"):
        read_config(tmp_path, {**HUNYUAN_A13B, "use_cla": True})


def test_hunyuan_per_layer_values_that_differ_are_refused(tmp_path: Path) -> None:
    cfg = {**HUNYUAN_A13B, "moe_topk": [8] * 31 + [4]}
    with pytest.raises(InputError, match=r"moe_topk.*one value for every layer"):
        read_config(tmp_path, cfg)


def test_kimi_k2_is_gated_without_an_activation_key(tmp_path: Path) -> None:
    """Kimi K2 is DeepSeek-V3's architecture under its own model_type: gated experts and
    untied embeddings whether or not the file says hidden_act."""
    base: dict[str, Any] = {
        "model_type": "kimi_k2",
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 384,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 1,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "vocab_size": 163840,
    }
    m = read_config(tmp_path, base)
    assert m.gated_mlp and not m.tied_embeddings
    # the card's 1.04 T counts its MTP layer; without it 1,026.4 B
    assert round(param_count(m) / 1e8) == 10264
    assert _shape(m) == _shape(read_config(tmp_path, {**base, "hidden_act": "silu"}, "k2"))


def test_an_unknown_model_type_must_name_its_activation(tmp_path: Path) -> None:
    cfg = {
        "model_type": "some_new_lm",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "intermediate_size": 4096,
        "vocab_size": 1000,
        "tie_word_embeddings": False,
    }
    with pytest.raises(InputError, match=r"hidden_act.*some_new_lm.*silu for a gated"):
        read_config(tmp_path, cfg)
    assert read_config(tmp_path, {**cfg, "hidden_act": "silu"}, "g").gated_mlp
    assert not read_config(tmp_path, {**cfg, "hidden_act": "gelu"}, "u").gated_mlp


@pytest.mark.parametrize(
    ("model_type", "says"),
    [
        ("falcon_h1", "side by side"),
        ("lfm2", "short-convolution"),
        ("bamba", "attn_layer_indices"),
        ("gemma3n_text", "AltUp"),
    ],
)
def test_unmodelled_architectures_are_refused_by_name(
    tmp_path: Path, model_type: str, says: str
) -> None:
    cfg = {**GRANITE_H_TINY, "model_type": model_type}
    with pytest.raises(InputError, match=rf"model_type='{model_type}'.*{says}"):
        read_config(tmp_path, cfg)


def test_minimax_m2_lightning_layers_are_refused(tmp_path: Path) -> None:
    cfg: dict[str, Any] = {
        "model_type": "minimax_m2",
        "hidden_size": 3072,
        "num_hidden_layers": 4,
        "num_attention_heads": 48,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 1536,
        "num_local_experts": 256,
        "num_experts_per_tok": 8,
        "vocab_size": 200064,
        "attn_type_list": [1, 1, 1, 1],
    }
    assert read_config(tmp_path, cfg).num_experts == 256
    with pytest.raises(InputError, match=r"attn_type_list=0.*lightning"):
        read_config(tmp_path, {**cfg, "attn_type_list": [0, 1, 1, 1]}, "lightning")


def test_shared_width_defaults_to_whole_experts_and_needs_a_count() -> None:
    base: dict[str, Any] = {
        "key": "x",
        "name": "x",
        "source": "test",
        "layers": 2,
        "hidden": 64,
        "heads": 4,
        "ffn_hidden": 32,
        "vocab": 100,
        "num_experts": 8,
        "top_k": 2,
    }
    assert Model.model_validate({**base, "shared_experts": 2}).shared_ffn_hidden == 64
    assert (
        Model.model_validate(
            {**base, "shared_experts": 1, "shared_ffn_hidden": 48}
        ).shared_ffn_hidden
        == 48
    )
    with pytest.raises(ValueError, match="shared_ffn_hidden=48 needs shared_experts"):
        Model.model_validate({**base, "shared_ffn_hidden": 48})


@pytest.mark.parametrize(
    ("outer", "inner", "says"),
    [
        ("kimi_k3", "kimi_linear", "Kimi K3's KDA"),
        ("gemma3n", "gemma3n_text", "Gemma 3n's"),
    ],
)
def test_a_multimodal_wrapper_is_refused_by_its_own_model_type(
    tmp_path: Path, outer: str, inner: str | None, says: str
) -> None:
    text = {k: v for k, v in GRANITE_H_TINY.items() if k != "model_type"}
    if inner:
        text["model_type"] = inner
    with pytest.raises(InputError, match=rf"model_type='{outer}'.*{says}"):
        read_config(tmp_path, {"model_type": outer, "text_config": text})


def test_nemotron_3_nano_4b_is_its_cards_count() -> None:
    """Megatron-Bridge's verification card: "all 263 tensors and 3,973,556,832 parameters"."""
    m = get_model("Nemotron 3 Nano 4B")
    assert (m.mamba_layers, m.attn_layers, m.mlp_layers) == (21, 4, 17)
    assert param_count(m) == 3_973_556_832
