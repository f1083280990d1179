"""Step 3.5 Flash (StepFun, model_type ``step3p5``): its config.json read as vLLM's Step3p5
model and transformers' Step3p7TextConfig read it, and the catalog entry.

Reference count: transformers 5.23.0 building Step3p7ForConditionalGeneration (whose text
config is model_type step3p5) from the config below on the meta device, summing ``numel``
over ``model.language_model.*`` and ``lm_head``: 196,956,118,272 (its MTP layers not
built; the routers' ``e_score_correction_bias`` is a buffer). By part: embedding and
untied head 2 x 128,896 x 4,096; attention 12 full layers x 75,759,616 (q and o 4,096 x
8,192, k and v 4,096 x 1,024, g_proj 4,096 x 64) and 33 sliding ones x 109,445,120 (q and
o 4,096 x 12,288, g_proj 4,096 x 96); 3 dense MLPs of 3 x 4,096 x 11,264; 42 MoE layers
of 288 experts and one shared expert of 3 x 4,096 x 1,280 with a 4,096 x 288 router;
2 x 4,096 norm weights a layer and the final 4,096; and 45 x 2 x 128 Q and K norm
weights, which gpuscale leaves out for every model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_runner import read_config

from gpuscale.catalog import get_model
from gpuscale.catalog.schema import Model
from gpuscale.errors import InputError
from gpuscale.perf.transformer import active_param_count, mtp_param_count, param_count

KINDS = ["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(48)]
"""layer_types: full attention every 4th layer, the 45 main layers then the 3 MTP layers."""

# stepfun-ai/Step-3.5-Flash config.json's keys as vLLM's step3p5.py, Megatron-Bridge's
# Step35Bridge and transformers' Step3p7TextConfig read them (rope_theta and
# partial_rotary_factors, also one per layer, are not read by gpuscale)
STEP35: dict[str, Any] = {
    "architectures": ["Step3p5ForCausalLM"],
    "model_type": "step3p5",
    "att_impl_type": "GQA",
    "hidden_size": 4096,
    "intermediate_size": 11264,
    "num_attention_heads": 64,
    "num_attention_groups": 8,
    "head_dim": 128,
    "num_hidden_layers": 45,
    "vocab_size": 128896,
    "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-5,
    "moe_num_experts": 288,
    "moe_top_k": 8,
    "moe_intermediate_size": 1280,
    "share_expert_dim": 1280,
    "moe_layers_enum": ",".join(str(i) for i in range(3, 45)),
    "moe_router_activation": "sigmoid",
    "use_moe_router_bias": True,
    "need_fp32_gate": True,
    "use_head_wise_attn_gate": True,
    "sliding_window": 512,
    "layer_types": KINDS,
    "attention_other_setting": {
        "attention_type": "sliding_attention",
        "num_attention_heads": 96,
        "num_attention_groups": 8,
        "head_dim": 128,
        "true_head_dim": 128,
    },
    "num_nextn_predict_layers": 3,
    "tie_word_embeddings": False,
}
TRANSFORMERS_PARAMS = 196_956_118_272
"""Step3p7ForConditionalGeneration's language model and head (transformers 5.23.0, meta)."""
QK_NORMS = 45 * 2 * 128
"""Per-head Q and K norm weights of the 45 layers, which gpuscale does not count."""
EXPERT = 3 * 4096 * 1280


def _shape(m: Model) -> dict[str, object]:
    return m.model_dump(exclude={"key", "name", "source", "aliases"})


def test_config_reads_as_vllm_builds_it(tmp_path: Path) -> None:
    m = read_config(tmp_path, STEP35, "Step-3.5-Flash")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim) == (45, 4096, 64, 8, 128)
    # the 33 sliding layers: a 512-token window and 96 query heads over 8 KV heads of 128
    assert (m.window, m.window_layers, m.window_kind) == (512, 33, "sliding")
    assert m.window_attn is not None
    assert (m.window_attn.heads, m.window_attn.kv_heads, m.window_attn.head_dim) == (96, 8, 128)
    assert m.head_counts == ((64, 8), (96, 8))
    assert m.head_gate and not m.attn_gate
    assert m.gated_mlp and not m.tied_embeddings and m.vocab == 128_896
    assert (m.num_experts, m.top_k, m.ffn_hidden, m.dense_ffn_hidden) == (288, 8, 1280, 11264)
    assert (m.first_dense_layers, m.moe_layers, m.mlp_layers) == (3, 42, 3)
    assert (m.shared_experts, m.shared_ffn_hidden) == (1, 1280)
    # the three MTP layers (indices 45-47): sliding attention and a dense MLP
    assert (m.mtp_layers, m.mtp_blocks, m.mtp_window) == (3, "*-", True)
    assert m.max_seq == 262_144


def test_parameter_counts_are_transformers_less_the_qk_norms(tmp_path: Path) -> None:
    m = read_config(tmp_path, STEP35)
    assert param_count(m) == TRANSFORMERS_PARAMS - QK_NORMS == 196_956_106_752
    # by hand: the two kinds of attention layer, each with its heads and head-wise gate
    full = 2 * 4096 * 8192 + 2 * 4096 * 1024 + 4096 * 64
    sliding = 2 * 4096 * 12288 + 2 * 4096 * 1024 + 4096 * 96
    assert (full, sliding) == (75_759_616, 109_445_120)
    moe = 288 * EXPERT + EXPERT + 4096 * 288
    hand = 12 * full + 33 * sliding + 3 * 3 * 4096 * 11264 + 42 * moe
    hand += 45 * 2 * 4096 + 4096 + 2 * 128896 * 4096
    assert param_count(m) == hand
    # active: 8 of the 288 routed experts in each MoE layer
    assert active_param_count(m) == param_count(m) - 42 * 280 * EXPERT == 11_987_300_352
    # an MTP layer (vLLM's Step3p5MTP, its output head aside): eh_proj 2h -> h, three norms,
    # a sliding attention layer with its two norms and a dense MLP of 11264
    per_mtp = 2 * 4096 * 4096 + 3 * 4096 + sliding + 2 * 4096 + 3 * 4096 * 11264
    assert mtp_param_count(m) == 3 * per_mtp == 844_296_192


def test_catalog_entry_is_the_config(tmp_path: Path) -> None:
    entry = get_model("step3.5-flash")
    assert _shape(entry) == _shape(read_config(tmp_path, STEP35))
    assert param_count(entry) == 196_956_106_752
    for name in ("Step 3.5 Flash", "Step-3.5-Flash", "stepfun-ai/Step-3.5-Flash"):
        assert get_model(name).key == "step3.5-flash"


def test_step37_wrapper_reads_its_step3p5_text_config(tmp_path: Path) -> None:
    # Step 3.7 Flash's multimodal config (model_type step3p7) holds a step3p5 text_config
    wrapper = {
        "model_type": "step3p7",
        "architectures": ["Step3p7ForConditionalGeneration"],
        "tie_word_embeddings": False,
        "text_config": {k: v for k, v in STEP35.items() if k != "tie_word_embeddings"},
        "vision_config": {"width": 1536, "layers": 47},
    }
    assert _shape(read_config(tmp_path, wrapper)) == _shape(read_config(tmp_path, STEP35, "t"))


def test_without_its_keys_the_config_class_defaults_hold(tmp_path: Path) -> None:
    # Step3p7TextConfig: 8 KV heads of 128, 288 experts of 1280 top-8 and a shared one,
    # dense MLP 11264, MoE from layer 3 on, the head-wise gate on; all layers full attention
    cfg = {
        "model_type": "step3p5",
        "hidden_size": 1024,
        "num_hidden_layers": 6,
        "num_attention_heads": 16,
        "vocab_size": 1000,
        "tie_word_embeddings": False,
    }
    m = read_config(tmp_path, cfg)
    assert (m.kv_heads, m.head_dim, m.num_experts, m.top_k) == (8, 128, 288, 8)
    assert (m.ffn_hidden, m.dense_ffn_hidden, m.shared_ffn_hidden) == (1280, 11264, 1280)
    assert (m.first_dense_layers, m.moe_layers, m.window, m.window_attn) == (3, 3, 0, None)
    assert m.head_gate and m.mtp_layers == 0
    # an attention_other_setting with no sliding layers to shape shapes none
    other = {"attention_other_setting": {"num_attention_heads": 32}}
    assert read_config(tmp_path, {**cfg, **other}, "o").window_attn is None
    # the gate off, as vLLM reads use_head_wise_attn_gate
    assert not read_config(tmp_path, {**cfg, "use_head_wise_attn_gate": False}, "g").head_gate


def test_setting_of_the_models_own_shape_is_no_kind_of_its_own(tmp_path: Path) -> None:
    same = {**STEP35["attention_other_setting"], "num_attention_heads": 64}
    m = read_config(tmp_path, {**STEP35, "attention_other_setting": same})
    assert m.window_attn is None and m.head_counts == ((64, 8),)
    # the MTP layers' kinds given apart, full attention: a depth attends to every key
    split = {**STEP35, "layer_types": KINDS[:45], "mtp_layer_types": ["full_attention"] * 3}
    assert not read_config(tmp_path, split, "f").mtp_window


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"att_impl_type": "MFA"}, r"att_impl_type='MFA'.*GQA"),
        (
            {"attention_other_setting": {"attention_type": "full_attention"}},
            r"attention_other_setting.attention_type='full_attention'.*sliding_attention",
        ),
        (
            {"attention_other_setting": {"num_attention_heads": 96, "num_attention_groups": 7}},
            r"attention_other_setting.num_attention_groups=7.*divisor of.*96 query heads",
        ),
        (
            {"attention_other_setting": {"num_attention_heads": 0}},
            r"attention_other_setting.num_attention_heads=0.*at least 1",
        ),
        ({"attention_other_setting": [96]}, r"attention_other_setting=.*an object"),
        ({"sliding_window": None}, r"sliding_window=None.*full-attention layers of another"),
        ({"moe_layers_enum": "3,4,99"}, r"moe_layers_enum=.*0 to 47"),
        ({"moe_layers_enum": ",".join(map(str, range(3, 46)))}, r"moe_layers_enum.*every MTP"),
        (
            {"layer_types": KINDS[:45], "mtp_layer_types": ["sliding_attention", "full_attention"]},
            r"mtp_layer_types=.*one kind for every MTP layer",
        ),
    ],
)
def test_shapes_gpuscale_does_not_model_are_refused(
    tmp_path: Path, change: dict[str, Any], says: str
) -> None:
    with pytest.raises(InputError, match=says):
        read_config(tmp_path, {**STEP35, **change})
