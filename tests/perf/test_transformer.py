"""Transformer arithmetic: published parameter counts and the Megatron FLOP conventions.

Every expected value below is either a published figure (cited beside it) or the cited
formula evaluated by hand in the test, never a value read back from gpuscale.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscale.catalog import Model, get_model
from gpuscale.perf.flop_conventions import megatron_model_flops, megatron_sc21_flops
from gpuscale.perf.transformer import (
    active_param_count,
    forward_flops_per_token,
    model_flops_per_token,
    param_count,
)

# --- parameter counts ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "published", "rel"),
    [
        # Brown et al. 2020 call it "175B"; the exact count of the Table 2.1 shape with
        # learned positions and tied embeddings (no biases) is 174.6 B.
        ("gpt3-175b", 174.6e9, 1e-3),
        # meta-llama/Meta-Llama-3.1-70B safetensors index: 70,553,706,496 parameters
        ("llama3-70b", 70_553_706_496, 1e-9),
        # meta-llama/Meta-Llama-3.1-8B: 8,030,261,248 parameters
        ("llama3-8b", 8_030_261_248, 1e-9),
        # DeepSeek-V3 technical report (arXiv 2412.19437) abstract: 671 B total (without MTP)
        ("deepseek-v3", 671e9, 2e-3),
        # Kimi K2 technical report (arXiv 2507.20534): 1.04 T total; ours 1.026 T
        ("kimi-k2", 1.04e12, 0.02),
        # mistralai/Mixtral-8x7B-v0.1: 46.7 B total (46,702,792,704 in the safetensors index)
        ("mixtral-8x7b", 46_702_792_704, 1e-9),
        # meta-llama/Llama-3.2-1B and -3B (tied embeddings): 1,235,814,400 and 3,212,749,824
        ("llama3.2-1b", 1_235_814_400, 1e-9),
        ("llama3.2-3b", 3_212_749_824, 1e-9),
        # Qwen/Qwen2.5-7B and -72B: 7,615,616,512 and 72,706,203,648 (their Q/K/V biases,
        # 0.1 M and 0.8 M, are not counted)
        ("qwen2.5-7b", 7_615_616_512, 2e-5),
        ("qwen2.5-72b", 72_706_203_648, 2e-5),
        # Qwen/Qwen3-8B: 8,190,735,360 (its per-head Q/K norms, 9 K, are not counted)
        ("qwen3-8b", 8_190_735_360, 2e-6),
        # DeepSeek-V2 report (arXiv 2405.04434): 236 B total; DeepSeek-V2-Lite: 15.7 B
        ("deepseek-v2", 236e9, 3e-3),
        ("deepseek-v2-lite", 15.7e9, 3e-3),
        # Databricks, "Introducing DBRX" (2024): 132 B total
        ("dbrx", 132e9, 5e-3),
        # Black et al. 2022 (GPT-NeoX-20B, arXiv 2204.06745): 20.6 B
        ("gpt-neox-20b", 20.6e9, 3e-3),
        # LLaMA 7B/13B/33B (HF conversions of the released weights): 6,738,415,616,
        # 13,015,864,320 and 32,528,943,616 parameters
        ("llama-7b", 6_738_415_616, 1e-9),
        ("llama-13b", 13_015_864_320, 1e-9),
        ("llama-33b", 32_528_943_616, 1e-9),
        # tiiuae/falcon-7b: 6.92 B; 01-ai/Yi-34B: 34.4 B; DeepSeek LLM 7B / 67B: 6.9 B / 67.4 B
        ("falcon-7b", 6.92e9, 2e-3),
        ("yi-34b", 34.4e9, 2e-3),
        ("deepseek-llm-7b", 6.91e9, 2e-3),
        ("deepseek-llm-67b", 67.4e9, 2e-3),
        # Gemma report (arXiv 2403.08295) Table 2: 786 M embedding + 7,751 M non-embedding
        ("gemma-7b", 8.537e9, 1e-3),
        # Phi-3 report (arXiv 2404.14219): 3.8 B
        ("phi-3-mini", 3.8e9, 1e-2),
    ],
)
def test_param_count_matches_published(model: str, published: float, rel: float) -> None:
    assert param_count(get_model(model)) == pytest.approx(published, rel=rel)


def test_gpt3_175b_param_count_by_hand() -> None:
    # 12 l h^2 (4h^2 attention + 8h^2 MLP) + 2 h per layer norms... written out in full:
    # per layer: 4 h^2 (Q, K, V, O) + 2 * h * 4h (MLP) + 2 h (two norms)
    # embeddings: V h (tied) + 2048 h (learned positions) + h (final norm)
    nl, h, v, s = 96, 12288, 50257, 2048
    expected = nl * (4 * h * h + 8 * h * h + 2 * h) + v * h + s * h + h
    assert expected == 174_591_270_912
    assert param_count(get_model("gpt3-175b")) == expected


@pytest.mark.parametrize(
    ("model", "active", "rel"),
    [
        # DeepSeek-V3 report: 37 B activated per token (ours 37.55 B, embeddings included)
        ("deepseek-v3", 37e9, 0.02),
        # Kimi K2 technical report: 32.6 B activated per token (ours 32.86 B)
        ("kimi-k2", 32.6e9, 0.02),
        # Mistral AI "Mixtral of experts" (arXiv 2401.04088): 12.9 B active per token
        ("mixtral-8x7b", 12.9e9, 0.01),
        # DeepSeek-V2 report: 21 B activated; Databricks: DBRX 36 B active
        ("deepseek-v2", 21e9, 0.02),
        ("dbrx", 36e9, 0.015),
    ],
)
def test_moe_active_params_match_published(model: str, active: float, rel: float) -> None:
    assert active_param_count(get_model(model)) == pytest.approx(active, rel=rel)


def test_active_params_equal_total_for_dense_models() -> None:
    for key in ("gpt3-175b", "llama3-70b", "llama3-8b"):
        m = get_model(key)
        assert active_param_count(m) == param_count(m)


def test_mixtral_active_params_by_hand() -> None:
    # 32 layers: attention h*q + 2*h*k + q*h with q = 4096, k = 8 x 128 = 1024;
    # top-2 of 8 SwiGLU experts (3 h f each, f = 14336) + router h*8 + 2 norms;
    # untied embeddings 2 V h + final norm.
    nl, h, f, v, k = 32, 4096, 14336, 32000, 1024
    attn = h * h + 2 * h * k + h * h
    per_layer_active = attn + 2 * 3 * h * f + h * 8 + 2 * h
    per_layer_total = attn + 8 * 3 * h * f + h * 8 + 2 * h
    m = get_model("mixtral-8x7b")
    assert active_param_count(m) == nl * per_layer_active + 2 * v * h + h
    assert param_count(m) == nl * per_layer_total + 2 * v * h + h


# --- Megatron FLOP conventions (shared/validation/README.md) --------------------------

# Narayanan et al. SC'21 GPT-3-style configuration: B = 1536, s = 2048, l = 96, h = 12288,
# V = 51200 (catalog megatron-175b: MHA, f = 4h).
B, S = 1536, 2048
L, H, V = 96, 12288, 51200


def _gpt() -> Model:
    m = get_model("megatron-175b")
    assert (m.layers, m.hidden, m.vocab, m.heads, m.kv_heads, m.ffn_hidden, m.gated_mlp) == (
        L,
        H,
        V,
        96,
        96,
        4 * H,
        False,
    )
    return m


def test_sc21_flops_per_iteration() -> None:
    # SC'21 eq. (3): F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))
    expected = 96 * B * S * L * H**2 * (1 + S / (6 * H) + V / (16 * L * H))
    assert megatron_sc21_flops(_gpt(), B, S) == pytest.approx(expected, rel=1e-12)
    # by hand: 96 x 1536 x 2048 x 96 x 12288^2 = 4.37750e18; the bracket is
    # 1 + 2048/73728 + 51200/18874368 = 1.030490; product 4.5110e18 FLOPs per iteration
    assert expected == pytest.approx(4.5110e18, rel=1e-4)


def test_megatron_model_flops_full_attention_gpt() -> None:
    # Megatron-LM num_floating_point_operations with g = a, q = h, f = 4h, k = 1, m = 1:
    # 12 B s l h^2 [(1 + 1 + s/h) + 4 + V/(2 l h)] = 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
    expected = 72 * B * S * L * H**2 * (1 + S / (6 * H) + V / (12 * L * H))
    assert megatron_model_flops(_gpt(), B, S, causal=False) == pytest.approx(expected, rel=1e-12)


def test_megatron_model_flops_causal_gpt() -> None:
    # causal variant (Megatron-LM since 2025, Megatron-Bridge): the s/h term halved,
    # 12 B s l h^2 [(2 + s/(2h)) + 4 + V/(2 l h)] = 72 B s l h^2 (1 + s/(12h) + V/(12 l h))
    expected = 72 * B * S * L * H**2 * (1 + S / (12 * H) + V / (12 * L * H))
    assert megatron_model_flops(_gpt(), B, S, causal=True) == pytest.approx(expected, rel=1e-12)


def test_sc21_hardware_flops_are_four_thirds_of_model_flops_without_logits() -> None:
    # SC'21 counts a recomputed forward pass: 4 passes of the layers vs 3, so the layer
    # terms are in ratio 96/72 = 4/3, while the logits term (V/16lh x 96 = V/12lh x 72)
    # is the same in both.
    m = _gpt()
    logits = 72 * B * S * L * H**2 * V / (12 * L * H)
    sc21 = megatron_sc21_flops(m, B, S)
    model = megatron_model_flops(m, B, S, causal=False)
    assert (sc21 - logits) / (model - logits) == pytest.approx(4 / 3, rel=1e-12)


def test_megatron_model_flops_llama3_70b_gqa_swiglu() -> None:
    # validation README: 12 B s l h^2 [(1 + g/a + s/h) q/h + (f/h) k m + V/(2 l h)]
    # Llama 3 70B: g = 8, a = 64, q = h = 8192, f = 28672, k = 1, m = 3/2 (SwiGLU)
    b, s, nl, h, v = 8, 8192, 80, 8192, 128256
    bracket = (1 + 8 / 64 + s / h) * 1 + (28672 / h) * 1 * 1.5 + v / (2 * nl * h)
    expected = 12 * b * s * nl * h**2 * bracket
    m = get_model("llama3-70b")
    assert megatron_model_flops(m, b, s, causal=False) == pytest.approx(expected, rel=1e-12)
    causal = 12 * b * s * nl * h**2 * (bracket - 0.5 * s / h)
    assert megatron_model_flops(m, b, s, causal=True) == pytest.approx(causal, rel=1e-12)


def test_megatron_model_flops_mixtral_counts_routed_experts() -> None:
    # k = 2 experts routed to per token, f = 14336, m = 3/2, g/a = 8/32
    b, s, nl, h, v = 1, 4096, 32, 4096, 32000
    bracket = (1 + 8 / 32 + s / h) + (14336 / h) * 2 * 1.5 + v / (2 * nl * h)
    expected = 12 * b * s * nl * h**2 * bracket
    got = megatron_model_flops(get_model("mixtral-8x7b"), b, s, causal=False)
    assert got == pytest.approx(expected, rel=1e-12)


# --- model FLOPs per token: 6N + attention ------------------------------------------


def _matmul_params(m: Model) -> int:
    """Parameters that take part in a matmul per token: all but norms, the input-embedding
    lookup (unless tied to the output layer, which is a matmul) and learned positions."""
    n = param_count(m)
    n -= m.layers * 2 * m.hidden + m.hidden  # norms
    if not m.tied_embeddings:
        n -= m.vocab * m.hidden  # the input lookup is not a matmul; the output layer is
    if m.position == "learned":
        n -= m.max_seq * m.hidden
    return n


@pytest.mark.parametrize("key", ["llama3-8b", "llama3-70b", "gpt3-175b", "megatron-22b"])
def test_model_flops_per_token_is_6n_plus_attention(key: str) -> None:
    # PaLM (arXiv 2204.02311) Appendix B: training FLOPs per token = 6 N + 12 l h s with
    # N the matmul parameters (q = heads x head_dim = h for these models); causal
    # counting halves the attention term: 6 N + 6 l h s (MaxText PR 1988).
    m = get_model(key)
    assert m.heads * m.head_dim == m.hidden
    s = 4096
    n = _matmul_params(m)
    nl, h = m.layers, m.hidden
    assert model_flops_per_token(m, s, causal=False) == pytest.approx(
        6 * n + 12 * nl * h * s, rel=1e-12
    )
    assert model_flops_per_token(m, s, causal=True) == pytest.approx(
        6 * n + 6 * nl * h * s, rel=1e-12
    )


def test_training_flops_are_three_forwards() -> None:
    m = get_model("llama3-70b")
    assert model_flops_per_token(m, 8192) == pytest.approx(
        3 * forward_flops_per_token(m, 8192), rel=1e-12
    )


def test_model_flops_agree_with_megatron_per_token() -> None:
    # For a GPT with f = 4h and MHA, Megatron's full-attention model FLOPs per token
    # (72 s l h^2 (...) per sequence / s) equals 6 N_matmul + 12 l h s, exactly the
    # gpuscale definition without causal halving (the two conventions coincide).
    m = _gpt()
    per_token = megatron_model_flops(m, 1, S, causal=False) / S
    assert model_flops_per_token(m, S, causal=False) == pytest.approx(per_token, rel=1e-12)
    per_token_causal = megatron_model_flops(m, 1, S, causal=True) / S
    assert model_flops_per_token(m, S, causal=True) == pytest.approx(per_token_causal, rel=1e-12)


@pytest.mark.parametrize(
    ("model", "seq", "tokens_per_s_per_gpu", "reported_tflops"),
    [
        # Megatron-Bridge performance summaries: each row's tokens/s per GPU and the model
        # TFLOP/s per GPU its FLOPs calculator printed (25.11: DeepSeek-V3 on GB300 and B200;
        # 26.06: Kimi K2 and Nemotron 3 Super on GB300, Nemotron 3 Nano on H100; 26.08.01:
        # Nemotron 3.5 Lightning on GB300). MLA, MTP and hybrid blocks all enter.
        ("DeepSeekV3 (w/o MTP)", 4096, 3848, 961),
        ("DeepSeekV3 (w/ MTP)", 4096, 2139, 557),
        ("Kimi_K2", 4096, 5372, 1099),
        ("Nemotron_3_Super", 8192, 9652, 817),
        ("Nemotron_3_Nano", 8192, 14719, 328),
        ("Nemotron_3_5_Lightning", 8192, 34816, 973),
        # 26.06, GPT-OSS 120B on GB300: half its layers attend over a 128-token window
        ("GPT OSS 120B", 4096, 33166, 1081),
    ],
)
def test_megatron_flops_reproduce_megatron_bridge_reported_tflops(
    model: str, seq: int, tokens_per_s_per_gpu: float, reported_tflops: float
) -> None:
    from gpuscale.validate.training_model import model_for

    m, _ = model_for({"model": model}, "test")
    batch = 64  # any batch: FLOPs per token are what the rate compares
    per_token = megatron_model_flops(m, batch, seq, causal=True) / (batch * seq)
    assert per_token * tokens_per_s_per_gpu / 1e12 == pytest.approx(reported_tflops, rel=0.01)


def test_mean_keys_of_a_sliding_window_by_hand() -> None:
    from gpuscale.perf.transformer import mean_keys

    # position i (1-based) of a causal sequence sees min(i, w) keys: the exact mean over
    # s = 4096 with w = 128 is (128 x 129 / 2 + 3968 x 128) / 4096 = 126.02
    exact = (128 * 129 / 2 + (4096 - 128) * 128) / 4096
    assert mean_keys(4096, 128) == pytest.approx(exact, rel=1e-3)
    assert mean_keys(4096, 0) == 2048.0  # no window: the causal half
    assert mean_keys(4096, 8192) == 2048.0  # a window longer than the sequence


def test_sliding_window_configs_are_read_by_layer_type(tmp_path: Path) -> None:
    import json

    from gpuscale.catalog.hf import load_hf_config

    base = {
        "hidden_size": 2880,
        "num_hidden_layers": 4,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "vocab_size": 201088,
        "intermediate_size": 2880,
    }
    cases = [
        # GPT-OSS: layer_types alternate
        (
            {
                "model_type": "gpt_oss",
                "sliding_window": 128,
                "layer_types": [
                    "sliding_attention",
                    "full_attention",
                    "sliding_attention",
                    "full_attention",
                ],
            },
            (128, 2),
        ),
        # Qwen: a window size with use_sliding_window false is off
        ({"model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": False}, (0, 0)),
        # Mistral 7B v0.1: every layer
        ({"model_type": "mistral", "sliding_window": 4096}, (4096, 4)),
        # Qwen2 with the window on: the layers from max_window_layers on
        (
            {
                "model_type": "qwen2",
                "sliding_window": 4096,
                "use_sliding_window": True,
                "max_window_layers": 3,
            },
            (4096, 1),
        ),
    ]
    for extra, expected in cases:
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**base, **extra}))
        m = load_hf_config(path)
        assert (m.window, m.window_layers) == expected


def test_mtp_depths_are_read_from_a_deepseek_style_config(tmp_path: Path) -> None:
    import json

    from gpuscale.catalog.hf import load_hf_config

    cfg = {
        "model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
        "num_attention_heads": 128, "vocab_size": 129280, "num_nextn_predict_layers": 1,
        "intermediate_size": 18432,
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert load_hf_config(path).mtp_layers == 1


@pytest.mark.parametrize(
    ("key", "experts", "step", "published"),
    [
        # Meta: Scout 109 B with its vision encoder (text 107.8 B), Maverick 400 B; both
        # 17 B active
        ("llama4-scout", 16, 1, 107.8e9),
        ("llama4-maverick", 128, 2, 400e9),
    ],
)
def test_llama4_from_its_multimodal_config_json(
    tmp_path: Path, key: str, experts: int, step: int, published: float
) -> None:
    import json

    from gpuscale.catalog.hf import load_hf_config

    text = {
        "model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48,
        "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
        "intermediate_size": 8192, "intermediate_size_mlp": 16384, "hidden_act": "silu",
        "vocab_size": 202048, "num_local_experts": experts, "num_experts_per_tok": 1,
        "interleave_moe_layer_step": step,
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama4", "text_config": text}))
    m = load_hf_config(path)
    assert param_count(m) == param_count(get_model(key))
    assert param_count(m) == pytest.approx(published, rel=5e-3)
    assert active_param_count(m) == pytest.approx(17.2e9, rel=1e-2)
    assert m.moe_layers == 48 // step


def test_llama2_34b_has_code_llamas_33_7b_parameters() -> None:
    # Code Llama 34B: 33.7 B parameters (Roziere et al. 2023); 48 layers of GQA attention
    # (64 heads, 8 KV heads of 128) and a 22,016-wide SwiGLU MLP, untied 32,000 embeddings
    from gpuscale.catalog import get_model
    from gpuscale.perf.transformer import param_count

    h, f, v, layers = 8192, 22016, 32000, 48
    attn = h * h * 2 + 2 * h * 8 * 128
    per_layer = attn + 3 * h * f + 2 * h
    total = layers * per_layer + 2 * v * h + h
    assert param_count(get_model("llama2-34b")) == total
    assert round(total / 1e9, 1) == 33.7
