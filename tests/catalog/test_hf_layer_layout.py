"""Which layers of a config.json model are MoE, and which attend within chunks: each
family's keys, counted as its modeling code places them (transformers'
Qwen2MoeDecoderLayer, DeepseekV2DecoderLayer, Llama4TextDecoderLayer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuscale.catalog import get_model
from gpuscale.catalog.hf import load_hf_config
from gpuscale.errors import InputError
from gpuscale.perf.transformer import chunk_keys, keys_per_query, param_count

BASE: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 24,
    "num_attention_heads": 4,
    "vocab_size": 100,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_experts_per_tok": 2,
}


def _load(tmp_path: Path, **keys: Any) -> Any:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**BASE, **keys}))
    return load_hf_config(path)


@pytest.mark.parametrize(
    ("keys", "moe_layers"),
    [
        # Qwen2-MoE: layer i is MoE when (i + 1) % decoder_sparse_step == 0: 1, 3, ..., 23
        ({"model_type": "qwen2_moe", "num_experts": 4, "decoder_sparse_step": 2}, 12),
        # ... and not in mlp_only_layers: 24 - 2
        ({"model_type": "qwen3_moe", "num_experts": 4, "mlp_only_layers": [0, 5]}, 22),
        # both: 12 odd layers, of which 5 is dense
        (
            {"model_type": "qwen3_moe", "num_experts": 4, "decoder_sparse_step": 2}
            | {"mlp_only_layers": [0, 5]},
            11,
        ),
        # DeepSeek: i >= first_k_dense_replace and i % moe_layer_freq == 0: 2, 4, ..., 22
        (
            {"model_type": "deepseek_v2", "n_routed_experts": 4, "first_k_dense_replace": 1}
            | {"moe_layer_freq": 2},
            11,
        ),
        ({"model_type": "deepseek_v3", "n_routed_experts": 4, "first_k_dense_replace": 3}, 21),
        # Llama 4 Maverick: every second layer, by step or by the listed layers
        ({"model_type": "llama4_text", "num_local_experts": 4, "interleave_moe_layer_step": 2}, 12),
        ({"model_type": "llama4_text", "num_local_experts": 4, "moe_layers": [1, 3, 5]}, 3),
        ({"model_type": "mixtral", "num_local_experts": 4}, 24),
        # a null list is the default layout
        ({"model_type": "llama4_text", "num_local_experts": 4, "moe_layers": None}, 24),
        # ERNIE 4.5: start <= i <= end (-1: the last) and (i + 1) % interval == 0
        (
            {"model_type": "ernie4_5_moe", "moe_num_experts": 4, "moe_k": 2}
            | {"tie_word_embeddings": True, "moe_layer_start_index": 1}
            | {"moe_layer_end_index": -1, "moe_layer_interval": 1},
            23,
        ),
        (
            {"model_type": "ernie4_5_moe", "moe_num_experts": 4, "moe_k": 2}
            | {"tie_word_embeddings": True, "moe_layer_start_index": 2}
            | {"moe_layer_end_index": 20, "moe_layer_interval": 2},
            9,  # 3, 5, ..., 19 (21 is past the end)
        ),
    ],
    ids=["qwen-step", "qwen-mlp-only", "qwen-both", "deepseek-freq", "deepseek-v3", "llama4-step",
         "llama4-list", "mixtral", "llama4-null", "ernie", "ernie-span"],
)  # fmt: skip
def test_moe_layers_follow_the_familys_keys(
    tmp_path: Path, keys: dict[str, Any], moe_layers: int
) -> None:
    m = _load(tmp_path, **keys)
    assert m.moe_layers == moe_layers
    assert m.mlp_layers == 24 - moe_layers


def test_a_dense_layer_swaps_the_experts_for_the_dense_mlp(tmp_path: Path) -> None:
    every = _load(tmp_path, model_type="qwen3_moe", num_experts=4)
    two_dense = _load(tmp_path, model_type="qwen3_moe", num_experts=4, mlp_only_layers=[0, 5])
    # a gated MLP of 128 is 3 x 64 x 128 = 24,576 weights; 4 gated experts of 32 are as many,
    # plus the router's 64 x 4 = 256: two dense layers hold 2 x 256 fewer
    assert param_count(every) - param_count(two_dense) == 2 * 256


@pytest.mark.parametrize(
    ("key", "value"), [("mlp_only_layers", [0, 24]), ("mlp_only_layers", "0,5"),
                       ("moe_layers", [True]), ("decoder_sparse_step", 0)],
)  # fmt: skip
def test_a_bad_layer_key_names_the_key(tmp_path: Path, key: str, value: Any) -> None:
    with pytest.raises(InputError, match=key):
        _load(tmp_path, model_type="qwen3_moe", num_experts=4, **{key: value})


@pytest.mark.parametrize(
    ("seq", "keys"),
    [
        (8192, 4096.0),  # one whole chunk: causal attention, s / 2
        (32768, 4096.0),  # 4 chunks of 8,192: 4 x 8192^2 / (2 x 32768)
        (10000, (8192**2 + 1808**2) / 20000),  # a chunk and a remainder of 1,808
        (4096, 2048.0),  # shorter than a chunk: plain causal
    ],
)
def test_chunked_attention_keys(seq: int, keys: float) -> None:
    assert chunk_keys(seq, 8192) == pytest.approx(keys)
    assert chunk_keys(seq, 8192, causal=False) == pytest.approx(2 * keys)


def test_llama4_attends_within_chunks_in_3_of_4_layers() -> None:
    m = get_model("llama4-scout")
    assert (m.window, m.window_layers, m.window_kind) == (8192, 36, "chunked")
    # 12 global layers see 16,384 keys a query at 32k, the 36 chunked ones 4,096
    assert keys_per_query(m, 32768) == pytest.approx((12 * 16384 + 36 * 4096) / 48)
    # at the chunk length nothing changes
    assert keys_per_query(m, 8192) == 4096.0


@pytest.mark.parametrize(
    ("keys", "chunked"),
    [
        ({}, 18),
        ({"no_rope_layers": []}, 18),  # as Meta's Scout file has it: the default
        ({"no_rope_layer_interval": 2}, 12),
        ({"no_rope_layers": [1, 0] * 12}, 12),
    ],
)
def test_config_json_chunks_the_rope_layers(
    tmp_path: Path, keys: dict[str, Any], chunked: int
) -> None:
    m = _load(
        tmp_path, model_type="llama4_text", num_local_experts=4, attention_chunk_size=8192, **keys
    )
    assert (m.window, m.window_layers, m.window_kind) == (8192, chunked, "chunked")


def test_bad_no_rope_layers_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"no_rope_layers.*a list of 24 zeros and ones"):
        _load(
            tmp_path,
            model_type="llama4_text",
            num_local_experts=4,
            attention_chunk_size=8192,
            no_rope_layers=[1],
        )


# ERNIE-4.5-21B-A3B config.json (baidu/ERNIE-4.5-21B-A3B-PT): 21 B total, 3 B active on its
# model card
ERNIE_21B: dict[str, Any] = {
    "model_type": "ernie4_5_moe",
    "hidden_act": "silu",
    "hidden_size": 2560,
    "intermediate_size": 12288,
    "max_position_embeddings": 131072,
    "moe_intermediate_size": 1536,
    "moe_k": 6,
    "moe_layer_end_index": 27,
    "moe_layer_interval": 1,
    "moe_layer_start_index": 1,
    "moe_num_experts": 64,
    "moe_num_shared_experts": 2,
    "num_attention_heads": 20,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "tie_word_embeddings": True,
    "vocab_size": 103424,
}


def test_ernie_moe_reads_its_own_expert_keys(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(ERNIE_21B))
    m = load_hf_config(path)
    assert (m.num_experts, m.top_k, m.shared_experts, m.moe_layers) == (64, 6, 2, 27)
    # per layer: attention 2560 x (2560 + 2 x 512) + 2560 x 2560 = 15,728,640; 64 + 2
    # gated experts of 3 x 2560 x 1536 = 11,796,480 each and a 2560 x 64 router; layer 0
    # a gated MLP of 3 x 2560 x 12288; one tied 103,424 x 2560 embedding
    attn = 2560 * (2560 + 2 * 512) + 2560 * 2560
    moe = 66 * 3 * 2560 * 1536 + 2560 * 64
    dense = 3 * 2560 * 12288
    weights = 28 * attn + 27 * moe + dense + 103424 * 2560
    norms = 28 * 2 * 2560 + 2560
    assert param_count(m) == weights + norms
    assert round(param_count(m) / 1e9, 1) == 21.8


@pytest.mark.parametrize(
    ("keys", "key"),
    [
        # Qwen3-Next is read, but only with its Gated DeltaNet sizes
        ({"model_type": "qwen3_next", "num_experts": 4}, "linear_num_value_heads"),
        (
            {"model_type": "some_hybrid", "num_experts": 4}
            | {"layer_types": ["linear_attention"] * 3 + ["full_attention"]},
            "layer_types",
        ),
    ],
)
def test_linear_attention_models_are_refused(
    tmp_path: Path, keys: dict[str, Any], key: str
) -> None:
    with pytest.raises(InputError, match=f"config.json:{key}=.*linear"):
        _load(tmp_path, **keys)


def test_errors_name_the_snapshot_folder(tmp_path: Path) -> None:
    folder = tmp_path / "qwen3-moe-snapshot"
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(
        json.dumps({**BASE, "model_type": "qwen3_moe", "num_experts": 4, "decoder_sparse_step": 0})
    )
    with pytest.raises(InputError, match=r"qwen3-moe-snapshot/config\.json:decoder_sparse_step"):
        load_hf_config(path)


def test_ernie_keys_left_out_take_the_config_class_defaults(tmp_path: Path) -> None:
    # Ernie4_5_MoeConfig: 64 experts, top-6, 2 shared, layer 0 dense, tied embeddings
    trimmed = {k: v for k, v in ERNIE_21B.items() if not k.startswith("moe_") or k == "moe_k"}
    del trimmed["tie_word_embeddings"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(trimmed))
    m = load_hf_config(path)
    assert (m.num_experts, m.top_k, m.shared_experts, m.moe_layers) == (64, 6, 2, 27)
    assert m.tied_embeddings
    path.write_text(json.dumps(ERNIE_21B))
    assert param_count(m) == param_count(load_hf_config(path))


def test_a_hugging_face_cache_snapshot_is_named_after_its_repository(tmp_path: Path) -> None:
    # models--org--name/snapshots/<commit>/config.json links to ../../blobs/<etag>
    repo = tmp_path / "models--Qwen--Qwen3-30B-A3B"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / ("ab" * 20)
    snap.mkdir(parents=True)
    blob = repo / "blobs" / "e1"
    blob.write_text(json.dumps({**BASE, "model_type": "qwen3_moe", "num_experts": 4}))
    (snap / "config.json").symlink_to(Path("../../blobs/e1"))
    assert load_hf_config(snap / "config.json").key == "Qwen3-30B-A3B"
    bad = {**BASE, "model_type": "qwen3_moe", "num_experts": 4, "decoder_sparse_step": 0}
    blob.write_text(json.dumps(bad))
    with pytest.raises(InputError, match=r"^Qwen3-30B-A3B/config\.json:decoder_sparse_step"):
        load_hf_config(snap / "config.json")


def test_an_end_index_below_minus_one_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="moe_layer_end_index=-2 is invalid: a layer index, or -1"):
        _load(tmp_path, model_type="ernie4_5_moe", moe_layer_end_index=-2)
