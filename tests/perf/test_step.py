"""Training step time: the breakdown sums to the step, bubble, comm at degree 1, FP8.

Pipeline bubble: Narayanan et al. SC'21 (arXiv 2104.04473) sec. 2.2: the bubble is a
fraction (p - 1)/m of the ideal time for 1F1B and (p - 1)/(v m) with v interleaved chunks,
i.e. (p - 1)/v x the per-micro-batch stage time. TP communication: Shoeybi et al. 2019
(Megatron-LM) -- 2 all-reduces forward and 2 backward per layer; full recomputation repeats
the forward's 2 (Korthikanti et al. 2022 sec. 4).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpuscale.calibrate import Calibration, default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.perf.comm import Fabric
from gpuscale.perf.comm.model import collective_time_s
from gpuscale.perf.kernels import attention_core_s, gemm_s
from gpuscale.perf.plan import SHARDING, Plans, Workload
from gpuscale.perf.stage_params import params_per_gpu
from gpuscale.perf.step import StepBreakdown, step_breakdown
from gpuscale.perf.training import estimate
from gpuscale.perf.transformer import model_flops_per_token, param_count
from gpuscale.perf.validity import validity

# non-zero fixed costs so the overhead term is visible in every reconstruction below, and
# FP8's input quantisation at its unfused traffic (4 bytes per element)
CAL = default_calibration().replace(
    step_overhead_s=0.25, microbatch_overhead_s=2e-3, fp8_cast_bytes=4.0
)

PER_MB = (
    "compute_s",
    "recompute_s",
    "memory_bound_s",
    "quantise_s",
    "tp_comm_s",
    "cp_comm_s",
    "ep_comm_s",
    "pp_comm_s",
)


def workload(
    model: str = "gpt3-175b",
    gpus: int = 1024,
    seq: int = 2048,
    gbs: int = 1536,
    gpu: str = "a100-sxm-80gb",
    precision: str = "bf16",
) -> Workload:
    g = get_gpu(gpu)
    s = system_for_gpu(g)
    return Workload(get_model(model), g, s, Fabric.from_system(s, gpus), gpus, seq, gbs, precision)


def step(w: Workload, **plan: Any) -> StepBreakdown:
    p = Plans.of(**plan)
    ok, _ = validity(w, p)
    assert ok.all(), "test plan must be valid"
    return step_breakdown(w, p, CAL)


def t_microbatch(b: StepBreakdown, m: int, i: int = 0) -> float:
    """Per-micro-batch stage time rebuilt from the other terms (all but bubble, DP comm,
    optimizer and the once-per-step overhead), divided by the micro-batch count m."""
    per_mb = sum(float(getattr(b, k)[i]) for k in PER_MB)
    per_mb += float(b.overhead_s[i]) - CAL.step_overhead_s  # m x microbatch_overhead_s
    return per_mb / m


@pytest.mark.parametrize(
    ("tp", "pp", "dp", "vpp", "mbs"),
    [(8, 8, 16, 1, 1), (8, 8, 16, 2, 1), (8, 16, 8, 3, 2), (4, 4, 64, 8, 2), (8, 12, 8, 1, 4)],
)
def test_bubble_is_p_minus_1_over_v_microbatch_times(
    tp: int, pp: int, dp: int, vpp: int, mbs: int
) -> None:
    w = workload()
    b = step(w, tp=tp, pp=pp, dp=dp, vpp=vpp, mbs=mbs, sp=True, recompute=1)
    m = w.global_batch // (dp * mbs)
    t_mb = t_microbatch(b, m)
    # SC'21: bubble time = (p - 1)/v x t_mb, a fraction (p - 1)/(v m) of the m x t_mb work
    assert float(b.bubble_s[0]) == pytest.approx((pp - 1) / vpp * t_mb, rel=1e-9)
    assert float(b.bubble_s[0]) / (m * t_mb) == pytest.approx((pp - 1) / (vpp * m), rel=1e-9)


def test_no_bubble_without_pipeline() -> None:
    w = workload()
    b = step(w, tp=8, pp=1, dp=128, mbs=1, sp=True, recompute=2, sharding=1)
    assert float(b.bubble_s[0]) == 0.0
    assert float(b.pp_comm_s[0]) == 0.0


def test_doubling_microbatches_halves_bubble_fraction() -> None:
    # same per-micro-batch shape (mbs 1), twice the global batch: (p-1)/m halves
    w1, w2 = workload(gbs=768), workload(gbs=1536)
    plan = dict(tp=8, pp=8, dp=16, mbs=1, sp=True, recompute=1)
    b1, b2 = step(w1, **plan), step(w2, **plan)
    f1 = float(b1.bubble_s[0]) / (48 * t_microbatch(b1, 48))
    f2 = float(b2.bubble_s[0]) / (96 * t_microbatch(b2, 96))
    assert f1 == pytest.approx(7 / 48, rel=1e-9)
    assert f2 == pytest.approx(f1 / 2, rel=1e-9)


def test_tp_comm_zero_at_tp1() -> None:
    w = workload("llama3-8b", gpus=8, gbs=64, seq=4096, gpu="h100-sxm")
    no_tp = step(w, tp=1, pp=1, dp=8, mbs=1, recompute=[0, 1, 2], sharding=[0, 1, 4])
    assert np.all(no_tp.tp_comm_s == 0.0)
    assert np.all(no_tp.dp_comm_s > 0.0)
    with_tp = step(w, tp=8, pp=1, dp=1, mbs=1, sp=True)
    assert float(with_tp.tp_comm_s[0]) > 0.0


def test_dp_comm_zero_at_dp1() -> None:
    # one GPU per model replica, TP = 1: nothing to reduce across replicas
    w = workload("llama3-8b", gpus=8, gbs=64, seq=4096, gpu="h100-sxm")
    for sharding in range(5):
        assert float(step(w, tp=1, pp=8, dp=1, mbs=1, sharding=sharding).dp_comm_s[0]) == 0.0


@pytest.mark.parametrize("sharding", range(5))
def test_dp_comm_zero_at_dp1_with_tensor_parallel_dense_model(sharding: int) -> None:
    # A dense model with DP = CP = 1 has no data-parallel group at all, whatever TP is:
    # gradient all-reduce / reduce-scatter and parameter all-gather are over 1 rank.
    w = workload("llama3-8b", gpus=8, gbs=64, seq=4096, gpu="h100-sxm")
    no_dp = step(w, tp=8, pp=1, dp=1, mbs=1, sp=True, sharding=sharding)
    assert float(no_dp.dp_comm_s[0]) == 0.0


def test_cp_joins_the_gradient_reduction_group() -> None:
    # CP ranks hold the same weights and reduce gradients with DP (Megatron dp_cp group)
    w = workload("llama3-8b", gpus=8, gbs=64, seq=4096, gpu="h100-sxm")
    with_cp = float(step(w, tp=4, pp=1, dp=1, cp=2, mbs=1, sp=True, sharding=1).dp_comm_s[0])
    # the same reduction as two data-parallel replicas make: two ranks of one node
    with_dp = float(step(w, tp=4, pp=1, dp=2, cp=1, mbs=1, sp=True, sharding=1).dp_comm_s[0])
    assert with_cp > 0 and with_cp == pytest.approx(with_dp, rel=1e-9)


def test_full_recompute_adds_the_forward_tp_all_reduces() -> None:
    # Megatron: 4 TP all-reduces per layer (2 fwd + 2 bwd), 6 with full recompute, plus
    # 2 for the embedding / output layer (unaffected). Ratio (6 L + 2)/(4 L + 2).
    w = workload()
    b = step(w, tp=8, pp=8, dp=16, mbs=1, sp=True, recompute=[0, 2])
    layers = 96 // 8
    assert float(b.tp_comm_s[1] / b.tp_comm_s[0]) == pytest.approx(
        (6 * layers + 2) / (4 * layers + 2), rel=1e-9
    )


def test_fp8_is_faster_than_bf16() -> None:
    plan = dict(tp=8, pp=4, dp=8, mbs=1, sp=True, recompute=1, sharding=1)
    bf = step(workload("llama3-70b", gpus=256, gbs=512, seq=8192, gpu="h100-sxm"), **plan)
    f8 = step(
        workload("llama3-70b", gpus=256, gbs=512, seq=8192, gpu="h100-sxm", precision="fp8"), **plan
    )
    assert float(f8.step_s[0]) < float(bf.step_s[0])
    # only GEMMs speed up (attention stays at the BF16 peak): compute shrinks by at most
    # the calibrated FP8 GEMM speed-up, and communication terms are equal
    assert float(f8.compute_s[0]) < float(bf.compute_s[0])
    assert float(f8.compute_s[0]) >= float(bf.compute_s[0]) / CAL.fp8_gemm_speedup
    # (exposed DP comm may grow: the shorter backward hides less of it)
    for k in ("tp_comm_s", "optimizer_s"):
        assert float(getattr(f8, k)[0]) == pytest.approx(float(getattr(bf, k)[0]), rel=1e-12)


def test_fp8_quantises_every_linear_layer_input_at_hbm_speed() -> None:
    # Llama 3 70B (h 8192, 64 query heads and 8 KV heads of 128, SwiGLU FFN 28672), TP8 with
    # sequence parallelism, 8192 tokens per micro-batch: the GEMMs' full-sequence inputs X
    # (forward) and output gradients dY (backward), per GPU and layer
    h, q, kv, f, tp, tokens = 8192, 8192, 1024, 28672, 8, 8192
    x_el = tokens * (h + q / tp + h + f / tp)  # QKV, output projection, FC1, FC2
    dy_el = tokens * ((q + 2 * kv) / tp + h + 2 * f / tp + h)
    layers, microbatches = 80 // 4, 512 // 8
    bw = get_gpu("h100-sxm").hbm_bw_Bps * CAL.hbm_eff
    expected = microbatches * layers * (x_el + dy_el) * CAL.fp8_cast_bytes / bw
    plan = dict(tp=8, pp=4, dp=8, mbs=1, sp=True, recompute=1, sharding=1)
    w = workload("llama3-70b", gpus=256, gbs=512, seq=8192, gpu="h100-sxm")
    bf = step(w, **plan)
    f8 = step(replace(w, precision="fp8"), **plan)
    fp4 = step(replace(w, gpu=get_gpu("b200"), precision="fp4"), **plan)
    assert float(f8.quantise_s[0]) == pytest.approx(expected, rel=1e-9)
    assert float(bf.quantise_s[0]) == 0.0
    assert float(f8.memory_bound_s[0]) == pytest.approx(float(bf.memory_bound_s[0]), rel=1e-12)
    # NVFP4 moves 7.125 bytes where FP8 moves 4 (an amax pass, two quantising passes)
    bw4 = get_gpu("b200").hbm_bw_Bps * CAL.hbm_eff
    expected4 = expected * bw / bw4 * 7.125 / 4.0
    assert float(fp4.quantise_s[0]) == pytest.approx(expected4, rel=1e-9)
    # a full recomputation quantises the forward inputs once more
    full = step(replace(w, precision="fp8"), **{**plan, "recompute": 2})
    full_bf = step(w, **{**plan, "recompute": 2})
    extra = microbatches * layers * x_el * CAL.fp8_cast_bytes / bw
    recompute_delta = float(full.recompute_s[0] - full_bf.recompute_s[0])
    gemm_delta = float(full.compute_s[0] - full_bf.compute_s[0])  # GEMMs' share, < 0
    assert recompute_delta - extra == pytest.approx(gemm_delta / 3.0, rel=1e-6)


def test_estimate_rates_follow_from_step_time() -> None:
    w = workload()
    p = Plans.of(tp=8, pp=8, dp=16, vpp=2, mbs=1, sp=True, recompute=1, sharding=1)
    e = estimate(w, p, CAL)
    step_s = float(e.step_s[0])
    # tokens/s per GPU = global batch x sequence / (step time x GPUs)
    tps = 1536 * 2048 / (step_s * 1024)
    assert float(e.tokens_per_s_per_gpu[0]) == pytest.approx(tps, rel=1e-12)
    # MFU = tokens/s/GPU x model FLOPs per token (causal) / dense BF16 peak (312 TF, A100)
    mfu = tps * model_flops_per_token(w.model, 2048, causal=True) / 312e12
    assert float(e.mfu[0]) == pytest.approx(mfu, rel=1e-9)
    assert 0.0 < float(e.mfu[0]) < 1.0
    assert float(e.model_tflops_per_gpu[0]) == pytest.approx(mfu * 312, rel=1e-9)


# --- invariants (hypothesis) -----------------------------------------------------------

W175 = workload()


@st.composite
def plans_175b(draw: st.DrawFn) -> dict[str, Any]:
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 2, 4, 8, 16]))
    dp = draw(st.sampled_from([1, 2, 4, 8, 16]))
    vpp = draw(st.sampled_from([1, 2, 3])) if pp > 1 else 1
    return dict(
        tp=tp,
        pp=pp,
        dp=dp,
        vpp=vpp,
        mbs=draw(st.sampled_from([1, 2, 4])),
        sp=draw(st.booleans()) and tp > 1,
        recompute=draw(st.integers(0, 2)),
        sharding=draw(st.integers(0, 4)),
        tp_overlap=draw(st.booleans()) and tp > 1,
    )


def _valid(plan: dict[str, Any]) -> bool:
    return bool(validity(W175, Plans.of(**plan))[0][0])


@settings(max_examples=80, deadline=None)
@given(plan=plans_175b())
def test_step_is_sum_of_nonnegative_terms(plan: dict[str, Any]) -> None:
    assume(_valid(plan))
    b = step_breakdown(W175, Plans.of(**plan), CAL)
    terms = b.terms()
    assert all(float(v[0]) >= 0.0 for v in terms.values())
    assert float(b.step_s[0]) == pytest.approx(sum(float(v[0]) for v in terms.values()), rel=1e-12)
    m = W175.global_batch // (int(plan["dp"]) * int(plan["mbs"]))
    pp, vpp = int(plan["pp"]), int(plan["vpp"])
    assert float(b.bubble_s[0]) == pytest.approx((pp - 1) / vpp * t_microbatch(b, m), rel=1e-9)
    if int(plan["tp"]) == 1:
        assert float(b.tp_comm_s[0]) == 0.0
    if int(plan["dp"]) == 1:  # dense model: no data-parallel group at all
        assert float(b.dp_comm_s[0]) == 0.0


@settings(max_examples=40, deadline=None)
@given(plan=plans_175b())
def test_recompute_costs_time_in_order(plan: dict[str, Any]) -> None:
    assume(_valid(plan))
    p = Plans.of(**{**plan, "recompute": [0, 1, 2]})
    b = step_breakdown(W175, p, CAL)
    none, sel, full = (float(x) for x in b.recompute_s)
    assert none == 0.0 < sel < full
    assert float(b.step_s[0]) < float(b.step_s[2])


W175_H100 = workload(gpu="h100-sxm")


@settings(max_examples=40, deadline=None)
@given(plan=plans_175b())
def test_fp8_never_slower_on_h100(plan: dict[str, Any]) -> None:
    w = W175_H100
    assume(bool(validity(w, Plans.of(**plan))[0][0]))
    bf = step_breakdown(w, Plans.of(**plan), CAL)
    f8 = step_breakdown(replace(w, precision="fp8"), Plans.of(**plan), CAL)
    # never slower but for the quantisation passes it adds: a plan bound by exposed ZeRO-3
    # communication gains nothing from the faster GEMMs and still pays the casts
    casts = float(f8.quantise_s[0])
    assert casts > 0.0
    assert float(f8.step_s[0]) - casts <= float(bf.step_s[0]) * (1 + 1e-12)
    assert float(f8.compute_s[0]) < float(bf.compute_s[0])


def _core(
    attention: str,
    gpu: str,
    seq: int = 4096,
    model: str = "gpt3-175b",
    tp: int = 8,
    cal: Calibration = CAL,
) -> tuple[float, float]:
    """Attention core seconds (forward, backward) of one layer and one sequence per GPU."""
    g = get_gpu(gpu)
    s = system_for_gpu(g)
    fabric = Fabric.from_system(s, 8)
    w = Workload(get_model(model), g, s, fabric, 8, seq, 8, "bf16", attention)
    one = np.array([1.0])
    fwd, bwd = attention_core_s(w, one, one * seq, one * tp, g.peak_flops("bf16"), 1e12, cal)
    return float(fwd[0]), float(bwd[0])


def test_flash2_is_slower_than_fused_only_where_hopper_kernels_exist() -> None:
    fa3, _ = _core("fused", "h100-sxm")
    fa2, fa2_bwd = _core("flash2", "h100-sxm")
    assert fa2 == pytest.approx(fa3 / CAL.attn_flash2_rel)
    assert fa2_bwd == pytest.approx(2.5 * fa2)
    assert _core("flash2", "a100-sxm-80gb") == _core("fused", "a100-sxm-80gb")
    # causal flash attention, forward: 2 x s^2 x (96 x 128 x 2) / 8 FLOPs / 2 at attn_eff
    flops = 2.0 * 4096**2 * (96 * 128 * 2) / 8 / 2
    peak = get_gpu("h100-sxm").peak_flops("bf16")
    assert fa3 == pytest.approx(flops / (peak * CAL.attn_eff), rel=1e-9)


def test_unfused_attention_pays_the_score_matrix_in_hbm_traffic() -> None:
    from gpuscale.perf.kernels import UNFUSED_BWD_BYTES, UNFUSED_FWD_BYTES, gemm_s

    fwd, bwd = _core("unfused", "a100-sxm-80gb")
    g = get_gpu("a100-sxm-80gb")
    heads = 96 / 8
    peak = g.peak_flops("bf16") * 0.869  # the A100's measured matmul ceiling (MAMF)
    assert g.matmul_eff == 0.869
    # QK^T: (s x d) @ (d x s); PV: (s x s) @ (s x d), one GEMM per head
    bmm = gemm_s(4096.0, 4096.0, 128.0, heads, peak, g.sms, CAL) + gemm_s(
        4096.0, 128.0, 4096.0, heads, peak, g.sms, CAL
    )
    scores = heads * 4096.0**2  # full s x s per head: the causal half is masked, not skipped
    assert fwd == pytest.approx(float(bmm) + 13.0 * scores / 1e12)
    assert bwd == pytest.approx(2 * float(bmm) + 19.0 * scores / 1e12)
    assert (UNFUSED_FWD_BYTES, UNFUSED_BWD_BYTES) == (13.0, 19.0)
    # at s = 4096 the score traffic alone outweighs the fused kernel's whole forward
    assert 13.0 * scores / 1e12 > _core("fused", "a100-sxm-80gb")[0]
    # a model trained without dropout (Llama 3 70B, 64 heads / TP8, head dim 128) skips
    # the attention dropout's 5 bytes a score each way
    lf, lb = _core("unfused", "a100-sxm-80gb", model="llama3-70b")
    h8 = 64 / 8
    bmm8 = gemm_s(4096.0, 4096.0, 128.0, h8, peak, g.sms, CAL) + gemm_s(
        4096.0, 128.0, 4096.0, h8, peak, g.sms, CAL
    )
    sc8 = h8 * 4096.0**2
    assert lf == pytest.approx(float(bmm8) + 8.0 * sc8 / 1e12)
    assert lb == pytest.approx(2 * float(bmm8) + 14.0 * sc8 / 1e12)


def test_each_local_expert_adds_its_fixed_cost_forward_and_backward() -> None:
    w = workload("qwen3-30b-a3b", gpus=8, seq=4096, gbs=64, gpu="h100-sxm")
    plan = {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "mbs": 1, "recompute": 0}
    p = Plans.of(**plan)
    base = step_breakdown(w, p, CAL.replace(moe_expert_overhead_s=0.0))
    more = step_breakdown(w, p, CAL.replace(moe_expert_overhead_s=1e-4))
    # 48 MoE layers x 128 / 8 local experts x 1e-4 s, x3 (forward + backward), 8 micro-batches
    want = 48 * 16 * 1e-4 * 3 * 8
    got = float(more.overhead_s[0] - base.overhead_s[0])
    assert got == pytest.approx(want, rel=1e-9)
    # a fixed cost, not HBM traffic
    assert float(more.memory_bound_s[0]) == pytest.approx(float(base.memory_bound_s[0]))


def test_expert_all_to_all_overlap_never_hides_more_than_the_compute() -> None:
    w = workload("qwen3-30b-a3b", gpus=64, seq=4096, gbs=256, gpu="h100-sxm")
    p = Plans.of(tp=1, pp=1, dp=64, ep=32, mbs=1, recompute=0)  # EP over 4 nodes
    exposed = step_breakdown(w, p, CAL.replace(ep_overlap=0.0))
    hidden = step_breakdown(w, p, CAL.replace(ep_overlap=1.0))
    half = step_breakdown(w, p, CAL.replace(ep_overlap=0.5))
    a2a, compute = float(exposed.ep_comm_s[0]), float(exposed.compute_s[0])
    assert a2a > 0
    assert float(hidden.ep_comm_s[0]) == pytest.approx(max(a2a - compute, 0.0))
    assert float(half.ep_comm_s[0]) == pytest.approx(max(a2a / 2, a2a - compute))


def test_hierarchical_dispatch_sends_a_token_once_per_remote_node() -> None:
    # Qwen3-30B-A3B (128 experts, top-8), EP 32 over 4 H100 nodes, overlap off: the
    # all-to-all time is bandwidth-bound on the NIC, so the hierarchical dispatch costs the
    # share of network copies it keeps, 2.72 nodes per token of the 8 x 24/32 = 6 copies
    w = workload("qwen3-30b-a3b", gpus=64, seq=4096, gbs=256, gpu="h100-sxm")
    p = Plans.of(tp=1, pp=1, dp=64, ep=32, mbs=1, recompute=0)
    cal = CAL.replace(ep_overlap=0.0)
    flat = float(step_breakdown(replace(w, ep_dispatch="all_to_all"), p, cal).ep_comm_s[0])
    tree = float(step_breakdown(w, p, cal).ep_comm_s[0])
    assert tree / flat == pytest.approx(2.7218 / 6.0, rel=0.02)
    # inside one node the two dispatchers move the same bytes
    p8 = Plans.of(tp=1, pp=1, dp=64, ep=8, mbs=1, recompute=0)
    a = step_breakdown(replace(w, ep_dispatch="all_to_all"), p8, cal).ep_comm_s[0]
    assert float(a) == pytest.approx(float(step_breakdown(w, p8, cal).ep_comm_s[0]))


def test_unknown_ep_dispatch_is_refused() -> None:
    from gpuscale.errors import InputError

    with pytest.raises(InputError, match="ep-dispatch"):
        replace(workload(), ep_dispatch="deepep")


def test_per_param_zero3_gathers_run_at_the_implementation_rate() -> None:
    # DeepSpeed ZeRO-3 of GPT-3 175B over 1,536 A100s, full recompute, one micro-batch: the
    # weights (2 bytes each) move four times at the implementation's rate - gathered for the
    # forward, the recomputed forward and the backward, and the gradients reduce-scattered
    w = replace(workload(gpus=1536), zero3_gathers="per-param")
    p = Plans.of(tp=1, pp=1, dp=1536, mbs=1, recompute=2, sharding=4)
    cal = CAL.replace(zero3_param_gather_Bps=1e9, zero3_overlap=0.0)
    got = float(step_breakdown(w, p, cal).dp_comm_s[0])
    params = 174.6e9  # every weight of the stage, embedding included
    assert got == pytest.approx(4 * params * 2 / 1e9, rel=5e-3)
    # the coalesced (FSDP) gathers of the same plan ride NCCL's ring, far faster
    fsdp = float(step_breakdown(replace(w, zero3_gathers="coalesced"), p, cal).dp_comm_s[0])
    assert fsdp < got / 10


def test_unknown_zero3_gathers_is_refused() -> None:
    from gpuscale.errors import InputError

    with pytest.raises(InputError, match="zero3-gathers"):
        replace(workload(), zero3_gathers="bucketed")


GPT_OSS_KEYS = (4096 / 2 + (128 - 128**2 / (2 * 4096))) / 2
"""Keys per query of GPT-OSS at s = 4096, averaged over its full and sliding-window layers."""


def test_fused_attention_slows_with_a_short_head_dimension() -> None:
    # GPT-OSS 120B: 64 heads of 64, causal, on one H100 at s = 4096
    fwd, bwd = _core("fused", "h100-sxm", model="gpt-oss-120b", tp=1)
    peak = get_gpu("h100-sxm").peak_flops("bf16")
    k = CAL.attn_half_dim
    eff = CAL.attn_eff * (64 / (64 + k)) / (128 / (128 + k))
    # QK^T and PV over 64 x 64 widths; half of the 36 layers see all 4096 / 2 keys per query
    # (causal), the other half a sliding window of 128: 128 - 128^2 / (2 x 4096) keys
    flops = 2.0 * 4096 * GPT_OSS_KEYS * (4096 + 4096)
    assert fwd == pytest.approx(flops / (peak * eff), rel=1e-9)
    assert bwd == pytest.approx(2.5 * fwd)
    assert eff < CAL.attn_eff


def test_attention_and_the_gemms_have_their_own_short_dimension_penalties() -> None:
    # attn_half_dim prices a Hopper kernel's short head, gemm_half_dim a GEMM's short K:
    # moving either leaves the other's time as it was
    def rate(d: float, k: float) -> float:
        return d / (d + k)

    base, _ = _core("fused", "h100-sxm", model="gpt-oss-120b", tp=1)
    short, _ = _core(
        "fused", "h100-sxm", model="gpt-oss-120b", tp=1, cal=CAL.replace(attn_half_dim=32.0)
    )
    k = CAL.attn_half_dim
    # head dimension 64 at 64 / (64 + k) over 128 / (128 + k) of 128's rate: with k = 32,
    # (2 / 3) / (4 / 5) = 0.83x (the H200's cuDNN calls ran at 0.80-0.87x)
    assert rate(64, 32) / rate(128, 32) == pytest.approx(5 / 6)
    assert base / short == pytest.approx(
        (rate(64, 32) / rate(128, 32)) / (rate(64, k) / rate(128, k))
    )
    gemm_moved = CAL.replace(gemm_half_dim=32.0)
    assert _core("fused", "h100-sxm", model="gpt-oss-120b", tp=1, cal=gemm_moved)[0] == base
    sms = get_gpu("h100-sxm").sms
    gemm = gemm_s(8192.0, 4096.0, 1024.0, 1.0, 1e15, sms, CAL)
    assert gemm_s(8192.0, 4096.0, 1024.0, 1.0, 1e15, sms, CAL.replace(attn_half_dim=32.0)) == gemm


def test_ampere_flash_attention_loses_less_on_a_short_head() -> None:
    # FlashAttention-2 on A100: head dimension 64 at d / (d + 22) of 128's rate, 0.87x,
    # not the GEMM reduction's 0.64x that Hopper kernels follow
    from gpuscale.perf.kernels import AMPERE_ATTN_HALF_DIM

    fwd, _ = _core("fused", "a100-sxm-80gb", model="gpt-oss-120b", tp=1)
    peak = get_gpu("a100-sxm-80gb").peak_flops("bf16")
    flops = 2.0 * 4096 * GPT_OSS_KEYS * (4096 + 4096)
    ratio = (64 / (64 + AMPERE_ATTN_HALF_DIM)) / (128 / (128 + AMPERE_ATTN_HALF_DIM))
    assert ratio == pytest.approx(0.87, abs=0.01)
    assert fwd == pytest.approx(flops / (peak * CAL.attn_eff * ratio), rel=1e-9)


def test_blackwell_ultra_runs_attention_faster_at_the_same_tensor_peak() -> None:
    # GB300 and GB200 share their dense BF16 peak; GB300's doubled exponential units give
    # its flash attention 1.35x the throughput (NVIDIA's measured attention FPROP gain)
    fused = {key: _core("fused", key, 8192, "llama3-70b", tp=1)[0] for key in ("gb200", "gb300")}
    assert get_gpu("gb200").peak_flops("bf16") == get_gpu("gb300").peak_flops("bf16")
    assert fused["gb200"] / fused["gb300"] == pytest.approx(1.35)


def test_eager_elementwise_adds_the_counted_bytes() -> None:
    from gpuscale.perf.step_memory_bound import (
        EAGER_GLU_BYTES,
        EAGER_NORM_BYTES,
        EAGER_ROPE_BYTES,
    )

    w = workload("llama3-8b", gpus=8, seq=8192, gbs=8, gpu="h100-sxm")
    p = Plans.of(tp=1, pp=1, dp=8, mbs=1, recompute=0, sharding=4)
    fused = step_breakdown(w, p, CAL)
    eager = step_breakdown(replace(w, elementwise="eager"), p, CAL)
    # per token per layer, forward: two norms over h = 4096, RoPE over q + k = 4096 + 1024,
    # silu(a) * b over the 14336-wide FFN; backward pays twice the forward; 32 layers
    per_token = 2 * 32.0 * 4096 + 16.0 * (4096 + 1024) + 4.0 * 14336
    assert (EAGER_NORM_BYTES, EAGER_ROPE_BYTES, EAGER_GLU_BYTES) == (32.0, 16.0, 4.0)
    bw = get_gpu("h100-sxm").hbm_bw_Bps * CAL.hbm_eff
    want = 32 * 3 * per_token * 8192 / bw
    got = float(eager.memory_bound_s[0] - fused.memory_bound_s[0])
    assert got == pytest.approx(want, rel=1e-9)


def test_embedding_and_loss_may_take_pipeline_chunks_of_their_own() -> None:
    # Llama 3.1 405B: 126 layers on PP16 x VPP8 = 128 chunks, as Megatron-Bridge runs it with
    # account_for_embedding/loss_in_pipeline_split; 144 chunks are too many
    w = workload("llama3.1-405b", 256, 8192, 1536, "gb200")
    ok, _ = validity(w, Plans.of(tp=[4, 4, 4], pp=[16, 16, 8], dp=[4, 4, 8], vpp=[8, 9, 16]))
    assert ok.tolist() == [True, False, True]
    b = step(w, tp=4, pp=16, dp=4, vpp=8)
    assert float(b.step_s[0]) > 0


@pytest.mark.parametrize(("gpu", "ratio"), [("gb200", 2.0), ("gb300", 3.0)])
def test_nvfp4_gemms_scale_fp8_by_the_fp4_peak_ratio(gpu: str, ratio: float) -> None:
    # GEMM-only time (attention core excluded) is FLOPs over peak x efficiency; NVFP4 runs
    # at FP8's fraction of peak, so its GEMMs take 1/ratio of FP8's: GB200's dense FP4 is
    # 10 PFLOP/s against 5 for FP8, GB300's 15 against 5
    plan = dict(tp=2, pp=4, dp=8, mbs=1, sp=True, recompute=1, sharding=1)
    kw: dict[str, Any] = dict(gpus=64, gbs=256, seq=8192, gpu=gpu)
    base = workload("llama3-70b", **kw)
    times = {}
    for prec in ("bf16", "fp8", "fp4"):
        w = replace(base, precision=prec)
        times[prec] = float(step_breakdown(w, Plans.of(**plan), CAL).compute_s[0])
    # compute = GEMMs x speed-up^-1 + the same attention core for all three precisions
    g8 = times["bf16"] - times["fp8"]  # = G (1 - 1/s8)
    g4 = times["bf16"] - times["fp4"]  # = G (1 - 1/(s8 ratio))
    s8 = CAL.fp8_gemm_speedup
    gemm = g8 / (1 - 1 / s8)
    assert g4 == pytest.approx(gemm * (1 - 1 / (s8 * ratio)), rel=1e-9)
    assert times["fp4"] < times["fp8"] < times["bf16"]


def test_gemms_run_at_the_gpus_measured_matmul_ceiling() -> None:
    # catalog matmul_eff = the MAMF table's measured TFLOP/s (stas00/ml-engineering) over the
    # catalog's own dense peak, so that peak x matmul_eff is the measured rate
    for key, mamf in (
        ("a100-sxm-80gb", 271.2),
        ("h100-sxm", 794.5),
        ("gh200", 828.6),
        ("b200", 1745.0),
        ("b300", 1769.0),
        ("gb200", 1822.0),
        ("mi300x", 668.4),
        ("mi325x", 784.9),
        ("mi355x", 1565.0),
    ):
        g = get_gpu(key)
        assert g.matmul_eff * g.peak_flops("bf16") / 1e12 == pytest.approx(mamf, rel=1e-3)
    # GEMM time is inverse to the ceiling, attention (its own kernels) and memory-bound
    # work are not: compute = G / x + A, so compute(x/4) - compute(x/2) = 2 (compute(x/2) -
    # compute(x))
    w = workload()
    plan = {"tp": 8, "pp": 8, "dp": 16, "mbs": 1}

    def at(scale: float) -> StepBreakdown:
        g = w.gpu.model_copy(update={"matmul_eff": w.gpu.matmul_eff * scale})
        return step(replace(w, gpu=g), **plan)

    full, half, quarter = at(1.0), at(0.5), at(0.25)
    gemm = float(half.compute_s[0] - full.compute_s[0])
    assert gemm > 0.5 * float(full.compute_s[0])  # GEMMs are most of a 175B layer
    assert float(quarter.compute_s[0] - half.compute_s[0]) == pytest.approx(2 * gemm, rel=1e-9)
    assert float(quarter.memory_bound_s[0]) == pytest.approx(float(full.memory_bound_s[0]))


def test_zero2_reduce_scatters_every_micro_batch_and_gathers_once() -> None:
    # ZeRO-2 keeps gradients only as shards, so each of the m micro-batches' backward
    # reduce-scatters them (DeepSpeed stage 2 reduces at every micro-step); the parameters
    # are gathered once per step. With nothing hidden: m x RS + 1 x AG, where ZeRO-1 pays
    # 1 x RS + 1 x AG (the full gradients accumulate locally).
    w = workload(model="llama3-8b", gpus=64, seq=4096, gbs=512, gpu="h100-sxm")
    cal = CAL.replace(zero3_overlap=0.0, dp_overlap=0.0)
    p2 = Plans.of(tp=1, pp=1, dp=64, mbs=1, sharding=3)  # 512 / 64 = 8 micro-batches
    p1 = Plans.of(tp=1, pp=1, dp=64, mbs=1, sharding=2)
    z2 = float(step_breakdown(w, p2, cal).dp_comm_s[0])
    z1 = float(step_breakdown(w, p1, cal).dp_comm_s[0])
    params = float(param_count(get_model("llama3-8b")))  # TP1 PP1: every weight on each GPU
    f = w.fabric
    rs = float(collective_time_s("reduce_scatter", np.array([params * 2.0]), 64, f, cal, 8)[0])
    ag = float(collective_time_s("all_gather", np.array([params * 2.0]), 64, f, cal, 8)[0])
    assert z1 == pytest.approx(rs + ag, rel=1e-6)
    assert z2 == pytest.approx(8 * rs + ag, rel=1e-6)


def test_per_layer_launch_cost_is_overhead_not_memory_traffic() -> None:
    w = workload()  # GPT-3 175B: 96 layers, 2 sublayers (attention, MLP) each
    p = Plans.of(tp=8, pp=8, dp=16, mbs=1)  # 12 layers per stage, 1536 / 16 = 96 mbs
    a = step_breakdown(w, p, CAL.replace(layer_overhead_s=0.0))
    b = step_breakdown(w, p, CAL.replace(layer_overhead_s=1e-4))
    assert float(b.memory_bound_s[0]) == pytest.approx(float(a.memory_bound_s[0]))
    # 96 micro-batches x 12 layers x 3 passes (forward, 2x backward) x 1e-4 s
    extra = float(b.overhead_s[0] - a.overhead_s[0])
    assert extra == pytest.approx(96 * 12 * 3 * 1e-4)


def test_one_gpu_job_has_no_pipeline_send() -> None:
    w = workload(model="llama3.2-1b", gpus=1, seq=4096, gbs=4, gpu="h100-sxm")
    b = step_breakdown(w, Plans.of(tp=1, pp=1, dp=1, mbs=1), CAL)
    assert float(b.pp_comm_s[0]) == 0.0 and float(b.dp_comm_s[0]) == 0.0
    assert float(b.step_s[0]) > 0.0


def test_one_micro_batch_zero2_times_as_zero1() -> None:
    # the same reduce-scatter and all-gather once each: ZeRO-2 saves memory, not time
    w = workload(model="llama3-70b", gpus=64, seq=8192, gbs=8, gpu="h100-sxm")
    z = [
        float(
            step_breakdown(w, Plans.of(tp=8, dp=8, mbs=1, recompute=2, sharding=k), CAL).step_s[0]
        )
        for k in (2, 3)
    ]
    assert z[0] == pytest.approx(z[1], rel=1e-12)


@pytest.mark.parametrize("recompute", [0, 2])
def test_mla_ring_attention_passes_full_key_and_value_heads(recompute: int) -> None:
    # Kimi K2 (MLA, 64 heads of 128 + 64 key and 128 value dims), 32 H100, TP8 CP4: the ring
    # passes each token's up-projected K and V, 64 x (192 + 128) = 20,480 values over TP 8,
    # 2 bytes each; every CP rank sits in another node. Per layer and micro-batch the
    # exposed time is max(ring fwd - attention fwd, 0) + max(2 x ring fwd - attention bwd,
    # 0), the forward's once more when the layer is recomputed
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    f = Fabric.from_system(s, 32)
    w = Workload(get_model("kimi-k2"), g, s, f, 32, 32768, 4, "bf16")
    b = step(w, tp=8, pp=1, dp=1, cp=4, ep=32, mbs=1, sp=True, recompute=recompute)
    s_loc, tp, cp = 8192.0, 8.0, 4.0
    chunk = s_loc * 64 * (192 + 128) / tp * 2.0
    ring = float(collective_time_s("all_gather", np.array([chunk * cp]), cp, f, CAL, 1.0)[0])
    one = np.array([1.0])
    peak = g.peak_flops("bf16") * g.clock_fraction
    fwd, bwd = attention_core_s(
        w, one, one * s_loc, one * tp, peak, g.hbm_bw_Bps * CAL.hbm_eff, CAL
    )
    per_layer = (1 + (recompute == 2)) * max(ring - float(fwd[0]), 0.0) + max(
        2 * ring - float(bwd[0]), 0.0
    )
    assert ring > float(fwd[0])  # exposed: the test checks the bytes, not only a max(0)
    assert float(b.cp_comm_s[0]) == pytest.approx(4 * 61 * per_layer, rel=1e-9)


def test_routed_experts_take_no_tensor_parallel_collective() -> None:
    # Mixtral 8x7B on 16 H100, TP2 SP, no recompute: each layer's attention block has one
    # all-reduce-sized collective forward and one backward; its MoE block (no shared
    # experts, expert TP 1) reaches its tokens by the all-to-all alone. Plus the embedding's
    # and the output layer's reductions: (32 x 2 + 2) per micro-batch. With a shared expert
    # (TP-split like a dense MLP) the MoE block pays its pair too: (32 x 4 + 2)
    w = workload("mixtral-8x7b", gpus=16, seq=4096, gbs=32, gpu="h100-sxm")
    tokens, h = 4096.0, 4096.0
    # under sequence parallelism each is an all-gather and a reduce-scatter of the block's
    # whole activations
    one = sum(
        float(collective_time_s(op, np.array([tokens * h * 2.0]), 2, w.fabric, CAL, 2.0)[0])
        for op in ("all_gather", "reduce_scatter")
    )
    m = 32 // 8  # dp 8, mbs 1
    plan = dict(tp=2, pp=1, dp=8, ep=8, mbs=1, sp=True, recompute=0)
    assert float(step(w, **plan).tp_comm_s[0]) == pytest.approx(m * (32 * 2 + 2) * one)
    shared = replace(w, model=w.model.model_copy(update={"shared_experts": 1}))
    assert float(step(shared, **plan).tp_comm_s[0]) == pytest.approx(m * (32 * 4 + 2) * one)


def test_an_moe_model_under_tensor_parallelism_needs_sequence_parallelism() -> None:
    # Megatron-LM asserts "When using MoE and tensor parallelism, sequence parallelism must
    # be used"; a dense model may run TP without it
    w = workload("mixtral-8x7b", gpus=16, seq=4096, gbs=32, gpu="h100-sxm")
    p = Plans.of(
        tp=np.array([2, 2, 1]), dp=np.array([8, 8, 16]), ep=8, sp=np.array([False, True, False])
    )
    ok, rules = validity(w, p)
    assert ok.tolist() == [False, True, True]
    assert [name for mask, name in rules if not mask[0]] == [
        "an MoE model with tp > 1 needs sequence parallelism"
    ]
    dense = workload("llama3-8b", gpus=16, seq=4096, gbs=32, gpu="h100-sxm")
    assert validity(dense, Plans.of(tp=2, dp=8, sp=False))[0].all()


def test_a_pcie_servers_tp_group_stays_inside_the_node() -> None:
    # H100 PCIe in an 8-GPU Gen5 server (no NVLink): a TP4 group's all-reduces go through
    # the host's PCIe switches, 4 members in one node, never over the network
    w = workload(model="llama3-8b", gpus=16, seq=4096, gbs=16, gpu="h100-pcie")
    assert w.fabric.domain_gpus == 1 and w.fabric.gpus_per_node == 8
    p = Plans.of(tp=4, pp=1, dp=4, mbs=1, sp=False)
    cal = CAL.replace(tp_overlap=0.0)
    got = float(step_breakdown(w, p, cal).tp_comm_s[0])
    one = float(
        collective_time_s("all_reduce", 4096 * 4096 * 2.0, 4, w.fabric, cal, 4, concurrent=True)
    )
    # 4 micro-batches x (32 layers x 2 blocks x 2 (forward, backward) + the embedding and
    # output-layer reductions)
    assert got == pytest.approx(4 * (32 * 4 + 2) * one, rel=1e-9)
    net = float(
        collective_time_s("all_reduce", 4096 * 4096 * 2.0, 4, w.fabric, cal, 1, concurrent=True)
    )
    assert one < net


def test_deepspeed_zero3_reduces_16_bit_gradients_fsdp_32_bit() -> None:
    # ZeRO-3 of Llama 3 8B over 64 H100s, one micro-batch, nothing hidden: the layer-wise
    # reduce-scatters move 2-byte gradients under DeepSpeed (communication_data_type = the
    # model's) and 4-byte ones under FSDP's fp32 reduce_dtype; the gathers are 2 bytes both
    w = workload(model="llama3-8b", gpus=64, seq=4096, gbs=64, gpu="h100-sxm")
    cal = CAL.replace(zero3_overlap=0.0, zero3_param_gather_Bps=1e15)
    p = Plans.of(tp=1, pp=1, dp=64, mbs=1, sharding=4)
    layers = 32.0
    params = float(param_count(get_model("llama3-8b")))
    f = w.fabric

    def coll(op: str, nbytes: float) -> float:
        size = np.array([params * nbytes / layers])
        return layers * float(collective_time_s(op, size, 64, f, cal, 8, concurrent=True)[0])

    ag = coll("all_gather", 2.0)
    fsdp = float(step_breakdown(w, p, cal).dp_comm_s[0])
    assert fsdp == pytest.approx(coll("reduce_scatter", 4.0) + 2 * ag, rel=1e-6)
    ds = float(step_breakdown(replace(w, zero3_gathers="per-param"), p, cal).dp_comm_s[0])
    assert ds == pytest.approx(coll("reduce_scatter", 2.0) + 2 * ag, rel=1e-6)


def test_zero2_under_a_pipeline_costs_what_the_distributed_optimizer_costs() -> None:
    # ZeRO-2 under a pipeline is FSDP keeping its weights gathered while PyTorch's schedules
    # hold the fp32 gradients whole until the last micro-batch (Llama 3's FSDP with PP):
    # one gather and one 4-byte reduce-scatter a step and 2 + 4 bytes a parameter held, as
    # Megatron's distributed optimizer; without PP ZeRO-2 reduces every micro-batch
    w = workload(model="llama3-70b", gpus=64, seq=4096, gbs=64, gpu="h100-sxm")
    cal = CAL.replace(dp_overlap=0.0)
    dist, z2 = (Plans.of(tp=8, pp=2, dp=4, mbs=1, recompute=2, sharding=k) for k in (1, 3))
    a, b = step_breakdown(w, dist, cal), step_breakdown(w, z2, cal)
    assert float(b.dp_comm_s[0]) == pytest.approx(float(a.dp_comm_s[0]), rel=1e-12)
    from gpuscale.perf.memory import memory_breakdown
    from gpuscale.perf.stage_params import params_per_gpu

    ma, mz = memory_breakdown(w, dist, cal), memory_breakdown(w, z2, cal)
    for part in ("weights", "gradients", "optimizer"):
        assert float(getattr(mz, part)[0]) == pytest.approx(float(getattr(ma, part)[0]))
    dense, _, _ = params_per_gpu(w, z2)
    assert float(mz.gradients[0]) == pytest.approx(4.0 * float(dense[0]), rel=1e-12)
    notes = estimate(w, z2, cal).notes()
    assert any("zero2 under a pipeline" in n for n in notes)
    # FSDP's full sharding under a pipeline stays per micro-batch (torchtitan's 405B runs)
    z3 = Plans.of(tp=8, pp=2, dp=4, mbs=1, recompute=2, sharding=4)
    assert float(step_breakdown(w, z3, cal).dp_comm_s[0]) > float(a.dp_comm_s[0])


@pytest.mark.parametrize(
    ("sharding", "gathers", "pieces", "held16", "held8"),
    [
        # Megatron's distributed optimizer: one 4-byte reduce-scatter and one gather a step;
        # 2 (16-bit) + 1 (FP8 copy) bytes a layer weight held, or the FP8 weights alone; the
        # embedding and output layer 2 bytes either way: (bytes a parameter, bytes more an
        # embedding parameter)
        (1, 1, 1, (3.0, -1.0), (1.0, 1.0)),
        # FSDP: per layer a reduce-scatter and two gathers; a 2 + 1 byte shard of each weight,
        # or only the 2-byte one (FSDP casts to FP8 for each gather, storing no FP8 shard)
        (4, 2, 32, (3.0 / 64, -1.0 / 64), (2.0 / 64, 0.0)),
    ],
)
def test_fp8_parameter_gathers_move_one_byte_weights(
    sharding: int,
    gathers: int,
    pieces: int,
    held16: tuple[float, float],
    held8: tuple[float, float],
) -> None:
    # Llama 3 8B in FP8 on 64 H100, one micro-batch, nothing hidden
    from gpuscale.perf.memory import memory_breakdown
    from gpuscale.perf.transformer import embedding_params

    w = workload(model="llama3-8b", gpus=64, seq=4096, gbs=64, gpu="h100-sxm", precision="fp8")
    w8 = replace(w, fp8_param_gather=True)
    cal = CAL.replace(dp_overlap=0.0, zero3_overlap=0.0)
    p = Plans.of(tp=1, pp=1, dp=64, mbs=1, sharding=sharding)
    n = float(param_count(get_model("llama3-8b")))
    emb = float(embedding_params(get_model("llama3-8b")))

    def coll(op: str, nbytes: float) -> float:
        size = np.array([n * nbytes / pieces])
        t = float(collective_time_s(op, size, 64, w.fabric, cal, 8, concurrent=True)[0])
        return pieces * t

    rs = coll("reduce_scatter", 4.0)
    for wl, ag in ((w, 2.0), (w8, 1.0)):
        got = float(step_breakdown(wl, p, cal).dp_comm_s[0])
        assert got == pytest.approx(rs + gathers * coll("all_gather", ag), rel=1e-6)
    for wl, (per, more) in ((w, held16), (w8, held8)):
        weights = float(memory_breakdown(wl, p, cal).weights[0])
        assert weights == pytest.approx(per * n + more * emb, rel=1e-9)


def test_fp8_parameter_gathers_need_fp8_and_a_sharded_optimizer() -> None:
    from gpuscale.errors import InputError
    from gpuscale.perf.memory import memory_breakdown

    w = workload(model="llama3-8b", gpus=64, seq=4096, gbs=64, gpu="h100-sxm", precision="fp8")
    w8 = replace(w, fp8_param_gather=True)
    # a ZeRO-3 layer gathered for compute holds 1 + 2 bytes a parameter instead of 2 + 2
    z3 = Plans.of(tp=1, pp=1, dp=64, mbs=1, sharding=4)
    b16 = float(memory_breakdown(w, z3, CAL).buffers[0]) - CAL.mem_reserved_bytes
    b8 = float(memory_breakdown(w8, z3, CAL).buffers[0]) - CAL.mem_reserved_bytes
    assert b8 == pytest.approx(b16 * 3.0 / 4.0, rel=1e-12)
    # plain data parallel gathers nothing (Megatron refuses the flag without a sharded
    # optimizer), and 16-bit training has no FP8 weights to gather
    ok, rules = validity(w8, Plans.of(tp=1, pp=1, dp=64, mbs=1, sharding=0))
    assert not ok[0]
    assert any("sharded optimizer" in why for mask, why in rules if not mask[0])
    with pytest.raises(InputError, match="fp8-param-gather"):
        replace(workload(model="llama3-8b", gpu="h100-sxm"), fp8_param_gather=True)


def test_a_plan_that_fills_the_gpu_is_told_about_fragmentation() -> None:
    # partial recompute keeps just what fits: with no headroom asked for, the plan sits at
    # the GPU's capacity and the estimate says the allocator may not leave it room
    w = workload(model="llama3-70b", gpus=64, seq=8192, gbs=64, gpu="h100-sxm")
    partial = Plans.of(tp=8, pp=2, dp=4, mbs=1, recompute=3, sharding=1)  # 45 % recomputed
    e = estimate(w, partial, CAL)
    assert bool(e.memory.fits[0])
    share = float(e.memory.total[0]) / w.gpu.memory_bytes
    tight = [n for n in e.notes() if "fragmentation" in n]
    assert share > 0.95 and tight == [
        f"memory is {100 * share:.0f} % of the GPU's: little margin for fragmentation beyond "
        "what the model allows for; --memory-headroom 0.1 ranks plans that leave 10 % free"
    ]
    # asking for headroom is the answer, so the note goes away
    e10 = estimate(replace(w, memory_headroom=0.1), partial, CAL)
    assert not [n for n in e10.notes() if "fragmentation" in n]
    # a plan well inside the memory gets no note
    full = Plans.of(tp=8, pp=2, dp=4, mbs=1, recompute=2, sharding=1)
    assert float(estimate(w, full, CAL).memory.total[0]) < 0.95 * w.gpu.memory_bytes
    assert not [n for n in estimate(w, full, CAL).notes() if "fragmentation" in n]


def test_separate_gradient_accumulation_is_a_pass_over_every_held_gradient() -> None:
    # DeepSpeed's BF16 optimizer, GPT-3 175B on 1,024 A100-80GB, TP8 PP16 DP8, ZeRO-1,
    # micro-batch 1: 1,536 / 8 = 192 micro-batches, each followed by
    # hp_grad.add_(lp.grad.float()) over the stage's parameters, 2 + 4 + 4 + 4 + 4 = 18
    # bytes each at the achieved HBM rate
    w = replace(workload(), grad_accumulation="separate")
    bw = w.gpu.hbm_bw_Bps * CAL.hbm_eff
    p = Plans.of(tp=8, pp=16, dp=8, mbs=1, recompute=2, sharding=SHARDING.index("zero1"))
    # the first stage: 6 layers of about (12 h^2 + 13 h) / 8 and the token and position
    # embeddings (50,257 + 2,048) x h / 8, 1.4394 B parameters: 13.4 ms a micro-batch
    h = 12288
    stage = 6 * (12 * h * h + 13 * h) / 8 + 52305 * h / 8
    dense, expert, _ = params_per_gpu(w, p)
    assert float(dense[0] + expert[0]) == pytest.approx(stage, rel=1e-4)
    per_mb = float(dense[0] + expert[0]) * 18.0 / bw
    assert per_mb == pytest.approx(stage * 18.0 / (2.039e12 * CAL.hbm_eff), rel=1e-3)
    got = step_breakdown(w, p, CAL)
    fused = step_breakdown(replace(w, grad_accumulation="fused"), p, CAL)
    assert float(got.grad_accum_s[0]) == pytest.approx(192 * per_mb, rel=1e-9)
    assert float(fused.grad_accum_s[0]) == 0.0
    # it runs inside each backward, before the stage sends its gradient back: the bubble,
    # (p - 1) / v stage times, grows by 15 passes too
    extra_bubble = float(got.bubble_s[0] - fused.bubble_s[0])
    assert extra_bubble == pytest.approx(15 * per_mb, rel=1e-9)
    assert float(got.step_s[0] - fused.step_s[0]) == pytest.approx(207 * per_mb, rel=1e-9)
    # DeepSpeed runs the BF16 optimizer at ZeRO stage 0 and 1 only: ZeRO-2 does not pay it
    z2 = Plans.of(tp=8, pp=1, dp=128, mbs=1, recompute=2, sharding=SHARDING.index("zero2"))
    assert float(step_breakdown(w, z2, CAL).grad_accum_s[0]) == 0.0


def test_unknown_grad_accumulation_is_refused() -> None:
    from gpuscale.errors import InputError

    with pytest.raises(InputError, match="grad-accumulation"):
        replace(workload(), grad_accumulation="fp32")


def _half_peak(w: Workload) -> Workload:
    peaks = {k: v / 2 for k, v in w.gpu.peak_tflops.items()}
    return replace(w, gpu=w.gpu.model_copy(update={"peak_tflops": peaks}))


@pytest.mark.parametrize(
    ("job", "plan"),
    [
        # ZeRO-3 gathers and expert all-to-alls hiding behind one micro-batch's compute
        (
            ("qwen3-30b-a3b", "b200", 256, 2048, 512, None, None),
            dict(tp=8, dp=32, ep=128, sp=True, sharding=4),
        ),
        # ZeRO-3 gathers and the context-parallel ring behind the attention cores
        (
            ("llama2-13b", "h100-sxm", 256, 8192, 512, "fp8", None),
            dict(tp=8, dp=16, cp=2, recompute=2, sharding=4),
        ),
    ],
)
def test_a_slower_gpu_never_shortens_the_step(job: tuple[Any, ...], plan: dict[str, Any]) -> None:
    # each second of compute hides at most one second of communication: with the GEMMs at
    # half speed the collectives may hide more, but never more than the compute (and the
    # recomputed forwards, behind which a recomputed ring hides) grew
    from gpuscale.cli.train_workload import build_workload

    w = build_workload(*job)
    p = Plans.of(**plan)
    fast, slow = estimate(w, p, CAL).step, estimate(_half_peak(w), p, CAL).step
    grown = sum(float(getattr(slow, t)[0] - getattr(fast, t)[0]) for t in PER_MB[:2])
    assert grown > 0.0
    assert float(slow.step_s[0]) >= float(fast.step_s[0])
    comm = ("ep_comm_s", "cp_comm_s", "dp_comm_s")
    saved = sum(float(getattr(fast, t)[0] - getattr(slow, t)[0]) for t in comm)
    assert 0.0 < saved <= grown * (1 + 1e-9)


def test_blocking_pipeline_transfers_are_not_hidden() -> None:
    # DeepSpeed's pipeline engine sends and receives synchronously: the two transfers a
    # chunk and micro-batch are all exposed, where Megatron's schedules hide pp_overlap
    from gpuscale.cli.train_workload import build_workload

    cal = CAL.replace(pp_overlap=0.75)
    w = build_workload("llama3-70b", "h100-sxm", 64, 4096, 128, None, None)
    p = Plans.of(tp=8, pp=4, dp=2, mbs=1)
    hidden = step_breakdown(w, p, cal).pp_comm_s[0]
    blocking = step_breakdown(replace(w, pp_p2p="blocking"), p, cal).pp_comm_s[0]
    assert float(hidden) > 0.0
    assert float(blocking) == pytest.approx(float(hidden) / (1.0 - 0.75), rel=1e-12)


def test_pipeline_hops_cross_nodes_once_the_pipeline_outgrows_one() -> None:
    # Llama 3 70B on 16 H100, TP4 PP4: stages on ranks 0-3, 4-7, 8-11, 12-15, so the hop
    # from stage 1 to stage 2 leaves the node; DeepSpeed's blocking sends pay the network
    # for every micro-batch (64 of them, one activation forward and one gradient back, each
    # 8,192 x 8,192 x 2 B / 4 under SP)
    w = replace(workload(model="llama3-70b", gpus=16, seq=8192, gbs=64), pp_p2p="blocking")
    b = step(w, tp=4, pp=4, dp=1, mbs=1, sp=True, recompute=2)
    one = collective_time_s("send_recv", np.array([8192 * 8192 * 2.0 / 4]), 2, w.fabric, CAL, 1.0)
    assert float(b.pp_comm_s[0]) == pytest.approx(64 * 2 * float(one[0]), rel=1e-9)
    # the whole pipeline in one node (TP2 PP4 on 8 GPUs): every hop over NVLink
    w8 = replace(workload(model="llama3-8b", gpus=8, seq=8192, gbs=64), pp_p2p="blocking")
    b8 = step(w8, tp=2, pp=4, dp=1, mbs=1, sp=True, recompute=0)
    nv = collective_time_s("send_recv", np.array([8192 * 4096 * 2.0 / 2]), 2, w8.fabric, CAL, 2.0)
    assert float(b8.pp_comm_s[0]) == pytest.approx(64 * 2 * float(nv[0]), rel=1e-9)


def test_sequence_parallel_blocks_pay_an_all_gather_and_a_reduce_scatter() -> None:
    # Llama 3 70B on 8 H100, TP8: without SP each block's forward and backward is one
    # all-reduce (NVLink SHARP on the NVSwitch); with SP an all-gather before the block and
    # a reduce-scatter after it, the same bytes, which in-switch reduction does not halve
    w = workload(model="llama3-70b", gpus=8, seq=8192, gbs=8, gpu="h100-sxm")
    act = np.array([8192 * 8192 * 2.0])

    def t(op: str) -> float:
        return float(collective_time_s(op, act, 8, w.fabric, CAL, 8.0)[0])

    n = 80 * 2 * 2 + 2  # 80 layers x 2 blocks x forward and backward, + embedding/output
    for sp, one in ((False, t("all_reduce")), (True, t("all_gather") + t("reduce_scatter"))):
        b = step(w, tp=8, pp=1, dp=1, mbs=1, sp=sp, recompute=0)
        assert float(b.tp_comm_s[0]) == pytest.approx(8 * n * one, rel=1e-9)
    assert t("all_gather") + t("reduce_scatter") > 1.2 * t("all_reduce")


def test_mla_output_projection_takes_the_heads_values() -> None:
    # DeepSeek-V3: 128 heads of 128 values, so its output projection reads 16,384 inputs a
    # token (not 128 x hidden / heads = 7,168); the low-rank query/key/value GEMMs take the
    # attention block's other weights. FP8 quantises the projection's input, X, and its
    # output gradient, dY (hidden wide)
    from gpuscale.perf.step_gemms import Gemms, layer_gemms
    from gpuscale.perf.transformer import layer_shapes

    w = workload(model="deepseek-v3", gpus=8, seq=4096, gbs=8, gpu="h100-sxm")
    p = Plans.of(tp=1, pp=1, dp=8, ep=8, mbs=1)
    tokens = np.array([4096.0])
    gemms = Gemms(tokens, 700e12, 132, CAL)
    lg = layer_gemms(w, p, gemms, np.array([1.0]), 700e12)
    h, o = 7168.0, 128 * 128.0
    qkv_n = layer_shapes(w.model).attn / h - o
    x_el, dy_el = lg.attn_el
    assert float(x_el[0]) == pytest.approx(4096 * h + 4096 * o)
    assert float(dy_el[0]) == pytest.approx(4096 * qkv_n + 4096 * h)
