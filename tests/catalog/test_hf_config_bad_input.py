"""A malformed Hugging Face config.json: one error naming the file, the key and the value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuscale.catalog.hf import load_hf_config
from gpuscale.errors import InputError

LLAMA: dict[str, Any] = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "hidden_act": "silu",
}
MOE = {**LLAMA, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}


def _load(tmp_path: Path, cfg: dict[str, Any]) -> InputError:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError) as exc:
        load_hf_config(path)
    return exc.value


def test_a_good_config_loads(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    m = load_hf_config(path)
    assert (m.layers, m.kv_heads, m.head_dim, m.ffn_hidden) == (32, 8, 128, 14336)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num_key_value_heads", "eight"),
        ("intermediate_size", "big"),
        ("head_dim", "x"),
        ("sliding_window", [128]),
        ("num_hidden_layers", True),  # JSON true is not a layer count
        ("num_hidden_layers", "32"),
        ("num_key_value_heads", 0),
        ("hidden_size", 40.5),
    ],
)
def test_a_bad_integer_names_its_key(tmp_path: Path, key: str, value: Any) -> None:
    err = _load(tmp_path, {**LLAMA, key: value})
    assert err.field.endswith(f"/config.json:{key}")
    assert err.value == value


@pytest.mark.parametrize(
    ("key", "value"),
    [("num_local_experts", "x"), ("num_experts_per_tok", 0), ("moe_intermediate_size", 0)],
)
def test_a_bad_expert_size_names_its_key(tmp_path: Path, key: str, value: Any) -> None:
    assert _load(tmp_path, {**MOE, key: value}).field.endswith(f"/config.json:{key}")


def test_an_integral_float_is_read_as_an_integer(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "num_hidden_layers": 32.0}))
    assert load_hf_config(path).layers == 32


@pytest.mark.parametrize(
    ("change", "words"),
    [
        # said in the file's keys, not the catalog's fields
        ({"num_key_value_heads": 5}, "num_key_value_heads=5 must divide num_attention_heads=32"),
        (
            {"num_attention_heads": 30, "num_key_value_heads": 30},
            "hidden_size=4096 is not a multiple of num_attention_heads=30",
        ),
        ({"n_group": 2, "topk_group": 5}, "topk_group=5 exceeds n_group=2"),
        ({"num_nextn_predict_layers": 33}, "num_nextn_predict_layers=33 exceeds the model's 32"),
    ],
)
def test_an_inconsistent_shape_is_explained(
    tmp_path: Path, change: dict[str, Any], words: str
) -> None:
    err = _load(tmp_path, {**LLAMA, **change})
    assert words in err.valid
    assert len(err.valid) < 200  # the reason, not a dump of the whole config


def test_top_k_above_the_experts(tmp_path: Path) -> None:
    err = _load(tmp_path, {**MOE, "num_experts_per_tok": 16})
    assert "num_experts_per_tok=16 exceeds num_local_experts=8" in err.valid


def test_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe{\x00")
    with pytest.raises(InputError, match="not a readable JSON file"):
        load_hf_config(path)


def test_a_block_type_that_is_not_a_name(tmp_path: Path) -> None:
    cfg = {**LLAMA, "model_type": "nemotron_h", "layers_block_type": [{"a": 1}]}
    err = _load(tmp_path, cfg)
    assert err.field.endswith("/config.json:layers_block_type")


def test_an_absurd_layer_count_is_refused_not_searched(tmp_path: Path) -> None:
    err = _load(tmp_path, {**LLAMA, "num_hidden_layers": 10**15})
    assert err.field.endswith("/config.json:num_hidden_layers")  # the file's key


def test_qwen2_moe_shared_expert_is_counted(tmp_path: Path) -> None:
    cfg = {
        **MOE,
        "model_type": "qwen2_moe",
        "num_experts": 60,
        "num_local_experts": None,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = load_hf_config(path)
    assert (m.num_experts, m.ffn_hidden, m.shared_experts) == (60, 1408, 4)  # 5632 = 4 x 1408


@pytest.mark.parametrize("key", ["tie_word_embeddings", "use_sliding_window"])
def test_a_boolean_given_as_text_is_refused(tmp_path: Path, key: str) -> None:
    err = _load(tmp_path, {**LLAMA, "sliding_window": 4096, key: "false"})
    assert err.field.endswith(f"/config.json:{key}")


def test_mla_without_a_query_key_head_dimension_is_refused(tmp_path: Path) -> None:
    mla = {"kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 0, "qk_rope_head_dim": 0}
    err = _load(tmp_path, {**LLAMA, "model_type": "deepseek_v3", **mla})
    assert err.field.endswith("/config.json:qk_nope_head_dim")
    assert "at least 1" in err.valid


def test_a_gated_mlp_must_state_its_width(tmp_path: Path) -> None:
    # Llama's config class defaults intermediate_size to 11008 whatever the hidden size:
    # no ratio to hidden_size can stand in for it
    cfg = {k: v for k, v in LLAMA.items() if k != "intermediate_size"}
    err = _load(tmp_path, cfg)
    assert err.field.endswith("/config.json:intermediate_size") and err.value is None
    assert "required for a gated (SwiGLU-style) MLP" in err.valid


def test_gpt2_without_n_inner_has_four_times_hidden(tmp_path: Path) -> None:
    # GPT2Config: n_inner None is 4 x n_embd
    path = tmp_path / "config.json"
    cfg = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257}
    path.write_text(json.dumps(cfg))
    assert load_hf_config(path).ffn_hidden == 3072


def test_an_moe_config_stating_only_the_experts_width_uses_it_for_the_mlp(tmp_path: Path) -> None:
    # every layer an MoE layer: the experts' width is the only MLP width there is
    cfg = {k: v for k, v in MOE.items() if k != "intermediate_size"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "moe_intermediate_size": 1536}))
    m = load_hf_config(path)
    assert (m.ffn_hidden, m.num_experts) == (1536, 8)


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    # json.loads keeps the last value; a repeated YAML key is refused, so is this
    path = tmp_path / "config.json"
    text = json.dumps(LLAMA)
    path.write_text(text[:-1] + ', "hidden_size": 2048}')
    with pytest.raises(InputError) as exc:
        load_hf_config(path)
    assert "repeated with two values: hidden_size" in exc.value.valid
    # the same value twice changes nothing, and is read
    path.write_text(text[:-1] + ', "hidden_size": 4096}')
    assert load_hf_config(path).hidden == 4096


GPT_OSS_LIKE = {**LLAMA, "model_type": "gpt_oss", "sliding_window": 128, "num_hidden_layers": 4}


@pytest.mark.parametrize(
    ("kinds", "value", "valid"),
    [
        (["sliding_attention", "full_attention"], "2 entries", "one per layer: 4"),
        (["sliding", "full_attention"] * 2, "sliding", "full_attention, sliding_attention"),
        ("full_attention", "full_attention", "a list of kinds, one per layer"),
    ],
)
def test_layer_types_must_name_each_layer_as_transformers_spells_it(
    tmp_path: Path, kinds: object, value: str, valid: str
) -> None:
    err = _load(tmp_path, {**GPT_OSS_LIKE, "layer_types": kinds})
    assert err.field.endswith("config.json:layer_types")
    assert err.value == value and valid in err.valid


def test_layer_types_as_listed_count_the_sliding_layers(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    kinds = ["sliding_attention", "full_attention"] * 2
    path.write_text(json.dumps({**GPT_OSS_LIKE, "layer_types": kinds}))
    m = load_hf_config(path)
    assert (m.window, m.window_layers) == (128, 2)


def test_a_model_type_that_is_not_a_name_is_refused(tmp_path: Path) -> None:
    err = _load(tmp_path, {**LLAMA, "model_type": {"a": 1}})
    assert err.field.endswith("config.json:model_type") and "a name" in err.valid


def test_expert_groups_must_split_the_experts_evenly(tmp_path: Path) -> None:
    err = _load(tmp_path, {**MOE, "n_group": 3, "topk_group": 1})
    assert "n_group=3 does not divide" in err.valid


def test_a_token_cannot_reach_more_experts_than_its_groups_hold(tmp_path: Path) -> None:
    # 8 experts in 4 groups of 2, a token's experts from 1 group: at most 2 a token
    err = _load(tmp_path, {**MOE, "n_group": 4, "topk_group": 1, "num_experts_per_tok": 3})
    assert "num_experts_per_tok=3 exceeds the 2 experts a token can reach" in err.valid
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({**MOE, "n_group": 4, "topk_group": 1, "num_experts_per_tok": 2}))
    assert load_hf_config(ok).top_k == 2


def test_an_moe_config_must_say_how_many_experts_a_token_uses(tmp_path: Path) -> None:
    # no silent top-1: Mixtral routes to 2, DeepSeek-V3 to 8, and the file must say which
    cfg = {k: v for k, v in MOE.items() if k != "num_experts_per_tok"}
    err = _load(tmp_path, cfg)
    assert err.field.endswith("config.json:num_experts_per_tok") and err.value is None
    assert "a mixture of 8 experts" in err.valid


def test_a_per_layer_list_holds_one_value_for_each_layer(tmp_path: Path) -> None:
    err = _load(tmp_path, {**LLAMA, "intermediate_size": [14336]})
    assert err.field.endswith("config.json:intermediate_size")
    assert err.valid == "a number, or a list of 32 (one for each layer)"
    path = tmp_path / "per_layer.json"
    path.write_text(json.dumps({**LLAMA, "intermediate_size": [14336] * 32}))
    assert load_hf_config(path).ffn_hidden == 14336


def test_an_absurd_mlp_width_is_refused(tmp_path: Path) -> None:
    err = _load(tmp_path, {**LLAMA, "intermediate_size": 10**15})
    assert "less than or equal to 100000000" in err.valid


def test_a_folder_reads_as_its_config_json_or_as_the_model_it_is_named_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuscale.catalog import get_model

    # a downloaded checkout (huggingface-cli download ... --local-dir): its config.json
    checkout = tmp_path / "my-model"
    checkout.mkdir()
    (checkout / "config.json").write_text(json.dumps({**LLAMA, "num_hidden_layers": 12}))
    assert get_model(str(checkout)).layers == 12
    # a folder without one, named like a catalog model, in the working directory: the model
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Llama-3.1-8B").mkdir()
    assert get_model("Llama-3.1-8B").key == "llama3-8b"
    (tmp_path / "notes").mkdir()
    with pytest.raises(InputError, match=r"a directory without a config\.json"):
        get_model("notes")
