"""Training memory per GPU: Korthikanti activations, ZeRO / Megatron byte splits, invariants.

Activation formulas: Korthikanti et al. 2022 (arXiv 2205.05198) Table 2, bytes per layer
for 16-bit activations, a GPT layer with f = 4h and MHA (a = heads, t = TP degree).
Bytes per parameter: ZeRO paper (arXiv 1910.02054) sec. 5 and Megatron-LM
``theoretical_memory_usage.py`` (training-anchors.md sec. 3 item 8).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.perf.comm import Fabric
from gpuscale.perf.memory import activation_bytes_per_layer, memory_breakdown
from gpuscale.perf.plan import SHARDING, Plans, Workload
from gpuscale.perf.transformer import param_count

CAL = default_calibration()


def workload(
    model: str = "megatron-22b",
    gpus: int = 64,
    seq: int = 2048,
    gbs: int = 512,
    flash: bool = False,
    gpu: str = "a100-sxm-80gb",
) -> Workload:
    g = get_gpu(gpu)
    s = system_for_gpu(g)
    attention = "fused" if flash else "unfused"
    fabric = Fabric.from_system(s, gpus)
    return Workload(get_model(model), g, s, fabric, gpus, seq, gbs, attention=attention)


# megatron-22b (Korthikanti Table 3): h = 6144, a = 64, f = 4h, MHA, not gated
H, A = 6144, 64


def act(w: Workload, **plan: object) -> float:
    return float(activation_bytes_per_layer(w, Plans.of(**plan))[0])


def test_model_is_gpt_style() -> None:
    m = get_model("megatron-22b")
    assert (m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.gated_mlp) == (H, A, A, 4 * H, False)


@pytest.mark.parametrize(("s", "b"), [(2048, 1), (2048, 4), (4096, 2)])
def test_no_parallelism_no_recompute(s: int, b: int) -> None:
    # Table 2, "no parallelism": s b h (34 + 5 a s / h)
    w = workload(seq=s)
    assert act(w, mbs=b) == pytest.approx(s * b * H * (34 + 5 * A * s / H), rel=1e-12)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tensor_parallel_without_sp(t: int) -> None:
    # Table 2, "tensor parallel (baseline)": s b h (10 + 24/t + 5 a s / (h t))
    s, b = 2048, 2
    w = workload(seq=s)
    expected = s * b * H * (10 + 24 / t + 5 * A * s / (H * t))
    assert act(w, tp=t, mbs=b) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("t", [2, 8])
def test_tensor_and_sequence_parallel(t: int) -> None:
    # Table 2, "tensor + sequence parallel": s b h (34 + 5 a s / h) / t
    s, b = 2048, 1
    w = workload(seq=s)
    expected = s * b * H * (34 + 5 * A * s / H) / t
    assert act(w, tp=t, sp=True, mbs=b) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("t", [1, 4])
def test_selective_recompute_without_sp(t: int) -> None:
    # Table 2, "tensor parallel + selective recompute": s b h (10 + 24/t)
    s, b = 2048, 1
    w = workload(seq=s)
    assert act(w, tp=t, recompute=1, mbs=b) == pytest.approx(s * b * H * (10 + 24 / t), rel=1e-12)


@pytest.mark.parametrize("t", [2, 8])
def test_selective_recompute_with_sp(t: int) -> None:
    # Table 2, "tensor + sequence parallel + selective recompute": 34 s b h / t
    s, b = 2048, 2
    w = workload(seq=s)
    assert act(w, tp=t, sp=True, recompute=1, mbs=b) == pytest.approx(34 * s * b * H / t, rel=1e-12)


@pytest.mark.parametrize("t", [1, 8])
def test_full_recompute_keeps_layer_input(t: int) -> None:
    # Table 2, "full activation recomputation": 2 s b h per layer (the layer input only)
    s, b = 2048, 3
    w = workload(seq=s)
    assert act(w, tp=t, recompute=2, mbs=b) == pytest.approx(2 * s * b * H, rel=1e-12)


def test_flash_attention_drops_the_score_term() -> None:
    # training-anchors.md sec. 3 item 5: flash attention removes the 5 a s^2 b term
    s, b = 2048, 1
    w = workload(seq=s, flash=True)
    assert act(w, mbs=b) == pytest.approx(34 * s * b * H, rel=1e-12)


def test_context_parallel_splits_the_sequence() -> None:
    # CP gives each GPU s / cp tokens of every layer: 34 (s/cp) b h with flash attention
    # (Megatron's context parallelism runs on flash/fused attention only)
    s, cp, b = 8192, 4, 2
    w = workload(seq=s, flash=True)
    assert act(w, cp=cp, mbs=b) == pytest.approx(34 * (s / cp) * b * H, rel=1e-12)


# --- bytes per parameter ---------------------------------------------------------------

N = 16  # data-parallel ranks sharing the optimizer


@pytest.mark.parametrize(
    ("sharding", "per_param"),
    [
        # Megatron DDP: bf16 weights 2 + fp32 main grads 4 + fp32 master/m/v 12 = 18
        ("none", (2, 4, 12)),
        # Megatron distributed optimizer: 6 + 12/N
        ("dist-opt", (2, 4, 12 / N)),
        # ZeRO-1: 2 + 2 + 12/N
        ("zero1", (2, 2, 12 / N)),
        # ZeRO-2: 2 + (2 + 12)/N
        ("zero2", (2, 2 / N, 12 / N)),
        # ZeRO-3: (2 + 2 + 12)/N
        ("zero3", (2 / N, 2 / N, 12 / N)),
    ],
)
def test_bytes_per_parameter(sharding: str, per_param: tuple[float, float, float]) -> None:
    w = workload("llama3-8b", gpus=N, gbs=N * 4, gpu="h100-sxm")
    p = Plans.of(dp=N, sharding=SHARDING.index(sharding))
    mem = memory_breakdown(w, p, CAL)
    n = param_count(w.model)  # TP = PP = 1: every GPU holds every parameter (or its shard)
    got = (float(mem.weights[0]) / n, float(mem.gradients[0]) / n, float(mem.optimizer[0]) / n)
    assert got == pytest.approx(per_param, rel=1e-12)
    total = (float(mem.weights[0]) + float(mem.gradients[0]) + float(mem.optimizer[0])) / n
    assert total == pytest.approx(sum(per_param), rel=1e-12)


@pytest.mark.parametrize(
    ("sharding", "grads"),
    # DeepSpeed's BF16 optimizer (ZeRO stage 0 and 1): the 16-bit gradient (2) and its
    # fp32 accumulator (4), whole (BLOOM's 176B run); ZeRO-2/3 keep their own shards
    [("none", 6.0), ("dist-opt", 6.0), ("zero1", 6.0), ("zero2", 2.0 / N), ("zero3", 2.0 / N)],
)
def test_separate_accumulation_keeps_fp32_accumulators(sharding: str, grads: float) -> None:
    w = replace(
        workload("llama3-8b", gpus=N, gbs=N * 4, gpu="h100-sxm"), grad_accumulation="separate"
    )
    mem = memory_breakdown(w, Plans.of(dp=N, sharding=SHARDING.index(sharding)), CAL)
    assert float(mem.gradients[0]) / param_count(w.model) == pytest.approx(grads, rel=1e-12)


def test_megatron_ddp_is_18_bytes_and_dist_opt_6_plus_12_over_n() -> None:
    w = workload("llama3-8b", gpus=N, gbs=N * 4, gpu="h100-sxm")
    n = param_count(w.model)
    mem = memory_breakdown(w, Plans.of(dp=N, sharding=[0, 1]), CAL)
    per = (mem.weights + mem.gradients + mem.optimizer) / n
    assert per == pytest.approx([18.0, 6 + 12 / N], rel=1e-12)


def test_fsdp_under_a_pipeline_holds_whole_weights_and_fp32_gradients() -> None:
    """PyTorch's pipeline schedules turn FSDP's gradient sync off until the last
    micro-batch, and torchtitan keeps the gathered weights after the forward: a stage holds
    its 16-bit weights and fp32 gradients whole, 2 + 4 + 12/d bytes a parameter, as the
    distributed optimizer; without a pipeline FSDP stays (2 + 2 + 12)/d, with its two
    gathered layers in the buffers."""
    w = workload("llama3-8b", gpus=4 * N, gbs=4 * N * 4, gpu="h100-sxm")
    z3, dist = SHARDING.index("zero3"), SHARDING.index("dist-opt")
    piped = memory_breakdown(w, Plans.of(pp=4, dp=N, sharding=[z3, dist]), CAL)
    for part in ("weights", "gradients", "optimizer", "buffers"):
        a, b = getattr(piped, part)
        assert a == pytest.approx(b, rel=1e-12), part
    n_stage = float(piped.weights[1]) / 2.0  # the fuller stage's parameters
    assert float(piped.gradients[0]) == pytest.approx(4.0 * n_stage, rel=1e-12)
    flat = memory_breakdown(w, Plans.of(dp=4 * N, sharding=z3), CAL)
    n = param_count(w.model)
    assert float(flat.gradients[0]) / n == pytest.approx(2 / (4 * N), rel=1e-12)
    assert float(flat.buffers[0]) > CAL.mem_reserved_bytes  # the gathered layers


def test_sharding_group_is_dp_times_cp() -> None:
    # Megatron shards the distributed optimizer over the DP x CP ranks
    w = workload("llama3-8b", gpus=N, gbs=N, seq=8192, gpu="h100-sxm")
    n = param_count(w.model)
    mem = memory_breakdown(w, Plans.of(dp=N // 2, cp=2, sharding=SHARDING.index("zero3")), CAL)
    assert float(mem.optimizer[0]) / n == pytest.approx(12 / N, rel=1e-12)


def test_expert_optimizer_is_sharded_over_expert_data_parallel() -> None:
    # training-anchors.md sec. 3 item 8: the distributed optimizer shards expert parameters
    # over the expert-data-parallel group, (tp x dp x cp) / ep with expert TP = 1
    # (Megatron-Core MoE), dense parameters over dp x cp.
    tp, dp, ep = 2, 8, 4
    w = workload("mixtral-8x7b", gpus=tp * dp, gbs=64, gpu="h100-sxm")
    m = w.model
    h, f, v = 4096, 14336, 32000
    attn = h * h + 2 * h * 1024 + h * h
    dense = 32 * (attn / tp + 2 * h + h * 8) + (2 * v * h + h) / tp  # TP splits attn, emb
    expert = 32 * 8 * 3 * h * f / ep  # whole experts, E / EP per GPU
    mem = memory_breakdown(
        w, Plans.of(tp=tp, dp=dp, ep=ep, sharding=SHARDING.index("dist-opt")), CAL
    )
    assert m.num_experts == 8 and m.top_k == 2
    assert float(mem.optimizer[0]) == pytest.approx(
        12 * dense / dp + 12 * expert / (tp * dp / ep), rel=1e-12
    )
    assert float(mem.weights[0]) == pytest.approx(2 * (dense + expert), rel=1e-12)


def test_fp8_adds_a_one_byte_weight_copy_of_the_layers_not_the_embedding() -> None:
    # Llama 3 8B: 128,256 x 4,096 input embedding and as many output-layer weights (and the
    # final norm's 4,096) stay 16-bit (Transformer Engine's FP8 is its linear layers'); the
    # others get a 1-byte copy
    w = workload("llama3-8b", gpus=N, gbs=N * 4, gpu="h100-sxm")
    w8 = replace(w, precision="fp8")
    p = Plans.of(dp=N)
    n, emb = param_count(w.model), 2 * 128256 * 4096 + 4096
    expected = 2.0 * n + (n - emb)
    assert float(memory_breakdown(w8, p, CAL).weights[0]) == pytest.approx(expected, rel=1e-12)
    # with FP8 parameter gathers the layers' FP8 weights are their only copy
    gathered = replace(w8, fp8_param_gather=True)
    p_dist = Plans.of(dp=N, sharding=1)
    weights = float(memory_breakdown(gathered, p_dist, CAL).weights[0])
    assert weights == pytest.approx((n - emb) + 2.0 * emb, rel=1e-12)


def test_pipeline_first_stage_holds_pp_microbatches() -> None:
    # training-anchors.md sec. 3 item 6: 1F1B keeps p micro-batches on the first stage, each
    # with L/p layers, i.e. L layers' worth; interleaving multiplies by 1 + (p-1)/(p v)
    w = workload(gpus=64, gbs=512)
    pp, tp, dp = 4, 8, 2
    per_layer = act(w, tp=tp, pp=pp, dp=dp, sp=True, recompute=1)
    one = memory_breakdown(w, Plans.of(tp=tp, pp=pp, dp=dp, sp=True, recompute=1), CAL)
    expected = per_layer * 48 * CAL.mem_activation_overhead  # 48/4 layers x 4 in flight
    assert float(one.activations[0]) == pytest.approx(expected, rel=1e-12)
    vpp = 3
    inter = memory_breakdown(w, Plans.of(tp=tp, pp=pp, dp=dp, sp=True, recompute=1, vpp=vpp), CAL)
    assert float(inter.activations[0]) == pytest.approx(
        expected * (1 + (pp - 1) / (pp * vpp)), rel=1e-12
    )


def test_interleaving_with_as_many_microbatches_as_stages_holds_them_all() -> None:
    # m = p: Megatron's interleaved schedule runs every forward first (its warm-up is capped
    # at the m v chunks there are), so the first stage holds exactly m micro-batches of its
    # layers, not p (1 + (p-1)/(p v)); m = 2p keeps Korthikanti's factor
    from gpuscale.perf.memory import in_flight

    w = workload(gpus=128, gbs=16)
    pp, vpp = 8, 2
    # dp 1: m = 16 = 2p; first 8 + 7/2 = 11.5 (below 16), last ((2 - 1) 8 + 1)/2 = 4.5
    p16 = Plans.of(tp=8, pp=pp, dp=1, vpp=vpp, mbs=1, sp=True, recompute=1)
    first, last = in_flight(w, p16)
    assert (float(first[0]), float(last[0])) == (11.5, 4.5)
    p4 = Plans.of(tp=8, pp=pp, dp=2, vpp=vpp, mbs=1, sp=True, recompute=1)  # m = 8 = p
    first, last = in_flight(w, p4)
    # first: min(8 + 7/2, 8) = 8; last: ((2 - 1) 8 + 1)/2 = 4.5
    assert (float(first[0]), float(last[0])) == (8.0, 4.5)
    per_layer = act(w, tp=8, pp=pp, dp=2, sp=True, recompute=1, vpp=vpp)
    mem = memory_breakdown(w, p4, CAL)
    expected = per_layer * (48 / 8) * 8 * CAL.mem_activation_overhead  # 6 layers x 8
    assert float(mem.activations[0]) == pytest.approx(expected, rel=1e-12)
    # 1F1B: the last stage holds one micro-batch
    first, last = in_flight(w, Plans.of(tp=8, pp=pp, dp=1, mbs=1))
    assert (float(first[0]), float(last[0])) == (8.0, 1.0)


def test_the_last_stage_with_its_logits_can_be_the_fuller_one() -> None:
    # Llama 3 8B, 8K sequence, PP2, full recompute: the first stage keeps 2 micro-batches x
    # 16 layers of 2 s b h inputs plus one re-materialised layer; the last keeps 1 x 16 of
    # them, one layer, and the fp32 logits of the 128,256-token vocabulary, 4 s b V bytes
    w = workload("llama3-8b", gpus=2, seq=8192, gbs=8, flash=True, gpu="h100-sxm")
    plan = dict(tp=1, pp=2, dp=1, mbs=1)
    s, h, v = 8192, 4096, 128256
    none_layer = act(w, **plan, recompute=0)
    full_layer = 2.0 * s * h
    assert act(w, **plan, recompute=2) == full_layer
    first = 2 * 16 * full_layer + none_layer
    last = 1 * 16 * full_layer + none_layer + 4.0 * s * v
    assert last > first
    mem = memory_breakdown(w, Plans.of(**plan, recompute=2), CAL)
    assert float(mem.activations[0]) == pytest.approx(last * CAL.mem_activation_overhead)


# --- invariants (hypothesis) -----------------------------------------------------------

TPS = st.sampled_from([1, 2, 4, 8])
SEQS = st.sampled_from([1024, 2048, 4096])


@settings(max_examples=60, deadline=None)
@given(
    tp=TPS,
    pp=st.sampled_from([1, 2, 4]),
    sharding=st.integers(0, 4),
    dp_lo=st.sampled_from([1, 2, 4]),
    mult=st.sampled_from([2, 4, 8]),
    fp8=st.booleans(),
)
def test_more_dp_shards_never_increase_optimizer_bytes(
    tp: int, pp: int, sharding: int, dp_lo: int, mult: int, fp8: bool
) -> None:
    w = workload("llama3-8b", gpus=1024, gbs=1024, gpu="h100-sxm")
    if fp8:
        w = replace(w, precision="fp8")
    lo = memory_breakdown(w, Plans.of(tp=tp, pp=pp, dp=dp_lo, sharding=sharding), CAL)
    hi = memory_breakdown(w, Plans.of(tp=tp, pp=pp, dp=dp_lo * mult, sharding=sharding), CAL)
    assert hi.optimizer[0] <= lo.optimizer[0]
    assert hi.gradients[0] <= lo.gradients[0]
    assert hi.weights[0] <= lo.weights[0]
    if sharding > 0:  # anything sharded strictly shrinks
        assert hi.optimizer[0] < lo.optimizer[0]


@settings(max_examples=60, deadline=None)
@given(
    tp=TPS,
    sp=st.booleans(),
    rc=st.integers(0, 2),
    seq=SEQS,
    flash=st.booleans(),
    pp=st.sampled_from([1, 2, 4, 8]),
    b=st.sampled_from([1, 2, 4]),
    model=st.sampled_from(["megatron-22b", "llama3-8b", "mixtral-8x7b"]),
)
def test_larger_microbatch_never_decreases_activations(
    tp: int, sp: bool, rc: int, seq: int, flash: bool, pp: int, b: int, model: str
) -> None:
    sp = sp and tp > 1
    w = workload(model, gpus=256, seq=seq, gbs=256, flash=flash)
    small = Plans.of(tp=tp, sp=sp, recompute=rc, pp=pp, dp=2, mbs=b)
    big = Plans.of(tp=tp, sp=sp, recompute=rc, pp=pp, dp=2, mbs=2 * b)
    a_small = float(activation_bytes_per_layer(w, small)[0])
    a_big = float(activation_bytes_per_layer(w, big)[0])
    assert a_big == pytest.approx(2 * a_small, rel=1e-12)  # per layer: linear in b
    m_small = float(memory_breakdown(w, small, CAL).activations[0])
    m_big = float(memory_breakdown(w, big, CAL).activations[0])
    assert m_big >= m_small


@settings(max_examples=60, deadline=None)
@given(
    tp=TPS,
    sp=st.booleans(),
    seq=SEQS,
    flash=st.booleans(),
    b=st.sampled_from([1, 2, 8]),
    cp=st.sampled_from([1, 2]),
    model=st.sampled_from(["megatron-22b", "llama3-70b", "deepseek-v3", "mixtral-8x7b"]),
)
def test_full_le_selective_le_none(
    tp: int, sp: bool, seq: int, flash: bool, b: int, cp: int, model: str
) -> None:
    sp = sp and tp > 1
    w = workload(model, gpus=256, seq=seq, gbs=256, flash=flash)
    p = Plans.of(tp=tp, sp=sp, mbs=b, cp=cp, recompute=[2, 1, 0])
    full, sel, none = activation_bytes_per_layer(w, p)
    assert full <= sel <= none
    if not flash:  # without flash attention selective recompute drops the score term
        assert sel < none


def test_full_recompute_total_below_selective_for_deep_stages() -> None:
    # With >= 12 layers per stage, keeping 2sbh per layer plus one layer re-materialised
    # is far below keeping 34sbh per layer (Korthikanti Table 2 ratios)
    w = workload(gpus=64, gbs=512)
    p = Plans.of(tp=8, pp=4, dp=2, sp=True, recompute=[2, 1, 0])
    a = memory_breakdown(w, p, CAL).activations
    assert a[0] < a[1] < a[2]


def test_fits_compares_total_with_capacity() -> None:
    w = workload("llama3-70b", gpus=8, gbs=8, gpu="h100-sxm")
    mem = memory_breakdown(w, Plans.of(tp=8, dp=1, sp=True, recompute=2, sharding=0), CAL)
    total = mem.weights + mem.gradients + mem.optimizer + mem.activations + mem.buffers
    assert np.allclose(mem.total, total)
    # 70.6 B params x 18 B / 8 GPUs = 159 GB > 80 GB: Megatron DDP on one node cannot fit
    assert not bool(mem.fits[0])
    assert float(mem.headroom[0]) < 0


def test_a_model_without_dropout_keeps_no_masks() -> None:
    # Llama 3 8B (no dropout), TP1, no recomputation, 4096 x 1 tokens: per layer the norms'
    # inputs and the QKV / MLP inputs (8 sbh), Q, K, V and the attention output
    # (4 s b q + 4 s b kv, q = 4096, kv = 1024) and SwiGLU's gate, up and product
    # (6 s b f, f = 14336); with dropout its two 1-byte masks add 2 sbh
    m = get_model("llama3-8b")
    assert not m.dropout
    g = get_gpu("h100-sxm")
    sys_ = system_for_gpu(g)
    w = Workload(m, g, sys_, Fabric.from_system(sys_, 8), 8, 4096, 8)
    p = Plans.of(tp=1, pp=1, dp=8, mbs=1)
    got = float(activation_bytes_per_layer(w, p)[0])
    assert got == 4096 * (8 * 4096 + 4 * 4096 + 4 * 1024 + 6 * 14336)
    wd = replace(w, model=m.model_copy(update={"dropout": True}))
    assert float(activation_bytes_per_layer(wd, p)[0]) - got == 2 * 4096 * 4096
    # the unfused path keeps the softmax output (2 bytes a score), with dropout also its
    # mask and output (5): 32 heads x 4096^2 scores
    un = replace(w, attention="unfused")
    und = replace(wd, attention="unfused")
    scores = 32 * 4096 * 4096
    assert float(activation_bytes_per_layer(un, p)[0]) - got == 2 * scores
    assert float(activation_bytes_per_layer(und, p)[0]) - got == 2 * 4096 * 4096 + 5 * scores


def test_tp_beyond_the_kv_heads_keeps_a_whole_kv_head_per_rank() -> None:
    # Llama 3 70B (8 KV heads of 128) with flash attention, SP, no recompute: per layer
    # s b (8 h + 4 q + 4 kv + 6 f) / t bytes (no dropout masks); at TP 16 each rank keeps
    # one whole K and V head, so kv counts as 128 x 16 = 2,048 across the group, not 1,024
    w = workload("llama3-70b", gpus=16, seq=4096, gbs=16, flash=True, gpu="h100-sxm")
    s, h, q, f = 4096, 8192, 8192, 28672
    for t, kv in ((8, 1024), (16, 128 * 16)):
        expected = s * (8 * h + 4 * q + 4 * kv + 6 * f) / t
        assert act(w, tp=t, dp=16 // t, sp=True, recompute=0) == pytest.approx(expected)


def test_an_op_by_op_loss_holds_three_fp32_copies_of_the_logits() -> None:
    """PyTorch's cross_entropy of upcast logits keeps the fp32 log-softmax and, in its
    backward, writes its gradient and its input's: 12 bytes a logit against a fused
    kernel's 4 (memory.LOSS_BYTES); the caching-allocator margin applies to both."""
    w = workload("llama3-8b", gpus=8, gbs=16, seq=8192, gpu="h100-sxm", flash=True)
    p = Plans.of(dp=8, mbs=2, recompute=2)  # full: the logits are most of it
    fused = float(memory_breakdown(w, p, CAL).activations[0])
    eager = float(memory_breakdown(replace(w, elementwise="eager"), p, CAL).activations[0])
    logits = 2 * 8192 * 128256  # micro-batch x sequence x vocabulary, no TP
    assert eager - fused == pytest.approx(8.0 * logits * CAL.mem_activation_overhead, rel=1e-9)


def test_fsdp_under_a_pipeline_keeps_no_fp8_copy_beside_what_it_gathered() -> None:
    """FP8 FSDP under a pipeline holds its gathered 16-bit weights (FP8 ones with FP8
    gathers) and nothing else: 2 (or 1) bytes a stage parameter."""
    w = replace(workload("llama3-8b", gpus=4 * N, gbs=4 * N * 4, gpu="h100-sxm"), precision="fp8")
    p = Plans.of(pp=4, dp=N, sharding=SHARDING.index("zero3"))
    bf16 = replace(w, precision="bf16")
    held = float(memory_breakdown(bf16, p, CAL).weights[0])
    assert float(memory_breakdown(w, p, CAL).weights[0]) == pytest.approx(held, rel=1e-12)
    gathered8 = replace(w, fp8_param_gather=True)
    assert float(memory_breakdown(gathered8, p, CAL).weights[0]) == pytest.approx(held / 2)


def test_the_loss_may_run_op_by_op_beside_fused_blocks() -> None:
    """torchtitan of 2024 compiled its blocks, not its loss: fused elementwise kernels, an
    op-by-op loss; by default the loss runs as the elementwise kernels do."""
    w = workload("llama3-8b", gpus=8, gbs=16, seq=8192, gpu="h100-sxm", flash=True)
    p = Plans.of(dp=8, mbs=2, recompute=2)

    def acts(**kw: object) -> float:
        return float(memory_breakdown(replace(w, **kw), p, CAL).activations[0])

    assert acts(loss="eager") == pytest.approx(acts(elementwise="eager"), rel=1e-12)
    assert acts(elementwise="eager", loss="fused") == pytest.approx(acts(), rel=1e-12)
    assert acts(loss="eager") > acts()


def test_partial_recompute_recomputes_nothing_where_the_plan_fits_without() -> None:
    # Gemma 2 9B on 8 H100 with ZeRO-1 fits without recomputation (79.2 of 79.6 GiB), too
    # tightly to hold one more re-materialised layer: partial recomputation is then none,
    # not the sliver that would make room for a layer no recomputation re-materialises
    from gpuscale.cli.train_workload import build_workload

    w = build_workload("gemma2-9b", "h100-sxm", 8, 4096, 64, None, None)
    none, partial = (
        memory_breakdown(w, Plans.of(dp=8, sharding=2, recompute=rc), CAL) for rc in (0, 3)
    )
    assert bool(none.fits[0])
    assert float(none.total[0]) > float(none.capacity) - float(
        activation_bytes_per_layer(w, Plans.of(dp=8, sharding=2))[0]
    )
    assert float(partial.recompute_fraction[0]) == 0.0
    assert float(partial.total[0]) == float(none.total[0])
