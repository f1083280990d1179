"""Models published GPU training benchmarks use: GLM-4.5, Qwen3-Coder, Gemma 2/3, Mistral
Large 2 / NeMo / Small 3, Phi-4, and the DeepSeek-R1 / V3.1 and Llama 3.1 / 3.3 names.

Every expected count is a published figure (cited beside it), never a value read back from
gpuscale; the catalog entries cite the config.json each shape comes from.
"""

from __future__ import annotations

import pytest

from gpuscale.catalog import get_model
from gpuscale.perf.transformer import active_param_count, param_count


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
    ],
)
def test_total_params_match_published(key: str, published: float, rel: float) -> None:
    assert param_count(get_model(key)) == pytest.approx(published, rel=rel)


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
    ("key", "published"),
    [
        # zai-org/GLM-4.5 README: 32 B and 12 B activated. Ours with the input embedding
        # and output head are 33.63 B and 13.42 B; without those two V x h matrices
        # 32.08 B and 12.18 B, which is how the GLM figures round
        ("glm4.5-355b-a32b", 32e9),
        ("glm4.5-air-106b-a12b", 12e9),
    ],
)
def test_glm_active_params_without_embeddings_match_published(key: str, published: float) -> None:
    m = get_model(key)
    assert active_param_count(m) - 2 * m.vocab * m.hidden == pytest.approx(published, rel=2e-2)


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
    ],
)
def test_published_names_resolve(name: str, key: str) -> None:
    assert get_model(name).key == key


def test_new_entries_cite_a_source_at_a_commit() -> None:
    for key in (
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
    ):
        assert "/blob/" in get_model(key).source, key
