"""Per-step time of an LLM serving engine: prefill, decode and mixed (chunked-prefill) steps.

One engine iteration processes ``T`` new tokens (prefill chunks plus one token per decoding
sequence) and reads the KV cache of every decoding sequence. On one GPU of a TP x PP
replica its time is

    t = max(linear FLOPs / (peak x matmul_eff x gemm_eff), weights / (HBM x hbm_eff)) GEMMs
      + prefill attention FLOPs / (peak16 x attn_eff)                                  FMHA
      + max(KV bytes read / (HBM x hbm_eff), decode FLOPs / (peak16 x attn_eff))       decode attn
      + 2 x layers x all_reduce(T x hidden x 2 B)                                       TP comm
    (attn_eff divided by the softmax factor where the heads are shorter than the GPU's
    softmax_head_dim: kernels.softmax_factors)
      + step overhead + per-sequence overhead x sequences                             host
      + sequences x 2 x Mamba state bytes / HBM                     hybrid models' state

(roofline per operator class, llm-analysis ``max(compute, memory)``: decode attention is
read-bound for GQA, and can be compute-bound where many heads share one cached latent or
head, MLA's, priced absorbed as decode kernels run it, and DeepSeek-V4's; FLOPs per token =
2 x active parameters, attention 4 x attention layers x heads x head_dim x q x kv / 2
causal — Vidur mfu_calculator.py; 2 all-reduces per layer (one per block of a hybrid model)
— GenZ tests/test_decode_time.py; a hybrid's Mamba blocks read and write each sequence's
state once per step; a DeepSeek-V4 model each sequence's window in every layer, its
compressed entries as the KV cache, its CSA layers' top-k of them as a DSA model's).
Layers with a sliding window of ``w`` tokens (chunked ones: chunks of
``w``) read at most ``w`` cached tokens a sequence and score at most ``w`` keys a query;
the step model bounds both in aggregate, min(context, sequences x w) and
min(pairs, prompt tokens x w), exact once every sequence is past the window. MoE layers
read only the experts the step's tokens route to: with ``T`` tokens each picking ``k`` of
``E`` experts the expected number of distinct experts touched is E x (1 - (1 - k/E)^T).
Pipeline parallelism splits layers over PP stages; PP micro-batches are in flight, so one
engine step (one token for every running sequence) takes PP stage times of a 1/PP batch.

Every efficiency is a named constant of :class:`~gpuscale.calibrate.Calibration`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuscale.calibrate import Calibration
from gpuscale.catalog import GPU, Model, System, system_for_gpu
from gpuscale.errors import InputError
from gpuscale.perf.attn_kinds import attn_kinds, heads_said
from gpuscale.perf.comm import Fabric, collective_time_s
from gpuscale.perf.engines import EngineConfig
from gpuscale.perf.inference_step import StepModel
from gpuscale.perf.kernels import softmax_factors
from gpuscale.perf.kv import (
    MemoryPlan,
    PrecisionPlan,
    indexer_key_bytes_per_token,
    kv_bytes_per_token,
    kv_window,
    mamba_state_bytes_per_seq,
    memory_plan,
    param_counts,
    window_cache_bytes_per_seq,
    window_share,
)
from gpuscale.perf.transformer import (
    attn_core_dims,
    entries_per_token,
    indexer_layers,
    indexer_pair_flops,
    layer_ratios,
    sparse_layers,
)


def _alpha_beta(
    op: str,
    n: int,
    bytes_per_token: float,
    fabric: Fabric,
    cal: Calibration,
    members_per_domain: int | None = None,
) -> tuple[float, float]:
    """Linearise one collective in the number of tokens it carries: time = a + b x tokens.

    The collective model is evaluated at 1 and 1,025 tokens; serving steps then cost their
    communication in closed form for any batch.
    """
    k = members_per_domain
    one = float(collective_time_s(op, bytes_per_token, n, fabric, cal, k))
    big = float(collective_time_s(op, bytes_per_token * 1025, n, fabric, cal, k))
    beta = (big - one) / 1024.0
    return one - beta, beta


@dataclass(frozen=True)
class _Linear:
    """The linear layers of one GPU of one stage: FLOPs and weight bytes a step spends."""

    flops_per_token: float
    """2 x active parameters (the routed experts at top_k / experts), no LM head."""
    head_flops_per_sample: float
    fixed_weight_bytes: float
    """Dense layers, attention and shared experts, and the 16-bit LM head averaged over the
    stages (it sits on the last)."""
    routed_bytes: float


@dataclass(frozen=True)
class _Attention:
    """Attention-core FLOPs of one GPU of one stage and the caps on the keys a query takes."""

    pair_flops: float
    """FLOPs per (query, key) pair of a prefill."""
    decode_pair_flops: float
    """FLOPs per (query, cached token) pair of a decode step (MLA absorbed)."""
    window_pair_share: float | None
    sparse_tokens: int
    sparse_share: float
    window_flops_per_token: float
    """DeepSeek-V4: the window's keys every layer scores, a fixed cost a token."""


@dataclass(frozen=True)
class _CacheReads:
    """What a decode step reads per context token on one GPU, and its DSA indexer's FLOPs."""

    kv_bytes_per_ctx_token: float
    index_bytes_per_ctx_token: float
    index_flops_per_pair: float


def build_step_model(
    model: Model,
    gpu: GPU,
    precision: PrecisionPlan,
    tp: int,
    pp: int,
    cal: Calibration,
    engine: EngineConfig | None = None,
    tokens_per_seq: int = 4096,
    prompt_tokens: int | None = None,
    system: System | None = None,
) -> StepModel:
    """The step model and memory plan of one replica of ``tp x pp`` GPUs."""
    eng = engine or EngineConfig()
    _check_replica(model, tp, pp)
    mem = _memory(model, gpu, precision, tp, pp, eng, tokens_per_seq, prompt_tokens)
    lin = _linear(model, precision.weight_bytes, tp, pp)
    attn = _attention(model, tp, pp)
    reads = _cache_reads(model, gpu, precision, tp, pp)
    fabric = Fabric.from_system(system or system_for_gpu(gpu))
    ar_alpha, ar_beta = _tp_all_reduces(model, fabric, tp, pp, cal)
    hop_alpha, hop_beta = _pp_hops(model, fabric, tp, pp, cal)
    hbm_bps = gpu.hbm_bw_Bps * cal.inf_hbm_eff
    return StepModel(
        model=model,
        gpu=gpu,
        precision=precision,
        tp=tp,
        pp=pp,
        engine=eng,
        memory=mem,
        # linear layers
        gemm_rate_flops=_gemm_rate_flops(model, gpu, precision, tp, cal),
        flops_per_token=lin.flops_per_token + attn.window_flops_per_token,
        head_flops_per_sample=lin.head_flops_per_sample,
        fixed_weight_bytes=lin.fixed_weight_bytes,
        routed_bytes=lin.routed_bytes,
        moe_k_over_e=(model.top_k / model.num_experts) if model.is_moe else 0.0,
        num_experts=model.num_experts,
        # attention core and the keys a query takes
        attn_rate_flops=_attn_rate_flops(model, gpu, cal),
        attn_flops_per_pair=attn.pair_flops,
        decode_attn_flops_per_pair=attn.decode_pair_flops,
        window_share=window_share(model, pp, tp),
        window_pair_share=attn.window_pair_share,
        window_tokens=kv_window(model),
        sparse_tokens=attn.sparse_tokens,
        sparse_share=attn.sparse_share,
        # cache reads
        hbm_Bps=hbm_bps,
        kv_bytes_per_ctx_token=reads.kv_bytes_per_ctx_token,
        index_bytes_per_ctx_token=reads.index_bytes_per_ctx_token,
        index_flops_per_pair=reads.index_flops_per_pair,
        # host and communication
        overhead_s=cal.decode_step_overhead_s + model.layers * cal.inf_layer_overhead_s,
        seq_overhead_s=_seq_overhead_s(model, precision, tp, pp, cal, hbm_bps),
        ar_alpha_s=ar_alpha,
        ar_beta_s_per_token=ar_beta,
        pp_hop_alpha_s=hop_alpha,
        pp_hop_beta_s_per_token=hop_beta,
    )


def _check_replica(model: Model, tp: int, pp: int) -> None:
    """TP and PP are positive, TP divides every attention kind's heads, PP at most the
    layers (a stage holds one layer or more)."""
    if tp < 1 or pp < 1:
        raise InputError("tp" if tp < 1 else "pp", tp if tp < 1 else pp, "a positive integer")
    if any(heads % tp for heads, _ in model.head_counts):
        said = heads_said(model)
        raise InputError("tp", tp, f"a divisor of {model.name}'s {said} attention heads")
    if pp > model.layers:
        raise InputError("pp", pp, f"at most {model.layers} (the layers of {model.name})")


def _memory(
    model: Model,
    gpu: GPU,
    precision: PrecisionPlan,
    tp: int,
    pp: int,
    eng: EngineConfig,
    tokens_per_seq: int,
    prompt_tokens: int | None,
) -> MemoryPlan:
    """The memory plan of one GPU of the replica under the engine's memory settings and
    limits (:func:`gpuscale.perf.kv.memory_plan`)."""
    return memory_plan(
        model,
        gpu,
        precision,
        tp,
        pp,
        tokens_per_seq,
        eng.mem_fraction,
        eng.max_num_tokens,
        eng.max_batch,
        eng.block_tokens,
        eng.reserved_bytes,
        eng.fraction_of_free,
        prompt_tokens,
    )


def _linear(model: Model, weight_bytes: float, tp: int, pp: int) -> _Linear:
    """FLOPs and bytes of the linear layers on one GPU: a stage's parameters split over TP,
    the layers over PP; FLOPs per token = 2 x active parameters (Vidur mfu_calculator.py)."""
    pc = param_counts(model)
    gp = tp * pp
    routed_active = pc.routed_experts * model.top_k / model.num_experts if model.is_moe else 0.0
    body_active = pc.attention + pc.dense_mlp + pc.shared_experts + routed_active
    fixed_w = (
        pc.attention + pc.dense_mlp + pc.shared_experts
    ) * weight_bytes / gp + pc.lm_head * 2.0 / gp  # 16-bit LM head on the last stage
    return _Linear(
        flops_per_token=2.0 * body_active / gp,
        head_flops_per_sample=2.0 * pc.lm_head / tp,
        fixed_weight_bytes=fixed_w,
        routed_bytes=pc.routed_experts * weight_bytes / gp,
    )


def _gemm_rate_flops(
    model: Model, gpu: GPU, precision: PrecisionPlan, tp: int, cal: Calibration
) -> float:
    """FLOP/s of the linear layers' GEMMs on one GPU.

    8-bit GEMMs keep inf_lowp_gemm_rel of the 16-bit efficiency, 4-bit its square (each
    halving of the format loses the same share to scaling and casting); the per-GPU shape
    shrinks with TP, eff ~ d / (d + d_half) with d = hidden / TP.
    """
    halvings = {"fp8": 1.0, "fp4": 2.0}.get(precision.compute, 0.0)
    d = model.hidden / tp
    rate: float = (
        gpu.peak_flops(precision.compute)
        * gpu.matmul_eff  # the GPU's measured matmul ceiling (MAMF / peak)
        * cal.inf_gemm_eff
        * cal.inf_lowp_gemm_rel**halvings
        * d
        / (d + cal.inf_gemm_half_dim)
    )
    return rate


def _half(gpu: GPU) -> str:
    """The GPU's 16-bit tensor-core format: bf16 where it has it, else fp16."""
    return "bf16" if "bf16" in gpu.peak_tflops else "fp16"


def _attn_rate_flops(model: Model, gpu: GPU, cal: Calibration) -> float:
    """FLOP/s of the attention core in 16 bits: a forward's attention at the pace of the
    exponential units where the heads are shorter than the GPU's softmax balance (GPT-OSS's
    64 on B200 and GB200: half rate; kernels.softmax_factors)."""
    qk_w, _ = attn_core_dims(model)  # the core's widths over all heads (MLA's own)
    qk_dim = qk_w / model.heads
    return gpu.peak_flops(_half(gpu)) * cal.inf_attn_eff / softmax_factors(gpu, qk_dim)[0]


def _attention(model: Model, tp: int, pp: int) -> _Attention:
    """Attention-core FLOPs per pair on one GPU: QK^T and PV, 2 FLOPs per MAC, so
    4 x heads x head_dim per pair and layer (Vidur mfu_calculator.py); the caps on the keys
    a query takes (a window, a DSA model's top-k)."""
    gp = tp * pp
    qk_w, v_w = attn_core_dims(model)
    pair_flops = 2.0 * (qk_w + v_w) * model.attn_layers / gp
    window_pairs = None
    if model.window_attn is not None:
        # Step 3.5: each kind of attention layer with its own heads; the windowed layers'
        # share of a pair's FLOPs (their pairs are capped at the window)
        def pair(v: Model) -> float:
            return 2.0 * v.heads * 2 * v.head_dim

        pair_flops = sum(n * pair(v) for n, v in attn_kinds(model)) / gp
        window_pairs = window_share(model, pp, tp, pair)
    # decode kernels run MLA absorbed: each head scores the latent and the rope key and sums
    # the latent (FlashMLA; vLLM's, SGLang's and TensorRT-LLM's MLA decode)
    decode_pair = pair_flops
    if model.mla is not None:
        x = model.mla
        absorbed = 2 * x.kv_lora_rank + x.qk_rope_head_dim
        decode_pair = 2.0 * model.heads * absorbed * model.attn_layers / gp
    sparse_tokens = model.sparse.topk if model.sparse is not None else 0
    sparse_share = sparse_layers(model) / model.attn_layers if model.attn_layers else 0.0
    if model.compressed is None:
        return _Attention(pair_flops, decode_pair, window_pairs, sparse_tokens, sparse_share, 0.0)
    # DeepSeek-V4: a query's pairs with the compressed entries, 1 / ratio of a context token
    # each, the CSA layers' capped at the top-k entries (k x ratio tokens); its window's 128
    # keys in every layer are a fixed cost a token
    c, entries = model.compressed, entries_per_token(model)
    csa = layer_ratios(model)[0].count(c.csa_ratio) / c.csa_ratio
    pair_flops *= entries / model.attn_layers
    return _Attention(
        pair_flops=pair_flops,
        decode_pair_flops=pair_flops,
        window_pair_share=window_pairs,
        sparse_tokens=sparse_tokens * c.csa_ratio,
        sparse_share=csa / entries,
        window_flops_per_token=2.0 * (qk_w + v_w) * c.window * model.layers / gp,
    )


def _cache_reads(model: Model, gpu: GPU, precision: PrecisionPlan, tp: int, pp: int) -> _CacheReads:
    """A decode step reads the attention's cache (capped at a DSA model's top-k) and all its
    indexer keys. DSA's indexer scores every earlier key, whole on every TP rank, in FP8
    where the GPU has it (DeepGEMM's fp8_mqa_logits, as vLLM and SGLang run it): counted
    here in 16-bit-equivalent FLOPs at the attention rate."""
    idx_tok = indexer_key_bytes_per_token(model, pp)
    kv_tok = kv_bytes_per_token(model, precision.kv_bytes, tp, pp) - idx_tok
    half = _half(gpu)
    fp8 = gpu.peak_flops("fp8") if "fp8" in gpu.peak_tflops else gpu.peak_flops(half)
    idx_pair = indexer_layers(model) / pp * indexer_pair_flops(model)
    if model.compressed is not None:
        idx_pair /= model.compressed.csa_ratio  # it scores entries, one per ratio tokens
    idx_pair *= gpu.peak_flops(half) / fp8
    return _CacheReads(kv_tok, idx_tok, idx_pair)


def _tp_all_reduces(
    model: Model, fabric: Fabric, tp: int, pp: int, cal: Calibration
) -> tuple[float, float]:
    """(alpha, beta per token) seconds of one step's TP all-reduces on a stage: one per
    mixer and MLP block of tokens x hidden activations in 16 bits (GenZ
    tests/test_decode_time.py); none without TP."""
    if tp <= 1:
        return 0.0, 0.0
    layers_stage = math.ceil(model.layers / pp)
    n_ar = round(model.sublayers_per_layer * layers_stage)  # one per mixer / MLP block
    alpha, beta = _alpha_beta("all_reduce", tp, model.hidden * 2.0, fabric, cal)
    return n_ar * alpha, n_ar * beta


def _pp_hops(
    model: Model, fabric: Fabric, tp: int, pp: int, cal: Calibration
) -> tuple[float, float]:
    """(alpha, beta per token) seconds of a stage boundary's send/recv of the activations,
    inside the scale-up domain or across it; none without PP.

    A stage (its TP group) never splits over domains, so a domain holds dom // tp whole
    stages and every that-many-th boundary crosses (all of them when one stage fills a
    domain or more).
    """
    if pp <= 1:
        return 0.0, 0.0
    hop = model.hidden * 2.0 * model.residual_streams  # DeepSeek-V4: n streams
    a_in, b_in = _alpha_beta("send_recv", 2, hop, fabric, cal, 2)
    a_out, b_out = _alpha_beta("send_recv", 2, hop, fabric, cal, 1)
    dom = fabric.scaleup_domain_gpus
    crossing = (pp - 1) // max(dom // tp, 1)
    share = crossing / (pp - 1)
    return (1.0 - share) * a_in + share * a_out, (1.0 - share) * b_in + share * b_out


def _seq_overhead_s(
    model: Model, precision: PrecisionPlan, tp: int, pp: int, cal: Calibration, hbm_Bps: float
) -> float:
    """Seconds per sequence and step: the host's, plus every stage reading and writing a
    hybrid model's Mamba state, and (DeepSeek-V4) every layer reading its window's
    entries, at HBM speed."""
    return (
        cal.inf_seq_overhead_s
        + pp * 2.0 * mamba_state_bytes_per_seq(model, 2.0, tp, pp) / hbm_Bps
        + pp * window_cache_bytes_per_seq(model, precision.kv_bytes, pp) / hbm_Bps
    )
