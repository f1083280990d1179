"""Hybrid Mamba-Transformer models (Nemotron-H, Nemotron 3): sizes, FLOPs, step and memory.

Expected values are published parameter counts or the cited formulas evaluated by hand.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.catalog.hf import load_hf_config
from gpuscale.catalog.schema import Model
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric
from gpuscale.perf.flop_conventions import megatron_model_flops
from gpuscale.perf.kv import kv_bytes_per_token, mamba_state_bytes_per_seq
from gpuscale.perf.memory import activation_bytes_per_layer, memory_breakdown
from gpuscale.perf.plan import Plans, Workload
from gpuscale.perf.step import step_breakdown
from gpuscale.perf.transformer import (
    active_param_count,
    forward_flops_per_token,
    layer_shapes,
    mtp_param_count,
    param_count,
    scan_flops_per_token,
)

CAL = default_calibration()


@pytest.mark.parametrize(
    ("model", "published", "rel"),
    [
        # NVIDIA Nemotron 3 Nano model card: 31.6 B total parameters
        ("nemotron3-nano-30b-a3b", 31.6e9, 2e-3),
        # Nemotron-H report (arXiv 2504.03624): 8 B and 56 B models
        ("nemotron-h-8b", 8.1e9, 1e-2),
        ("nemotron-h-56b", 56.3e9, 1e-2),
    ],
)
def test_hybrid_parameter_counts(model: str, published: float, rel: float) -> None:
    assert param_count(get_model(model)) == pytest.approx(published, rel=rel)


def test_nano_active_parameters_match_the_model_card() -> None:
    # "3.6B active parameters (including embeddings)"
    assert active_param_count(get_model("nemotron3-nano-30b-a3b")) == pytest.approx(3.6e9, rel=1e-2)


@pytest.mark.parametrize(
    ("model", "published"),
    [
        # Megatron-Bridge docs (nemotron3-ultra.md, nemotron3.5-lightning.md): parameters
        # including the one MTP layer both checkpoints carry
        ("nemotron3-ultra-550b-a55b", 560_524_603_904),
        ("nemotron3-5-lightning-30b-a3b", 32_913_266_240),
    ],
)
def test_totals_with_the_mtp_layer_match_the_published_counts(model: str, published: int) -> None:
    m = get_model(model)
    assert (m.mtp_layers, m.mtp_weight_sets) == (2, 1)  # one layer run at two depths
    assert param_count(m) + mtp_param_count(m) == pytest.approx(published, rel=2e-4)


def test_mamba_mixer_weights_by_hand() -> None:
    # Nano: h 2688, d = 64 x 64 = 4096, G N = 8 x 128, 64 heads, conv kernel 4
    # in_proj 2688 (2 x 4096 + 2 x 1024 + 64) = 27,697,152; conv (4096 + 2048) x 5 = 30,720;
    # A, D, dt bias 192; gated norm 4096; out_proj 4096 x 2688 = 11,010,048
    sh = layer_shapes(get_model("nemotron3-nano-30b-a3b"))
    assert sh.mamba == 27_697_152 + 30_720 + 192 + 4_096 + 11_010_048
    assert sh.norms == 2688  # one norm per hybrid block


def test_ssd_flops_by_hand() -> None:
    # chunk Q 128, N 128, P 64, H 64, G 8: 2 x [8 x 128 x 128 / 2 + 64 x (128 x 64 / 2
    # + 2 x 128 x 64)] = 2 x (65,536 + 1,310,720)
    assert scan_flops_per_token(get_model("nemotron3-nano-30b-a3b")) == 2_752_512


def test_megatron_hybrid_flops_by_hand() -> None:
    # Megatron-LM hybrid_flops for Nano, B = 1, s = 4096 (causal): 3 x forward of
    # attention 4 s q (h (1 + g/a) + s/2) x 6 blocks, MoE 4 s (h f k + h f_sh) x 23 (relu2: x1),
    # Mamba 2 s h (2 d + 2 G N + H) + 7 s d N + 2 s d h with d = 2 h, x 23, logits 2 s h V
    s, h = 4096, 2688
    attn = 4 * s * 4096 * (h * (1 + 2 / 32) + s / 2)
    moe = 4 * s * (h * 1856 * 6 + h * 3712)
    d = 2 * h
    mamba = 2 * s * h * (2 * d + 2 * 8 * 128 + 64) + 7 * s * d * 128 + 2 * s * d * h
    logits = 2 * s * h * 131072
    expected = 3 * (6 * attn + 23 * moe + 23 * mamba + logits)
    got = megatron_model_flops(get_model("nemotron3-nano-30b-a3b"), 1, s, causal=True)
    assert got == pytest.approx(expected, rel=1e-12)


def test_hybrid_forward_flops_count_each_block_once() -> None:
    # Nemotron-H 8B, by hand: attention 4096 x 4096 x 2 + 2 x 4096 x 1024 = 41,943,040
    # weights; squared-ReLU MLP 2 x 4096 x 21504 = 176,160,768; Mamba in_proj 4096 x (2 x
    # 8192 + 2 x 1024 + 128) = 76,021,760, conv 10,240 x 5 = 51,200, A/D/dt 384, norm 8192,
    # out_proj 8192 x 4096 = 33,554,432; SSD 2 x (8 x 128 x 128 / 2 + 128 x (128 x 64 / 2
    # + 2 x 128 x 64)) = 5,373,952 FLOPs per token
    m = get_model("nemotron-h-8b")
    s = 8192
    attn, mlp = 41_943_040, 176_160_768
    mamba = 76_021_760 + 51_200 + 384 + 8_192 + 33_554_432
    core = 2.0 * s * 2 * 4096 * 4 * 0.5  # QK^T and PV, 4 attention blocks, causal half
    gemm = 4 * attn + 24 * mlp + 24 * mamba
    expected = 2.0 * gemm + core + 24 * 5_373_952 + 2.0 * 131072 * 4096
    assert forward_flops_per_token(m, s) == pytest.approx(expected, rel=1e-12)


def _as_pattern(key: str) -> tuple[Model, Model]:
    """A catalog model and the same model written as a hybrid pattern '*-' per layer."""
    m = get_model(key)
    body = m.model_dump()
    body.update(key=f"{key}-blocks", layers=2 * m.layers, pattern="*-" * m.layers)
    return m, Model.model_validate(body)


def _workload(m: Model, gpus: int = 64, precision: str = "bf16") -> Workload:
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    return Workload(m, g, s, Fabric.from_system(s, gpus), gpus, 8192, 256, precision)


@pytest.mark.parametrize(
    "plan",
    [
        dict(tp=1, pp=1, dp=64, mbs=1, recompute=1, sharding=1),
        dict(tp=2, pp=4, dp=8, mbs=1, sp=True, recompute=1, sharding=1),
        dict(tp=8, pp=2, dp=4, mbs=2, sp=False, recompute=0, sharding=0),
        dict(tp=4, pp=2, dp=8, mbs=1, sp=True, recompute=0, sharding=2),
    ],
)
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_attention_mlp_pattern_equals_the_layered_model(
    plan: dict[str, Any], precision: str
) -> None:
    # a layer of attention + MLP is two hybrid blocks ('*' then '-'): the parameters, every
    # step-time term and the memory must be the same either way. (Not so with full
    # recomputation, which checkpoints every block's input, nor with ZeRO-3, which gathers
    # block by block: twice the checkpoints and the collectives, as in Megatron's hybrid stack.)
    layered, blocks = _as_pattern("llama3-8b")
    assert param_count(blocks) == param_count(layered)
    p = Plans.of(**plan)
    wl, wb = _workload(layered, precision=precision), _workload(blocks, precision=precision)
    sl, sb = step_breakdown(wl, p, CAL), step_breakdown(wb, p, CAL)
    assert float(sb.step_s[0]) == pytest.approx(float(sl.step_s[0]), rel=1e-9)
    for term in ("compute_s", "memory_bound_s", "tp_comm_s", "recompute_s", "dp_comm_s"):
        assert float(getattr(sb, term)[0]) == pytest.approx(float(getattr(sl, term)[0]), rel=1e-9)
    ml, mb = memory_breakdown(wl, p, CAL), memory_breakdown(wb, p, CAL)
    assert float(mb.total[0]) == pytest.approx(float(ml.total[0]), rel=1e-9)


def test_full_recompute_keeps_one_input_per_block() -> None:
    layered, blocks = _as_pattern("llama3-8b")
    p = Plans.of(tp=1, pp=1, dp=64, mbs=1, recompute=2, sharding=1)
    ml = memory_breakdown(_workload(layered), p, CAL)
    mb = memory_breakdown(_workload(blocks), p, CAL)
    # 64 blocks' inputs against 32 layers', 2 s b h bytes each (s 8192, b 1, h 4096), plus
    # the one layer (block) re-materialised at a time
    none = Plans.of(tp=1, pp=1, dp=64, mbs=1, recompute=0, sharding=1)
    one_l = float(activation_bytes_per_layer(_workload(layered), none)[0])
    one_b = float(activation_bytes_per_layer(_workload(blocks), none)[0])
    inputs = 2 * 8192 * 4096
    expected = (64 * inputs + one_b - 32 * inputs - one_l) * CAL.mem_activation_overhead
    assert float(mb.activations[0] - ml.activations[0]) == pytest.approx(expected, rel=1e-9)
    assert one_b == pytest.approx(one_l / 2, rel=1e-12)


def test_mamba_blocks_cost_time_and_memory() -> None:
    # the same plan with two more Mamba blocks: its time and its activation memory grow
    nano = get_model("nemotron3-nano-30b-a3b")
    body = nano.model_dump()
    body.update(key="nano-more-mamba", layers=54, pattern=nano.pattern + "MM")
    more = Model.model_validate(body)
    p = Plans.of(tp=1, pp=1, dp=8, ep=8, mbs=1, recompute=0, sharding=1)
    t0 = float(step_breakdown(_workload(nano, 8), p, CAL).step_s[0])
    t1 = float(step_breakdown(_workload(more, 8), p, CAL).step_s[0])
    assert t1 > t0
    m0 = float(memory_breakdown(_workload(nano, 8), p, CAL).activations[0])
    m1 = float(memory_breakdown(_workload(more, 8), p, CAL).activations[0])
    # by hand, per block and token (s 8192, b 1, h 2688; 64 heads of 64: inner 4096; 8
    # groups of state 128): the block's input and its norm's output (2 h bytes each), and
    # in 16-bit in_proj's output (2 x 4096 + 2 x 8 x 128 + 64 = 10304), the conv's output
    # (4096 + 2 x 8 x 128 = 6144), the scan's output and the gated norm's (2 x 4096)
    per_block = 8192 * (4 * 2688 + 2 * (10304 + 6144 + 2 * 4096))
    assert m1 - m0 == pytest.approx(2 * per_block * CAL.mem_activation_overhead, rel=1e-9)


def test_kv_cache_and_mamba_state_by_hand() -> None:
    m = get_model("nemotron3-nano-30b-a3b")
    # 6 attention blocks x (2 KV heads x 128) x K and V x 2 bytes
    assert kv_bytes_per_token(m) == 6 * 2 * 128 * 2 * 2
    # 23 Mamba blocks x (64 x 64 x 128 SSM state + 3 x (4096 + 2048) conv inputs) x 2 bytes
    assert mamba_state_bytes_per_seq(m) == 23 * (64 * 64 * 128 + 3 * 6144) * 2
    assert mamba_state_bytes_per_seq(get_model("llama3-8b")) == 0.0


def _write(tmp_path: Path, cfg: dict[str, Any]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


NANO_CFG: dict[str, Any] = {
    "model_type": "nemotron_h",
    "hidden_size": 2688,
    "num_hidden_layers": 52,
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "n_routed_experts": 128,
    "num_experts_per_tok": 6,
    "moe_intermediate_size": 1856,
    "moe_shared_expert_intermediate_size": 3712,
    "n_shared_experts": 1,
    "mamba_num_heads": 64,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "chunk_size": 128,
    "vocab_size": 131072,
    "mlp_hidden_act": "relu2",
    "intermediate_size": 1856,
}


def test_a_nemotron_h_config_json_reads_as_the_catalog_model(tmp_path: Path) -> None:
    m = load_hf_config(_write(tmp_path, NANO_CFG))
    assert m.pattern == get_model("nemotron3-nano-30b-a3b").pattern
    assert m.mamba == get_model("nemotron3-nano-30b-a3b").mamba
    assert (m.shared_experts, m.gated_mlp, m.position) == (2, False, "none")
    assert param_count(m) == param_count(get_model("nemotron3-nano-30b-a3b"))


def test_layers_block_type_lists_are_read_as_the_pattern(tmp_path: Path) -> None:
    names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    cfg = {k: v for k, v in NANO_CFG.items() if k != "hybrid_override_pattern"}
    cfg["layers_block_type"] = [names[c] for c in NANO_CFG["hybrid_override_pattern"]]
    assert load_hf_config(_write(tmp_path, cfg)).pattern == NANO_CFG["hybrid_override_pattern"]
    cfg["layers_block_type"][0] = "rwkv"
    with pytest.raises(InputError) as exc:
        load_hf_config(_write(tmp_path, cfg))
    assert exc.value.field.endswith("/config.json:layers_block_type") and exc.value.value == "rwkv"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hybrid_override_pattern": "MEMX" + "E" * 48}, "pattern letters"),
        ({"num_hidden_layers": 50}, "52 blocks but num_hidden_layers=50"),
        ({"mamba_num_heads": None}, "mamba_num_heads"),
    ],
)
def test_bad_hybrid_configs_name_the_field(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    cfg = {**NANO_CFG, **change}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(InputError, match=message):
        load_hf_config(_write(tmp_path, cfg))


def test_nemotron_3_row_spellings_resolve() -> None:
    assert get_model("Nemotron_3_Nano").key == "nemotron3-nano-30b-a3b"
    assert get_model("Nemotron_3_Super").key == "nemotron3-super-120b-a12b"
    assert get_model("Nemotron_3_5_Lightning").key == "nemotron3-5-lightning-30b-a3b"
    assert np.isclose(get_model("Nemotron_3_Super").moe_width, 1024)


def test_serving_caches_sliding_window_layers_as_full_ones() -> None:
    # an upper bound past the window: 36 attention layers x K and V of 8 heads x 64, 2 B
    assert kv_bytes_per_token(get_model("gpt-oss-120b")) == 36 * 2 * 8 * 64 * 2


def test_mamba_state_takes_its_share_of_the_kv_pool() -> None:
    from gpuscale.perf.kv import memory_plan, precision_plan

    m, gpu = get_model("nemotron3-nano-30b-a3b"), get_gpu("h100-sxm")
    prec = precision_plan(gpu, "bf16")
    plan = memory_plan(m, gpu, prec, 1, 1, 8192, 0.9, 8192, 10_000, 16, 0.0, False)
    per_seq = 512 * 16 * kv_bytes_per_token(m) + mamba_state_bytes_per_seq(m)
    assert plan.kv_limited_seqs == int(plan.kv_pool_bytes // per_seq)
    assert plan.kv_blocks == plan.kv_limited_seqs * 512  # only those sequences' blocks


def test_ssd_scan_time_by_hand() -> None:
    # Nano on one H100, 8192 tokens, TP 1: 2,752,512 FLOPs per token of batched block
    # matmuls, every one reducing over 128 (state N = chunk Q = 128), so all run at the GEMM
    # efficiency of K = 128 under the H100's matmul ceiling (wave quantisation off: sms 0);
    # plus per token 2 (3 x 4096 + 4 x 1024) + 4 x 2 x 8 x 128 + 16 x 64 x 64 x 128 / 128
    # = 106,496 bytes of HBM traffic; the whole at the kernels' measured ssd_eff of that
    from gpuscale.perf.kernels import scan_s

    w = _workload(get_model("nemotron3-nano-30b-a3b"), 8)
    w = replace(w, gpu=w.gpu.model_copy(update={"sms": 0}))
    peak, bw = w.gpu.peak_flops("bf16"), w.gpu.hbm_bw_Bps * CAL.hbm_eff
    t = scan_s(w, np.array([8192.0]), np.array([1.0]), peak, bw, CAL)
    eff = 0.803 * CAL.gemm_eff_max * 128 / (128 + CAL.gemm_half_dim)
    expected = (8192 * 2_752_512 / (peak * eff) + 8192 * 106_496 / bw) / CAL.ssd_eff
    assert float(t[0]) == pytest.approx(expected, rel=1e-12)


def test_context_parallel_mamba_blocks_pay_two_all_to_alls_each_way() -> None:
    # an all-Mamba variant of Nano (no attention block: no ring-attention term), 8 H100,
    # CP 2: each of its 29 Mamba blocks moves its in_proj output, 4096 local tokens x
    # (2 x 4096 + 2 x 8 x 128 + 64) x 2 B, to head shards and its 4096 x 4096 x 2 B output
    # back, forward and backward
    from gpuscale.perf.comm import collective_time_s

    nano = get_model("nemotron3-nano-30b-a3b")
    body = nano.model_dump()
    body.update(key="nano-all-mamba", pattern=nano.pattern.replace("*", "M"))
    m = Model.model_validate(body)
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    fab = Fabric.from_system(s, 8)
    w = Workload(m, g, s, fab, 8, 8192, 64, "bf16")
    b = step_breakdown(w, Plans.of(tp=1, pp=1, dp=4, cp=2, ep=1, mbs=1, recompute=0), CAL)
    t_in = collective_time_s("all_to_all", 4096 * 10304 * 2.0, 2.0, fab, CAL, 2.0)
    t_out = collective_time_s("all_to_all", 4096 * 4096 * 2.0, 2.0, fab, CAL, 2.0)
    expected = 16 * 29 * 2 * (float(t_in) + float(t_out))
    assert float(b.cp_comm_s[0]) == pytest.approx(expected, rel=1e-9)


def test_tensor_parallelism_must_split_the_mamba_heads_and_groups() -> None:
    from gpuscale.perf.validity import validity

    # Nano: 64 Mamba heads in 8 groups; TP 16 divides its 32 attention heads, not the groups
    w = _workload(get_model("nemotron3-nano-30b-a3b"), 16)
    # (an MoE model under TP needs sequence parallelism)
    plans = Plans.of(tp=np.array([8, 16]), pp=1, dp=np.array([2, 1]), mbs=1, sp=True)
    ok, rules = validity(w, plans)
    assert ok.tolist() == [True, False]
    broken = [name for mask, name in rules if not mask[1]]
    assert broken == ["Mamba-2 heads and groups not divisible by tp (heads by tp x cp)"]
