"""Qwen3 0.6B / 1.7B / 4B, Grok-1, MiniMax-M2, StarCoder2 3B / 7B / 15B, Moonlight-16B-A3B,
NVIDIA Nemotron Nano 2 (9B, 12B), and the Llama 3.1 Nemotron 70B name.

Every expected count is a figure the model's own card, README or paper publishes (cited
beside it), never a value read back from gpuscale; the catalog entries cite the config each
shape comes from.
"""

from __future__ import annotations

import pytest

from gpuscale.catalog import get_model
from gpuscale.perf.transformer import active_param_count, param_count

NEW_KEYS = (
    "qwen3-0.6b",
    "qwen3-1.7b",
    "qwen3-4b",
    "grok-1",
    "minimax-m2",
    "starcoder2-3b",
    "starcoder2-7b",
    "starcoder2-15b",
    "moonlight-16b-a3b",
    "nemotron-nano-9b-v2",
    "nemotron-nano-12b-v2",
)


def _embedding_matrices(key: str) -> int:
    """The V x h input embedding and, unless tied, the output head."""
    m = get_model(key)
    return m.vocab * m.hidden * (1 if m.tied_embeddings else 2)


@pytest.mark.parametrize(
    ("key", "published", "rel"),
    [
        # Qwen3 model cards: 0.6B, 1.7B and 4.0B parameters (two significant figures; ours
        # 0.596 B, 1.721 B and 4.022 B, the per-head Q/K norms left out)
        ("qwen3-0.6b", 0.6e9, 1.5e-2),
        ("qwen3-1.7b", 1.7e9, 1.5e-2),
        ("qwen3-4b", 4.0e9, 1.5e-2),
        # xai-org/grok-1 README: 314B parameters (ours 315.68 B)
        ("grok-1", 314e9, 1e-2),
        # MiniMax-M2 (transformers model doc): 230 billion total parameters (ours 228.69 B)
        ("minimax-m2", 230e9, 1e-2),
        # bigcode/starcoder2-3b: 3.03 B parameters on its Hugging Face listing (ours
        # 3.0295 B, biases left out)
        ("starcoder2-3b", 3.03e9, 1e-2),
        # NVIDIA-Nemotron-Nano-9B-v2: 8.89 B (NVIDIA's release figure);
        # NVIDIA-Nemotron-Nano-12B-v2-Base card: 12.31 B (ours 8.8882 B and 12.3100 B)
        ("nemotron-nano-9b-v2", 8.89e9, 1e-3),
        ("nemotron-nano-12b-v2", 12.31e9, 1e-3),
    ],
)
def test_total_params_match_published(key: str, published: float, rel: float) -> None:
    assert param_count(get_model(key)) == pytest.approx(published, rel=rel)


@pytest.mark.parametrize(
    ("key", "published", "rel"),
    [
        # Qwen3 model cards, "Number of Parameters (Non-Embedding)": 0.44B, 1.4B, 3.6B (the
        # tied V x h matrix counted once; ours 0.4405 B, 1.409 B, 3.634 B)
        ("qwen3-0.6b", 0.44e9, 1.5e-2),
        ("qwen3-1.7b", 1.4e9, 1.5e-2),
        ("qwen3-4b", 3.6e9, 1.5e-2),
        # Moonlight-16B-A3B release: 15.29B total parameters, a count without the embedding
        # matrices (ours 15.289 B; 15.96 B with the input embedding and output head)
        ("moonlight-16b-a3b", 15.29e9, 1e-2),
    ],
)
def test_non_embedding_params_match_published(key: str, published: float, rel: float) -> None:
    non_embedding = param_count(get_model(key)) - _embedding_matrices(key)
    assert non_embedding == pytest.approx(published, rel=rel)


@pytest.mark.parametrize(
    ("key", "published", "rel"),
    [
        # Moonlight-16B-A3B release: 2.24B activated parameters, without the embeddings (ours
        # 2.244 B)
        ("moonlight-16b-a3b", 2.24e9, 1e-2),
        # MiniMax-M2: 10 billion active parameters, a rounded figure; ours 9.80 B without
        # the input embedding and output head (11.03 B with them), the way the GLM-4.5
        # figures round in test_more_models
        ("minimax-m2", 10e9, 2e-2),
    ],
)
def test_active_params_without_embeddings_match_published(
    key: str, published: float, rel: float
) -> None:
    active = active_param_count(get_model(key)) - _embedding_matrices(key)
    assert active == pytest.approx(published, rel=rel)


@pytest.mark.parametrize(
    ("key", "billions"),
    [
        # the StarCoder2 cards name the models by whole billions: "a 3B / 7B / 15B parameter
        # model" (ours 3.03 B, 7.17 B tied, 15.96 B untied)
        ("starcoder2-3b", 3),
        ("starcoder2-7b", 7),
        ("starcoder2-15b", 15),
    ],
)
def test_starcoder2_sizes_match_their_cards(key: str, billions: int) -> None:
    assert param_count(get_model(key)) // 10**9 == billions


def test_tied_embeddings_as_the_configs_say() -> None:
    # Qwen3 0.6B/1.7B/4B tie_word_embeddings true; Grok-1 decodes with its input embedding;
    # StarCoder2 3B and 7B have no lm_head.weight; the others untie
    tied = {"qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "grok-1", "starcoder2-3b", "starcoder2-7b"}
    for key in NEW_KEYS:
        assert get_model(key).tied_embeddings == (key in tied), key


def test_starcoder2_mlp_is_not_gated_and_attention_slides() -> None:
    for key in ("starcoder2-3b", "starcoder2-7b", "starcoder2-15b"):
        m = get_model(key)
        assert not m.gated_mlp and m.ffn_hidden == 4 * m.hidden
        assert (m.window, m.window_layers, m.max_seq) == (4096, m.layers, 16384)


def test_moe_layouts() -> None:
    # Grok-1: 8 experts top-2 in all 64 layers, expert width int(8 x 6144) x 2 // 3;
    # MiniMax-M2: 256 experts top-8 in all 62 layers; Moonlight: the first of 27 layers
    # dense, 64 routed experts top-6 + 2 shared
    grok = get_model("grok-1")
    assert (grok.num_experts, grok.top_k, grok.moe_layers) == (8, 2, 64)
    assert grok.ffn_hidden == 8 * 6144 * 2 // 3
    m2 = get_model("minimax-m2")
    assert (m2.num_experts, m2.top_k, m2.shared_experts, m2.moe_layers) == (256, 8, 0, 62)
    ml = get_model("moonlight-16b-a3b")
    assert (ml.num_experts, ml.top_k, ml.shared_experts, ml.moe_layers) == (64, 6, 2, 26)
    assert ml.mla is not None and ml.mla.q_lora_rank == 0


@pytest.mark.parametrize(
    ("key", "mamba", "mlp", "attention"),
    [
        # NVIDIA-Nemotron-Nano-9B-v2: 56 layers, 27 Mamba, 25 MLP, 4 attention;
        # Nemotron-Nano-12B-v2-Base card: 62 layers, 28 each of MLP and Mamba-2, 6 attention
        ("nemotron-nano-9b-v2", 27, 25, 4),
        ("nemotron-nano-12b-v2", 28, 28, 6),
    ],
)
def test_nemotron_nano_v2_block_pattern(key: str, mamba: int, mlp: int, attention: int) -> None:
    m = get_model(key)
    assert (m.mamba_layers, m.mlp_layers, m.attn_layers) == (mamba, mlp, attention)
    assert m.mamba is not None
    assert (m.mamba.heads, m.mamba.head_dim, m.mamba.state, m.mamba.groups) == (128, 80, 128, 8)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("Qwen3-0.6B", "qwen3-0.6b"),
        ("Qwen/Qwen3-0.6B", "qwen3-0.6b"),
        ("Qwen3-0.6B-Base", "qwen3-0.6b"),
        ("Qwen3 1.7B", "qwen3-1.7b"),
        ("Qwen3-1.7B", "qwen3-1.7b"),
        ("Qwen3-4B", "qwen3-4b"),
        ("Qwen3_4B", "qwen3-4b"),
        ("Grok-1", "grok-1"),
        ("xai-org/grok-1", "grok-1"),
        ("Grok 1", "grok-1"),
        ("MiniMax-M2", "minimax-m2"),
        ("MiniMaxAI/MiniMax-M2", "minimax-m2"),
        ("MiniMax M2", "minimax-m2"),
        ("StarCoder2-3B", "starcoder2-3b"),
        ("bigcode/starcoder2-7b", "starcoder2-7b"),
        ("StarCoder2 15B", "starcoder2-15b"),
        ("Moonlight-16B-A3B", "moonlight-16b-a3b"),
        ("moonshotai/Moonlight-16B-A3B-Instruct", "moonlight-16b-a3b"),
        ("NVIDIA-Nemotron-Nano-9B-v2", "nemotron-nano-9b-v2"),
        ("nvidia/NVIDIA-Nemotron-Nano-9B-v2-Base", "nemotron-nano-9b-v2"),
        ("Nemotron Nano 2 9B", "nemotron-nano-9b-v2"),
        ("NVIDIA-Nemotron-Nano-12B-v2-Base", "nemotron-nano-12b-v2"),
        ("Nemotron-Nano-12B-v2", "nemotron-nano-12b-v2"),
        ("Llama 3.1 Nemotron 70B", "llama3-70b"),
        ("Llama-3.1-Nemotron-70B-Instruct", "llama3-70b"),
        ("nvidia/Llama-3.1-Nemotron-70B-Instruct-HF", "llama3-70b"),
    ],
)
def test_published_names_resolve(name: str, key: str) -> None:
    assert get_model(name).key == key


def test_new_entries_cite_a_source_at_a_commit() -> None:
    for key in NEW_KEYS:
        source = get_model(key).source
        assert source.startswith("[P] ") and "/blob/" in source, key
