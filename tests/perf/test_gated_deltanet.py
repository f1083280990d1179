"""Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5): sizes, FLOPs, scan time, config.json.

Expected values are evaluated by hand from the models' config.json and the cited formulas
(Megatron-LM's ``_compute_gdn_attention_params`` and its gated_delta_net FLOPs term).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.catalog.hf import load_hf_config
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric
from gpuscale.perf.flop_conventions import megatron_model_flops
from gpuscale.perf.kernels import scan_s
from gpuscale.perf.kv import mamba_state_bytes_per_seq
from gpuscale.perf.plan import Workload
from gpuscale.perf.transformer import (
    active_param_count,
    layer_shapes,
    mtp_param_count,
    param_count,
    scan_flops_per_token,
)
from gpuscale.validate.training_rows import model_kind

CAL = default_calibration()

# Qwen/Qwen3-Next-80B-A3B-Instruct config.json, the keys gpuscale reads
QWEN3_NEXT: dict[str, Any] = {
    "model_type": "qwen3_next",
    "num_hidden_layers": 48,
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "full_attention_interval": 4,
    "linear_num_value_heads": 32,
    "linear_num_key_heads": 16,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "intermediate_size": 5120,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "max_position_embeddings": 262144,
}

H, V = 2048, 151936
# a Gated DeltaNet block: in_proj to q, k (16 x 128 each), v, z (32 x 128 each), beta and
# the decay (32 each); the conv over q, k, v (8,192 channels x 4, no bias); A_log and
# dt_bias (32 each); the gated norm (one head's 128); out_proj 4,096 -> 2,048
GDN = H * (2 * 2048 + 2 * 4096 + 2 * 32) + 8192 * 4 + 2 * 32 + 128 + 4096 * H
# gated attention: Q and its gate (2 x 16 x 256), K and V (2 x 2 x 256), output 4,096 -> H
ATTN = H * (2 * 4096 + 2 * 512) + 4096 * H
EXPERT = 3 * H * 512  # gate, up and down projections
MOE_ALL = 512 * EXPERT + EXPERT + H * 512  # routed, shared, router
MOE_ACTIVE = 10 * EXPERT + EXPERT + H * 512
NORMS = 96 * H + H  # one per block, the final one
EMB = 2 * V * H


def _config(tmp_path: Path, **keys: Any) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**QWEN3_NEXT, **keys}))
    return path


def test_block_weights_by_hand() -> None:
    s = layer_shapes(get_model("qwen3-next-80b-a3b"))
    assert s.mamba == GDN
    assert s.attn == ATTN == 27_262_976


def test_qwen3_next_parameter_counts() -> None:
    m = get_model("qwen3-next-80b-a3b")
    total = 36 * GDN + 12 * ATTN + 48 * MOE_ALL + NORMS + EMB
    active = 36 * GDN + 12 * ATTN + 48 * MOE_ACTIVE + NORMS + EMB
    assert param_count(m) == total == 79_674_286_848  # "80B in total" (model card)
    assert active_param_count(m) == active == 3_874_824_960  # 3.25 B without embeddings
    # its MTP depth: the 2h -> h projection, three norms, a gated-attention and a MoE block
    mtp = 2 * H * H + 3 * H + ATTN + H + MOE_ALL + H
    assert mtp_param_count(m) == mtp
    # the checkpoint's safetensors hold 81.325 B with the MTP layer (gpuscale leaves out the
    # q/k norms and the shared experts' 1-wide gates, about 0.1 M weights)
    assert param_count(m) + mtp_param_count(m) == pytest.approx(81.325e9, rel=1e-5)
    assert model_kind(m) == "hybrid Gated DeltaNet"


def test_config_json_reads_as_the_catalog_entry(tmp_path: Path) -> None:
    m = load_hf_config(_config(tmp_path))
    cat = get_model("qwen3-next-80b-a3b")
    assert m.pattern == cat.pattern == "MEMEME*E" * 12
    assert m.mamba == cat.mamba
    assert m.attn_gate and m.layers == 96
    assert param_count(m) == param_count(cat)
    # the config names no MTP depth; the catalog's model trains one
    assert m.mtp_layers == 0 and cat.mtp_layers == 1
    no_mtp = cat.model_copy(update={"mtp_layers": 0})
    assert megatron_model_flops(m, 2, 4096, True) == megatron_model_flops(no_mtp, 2, 4096, True)


def test_qwen35_text_config_with_layer_types(tmp_path: Path) -> None:
    # Qwen3.5's multimodal config: the language model in text_config, the layout as a list
    # the keys a qwen3_5_moe_text config has (no intermediate_size, decoder_sparse_step or
    # mlp_only_layers; tie_word_embeddings at the top level)
    drop = (
        "full_attention_interval",
        "intermediate_size",
        "decoder_sparse_step",
        "mlp_only_layers",
        "tie_word_embeddings",
    )
    text = {k: v for k, v in QWEN3_NEXT.items() if k not in drop}
    kinds = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(40)]
    text |= {
        "model_type": "qwen3_5_moe_text",
        "num_hidden_layers": 40,
        "layer_types": kinds,
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "vocab_size": 248320,
        "mtp_num_hidden_layers": 1,
    }
    path = tmp_path / "config.json"
    top = {"model_type": "qwen3_5_moe", "tie_word_embeddings": False}
    path.write_text(json.dumps(top | {"text_config": text | {"attn_output_gate": True}}))
    m = load_hf_config(path)
    cat = get_model("qwen3.5-35b-a3b")
    assert m.pattern == cat.pattern and m.mamba == cat.mamba
    assert m.mtp_layers == cat.mtp_layers == 1 and m.mtp_blocks == "*E"
    assert param_count(m) + mtp_param_count(m) == param_count(cat) + mtp_param_count(cat)
    moe = 256 * EXPERT + EXPERT + H * 256
    assert param_count(cat) == 30 * GDN + 10 * ATTN + 40 * moe + 80 * H + H + 2 * 248320 * H


@pytest.mark.parametrize(
    ("keys", "field"),
    [
        ({"linear_num_value_heads": None}, "linear_num_value_heads"),
        ({"linear_num_key_heads": None}, "linear_num_key_heads"),  # no default guessed
        ({"attn_output_gate": "false"}, "attn_output_gate"),  # a JSON boolean only
        ({"linear_value_head_dim": 10**12}, "linear_value_head_dim"),  # beyond any model
        ({"linear_num_key_heads": 12}, "linear_num_key_heads"),  # 12 does not divide 32
        ({"layer_types": ["linear_attention"] * 47 + ["sliding_attention"]}, "layer_types"),
        ({"layer_types": ["linear_attention"] * 3}, "layer_types"),
    ],
)
def test_bad_gated_deltanet_keys_name_the_key(
    tmp_path: Path, keys: dict[str, Any], field: str
) -> None:
    with pytest.raises(InputError, match=f"config.json:{field}="):
        load_hf_config(_config(tmp_path, **keys))


def test_megatron_flops_match_megatron_lms_gated_delta_net_formula() -> None:
    # Megatron-LM num_floating_point_operations, experimental_attention_variant
    # gated_delta_net with linear_attention_freq 4, per token of a causal sequence s:
    # 6 (h (2 qk + 2 v + 2 nv) + K (2 qk + v) + 4 nv dv^2 + h v) per linear layer;
    # 6 (h (q + 2 kv + q_gate) + q h) + 6 q s per standard one; 6 h (3 f k + 3 f_s) per
    # MoE layer; 6 h V for the logits
    s, b = 4096, 2
    linear = 6 * (H * (2 * 2048 + 2 * 4096 + 2 * 32) + 4 * (2 * 2048 + 4096))
    linear += 6 * (4 * 32 * 128**2 + H * 4096)
    standard = 6 * (H * (4096 + 2 * 512 + 4096) + 4096 * H) + 6 * 4096 * s
    moe = 6 * H * (3 * 512 * 10 + 3 * 512)
    per_token = 36 * linear + 12 * standard + 48 * moe + 6 * H * V
    m = get_model("qwen3-next-80b-a3b").model_copy(update={"mtp_layers": 0})
    assert megatron_model_flops(m, b, s, causal=True) == pytest.approx(b * s * per_token, 1e-12)


def test_gated_delta_scan_flops_by_hand() -> None:
    # per value head and token, chunk Q = 64, N = P = 128: 1.5 Q N + Q P + Q^2 / 6 + 3 N P
    # multiply-adds = 12,288 + 8,192 + 682.67 + 49,152
    macs = 12_288 + 8_192 + 64 * 64 / 6 + 49_152
    assert scan_flops_per_token(get_model("qwen3-next-80b-a3b")) == pytest.approx(2 * 32 * macs)


def test_gated_delta_scan_time_by_hand() -> None:
    # 4096 tokens on one H100, TP 2 (16 value heads a GPU), wave quantisation off: each
    # batched GEMM at gemm_eff_max x K / (K + half) of the matmul ceiling, K the reduction
    m = get_model("qwen3-next-80b-a3b")
    g = get_gpu("h100-sxm").model_copy(update={"sms": 0})
    sys = system_for_gpu(g)
    w = Workload(m, g, sys, Fabric.from_system(sys, 8), 8, 4096, 8, "bf16")
    peak, bw = g.peak_flops("bf16"), g.hbm_bw_Bps * CAL.hbm_eff
    t = scan_s(w, np.array([4096.0]), np.array([2.0]), peak, bw, CAL)
    rate = peak * g.matmul_eff * CAL.gemm_eff_max

    def at(k: float) -> float:
        return rate * k / (k + CAL.gemm_half_dim)

    # per chunk of 64 and value head, FLOPs by reduction length K: K K^T and Q K^T
    # (32 x 64 over 128), W S and Q S (64 x 128 over 128); W = T K, U = T V and the scores
    # times the values (32 x 128 over 64), the inverse (64/6 x 64 over 64), the state
    # update (128 x 128 over 64)
    by_k = {
        128.0: 2 * (2 * 32 * 64 * 128) + 2 * (2 * 64 * 128 * 128),
        64.0: 3 * (2 * 32 * 128 * 64) + 2 * (64 / 6) * 64 * 64 + 2 * 128 * 128 * 64,
    }
    batch = 4096 / 64 * 16
    flops_time = sum(batch * f / at(k) for k, f in by_k.items())
    # HBM per token over TP 2: 16-bit q and k expanded from 16 to 32 heads (read 2 x 2,048,
    # write 2 x 4,096), read 5 x 4,096, values and output 3 x 4,096, W and U 2 x 32 x 256;
    # fp32 T 2 x 32 x 64 and chunk states 4 x 32 x 128 x 128 / 64
    traffic = 2 * (2 * 2048 + 2 * 4096 + 5 * 4096 + 3 * 4096 + 2 * 32 * 256)
    traffic = (traffic + 4 * (2 * 32 * 64 + 4 * 32 * 128 * 128 / 64)) / 2
    assert float(t[0]) == pytest.approx(flops_time + 4096 * traffic / bw, rel=1e-12)


def test_recurrent_state_per_sequence() -> None:
    # per Gated DeltaNet layer: 32 heads x 128 x 128 state and 3 x 8,192 conv inputs, 2 bytes
    m = get_model("qwen3-next-80b-a3b")
    per_layer = (32 * 128 * 128 + 3 * 8192) * 2
    assert mamba_state_bytes_per_seq(m) == 36 * per_layer == 39_518_208
    assert mamba_state_bytes_per_seq(m, tp=2, pp=4) == 9 * per_layer / 2


def test_gated_attention_costs_step_time() -> None:
    # the same model without the attention gate (its GEMM and elementwise pass) is faster
    from gpuscale.perf.plan import Plans
    from gpuscale.perf.step import step_breakdown

    m = get_model("qwen3-next-80b-a3b")
    plain = m.model_copy(update={"attn_gate": False})
    g = get_gpu("h100-sxm")
    sys = system_for_gpu(g)
    plans = Plans.of(tp=2, pp=1, dp=32, ep=64, mbs=1, sp=True)
    steps = []
    for model in (m, plain):
        w = Workload(model, g, sys, Fabric.from_system(sys, 64), 64, 4096, 256, "bf16")
        steps.append(float(step_breakdown(w, plans, CAL).step_s[0]))
    assert steps[0] > steps[1]


def test_tp_and_cp_must_split_the_key_heads() -> None:
    from gpuscale.perf.plan import Plans
    from gpuscale.perf.validity import validity

    # 16 key heads, 32 value heads: TP 4 x CP 4 splits both, TP 4 x CP 8 not the key heads
    m = get_model("qwen3-next-80b-a3b")
    g = get_gpu("h100-sxm")
    sys = system_for_gpu(g)
    w = Workload(m, g, sys, Fabric.from_system(sys, 512), 512, 32768, 64, "bf16")
    cp = np.array([4, 8])
    plans = Plans.of(tp=4, pp=1, dp=512 // (4 * cp), cp=cp, ep=32, mbs=1, sp=True)
    ok, rules = validity(w, plans)
    assert ok.tolist() == [True, False]
    broken = [name for mask, name in rules if not mask[1]]
    assert broken == ["Gated DeltaNet value and key heads not divisible by tp x cp"]


def test_mambas_recompute_module_is_not_a_gated_deltanets() -> None:
    # Megatron-Core's "mamba" recompute module is its MambaLayer's: a Gated DeltaNet sits in
    # a TransformerLayer, which the flag does not reach
    m = get_model("qwen3-next-80b-a3b")
    g = get_gpu("h100-sxm")
    sys = system_for_gpu(g)
    fab = Fabric.from_system(sys, 64)
    with pytest.raises(InputError, match=r"recompute-modules='mamba'.*no Mamba layers"):
        Workload(m, g, sys, fab, 64, 4096, 256, "bf16", recompute_modules=("mamba",))


def test_qwen35_flagship_against_its_model_card() -> None:
    # Qwen3.5 397B-A17B: "397B total, 17B active"; by hand, a Gated DeltaNet block of
    # 4096 x (2 x 2048 + 2 x 8192 + 2 x 64) + 12,288 x 4 + 128 + 128 + 8192 x 4096, a gated
    # attention block of 4096 x (2 x 8192 + 2 x 512) + 8192 x 4096, a MoE of 512 experts of
    # 3 x 4096 x 1024, a shared one and a 4096 x 512 router
    m = get_model("qwen3.5-397b-a17b")
    gdn = 4096 * (2 * 2048 + 2 * 8192 + 2 * 64) + 12_288 * 4 + 2 * 64 + 128 + 8192 * 4096
    attn = 4096 * (2 * 8192 + 2 * 512) + 8192 * 4096
    expert = 3 * 4096 * 1024
    emb, norms = 2 * 248_320 * 4096, 120 * 4096 + 4096
    moe = (512 + 1) * expert + 4096 * 512  # routed and shared experts, router
    assert param_count(m) == 45 * gdn + 15 * attn + 60 * moe + emb + norms
    assert param_count(m) == pytest.approx(397e9, rel=0.005)
    assert active_param_count(m) == pytest.approx(17e9, rel=0.03)


def test_qwen38_flop_count_matches_its_verification_card() -> None:
    # Megatron-Bridge's Qwen3.8 27B card: 819.19 model TFLOP/s and 4,877.758 tokens/s per
    # GPU at sequence 4096, 167.9 GFLOP a token (its merger and frozen vision encoder aside);
    # Megatron's count of the language model with its MTP layer
    m = get_model("qwen3.8-27b")
    per_token = megatron_model_flops(m, 1, 4096, causal=True) / 4096
    assert per_token == pytest.approx(819.19e12 / 4877.758, rel=0.01)
    # 64 layers: 48 Gated DeltaNet, 16 gated attention, each with a 17,408-wide MLP
    assert m.pattern.count("M") == 48 and m.attn_layers == 16 and m.mlp_layers == 64
