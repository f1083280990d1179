"""Real Hugging Face config.json files read into the published parameter counts: a gated
MLP decided by the architecture (model_type), not the activation's name (Gemma's GeGLU), and
a missing ``tie_word_embeddings`` read as the config class's default."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli

from gpuscale.catalog import get_model
from gpuscale.catalog.hf import load_hf_config
from gpuscale.errors import InputError
from gpuscale.perf.transformer import attn_dims, param_count

# https://huggingface.co/google/gemma-7b/blob/main/config.json (first release: hidden_act
# "gelu", no tie_word_embeddings key; GemmaConfig ties them). 8.54 B: Gemma report (arXiv
# 2403.08295) Table 2, 786 M embedding + 7,751 M non-embedding
GEMMA_7B: dict[str, Any] = {
    "architectures": ["GemmaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "head_dim": 256,
    "hidden_act": "gelu",
    "hidden_size": 3072,
    "initializer_range": 0.02,
    "intermediate_size": 24576,
    "max_position_embeddings": 8192,
    "model_type": "gemma",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 16,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.38.0.dev0",
    "use_cache": True,
    "vocab_size": 256000,
}

# https://huggingface.co/google/gemma-2-9b/blob/main/config.json (the -it file, same shape,
# is quoted whole in github.com/vllm-project/vllm/issues/10548); 9,241,705,984 parameters
# on the model page, of which 2 x 42 x 3584 are Gemma 2's extra pre/post-feedforward norms
GEMMA2_9B: dict[str, Any] = {
    "architectures": ["Gemma2ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0,
    "bos_token_id": 2,
    "cache_implementation": "hybrid",
    "eos_token_id": 1,
    "final_logit_softcapping": 30.0,
    "head_dim": 256,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 3584,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "gemma2",
    "num_attention_heads": 16,
    "num_hidden_layers": 42,
    "num_key_value_heads": 8,
    "pad_token_id": 0,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "sliding_window_size": 4096,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.42.0.dev0",
    "use_cache": True,
    "vocab_size": 256000,
}

# https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json; 8,030,261,248
LLAMA3_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}

# https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json; 7,241,732,096
MISTRAL_7B: dict[str, Any] = {
    "architectures": ["MistralForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.34.0.dev0",
    "use_cache": True,
    "vocab_size": 32000,
}

# https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json; 7,615,616,512 with the
# query/key/value biases (28 x (3584 + 2 x 512) = 129,024), which the count here leaves out
QWEN25_7B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 3584,
    "initializer_range": 0.02,
    "intermediate_size": 18944,
    "max_position_embeddings": 131072,
    "max_window_layers": 28,
    "model_type": "qwen2",
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1",
    "use_cache": True,
    "use_mrope": False,
    "use_sliding_window": False,
    "vocab_size": 152064,
}


def _write(tmp_path: Path, cfg: dict[str, Any], name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize(
    ("cfg", "billions", "published"),
    [
        (GEMMA_7B, 8.54, 8_537_680_896),
        (GEMMA2_9B, 9.24, 9_241_705_984 - 2 * 42 * 3584),
        (LLAMA3_8B, 8.03, 8_030_261_248),
        (MISTRAL_7B, 7.24, 7_241_732_096),
        (QWEN25_7B, 7.62, 7_615_616_512 - 28 * (3584 + 2 * 512)),
    ],
    ids=["gemma-7b", "gemma-2-9b", "llama-3-8b", "mistral-7b", "qwen2.5-7b"],
)
def test_published_configs_give_published_counts(
    tmp_path: Path, cfg: dict[str, Any], billions: float, published: int
) -> None:
    n = param_count(load_hf_config(_write(tmp_path, cfg)))
    assert round(n / 1e9, 2) == billions
    # the same weights as the checkpoint, less what the model does not count (biases and
    # Gemma 2's two extra norms a layer, 0.003 % together)
    assert n == published


def test_gemma_7b_reads_as_the_catalog_entry(tmp_path: Path) -> None:
    m = load_hf_config(_write(tmp_path, GEMMA_7B))
    cat = get_model("gemma-7b")
    assert (m.gated_mlp, m.tied_embeddings) == (True, True)
    # 16 heads of 256 = 4096 query/output width on a 3072 hidden size
    assert attn_dims(m) == (4096, 4096) == attn_dims(cat)
    assert param_count(m) == param_count(cat)


@pytest.mark.parametrize(
    "act",
    [
        {"hidden_act": "gelu"},
        {"hidden_act": "gelu_pytorch_tanh"},
        {"hidden_activation": "gelu_pytorch_tanh"},  # the later gemma-7b file
        {},
    ],
)
@pytest.mark.parametrize("model_type", ["gemma", "gemma2", "gemma3_text"])
def test_gemma_mlps_are_gated_whatever_the_activation(
    tmp_path: Path, model_type: str, act: dict[str, str]
) -> None:
    cfg = {k: v for k, v in GEMMA_7B.items() if k != "hidden_act"}
    m = load_hf_config(_write(tmp_path, {**cfg, **act, "model_type": model_type}))
    assert m.gated_mlp


@pytest.mark.parametrize(
    ("model_type", "act", "gated"),
    [
        ("llama", "gelu", True),  # LlamaMLP has gate_proj whatever the activation
        ("phi3", "silu", True),
        ("deepseek_v2", "silu", True),
        ("gpt_neox", "gelu", False),
        ("gpt2", "gelu_new", False),
        ("opt", "relu", False),
        ("bloom", "gelu", False),
        ("falcon", "gelu", False),
        ("gptj", "gelu_new", False),
        ("mpt", "silu", False),  # MptMLP: up_proj and down_proj only
        ("nemotron_h", "relu2", False),
        # not in the table: the activation's name decides, as before
        ("olmo", "silu", True),
        ("starcoder2", "gelu_pytorch_tanh", False),
    ],
)
def test_gating_follows_the_architecture(
    tmp_path: Path, model_type: str, act: str, gated: bool
) -> None:
    cfg = {**LLAMA3_8B, "model_type": model_type, "hidden_act": act}
    assert load_hf_config(_write(tmp_path, cfg)).gated_mlp is gated


@pytest.mark.parametrize(
    ("model_type", "tied"),
    [
        ("gemma", True),
        ("gemma2", True),
        ("gemma3_text", True),
        ("gpt2", True),
        ("opt", True),
        ("bloom", True),  # BloomConfig leaves it to PretrainedConfig (True)
        ("gpt_bigcode", True),
        ("llama", False),
        ("mistral", False),
        ("mixtral", False),
        ("qwen2", False),
        ("qwen2_moe", False),
        ("qwen3", False),
        ("qwen3_moe", False),
        ("deepseek_v2", False),
        ("deepseek_v3", False),
        ("gpt_neox", False),
        ("phi3", False),
        ("llama4_text", False),
        ("nemotron_h", False),
    ],
)
def test_a_missing_tie_key_is_the_config_class_default(
    tmp_path: Path, model_type: str, tied: bool
) -> None:
    cfg = {k: v for k, v in LLAMA3_8B.items() if k != "tie_word_embeddings"}
    m = load_hf_config(_write(tmp_path, {**cfg, "model_type": model_type}))
    assert m.tied_embeddings is tied


@pytest.mark.parametrize("value", [True, False])
def test_a_given_tie_key_wins_over_the_default(tmp_path: Path, value: bool) -> None:
    for model_type in ("gemma", "llama", "olmo"):
        cfg = {**GEMMA_7B, "model_type": model_type, "tie_word_embeddings": value}
        assert load_hf_config(_write(tmp_path, cfg)).tied_embeddings is value


@pytest.mark.parametrize("model_type", ["olmo", None])
def test_an_unknown_model_type_without_the_tie_key_names_the_key(
    tmp_path: Path, model_type: str | None
) -> None:
    cfg = {k: v for k, v in LLAMA3_8B.items() if k not in ("tie_word_embeddings", "model_type")}
    if model_type:
        cfg["model_type"] = model_type
    with pytest.raises(InputError) as exc:
        load_hf_config(_write(tmp_path, cfg))
    assert exc.value.field.endswith("/config.json:tie_word_embeddings")
    assert "true or false" in exc.value.valid
    assert len(str(exc.value)) < 200  # one line


def test_gemma2_alternates_sliding_and_global_layers(tmp_path: Path) -> None:
    # Gemma2Config: layer i uses the window when (i + 1) % 2, 21 of the 42
    m = load_hf_config(_write(tmp_path, GEMMA2_9B))
    assert (m.window, m.window_layers) == (4096, 21)
    kinds = ["sliding_attention", "full_attention"] * 21
    listed = load_hf_config(_write(tmp_path, {**GEMMA2_9B, "layer_types": kinds}))
    assert (listed.window, listed.window_layers) == (4096, 21)
    # the window does not change the count (query_pre_attn_scalar neither)
    assert param_count(m) == param_count(listed)


def test_gemma3_uses_its_sliding_window_pattern(tmp_path: Path) -> None:
    # google/gemma-3-1b's config.json: 26 layers, a 512 window, every 6th layer global
    # (layers 6, 12, 18 and 24 counted from 1), the other 22 sliding
    cfg = {
        **GEMMA2_9B,
        "model_type": "gemma3_text",
        "num_hidden_layers": 26,
        "sliding_window": 512,
        "sliding_window_pattern": 6,
    }
    m = load_hf_config(_write(tmp_path, cfg))
    assert (m.window, m.window_layers) == (512, 26 - 4)


def test_the_cli_prints_gemma_7b_as_8_5_b(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, GEMMA_7B, "gemma-7b.json")
    args = ["train", "estimate", "--model", str(path), "--gpu", "h100-sxm", "--gpus", "8"]
    code, out, err = run_cli([*args, "--zero", "zero3"], capsys)
    assert code == 0, err
    assert "8.5 B parameters" in out


def _write_cfg(tmp_path: Path, cfg: dict[str, Any], name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


FALCON_7B = {
    "model_type": "falcon",
    "hidden_size": 4544,
    "num_attention_heads": 71,
    "num_hidden_layers": 32,
    "vocab_size": 65024,
    "multi_query": True,
    "new_decoder_architecture": False,
    "bias": False,
    "alibi": False,
}


def test_falcon_shares_its_kv_heads(tmp_path: Path) -> None:
    # Falcon-7B is multi-query: one K/V head. Per layer 4544^2 (Q) + 2 x 64 x 4544 (K, V)
    # + 4544^2 (out) + 2 x 4544 x 18176 (plain 4h MLP) = 207,060,992; x 32 + 65,024 x 4544
    # tied embeddings = 6,921,420,800, the 6.92 B it is published at (norms add 0.3 M)
    m = load_hf_config(_write_cfg(tmp_path, FALCON_7B))
    assert m.kv_heads == 1
    assert param_count(m) == pytest.approx(6_921_420_800, rel=1e-4)
    # Falcon-40B's spelling (new decoder architecture): num_kv_heads groups
    forty = {**FALCON_7B, "new_decoder_architecture": True, "num_kv_heads": 8}
    forty.update(hidden_size=8192, num_attention_heads=128, num_hidden_layers=60)
    assert load_hf_config(_write_cfg(tmp_path, forty, "f40.json")).kv_heads == 8


@pytest.mark.parametrize("model_type", ["jamba", "mamba", "mamba2"])
def test_layer_layouts_config_json_gives_in_keys_not_read_are_refused(
    tmp_path: Path, model_type: str
) -> None:
    cfg = {"model_type": model_type, "hidden_size": 4096, "num_hidden_layers": 32}
    cfg.update(num_attention_heads=32, vocab_size=65536)
    with pytest.raises(InputError, match=f"model_type='{model_type}' is invalid: a model_type"):
        load_hf_config(_write_cfg(tmp_path, cfg))


def test_gemma3_multimodal_config_takes_the_text_defaults(tmp_path: Path) -> None:
    # Gemma 3 27B's published config.json: the text_config leaves the vocabulary (262,208)
    # and the tied embeddings to Gemma3TextConfig's defaults
    text = {"model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504}
    text.update(num_attention_heads=32, num_hidden_layers=62, num_key_value_heads=16)
    text.update(head_dim=128, sliding_window=1024)
    m = load_hf_config(_write_cfg(tmp_path, {"model_type": "gemma3", "text_config": text}))
    assert m.vocab == 262208 and m.tied_embeddings
    assert param_count(m) / 1e9 == pytest.approx(27.0, abs=0.1)


def test_gemma3_text_configs_missing_their_heads_take_the_class_defaults(
    tmp_path: Path,
) -> None:
    # google/gemma-3-12b-it's text_config states no head_dim (Gemma3TextConfig: 256) nor a
    # context (131,072); gemma-3-4b-it's no heads either (8 query, 4 KV heads of 256)
    text = {"model_type": "gemma3_text", "hidden_size": 3840, "intermediate_size": 15360}
    text.update(num_attention_heads=16, num_hidden_layers=48, num_key_value_heads=8)
    text.update(sliding_window=1024, rope_scaling={"factor": 8.0, "rope_type": "linear"})
    m = load_hf_config(_write_cfg(tmp_path, {"model_type": "gemma3", "text_config": text}))
    assert (m.head_dim, m.max_seq, m.window, m.window_layers) == (256, 131072, 1024, 40)
    # per layer: q 3840 x 4096 + k, v 3840 x 2048 each + o 4096 x 3840 + GeGLU 3 x 3840 x
    # 15360 = 224,133,120; x 48 + 262,208 x 3840 tied = 11,765,391,360 (norms 0.25 M more)
    assert param_count(m) == pytest.approx(11_765_391_360, rel=1e-4)
    small = {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240}
    small.update(num_hidden_layers=34, sliding_window=1024)
    four = load_hf_config(_write_cfg(tmp_path, {"model_type": "gemma3", "text_config": small}))
    assert (four.heads, four.kv_heads, four.head_dim) == (8, 4, 256)
    # a key the file gives as null stays null: no window
    none = load_hf_config(_write_cfg(tmp_path, {**small, "sliding_window": None}, "n.json"))
    assert none.window == 0


@pytest.mark.parametrize("model_type", ["phi3", "mixtral", "starcoder2"])
def test_a_sliding_window_these_models_set_applies_to_every_layer(
    tmp_path: Path, model_type: str
) -> None:
    # Phi3Attention, MixtralAttention, Starcoder2Attention pass config.sliding_window to
    # every layer: Phi-3-mini-4k's 2,047 tokens; a null one (phi-4, Mixtral) is none
    cfg = {"model_type": model_type, "hidden_size": 3072, "intermediate_size": 8192}
    cfg.update(num_attention_heads=32, num_hidden_layers=32, vocab_size=32064)
    if model_type == "starcoder2":  # keys gpuscale needs of a model_type it has no table for
        cfg.update(hidden_act="gelu_pytorch_tanh", tie_word_embeddings=True)
    m = load_hf_config(_write_cfg(tmp_path, {**cfg, "sliding_window": 2047}))
    assert (m.window, m.window_layers) == (2047, 32)
    assert load_hf_config(_write_cfg(tmp_path, {**cfg, "sliding_window": None})).window == 0


def test_a_top_level_tie_holds_for_the_text_model(tmp_path: Path) -> None:
    text = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192}
    text.update(num_attention_heads=32, num_hidden_layers=16, vocab_size=128256)
    cfg = {"model_type": "llava", "tie_word_embeddings": True, "text_config": text}
    assert load_hf_config(_write_cfg(tmp_path, cfg)).tied_embeddings


def test_more_dense_layers_than_layers_names_the_key(tmp_path: Path) -> None:
    cfg = {"model_type": "deepseek_v3", "hidden_size": 1024, "num_hidden_layers": 4}
    cfg.update(num_attention_heads=8, vocab_size=1000, n_routed_experts=8)
    cfg.update(num_experts_per_tok=2, moe_intermediate_size=256, first_k_dense_replace=6)
    with pytest.raises(InputError, match="first_k_dense_replace=6 is invalid: at most"):
        load_hf_config(_write_cfg(tmp_path, cfg))


def test_a_snapshots_config_is_named_after_its_folder(tmp_path: Path) -> None:
    folder = tmp_path / "falcon-7b"
    folder.mkdir()
    assert load_hf_config(_write_cfg(folder, FALCON_7B)).key == "falcon-7b"
    assert load_hf_config(_write_cfg(tmp_path, FALCON_7B, "f7.json")).key == "f7"


def test_deepseek_and_qwen3_moe_keys_left_out_take_the_config_class_defaults(
    tmp_path: Path,
) -> None:
    # DeepseekV3Config's MLA and MoE defaults are DeepSeek-V3's (kv_lora_rank 512, 256
    # experts of 2,048), Qwen3MoeConfig's 128 experts of 768, 8 a token: a file leaving
    # them out is the same model, not an MHA or dense one (671.03 B; 30.53 B)
    v3 = {"model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168}
    v3.update(intermediate_size=18432, num_hidden_layers=61, num_attention_heads=128)
    v3.update(num_key_value_heads=128, num_nextn_predict_layers=0)
    m = load_hf_config(_write_cfg(tmp_path, v3, "v3.json"))
    assert m.mla is not None and m.mla.kv_lora_rank == 512
    assert param_count(m) == param_count(get_model("deepseek-v3").model_copy(
        update={"mtp_layers": 0, "mtp_weight_sets": 0}))  # fmt: skip
    qm = {"model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 2048}
    qm.update(intermediate_size=6144, num_hidden_layers=48, num_attention_heads=32)
    qm.update(num_key_value_heads=4, head_dim=128)
    q = load_hf_config(_write_cfg(tmp_path, qm, "qm.json"))
    assert (q.num_experts, q.top_k, q.ffn_hidden) == (128, 8, 768)
    assert param_count(q) == param_count(get_model("qwen3-30b-a3b"))


def test_a_head_dimension_of_zero_is_refused(tmp_path: Path) -> None:
    cfg = {"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 2}
    cfg.update(num_attention_heads=8, vocab_size=1000, intermediate_size=4096, head_dim=0)
    with pytest.raises(InputError, match="head_dim=0 is invalid: an integer of at least 1"):
        load_hf_config(_write_cfg(tmp_path, cfg))
