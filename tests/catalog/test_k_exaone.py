"""K-EXAONE 236B-A23B (LG AI Research, model_type ``exaone_moe``): its config.json read as
transformers' ExaoneMoeConfig and ExaoneMoeForCausalLM read it, and the catalog entry.

Reference counts: transformers 5.25 building ExaoneMoeForCausalLM from this config on the
meta device, summing ``numel`` over its parameters: 236,571,150,336 (no MTP weights: the
class ignores ``mtp.*``; the routers' ``e_score_correction_bias`` is a buffer). gpuscale
counts 12,288 fewer, the 48 layers' per-head Q and K RMSNorm weights (2 x 128 a layer),
which it leaves out for every model. The checkpoint's 237,099,669,632 (its safetensors
index; the tensor inventory in Baekpica/k-exaone-mixed-ds4) add 47 x 128 bias entries and
the MTP layer's 528,513,280."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_runner import read_config

from gpuscale.catalog import get_model
from gpuscale.catalog.schema import Model
from gpuscale.errors import InputError
from gpuscale.perf.transformer import active_param_count, mtp_param_count, param_count

_SLIDING = [(i + 1) % 4 != 0 for i in range(48)]
"""K-EXAONE's LLLG schedule: layers 3, 7, ..., 47 global, the other 36 sliding."""

# LGAI-EXAONE/K-EXAONE-236B-A23B config.json at revision 61e6d578eb10 (transformers 5.1.0),
# as rengzhengcodes/SmolBench's scripts/arch/arch_configs_raw.json stores it, its lists
# written as comprehensions
K_EXAONE: dict[str, Any] = {
    "architectures": ["ExaoneMoeForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "dtype": "bfloat16",
    "eos_token_id": 53,
    "first_k_dense_replace": 1,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 6144,
    "initializer_range": 0.02,
    "intermediate_size": 18432,
    "is_moe_layer": [i > 0 for i in range(48)],
    "layer_types": ["sliding_attention" if s else "full_attention" for s in _SLIDING],
    "max_position_embeddings": 262144,
    "mlp_layer_types": ["dense"] + ["sparse"] * 47,
    "model_type": "exaone_moe",
    "moe_intermediate_size": 2048,
    "mtp_layer_types": ["full_attention"],
    "mtp_sliding_windows": [0],
    "n_group": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 64,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 8,
    "num_nextn_predict_layers": 1,
    "num_shared_experts": 1,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-05,
    "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "sliding_window": 128,
    "sliding_window_pattern": "LLLG",
    "sliding_windows": [128 if s else 0 for s in _SLIDING],
    "tie_word_embeddings": False,
    "tokenizer_class": "GPT2Tokenizer",
    "topk_group": 1,
    "transformers_version": "5.1.0",
    "use_cache": True,
    "vocab_size": 153600,
}
TRANSFORMERS_PARAMS = 236_571_150_336
"""ExaoneMoeForCausalLM's parameters (transformers 5.25, meta device)."""
TRANSFORMERS_ACTIVE = TRANSFORMERS_PARAMS - 47 * 120 * 37_748_736
"""Less the 120 routed experts of 3 x 6144 x 2048 a token skips in each MoE layer."""
QK_NORMS = 48 * 2 * 128
"""Per-head Q and K norm weights of the 48 layers, which gpuscale does not count."""


def _shape(m: Model) -> dict[str, object]:
    return m.model_dump(exclude={"key", "name", "source", "aliases"})


def test_config_reads_as_transformers_builds_it(tmp_path: Path) -> None:
    m = read_config(tmp_path, K_EXAONE, "K-EXAONE-236B-A23B")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim) == (48, 6144, 64, 8, 128)
    assert m.gated_mlp and not m.tied_embeddings and m.vocab == 153_600
    assert (m.window, m.window_layers, m.window_kind) == (128, 36, "sliding")
    assert m.attn_layers - (m.window_layers or 0) == 12  # the global (NoPE) layers
    assert (m.num_experts, m.top_k, m.ffn_hidden, m.dense_ffn_hidden) == (128, 8, 2048, 18432)
    assert (m.first_dense_layers, m.moe_layers, m.mlp_layers) == (1, 47, 1)
    assert (m.shared_experts, m.shared_ffn_hidden) == (1, 2048)
    assert (m.route_groups, m.route_topk_groups) == (1, 1)
    assert (m.mtp_layers, m.mtp_blocks) == (1, "*-")  # its MTP layer's MLP is dense
    assert m.max_seq == 262_144


def test_parameter_counts_are_transformers_less_the_qk_norms(tmp_path: Path) -> None:
    m = read_config(tmp_path, K_EXAONE)
    assert param_count(m) == TRANSFORMERS_PARAMS - QK_NORMS == 236_571_138_048
    assert active_param_count(m) == TRANSFORMERS_ACTIVE - QK_NORMS == 23_668_267_008
    # the MTP layer: eh_proj 2h x h, 3 norms, attention 113,246,208, two layer norms and a
    # dense MLP of 3 x 6144 x 18432, less its own Q and K norms (256)
    assert mtp_param_count(m) == 528_513_280 - 256
    checkpoint = 237_099_669_632
    assert param_count(m) + mtp_param_count(m) == checkpoint - 47 * 128 - QK_NORMS - 256


def test_catalog_entry_is_the_config(tmp_path: Path) -> None:
    entry = get_model("k-exaone-236b-a23b")
    assert _shape(entry) == _shape(read_config(tmp_path, K_EXAONE))
    assert param_count(entry) == 236_571_138_048
    for name in ("K-EXAONE", "K_EXAONE", "K-EXAONE-236B-A23B", "LGAI-EXAONE/K-EXAONE-236B-A23B"):
        assert get_model(name).key == "k-exaone-236b-a23b"


def test_without_layer_lists_the_config_class_defaults_hold(tmp_path: Path) -> None:
    # ExaoneMoeConfig: first_k_dense_replace 1, 64 experts of 1024 top-8 with one shared,
    # dense MLP 16384, sliding_window 4096 on every layer but each 4th (pattern 4); transformers
    # builds 372,614,400 parameters from these keys, gpuscale 8 x 2 x 64 fewer (Q/K norms)
    cfg = {
        "model_type": "exaone_moe",
        "vocab_size": 1000,
        "hidden_size": 256,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    m = read_config(tmp_path, cfg)
    assert (m.window, m.window_layers, m.moe_layers, m.first_dense_layers) == (4096, 6, 7, 1)
    assert (m.num_experts, m.top_k, m.shared_experts) == (64, 8, 1)
    assert (m.ffn_hidden, m.dense_ffn_hidden, m.mtp_layers) == (1024, 16384, 0)
    assert param_count(m) == 372_614_400 - 8 * 2 * 64


def test_the_per_layer_list_alone_gives_the_window(tmp_path: Path) -> None:
    # as vLLM and Megatron-Bridge read it (K-EXAONE 2.0's files give no sliding_window)
    no_scalar = {k: v for k, v in K_EXAONE.items() if k != "sliding_window"}
    for name, cfg in (("absent", no_scalar), ("null", {**K_EXAONE, "sliding_window": None})):
        m = read_config(tmp_path, cfg, name)
        assert (m.window, m.window_layers) == (128, 36)
    full = {**K_EXAONE, "sliding_windows": [0] * 48, "layer_types": ["full_attention"] * 48}
    m = read_config(tmp_path, full, "full")
    assert (m.window, m.window_layers) == (0, 0)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        # K-EXAONE 2.0's kind of schedule: windows of two sizes
        ({"sliding_windows": [4096, 128, 128, 0] * 12}, r"sliding_windows=.*128, 4096.*differ"),
        ({"sliding_window": 4096}, r"sliding_windows=.*128 and sliding_window 4096"),
        ({"sliding_windows": [128] * 48}, r"sliding_windows='128 at layer 3'.*full_attention"),
        ({"sliding_windows": [128, 0] * 12}, r"sliding_windows='24 entries'.*48 windows"),
        ({"sliding_windows": [128, 128, 128, -1] * 12}, r"sliding_windows=-1.*0 or more"),
        ({"mtp_layer_types": ["sliding_attention"]}, r"mtp_layer_types=.*windowed MTP"),
    ],
)
def test_windows_gpuscale_does_not_model_are_refused(
    tmp_path: Path, change: dict[str, Any], says: str
) -> None:
    with pytest.raises(InputError, match=says):
        read_config(tmp_path, {**K_EXAONE, **change})
