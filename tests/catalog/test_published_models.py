"""Models published GPU training benchmarks use, each checked against the figures its
card, README or paper publishes: GLM-4.5, Qwen3-Coder, Gemma 2/3, Mistral Large 2 / NeMo /
Small 3, Phi-4, Qwen3 0.6B / 1.7B / 4B, Grok-1, MiniMax-M2, StarCoder2 3B / 7B / 15B,
Moonlight-16B-A3B, NVIDIA Nemotron Nano 2 (9B, 12B), and the names benchmarks give them
(DeepSeek-R1 / V3.1, Llama 3.1 / 3.3, Llama 3.1 Nemotron 70B).

Every expected count is a published figure (cited beside it), never a value read back from
gpuscale; the catalog entries cite the config each shape comes from.
"""

from __future__ import annotations

import pytest
from cli_runner import embedding_matrices

from gpuscale.catalog import get_model
from gpuscale.perf.transformer import active_param_count, param_count

ADDED_2025 = (
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
ENTRIES = (
    "glm4.5-355b-a32b",
    "glm4.5-air-106b-a12b",
    "qwen3-coder-480b-a35b",
    "gemma2-9b",
    "gemma2-27b",
    "gemma3-12b",
    "gemma3-27b",
    "mistral-large-123b",
    "mistral-nemo-12b",
    "mistral-small-24b",
    "phi-4",
    *ADDED_2025,
)


@pytest.mark.parametrize(
    ("key", "published", "rel"),
    [
        # zai-org/GLM-4.5 README: 355 B total, GLM-4.5-Air 106 B (without the MTP layer;
        # ours 352.8 B and 106.85 B)
        ("glm4.5-355b-a32b", 355e9, 1e-2),
        ("glm4.5-air-106b-a12b", 106e9, 1e-2),
        # Qwen/Qwen3-Coder-480B-A35B-Instruct: 480 B total (ours 480.15 B)
        ("qwen3-coder-480b-a35b", 480e9, 1e-3),
        # google/gemma-2-9b and -27b safetensors: 9,241,705,984 and 27,227,128,320; the
        # catalog leaves out Gemma 2's extra post-attention and post-MLP norms (2 h a layer:
        # 301,056 and 423,936 parameters)
        ("gemma2-9b", 9_241_705_984, 1e-4),
        ("gemma2-27b", 27_227_128_320, 1e-4),
        # Gemma 3 report (arXiv 2503.19786) Table 1, language model only (no 417 M vision
        # encoder): 12B 1,012 M embedding + 10,759 M non-embedding; 27B 1,416 M + 25,600 M
        ("gemma3-12b", 1_012e6 + 10_759e6, 2e-3),
        ("gemma3-27b", 1_416e6 + 25_600e6, 2e-3),
        # mistralai/Mistral-Large-Instruct-2407 model card: 123 B (ours 122.61 B)
        ("mistral-large-123b", 123e9, 1e-2),
        # mistralai/Mistral-Nemo-Base-2407 safetensors: 12,247,782,400
        ("mistral-nemo-12b", 12_247_782_400, 1e-9),
        # mistralai/Mistral-Small-24B-Base-2501 safetensors: 23,572,403,200
        ("mistral-small-24b", 23_572_403_200, 1e-9),
        # microsoft/phi-4 safetensors: 14,659,507,200
        ("phi-4", 14_659_507_200, 1e-9),
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
    non_embedding = param_count(get_model(key)) - embedding_matrices(key)
    assert non_embedding == pytest.approx(published, rel=rel)


@pytest.mark.parametrize(
    ("key", "published", "rel"),
    [
        # Qwen3-Coder-480B-A35B: 35 B activated (ours 35.47 B, embeddings included)
        ("qwen3-coder-480b-a35b", 35e9, 1.5e-2),
    ],
)
def test_moe_active_params_match_published(key: str, published: float, rel: float) -> None:
    assert active_param_count(get_model(key)) == pytest.approx(published, rel=rel)


@pytest.mark.parametrize(
    ("key", "published", "rel"),
    [
        # zai-org/GLM-4.5 README: 32 B and 12 B activated. Ours with the input embedding
        # and output head are 33.63 B and 13.42 B; without those two V x h matrices
        # 32.08 B and 12.18 B, which is how the GLM figures round
        ("glm4.5-355b-a32b", 32e9, 2e-2),
        ("glm4.5-air-106b-a12b", 12e9, 2e-2),
        # Moonlight-16B-A3B release: 2.24B activated parameters, without the embeddings (ours
        # 2.244 B)
        ("moonlight-16b-a3b", 2.24e9, 1e-2),
        # MiniMax-M2: 10 billion active parameters, a rounded figure; ours 9.80 B without
        # the input embedding and output head (11.03 B with them), the way the GLM-4.5
        # figures round
        ("minimax-m2", 10e9, 2e-2),
    ],
)
def test_active_params_without_embeddings_match_published(
    key: str, published: float, rel: float
) -> None:
    active = active_param_count(get_model(key)) - embedding_matrices(key)
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
    for key in ADDED_2025:
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


def test_glm_and_qwen3_coder_moe_layout() -> None:
    # GLM-4.5: 3 dense layers + 89 MoE (Megatron-Bridge moe_layer_freq [0]*3 + [1]*89);
    # GLM-4.5-Air: 1 + 45; Qwen3-Coder: every one of its 62 layers MoE
    assert get_model("glm4.5-355b-a32b").moe_layers == 89
    assert get_model("glm4.5-air-106b-a12b").moe_layers == 45
    assert get_model("qwen3-coder-480b-a35b").moe_layers == 62


@pytest.mark.parametrize(
    ("key", "window", "layers"),
    [
        # Gemma 2: a 4,096-token window on every other layer (Gemma2Config)
        ("gemma2-9b", 4096, 21),
        ("gemma2-27b", 4096, 23),
        # Gemma 3: 5 local layers of 1,024 for every global one (sliding_window_pattern 6)
        ("gemma3-12b", 1024, 40),
        ("gemma3-27b", 1024, 52),
    ],
)
def test_gemma_sliding_window_layers(key: str, window: int, layers: int) -> None:
    m = get_model(key)
    assert (m.window, m.window_layers, m.window_kind) == (window, layers, "sliding")


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
        ("GLM-4.5", "glm4.5-355b-a32b"),
        ("GLM_4.5", "glm4.5-355b-a32b"),
        ("glm4.5", "glm4.5-355b-a32b"),
        ("GLM 4.5", "glm4.5-355b-a32b"),
        ("GLM-4.5-355B-A32B", "glm4.5-355b-a32b"),
        ("GLM-4.5-Air", "glm4.5-air-106b-a12b"),
        ("GLM_4.5_Air", "glm4.5-air-106b-a12b"),
        ("glm4.5-air", "glm4.5-air-106b-a12b"),
        ("Qwen3-Coder-480B-A35B", "qwen3-coder-480b-a35b"),
        ("Qwen3-Coder-480B-A35B-Instruct", "qwen3-coder-480b-a35b"),
        ("Qwen3_Coder_480B_A35B", "qwen3-coder-480b-a35b"),
        ("Gemma-2-9B", "gemma2-9b"),
        ("Gemma 2 9B", "gemma2-9b"),
        ("Gemma-2-27B", "gemma2-27b"),
        ("gemma-2-27b-it", "gemma2-27b"),
        ("Gemma-3-12B", "gemma3-12b"),
        ("Gemma 3 27B", "gemma3-27b"),
        ("gemma-3-27b-it", "gemma3-27b"),
        ("Mistral-Large-Instruct-2407", "mistral-large-123b"),
        ("Mistral Large 2", "mistral-large-123b"),
        ("mistralai/Mistral-Large-Instruct-2407", "mistral-large-123b"),
        ("Mistral-Nemo-Base-2407", "mistral-nemo-12b"),
        ("Mistral-NeMo-12B", "mistral-nemo-12b"),
        ("Mistral-Small-24B-Instruct-2501", "mistral-small-24b"),
        ("Mistral Small 3", "mistral-small-24b"),
        ("Phi-4", "phi-4"),
        ("phi4", "phi-4"),
        ("DeepSeek-R1", "deepseek-v3"),
        ("DeepSeek-V3.1", "deepseek-v3"),
        ("Llama 3.3 70B", "llama3-70b"),
        ("Llama-3.3-70B", "llama3-70b"),
        ("Llama-3.1-70B", "llama3-70b"),
        ("Llama-3.1-405B", "llama3-405b"),
        ("Llama 3.1 405B", "llama3-405b"),
        ("Llama-3.1-8B", "llama3-8b"),
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


def test_entries_cite_a_source_at_a_commit() -> None:
    for key in ENTRIES:
        source = get_model(key).source
        assert source.startswith("[P] ") and "/blob/" in source, key


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("CodeLlama-7b-hf", "llama2-7b"),
        ("Code Llama 13B", "llama2-13b"),
        ("CodeLlama-70B", "llama2-70b"),
    ],
)
def test_code_llama_is_llama_2_with_16_more_tokens(name: str, base: str) -> None:
    # Code Llama's 7B, 13B and 70B add 16 infilling tokens to Llama 2's 32,000 (their
    # config.json: vocab 32016), in the input embedding and the untied output layer alike
    m, b = get_model(name), get_model(base)
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden) == (
        b.layers,
        b.hidden,
        b.heads,
        b.kv_heads,
        b.ffn_hidden,
    )
    assert m.vocab == 32016 and param_count(m) - param_count(b) == 2 * 16 * m.hidden
