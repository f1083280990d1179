"""Research-suite models that published GPU training benchmarks use: GPT-2, Pythia, OPT 1.3B to
66B, OLMo 1B / 7B, OLMo 2 7B / 13B / 32B, OLMoE 1B-7B, TinyLlama 1.1B, Qwen2.5 0.5B / 1.5B /
3B, Gemma 2 2B and Gemma 3 1B / 4B, each checked against the figures its card, README or paper
publishes, and the names benchmarks give them.

Every expected count is a published figure (cited beside it), never a value read back from
gpuscale; the catalog entries cite the config each shape comes from.
"""

from __future__ import annotations

import pytest
from cli_runner import embedding_matrices

from gpuscale.catalog import get_model
from gpuscale.perf.transformer import active_param_count, param_count

GPT2 = ("gpt2-124m", "gpt2-355m", "gpt2-774m", "gpt2-1.5b")
PYTHIA = (
    "pythia-70m",
    "pythia-160m",
    "pythia-410m",
    "pythia-1b",
    "pythia-1.4b",
    "pythia-2.8b",
    "pythia-6.9b",
    "pythia-12b",
)
OPT = ("opt-1.3b", "opt-2.7b", "opt-6.7b", "opt-13b", "opt-30b", "opt-66b")
OLMO = ("olmo-1b", "olmo-7b", "olmo2-7b", "olmo2-13b", "olmo2-32b", "olmoe-1b-7b")
OTHERS = (
    "tinyllama-1.1b",
    "qwen2.5-0.5b",
    "qwen2.5-1.5b",
    "qwen2.5-3b",
    "gemma2-2b",
    "gemma3-1b",
    "gemma3-4b",
)
ENTRIES = (*GPT2, *PYTHIA, *OPT, *OLMO, *OTHERS)


def _sig(x: float, digits: int = 2) -> float:
    """``x`` rounded to ``digits`` significant figures, as a size in a model's name is."""
    return float(f"{x:.{digits}g}")


@pytest.mark.parametrize(
    ("key", "published", "rel"),
    [
        # openai/gpt-2 model_card.md: "124 million, 355 million, and 774 million parameter
        # models" (to the nearest million; the catalog leaves out the linear and LayerNorm
        # biases, about 0.1 M in the 124M: within 0.5 %)
        ("gpt2-124m", 124e6, 5e-3),
        ("gpt2-355m", 355e6, 5e-3),
        ("gpt2-774m", 774e6, 5e-3),
        # the card calls the XL "1.5 billion parameters"; OpenAI released it as the 1558M
        # checkpoint (download_model.py 1558M): to the nearest million, biases not counted
        ("gpt2-1.5b", 1558e6, 1e-3),
        # Pythia model card, "total params" (Biderman et al. 2023): the catalog leaves out
        # GPT-NeoX's biases, 11 h a layer (Q/K/V 3 h, output h, MLP 5 h, two LayerNorms 2 h)
        # and the final LayerNorm's: at most 0.07 % (the 410M)
        ("pythia-70m", 70_426_624, 1e-3),
        ("pythia-160m", 162_322_944, 1e-3),
        ("pythia-410m", 405_334_016, 1e-3),
        ("pythia-1b", 1_011_781_632, 1e-3),
        ("pythia-1.4b", 1_414_647_808, 1e-3),
        ("pythia-2.8b", 2_775_208_960, 1e-3),
        ("pythia-6.9b", 6_857_302_016, 1e-3),
        ("pythia-12b", 11_846_072_320, 1e-3),
        # allenai/OLMo-1B-hf and OLMo-7B-hf safetensors: 1,176,764,416 and 6,888,095,744.
        # OLMo's LayerNorm has no weights; the catalog counts 2 h a layer and h for them
        # (67,584 and 266,240 parameters)
        ("olmo-1b", 1_176_764_416, 1e-4),
        ("olmo-7b", 6_888_095_744, 1e-4),
        # allenai/OLMo-2-1124-7B, OLMo-2-1124-13B and OLMo-2-0325-32B safetensors:
        # 7,298,617,344, 13,716,198,400 and 32,234,279,936; the catalog leaves out the
        # per-layer Q and K norms (262,144, 409,600 and 393,216 parameters)
        ("olmo2-7b", 7_298_617_344, 1e-4),
        ("olmo2-13b", 13_716_198_400, 1e-4),
        ("olmo2-32b", 32_234_279_936, 1e-4),
        # google/gemma-2-2b safetensors: 2,614,341,888; the catalog leaves out Gemma 2's
        # extra post-attention and post-MLP norms (2 h a layer: 119,808 parameters)
        ("gemma2-2b", 2_614_341_888, 1e-4),
        # Gemma 3 report (arXiv 2503.19786) Table 1, language model only: 1B 302 M
        # embedding + 698 M non-embedding; 4B 675 M + 3,209 M (without the 417 M vision
        # encoder); figures in millions, the report's embedding counts a little larger
        ("gemma3-1b", 302e6 + 698e6, 2e-3),
        ("gemma3-4b", 675e6 + 3_209e6, 2e-3),
    ],
)
def test_total_params_match_published(key: str, published: float, rel: float) -> None:
    assert param_count(get_model(key)) == pytest.approx(published, rel=rel)


@pytest.mark.parametrize(
    ("key", "billions"),
    [
        # OPT: Zhang et al. 2022 Table 1 names each model by its size to two significant
        # figures (ours 1.315, 2.651, 6.657, 12.85, 29.97, 65.71 B, biases left out)
        ("opt-1.3b", 1.3),
        ("opt-2.7b", 2.7),
        ("opt-6.7b", 6.7),
        ("opt-13b", 13),
        ("opt-30b", 30),
        ("opt-66b", 66),
        # TinyLlama README: "1.1B parameters"
        ("tinyllama-1.1b", 1.1),
        # OLMoE paper (arXiv 2409.02060) Table 1: 6.9B total parameters
        ("olmoe-1b-7b", 6.9),
    ],
)
def test_sizes_match_their_names(key: str, billions: float) -> None:
    assert _sig(param_count(get_model(key)) / 1e9) == billions


@pytest.mark.parametrize(
    ("key", "total", "non_embedding"),
    [
        # Qwen2.5 model cards, "Number of Parameters" and "(Non-Embedding)": 0.49B / 0.36B,
        # 1.54B / 1.31B, 3.09B / 2.77B (two decimals; the tied V x h matrix counted once,
        # Q/K/V biases left out)
        ("qwen2.5-0.5b", 0.49, 0.36),
        ("qwen2.5-1.5b", 1.54, 1.31),
        ("qwen2.5-3b", 3.09, 2.77),
    ],
)
def test_qwen25_counts_match_their_cards(key: str, total: float, non_embedding: float) -> None:
    params = param_count(get_model(key))
    assert round(params / 1e9, 2) == total
    assert round((params - embedding_matrices(key)) / 1e9, 2) == non_embedding


@pytest.mark.parametrize(
    ("key", "published"),
    [
        # Biderman et al. 2023 (arXiv 2304.01373) Table 1, "Non-Embedding Params"
        ("pythia-70m", 18_915_328),
        ("pythia-160m", 85_056_000),
        ("pythia-410m", 302_311_424),
        ("pythia-1b", 805_736_448),
        ("pythia-1.4b", 1_208_602_624),
        ("pythia-2.8b", 2_517_652_480),
        ("pythia-6.9b", 6_444_163_072),
        ("pythia-12b", 11_327_027_200),
    ],
)
def test_pythia_non_embedding_params_match_table_1(key: str, published: int) -> None:
    # the biases (11 h a layer and h) are the whole difference: at most 0.18 % (the 70M)
    non_embedding = param_count(get_model(key)) - embedding_matrices(key)
    assert non_embedding == pytest.approx(published, rel=2e-3)


@pytest.mark.parametrize(
    ("key", "total", "non_embedding"),
    [
        # Pythia model card, total and non-embedding params: their difference is the input
        # embedding and the untied output head, 2 V h, which gives the padded vocabulary
        ("pythia-70m", 70_426_624, 18_915_328),
        ("pythia-410m", 405_334_016, 302_311_424),
        ("pythia-6.9b", 6_857_302_016, 6_444_163_072),
        ("pythia-12b", 11_846_072_320, 11_327_027_200),
    ],
)
def test_pythia_vocab_is_the_padded_one_the_card_implies(
    key: str, total: int, non_embedding: int
) -> None:
    m = get_model(key)
    assert not m.tied_embeddings
    assert (total - non_embedding) % (2 * m.hidden) == 0
    assert m.vocab == (total - non_embedding) // (2 * m.hidden)


def test_olmoe_moe_layout_and_active_params() -> None:
    # OLMoE config: 64 experts of 1024 (SwiGLU), top-8, in all 16 layers; OLMoE paper
    # Table 1: 1.3B active parameters (two significant figures, embeddings included)
    m = get_model("olmoe-1b-7b")
    assert (m.num_experts, m.top_k, m.shared_experts, m.moe_layers) == (64, 8, 0, 16)
    assert m.ffn_hidden == 1024 and m.gated_mlp
    assert _sig(active_param_count(m) / 1e9) == 1.3


@pytest.mark.parametrize(
    ("key", "window", "layers"),
    [
        # Gemma 2: a 4,096-token window on every other layer (13 of 26)
        ("gemma2-2b", 4096, 13),
        # Gemma 3: 5 local layers for every global one; 1B a 512 window (22 of 26 local),
        # 4B a 1,024 window (29 of 34)
        ("gemma3-1b", 512, 22),
        ("gemma3-4b", 1024, 29),
    ],
)
def test_gemma_sliding_window_layers(key: str, window: int, layers: int) -> None:
    m = get_model(key)
    assert (m.window, m.window_layers, m.window_kind) == (window, layers, "sliding")


def test_gpt2_and_opt_are_learned_position_tied_dropout_models() -> None:
    # GPT-2: 1,024 learned positions, vocab 50257, tied head, 4h GELU MLP, dropout 0.1;
    # OPT: 2,048 learned positions, vocab 50272, tied head, 4h ReLU MLP, dropout 0.1
    for key, positions, vocab in [
        *((k, 1024, 50257) for k in GPT2),
        *((k, 2048, 50272) for k in OPT),
    ]:
        m = get_model(key)
        assert (m.position, m.max_seq, m.vocab) == ("learned", positions, vocab), key
        assert m.tied_embeddings and m.dropout, key
        assert not m.gated_mlp and m.ffn_hidden == 4 * m.hidden, key


def test_pythia_is_rotary_untied_without_dropout() -> None:
    # Pythia configs: rotary, no-weight-tying, 4h GELU MLP, hidden and attention dropout 0
    for key in PYTHIA:
        m = get_model(key)
        assert (m.position, m.max_seq) == ("rope", 2048), key
        assert not (m.tied_embeddings or m.dropout or m.gated_mlp), key
        assert m.ffn_hidden == 4 * m.hidden and m.kv_heads == m.heads, key


def test_tied_embeddings_as_the_configs_say() -> None:
    # OLMo 1B weight_tying true; Qwen2.5 0.5B-3B and the Gemmas tie; OLMo 7B, OLMo 2,
    # OLMoE and TinyLlama do not
    tied = {"olmo-1b", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b"}
    tied |= {"gemma2-2b", "gemma3-1b", "gemma3-4b"}
    for key in (*OLMO, *OTHERS):
        assert get_model(key).tied_embeddings == (key in tied), key


@pytest.mark.parametrize(
    ("key", "kv_heads"),
    [
        # grouped-query attention: TinyLlama 4 query groups; Qwen2.5 2; OLMo 2 32B 8;
        # Gemma 2 2B 4, Gemma 3 1B 1, Gemma 3 4B 4; OLMo 2 7B / 13B multi-head
        ("tinyllama-1.1b", 4),
        ("qwen2.5-0.5b", 2),
        ("qwen2.5-3b", 2),
        ("olmo2-32b", 8),
        ("olmo2-7b", 32),
        ("gemma2-2b", 4),
        ("gemma3-1b", 1),
        ("gemma3-4b", 4),
    ],
)
def test_key_value_heads(key: str, kv_heads: int) -> None:
    assert get_model(key).kv_heads == kv_heads


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("GPT-2 XL", "gpt2-1.5b"),
        ("gpt2-xl", "gpt2-1.5b"),
        ("GPT2-1.5B", "gpt2-1.5b"),
        ("openai-community/gpt2-xl", "gpt2-1.5b"),
        ("gpt2", "gpt2-124m"),
        ("openai-community/gpt2", "gpt2-124m"),
        ("gpt2-medium", "gpt2-355m"),
        ("GPT-2 Large", "gpt2-774m"),
        ("Pythia-1B", "pythia-1b"),
        ("EleutherAI/pythia-6.9b", "pythia-6.9b"),
        ("EleutherAI/pythia-12b-deduped", "pythia-12b"),
        ("pythia-410m-deduped", "pythia-410m"),
        ("OPT-1.3B", "opt-1.3b"),
        ("facebook/opt-66b", "opt-66b"),
        ("OPT 30B", "opt-30b"),
        ("OLMo-1B", "olmo-1b"),
        ("allenai/OLMo-7B-hf", "olmo-7b"),
        ("OLMo-2-1124-7B", "olmo2-7b"),
        ("allenai/OLMo-2-1124-13B-Instruct", "olmo2-13b"),
        ("OLMo-2-0325-32B", "olmo2-32b"),
        ("OLMo 2 32B", "olmo2-32b"),
        ("allenai/OLMoE-1B-7B-0924", "olmoe-1b-7b"),
        ("OLMoE-1B-7B", "olmoe-1b-7b"),
        ("TinyLlama-1.1B", "tinyllama-1.1b"),
        ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "tinyllama-1.1b"),
        ("Qwen2.5-0.5B", "qwen2.5-0.5b"),
        ("Qwen/Qwen2.5-1.5B-Instruct", "qwen2.5-1.5b"),
        ("Qwen2.5 3B", "qwen2.5-3b"),
        ("Gemma-2-2B", "gemma2-2b"),
        ("google/gemma-2-2b-it", "gemma2-2b"),
        ("gemma-3-1b-it", "gemma3-1b"),
        ("Gemma 3 4B", "gemma3-4b"),
    ],
)
def test_published_names_resolve(name: str, key: str) -> None:
    assert get_model(name).key == key


def test_existing_names_keep_their_models() -> None:
    # the new aliases take no name an older entry answers to
    assert get_model("opt").key == "opt-175b"
    assert get_model("Qwen2-7B").key == "qwen2.5-7b"
    assert get_model("gemma-2-9b-it").key == "gemma2-9b"
    assert get_model("GPT-NeoX-20B").key == "gpt-neox-20b"


def test_entries_cite_a_source_at_a_commit() -> None:
    for key in ENTRIES:
        source = get_model(key).source
        assert source.startswith("[P] ") and "/blob/" in source, key
