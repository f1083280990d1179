"""Inference memory and per-step model: KV bytes, weights under TP, decode bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpuscale.calibrate import Calibration
from gpuscale.catalog import get_gpu, get_model
from gpuscale.errors import InputError
from gpuscale.perf.inference import build_step_model
from gpuscale.perf.kv import (
    kv_bytes_per_token,
    param_counts,
    precision_plan,
    weight_bytes_per_gpu,
)

KIB = 1024


@pytest.mark.parametrize(
    ("model", "kib"),
    # shared/reference/serving_notes.md: 131,072 / 327,680 / 516,096 B per token at BF16
    [("llama3-8b", 128), ("llama3-70b", 320), ("llama3-405b", 504)],
)
def test_kv_bytes_per_token_llama3_bf16(model: str, kib: int) -> None:
    assert kv_bytes_per_token(get_model(model), 2.0) == kib * KIB


def test_kv_heads_are_replicated_when_tp_exceeds_them() -> None:
    m = get_model("llama3-70b")  # 8 KV heads
    whole = kv_bytes_per_token(m, 2.0)
    assert kv_bytes_per_token(m, 2.0, tp=8) == whole / 8
    # TP 16 > 8 KV heads: each GPU still holds one head, not half of one
    assert kv_bytes_per_token(m, 2.0, tp=16) == whole / 8


def test_mla_caches_one_latent_shared_by_all_heads() -> None:
    m = get_model("deepseek-v3")
    assert m.mla is not None
    per_layer = (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) * 2.0
    assert kv_bytes_per_token(m, 2.0) == per_layer * m.layers
    assert kv_bytes_per_token(m, 2.0, tp=8) == kv_bytes_per_token(m, 2.0)


def test_fp8_kv_halves_the_cache() -> None:
    gpu = get_gpu("h100-sxm")
    p = precision_plan(gpu, "fp8")
    assert p.kv == "fp8"
    m = get_model("llama3-8b")
    assert kv_bytes_per_token(m, p.kv_bytes) == 64 * KIB


def test_weight_bytes_per_gpu_divide_by_tp_and_pp() -> None:
    m = get_model("llama3-70b")
    gpu = get_gpu("h100-sxm")
    p = precision_plan(gpu, "bf16")
    w1 = weight_bytes_per_gpu(m, p, 1, 1)
    assert w1 == pytest.approx(param_counts(m).total * 2.0, rel=1e-12)
    assert weight_bytes_per_gpu(m, p, 4, 1) == pytest.approx(w1 / 4)
    assert weight_bytes_per_gpu(m, p, 4, 2) == pytest.approx(w1 / 8)
    # ~70.6 B parameters (Llama 3.1 70B config)
    assert param_counts(m).total == pytest.approx(70.55e9, rel=0.01)


def test_fp8_weights_are_half_of_bf16_apart_from_embeddings() -> None:
    m = get_model("llama3-8b")
    gpu = get_gpu("h100-sxm")
    pc = param_counts(m)
    emb = (pc.embedding + pc.lm_head) * 2.0
    w16 = weight_bytes_per_gpu(m, precision_plan(gpu, "bf16"), 1, 1)
    w8 = weight_bytes_per_gpu(m, precision_plan(gpu, "fp8"), 1, 1)
    assert w8 - emb == pytest.approx((w16 - emb) / 2)


def test_batch1_decode_is_bounded_by_weight_reads() -> None:
    """Batch 1 decode cannot beat reading every weight once at the achieved bandwidth."""
    cal = Calibration().replace(decode_step_overhead_s=0.0, inf_seq_overhead_s=0.0)
    m, gpu = get_model("llama3-70b"), get_gpu("h100-sxm")
    sm = build_step_model(m, gpu, precision_plan(gpu, "bf16"), 4, 1, cal, tokens_per_seq=2048)
    t = sm.decode_time_s(1, 1024)
    w = sm.memory.weights_bytes
    bound = w / (gpu.hbm_bw_Bps * cal.inf_hbm_eff)
    assert t >= bound * 0.999
    # and is not far above it (KV read of 1k tokens and TP all-reduces are small)
    assert t <= bound * 1.5


def test_moe_decode_reads_only_routed_experts() -> None:
    cal = Calibration()
    m, gpu = get_model("mixtral-8x7b"), get_gpu("h100-sxm")
    sm = build_step_model(m, gpu, precision_plan(gpu, "bf16"), 2, 1, cal, tokens_per_seq=1024)
    one = sm.decode_time_s(1, 512)
    many = sm.decode_time_s(64, 512)
    assert many > one * 1.8
    # weights a decode step reads on one GPU (TP2, bf16), by hand: attention (q and o
    # 4096 x 4096, k and v 4096 x 1024) in 32 layers and the output head (4096 x 32000),
    # always; each expert (three 4096 x 14336 matrices and its router column), only if
    # one of the step's tokens routes to it: T tokens picking 2 of 8 touch 1 - (6/8)^T
    fixed = (32 * (2 * 4096**2 + 2 * 4096 * 1024) + 4096 * 32000) / 2 * 2.0
    routed = 32 * 8 * (3 * 4096 * 14336 + 4096) / 2 * 2.0
    for tokens in (1, 64):
        b = sm.breakdown(0, 0, 0, tokens, 512 * tokens)
        touched = 1 - (1 - 2 / 8) ** tokens
        assert b.bound == "memory"
        assert b.gemm_s * sm.hbm_Bps == pytest.approx(fixed + touched * routed, rel=1e-9)


def test_vectorised_decode_matches_scalar() -> None:
    cal = Calibration()
    m, gpu = get_model("llama3-8b"), get_gpu("h200")
    sm = build_step_model(m, gpu, precision_plan(gpu, "fp8"), 1, 1, cal, tokens_per_seq=2048)
    b = np.array([1, 8, 64, 256])
    vec = sm.decode_time_s_vec(b, np.full(4, 1500.0))
    for bi, v in zip(b, vec, strict=True):
        assert v == pytest.approx(sm.decode_time_s(int(bi), 1500.0), rel=1e-9)


def test_one_prompt_passes_every_pipeline_stage_whole() -> None:
    # Llama 3 70B at TP4: split over 2 stages, one 2,048-token prompt still runs all 80
    # layers in turn (half on each stage), so its prefill takes as long as at PP1 (plus a
    # hop), not half; 64 decoding sequences fill both micro-batches, 32 each
    cal = Calibration()
    m, gpu = get_model("llama3-70b"), get_gpu("h100-sxm")
    plan = precision_plan(gpu, "bf16")
    one = build_step_model(m, gpu, plan, 4, 1, cal, tokens_per_seq=2304)
    two = build_step_model(m, gpu, plan, 4, 2, cal, tokens_per_seq=2304)
    assert two.prefill_time_s(2048) == pytest.approx(one.prefill_time_s(2048), rel=0.02)
    g, a, k, c, hop, _ = two._stage(0.0, 0.0, 0, 64, 64 * 1500.0)
    assert two.decode_time_s(64, 1500.0) == pytest.approx(
        2 * (g + a + k + c + hop) + two.overhead_s + two.seq_overhead_s * 64, rel=1e-12
    )
    vec = two.decode_time_s_vec(np.array([1, 2, 64]), np.full(3, 1500.0))
    for bi, v in zip((1, 2, 64), vec, strict=True):
        assert v == pytest.approx(two.decode_time_s(bi, 1500.0), rel=1e-9)


def test_prefill_is_compute_bound_and_scales_with_tokens() -> None:
    cal = Calibration()
    m, gpu = get_model("llama3-8b"), get_gpu("h100-sxm")
    sm = build_step_model(m, gpu, precision_plan(gpu, "bf16"), 1, 1, cal, tokens_per_seq=8192)
    b = sm.breakdown(4096.0, 4096 * 4097 / 2, 1, 0, 0.0)
    assert b.bound == "compute"
    assert sm.prefill_time_s(4096) > 1.9 * sm.prefill_time_s(2048)


def test_max_sequences_from_kv_pool_and_blocks() -> None:
    cal = Calibration()
    m, gpu = get_model("llama3-70b"), get_gpu("h100-sxm")
    sm = build_step_model(m, gpu, precision_plan(gpu, "fp8"), 4, 1, cal, tokens_per_seq=2304)
    mem = sm.memory
    per_seq = math.ceil(2304 / mem.block_tokens) * mem.block_tokens * mem.kv_bytes_per_token
    assert mem.kv_limited_seqs == int(
        mem.kv_pool_bytes // (mem.block_tokens * mem.kv_bytes_per_token)
    ) // math.ceil(2304 / mem.block_tokens)
    assert mem.kv_limited_seqs * per_seq <= mem.kv_pool_bytes


def test_unsupported_precision_is_an_input_error() -> None:
    with pytest.raises(InputError, match="fp8"):
        precision_plan(get_gpu("a100-sxm-80gb"), "fp8")
    with pytest.raises(InputError, match="fp4"):
        precision_plan(get_gpu("h100-sxm"), "fp4")
    with pytest.raises(InputError):
        precision_plan(get_gpu("h100-sxm"), "int3")


def test_pipeline_hops_between_nodes_cost_the_network_latency() -> None:
    # Llama 3 405B in FP8 on DGX H100 (8 GPUs a node): TP4 PP2 keeps both stages in one
    # node, TP8 PP2 puts each stage in its own node, TP2 PP8 crosses once in 7 boundaries
    from gpuscale.catalog import get_system
    from gpuscale.perf.comm import Fabric
    from gpuscale.perf.comm.model import collective_time_s

    cal = Calibration()
    m, gpu = get_model("llama3-405b"), get_gpu("h100-sxm")
    prec = precision_plan(gpu, "fp8")
    fabric = Fabric.from_system(get_system("dgx-h100"))
    size = m.hidden * 2.0

    def hop(k: int) -> float:
        return float(collective_time_s("send_recv", size, 2, fabric, cal, k))

    def alpha(tp: int, pp: int) -> float:
        return build_step_model(m, gpu, prec, tp, pp, cal, tokens_per_seq=2048).pp_hop_alpha_s

    beta_in = float(collective_time_s("send_recv", size * 1025, 2, fabric, cal, 2)) - hop(2)
    assert alpha(4, 2) == pytest.approx(hop(2) - beta_in / 1024, rel=1e-9)
    assert alpha(8, 2) > alpha(4, 2)
    mixed = alpha(2, 8)
    assert alpha(4, 2) < mixed < alpha(8, 2)
    assert mixed == pytest.approx(alpha(4, 2) + (alpha(8, 2) - alpha(4, 2)) / 7, rel=1e-9)
    # TP5 does not divide the 8-GPU node: one whole stage a node, every boundary crosses
    m5 = get_model("llama3-8b").model_copy(update={"heads": 40, "kv_heads": 8})
    hop5 = build_step_model(m5, gpu, prec, 5, 3, cal, tokens_per_seq=2048).pp_hop_alpha_s
    one5 = build_step_model(m5, gpu, prec, 5, 2, cal, tokens_per_seq=2048).pp_hop_alpha_s
    assert hop5 == pytest.approx(one5, rel=1e-9) and hop5 > alpha(4, 2)


def test_decode_attention_takes_the_longer_of_its_reads_and_its_flops() -> None:
    import dataclasses

    cal = Calibration()
    m, gpu = get_model("deepseek-v3"), get_gpu("h200")
    sm = build_step_model(m, gpu, precision_plan(gpu, "fp8"), 8, 1, cal, tokens_per_seq=8192)
    # MLA decodes absorbed: 128 heads score the 512 latent + 64 rope dimensions and sum the
    # 512 latent, 61 layers, heads split over TP8
    assert sm.decode_attn_flops_per_pair == 2.0 * 128 * (2 * 512 + 64) * 61 / 8
    # at TP8 on H200 its FP8 latent reads take longer: nothing beyond them
    base = sm.breakdown(0, 0, 0, 64, 64 * 4000.0)
    assert base.attention_s == 0.0
    # with HBM ten times faster the FLOPs take longer: their excess is attention time
    fast = dataclasses.replace(sm, hbm_Bps=sm.hbm_Bps * 10)
    b = fast.breakdown(0, 0, 0, 64, 64 * 4000.0)
    flops_s = sm.decode_attn_flops_per_pair * 64 * 4000.0 / sm.attn_rate_flops
    assert b.attention_s + b.kv_read_s == pytest.approx(flops_s, rel=1e-12)
    # the closed form and the vectorised decode agree with it
    a, slope = fast.decode_coeffs(64, 64 * 4000.0)
    assert a + slope * 64 * 4000.0 == pytest.approx(fast.decode_time_s(64, 4000.0), rel=1e-9)
    vec = fast.decode_time_s_vec(np.array([64]), np.array([4000.0]))
    assert vec[0] == pytest.approx(fast.decode_time_s(64, 4000.0), rel=1e-9)
