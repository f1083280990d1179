"""Memory per GPU of a training plan: weights, gradients, optimizer states, activations.

Bytes per parameter with mixed-precision Adam (ZeRO paper, arXiv 1910.02054; Megatron
``theoretical_memory_usage.py``), d = data-parallel sharding group (DP x CP, or the
hybrid shard group):
  none (Megatron DDP, fp32 main grads): 2 + 4 + 12        = 18
  dist-opt (Megatron distributed opt.): 2 + 4 + 12/d
  zero1:                                2 + 2 + 12/d
  zero2:                                2 + (2 + 12)/d   (under a pipeline: dist-opt's)
  zero3 / FSDP:                         (2 + 2 + 12)/d   (under a pipeline: dist-opt's)
FP8 training keeps an extra 1-byte copy of each weight (Transformer Engine). Gradients
accumulated in a pass of their own (DeepSpeed's BF16 optimizer) take 2 + 4 bytes.

Activations per layer and micro-batch (Korthikanti et al. 2022, arXiv 2205.05198, Table 2,
generalised to GQA and gated MLPs), s = sequence per GPU, b = micro-batch, t = TP:
  replicated across TP unless sequence parallel: 10 s b h (2 norms' inputs 4, attention and
  MLP inputs 4, two dropout masks 2);
  split across TP: s b (4 q + 4 kv) (Q, K, V, output-projection input) and the MLP's
  4 f (6 f when gated) (activation input and output);
  attention scores 5 a s^2 b / t without flash attention and without selective recompute;
  full recompute keeps only each layer's input, 2 s b h (/t with SP).
GPT with f = 4h and MHA gives 34 s b h + 5 a s^2 b, the paper's figure. With FP8 GEMMs
(Transformer Engine) the GEMM inputs saved for backward take 1 byte instead of 2.
The first pipeline stage holds p micro-batches in flight (x (1 + (p-1)/(p v)) interleaved,
at most all m); the last one holds one (interleaved, ((v-1) p + 1)/v) and the fp32 logits of
the output layer (three with an op-by-op loss, :data:`LOSS_BYTES`); memory is that of the
fuller of the two.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.perf.attn_kinds import kind_mean
from gpuscale.perf.plan import (
    FloatArrayT,
    IntArray,
    Plans,
    Workload,
    memory_sharding,
    pipelined_zero3,
    separate_accumulation,
)
from gpuscale.perf.recompute import op_sac_gemms
from gpuscale.perf.sharding import ShardGroups
from gpuscale.perf.stage_kinds import AVERAGE, StageMix, stage_candidates
from gpuscale.perf.stage_params import candidate_layers, candidate_params
from gpuscale.perf.stages import pipeline_stages
from gpuscale.perf.transformer import (
    compressor_width,
    indexer_layers,
    kv_width_per_rank,
    mean_attn_dims,
    mtp_layer_equivalents,
    sparse_layers,
)

FloatArray = FloatArrayT

SEPARATE_GRAD_BYTES = 6.0
"""Gradient bytes per parameter when gradients accumulate in a pass of their own (DeepSpeed's
BF16 optimizer, ``Workload.grad_accumulation``, on DDP and ZeRO-1 plans): the 16-bit
gradient and its fp32 accumulator, both whole."""

# bytes per parameter: (weights, gradients, optimizer states, sharded parts divided by d)
# columns: weights, grads, optimizer; each as (unsharded, sharded) byte counts
_BYTES = {
    0: ((2, 0), (4, 0), (12, 0)),
    1: ((2, 0), (4, 0), (0, 12)),
    2: ((2, 0), (2, 0), (0, 12)),
    3: ((2, 0), (0, 2), (0, 12)),
    4: ((0, 2), (0, 2), (0, 12)),
}


LOSS_BYTES = {"fused": 4.0, "eager": 12.0}
"""Bytes a logit takes at the loss's peak, by how the run's memory-bound ops run
(:data:`~gpuscale.perf.plan.ELEMENTWISE`). A fused cross-entropy (Megatron's vocab-parallel
kernel, torch.compile's) keeps one fp32 copy, the softmax it overwrites with its gradient:
Megatron-LM's CI memory tests come within 3 % with it (``gpuscale validate memory`` on
``benchmarks/heldout/memory_published.csv``). PyTorch's op-by-op ``cross_entropy`` of
upcast logits keeps the fp32 log-softmax for the backward, which then writes its gradient
and its input's: three fp32 copies."""


MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "buffers")
"""The parts of a GPU's memory a :class:`MemoryBreakdown` holds, in the order reports list
them; they add up to its total."""


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU on the most loaded pipeline stage, one array element per plan."""

    weights: FloatArray
    gradients: FloatArray
    optimizer: FloatArray
    activations: FloatArray
    buffers: FloatArray
    """Communication buffers, unsharded ZeRO-3 layers, CUDA/NCCL workspaces."""
    capacity: float
    recompute_fraction: FloatArray
    """Fraction of layers whose activations are recomputed (1 for full, 0 for none)."""

    @property
    def total(self) -> FloatArray:
        return self.weights + self.gradients + self.optimizer + self.activations + self.buffers

    @property
    def fits(self) -> np.ndarray:
        # partial recompute fills the memory exactly: allow for the rounding of that sum
        return self.total <= self.capacity * (1.0 + 1e-9)

    @property
    def headroom(self) -> FloatArray:
        """capacity - total: negative means the plan is short by that many bytes."""
        return self.capacity - self.total


def activation_bytes_per_layer(
    w: Workload, p: Plans, seq_len: float | None = None, mix: StageMix | None = None
) -> FloatArray:
    """Activation bytes one layer stores for one micro-batch on one GPU (16-bit): the
    model's average layer, or the average of a stage whose layers' kinds ``mix`` gives."""
    mix = AVERAGE if mix is None else mix
    m = w.model
    s = (w.seq_len if seq_len is None else seq_len) / p.cp
    b = p.mbs.astype(np.float64)
    h = float(m.hidden)
    t = p.tp.astype(np.float64)
    # Q and K/V widths and heads averaged over the attention layers' kinds (Step 3.5)
    q, kv = mean_attn_dims(m)
    heads = kind_mean(m, lambda v: v.heads)
    if m.mla is not None:
        q = m.heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim)
        kv = m.heads * (m.mla.qk_nope_head_dim + m.mla.v_head_dim) // 2
    # GQA under more TP ranks than key/value heads: each rank keeps a whole K and V head
    kv_split = kind_mean(m, lambda v: kv_width_per_rank(v, t) * t) if m.mla is None else kv
    mlp_mult = 6.0 if m.gated_mlp else 4.0
    a_frac = m.attn_layers / m.layers * mix.attn
    mlp_frac = m.mlp_layers / m.layers * mix.mlp
    moe_frac = m.moe_layers / m.layers * mix.moe
    mamba_frac = m.mamba_layers / m.layers * mix.mamba
    sub = m.sublayers_per_layer / 2.0
    f_dense = float(m.dense_ffn_hidden)
    f_moe = float(m.top_k * m.ffn_hidden + m.shared_ffn_hidden)
    moe = mlp_mult * f_moe + 2 * m.top_k * m.moe_width
    # Mamba-2 (and a Gated DeltaNet) keeps in_proj's output (z, x, B, C, dt), the conv
    # output (x, B, C), the scan output y and out_proj's input, 2 bytes each
    mamba = 0.0
    if m.mamba is not None:
        mx = m.mamba
        mamba = 2.0 * (mx.in_proj_width + mx.conv_channels + 2 * mx.inner)
    # Korthikanti et al.'s 10sbh: both norms' inputs, the QKV and MLP inputs (2sbh each) and,
    # with dropout, its two 1-byte masks (after attention, after the MLP)
    replicated = sub * (10.0 if m.dropout else 8.0) * s * b * h
    split = (
        s
        * b
        * (
            # gated attention also keeps the gate and the ungated output (2 x 2 q bytes)
            a_frac * ((8.0 if m.attn_gate else 4.0) * q + 4.0 * kv_split)
            + mlp_frac * mlp_mult * f_dense
            + moe_frac * moe
            + mamba_frac * mamba
        )
    )
    if m.head_gate:  # a head-wise gate's gates and the ungated output, 2 (q + heads) bytes
        split = split + s * b * a_frac * 2.0 * (q + heads)
    # Transformer Engine saves GEMM inputs for backward in FP8 (1 byte; NVFP4 is costed the
    # same, its 0.56-byte copies plus column-wise ones for the weight gradient): the QKV and
    # fc1 inputs (2 x 2 s b h), the output-projection input (2 s b q), fc2's (2 s b f); a
    # hybrid block has one of each pair (in_proj's, out_proj's for Mamba)
    fp8_cut = 1.0 if w.precision in ("fp8", "fp4") else 0.0  # bytes saved on a GEMM input
    d_mamba = float(m.mamba.inner) if m.mamba is not None else 0.0
    replicated = replicated - fp8_cut * sub * 2.0 * s * b * h
    split = split - fp8_cut * s * b * (
        a_frac * q + mlp_frac * f_dense + moe_frac * f_moe + mamba_frac * d_mamba
    )
    # selective recomputation of Megatron-Core modules drops what they alone keep: the
    # outputs of the norms that are modules of their own (an MoE layer's pre-norm, MLA's
    # input norm; Transformer Engine fuses the others into the next GEMM), the experts'
    # activation output (fc2's input), a dense MLP's, a whole MoE layer's, the shared
    # experts' or a Mamba mixer's activations, each as the lines above store it (a GEMM
    # input kept in FP8 is 1 byte); MLA's up-projection outputs are not counted (its time is)
    mods = set(w.recompute_modules)
    keep_moe = "moe" not in mods
    norms = moe_frac * 2.0 + (a_frac * (2.0 - fp8_cut) if m.mla is not None else 0.0)
    saved_rep = norms * s * b * h if "layernorm" in mods else 0.0
    shared = float(m.shared_ffn_hidden)
    saved_split = (
        s
        * b
        * (
            (moe_frac * f_moe * (2.0 - fp8_cut) if "moe_act" in mods and keep_moe else 0.0)
            + (mlp_frac * (mlp_mult - fp8_cut) * f_dense if "mlp" in mods else 0.0)
            + (moe_frac * (moe - fp8_cut * f_moe) if "moe" in mods else 0.0)
            + (
                moe_frac * (mlp_mult - fp8_cut) * shared
                if "shared_experts" in mods and keep_moe
                else 0.0
            )
            + (mamba_frac * (mamba - fp8_cut * d_mamba) if "mamba" in mods else 0.0)
        )
    )
    sel = p.recompute == 1
    replicated = np.where(sel, replicated - saved_rep, replicated)
    split = np.where(sel, np.maximum(split - saved_split, 0.0), split)
    # unfused attention keeps the softmax output (2 bytes per score) and, with dropout, its
    # mask (1) and output (2): Korthikanti et al.'s 5as^2b, or 2as^2b without dropout
    scores = a_frac * (5.0 if m.dropout else 2.0) * heads * s * s * b
    no_scores = (p.recompute >= 2) | (sel & ("core_attn" in mods))
    if w.flash_attention:
        no_scores = np.ones_like(no_scores)
    act = np.where(p.sp, (replicated + split) / t, replicated + split / t)
    act = act + np.where(no_scores, 0.0, scores / t)
    if m.compressed is not None:
        # DeepSeek-V4 also keeps its query latent, o_a's output (the grouped projection's
        # g x r_o) and its compressors' kv and gate outputs, 16-bit; the two
        # hyper-connections keep their n-stream inputs (n - 1 more hidden widths each)
        c = m.compressed
        kept = 2.0 * (c.q_lora_rank + compressor_width(m)) + 2.0 * c.o_groups * c.o_lora_rank / t
        act = act + s * b * kept
    if m.residual_streams > 1:
        streams = 2.0 * 2.0 * (m.residual_streams - 1) * h
        act = act + np.where(p.sp, s * b * streams / t, s * b * streams)
    if m.sparse is not None:
        # a DSA layer keeps its selection for the sparse attention's backward (the top-k
        # key indices, int32) and an indexer's queries, key (16-bit) and head weights (fp32)
        # for its own loss's backward, whole on every TP rank
        x = m.sparse
        own = (
            2.0 * x.heads * x.head_dim
            + 2.0 * x.head_dim
            + (4.0 * x.heads if x.head_weights else 0.0)
        )
        per_token = (sparse_layers(m) * 4.0 * x.topk + indexer_layers(m) * own) / m.layers
        act = act + s * b * per_token
    if "ops" in mods:
        act = np.where(sel, _op_sac_bytes(w, p, s, b), act)
    # full recomputation keeps each layer's input: the n residual streams of hyper-connections
    kept_input = 2.0 * s * b * h * m.residual_streams
    full = np.where(p.sp, kept_input / t, kept_input)
    return np.where(p.recompute >= 2, full, act)


def _op_sac_bytes(w: Workload, p: Plans, s: FloatArray, b: FloatArray) -> FloatArray:
    """Bytes one layer keeps for one micro-batch under torchtitan's per-op checkpointing
    (:func:`gpuscale.perf.recompute.op_sac_gemms`), 16-bit: the layer's input (the
    checkpoint's), the odd matmuls' outputs, the attention kernel's output and its fp32
    log-sum-exp. For Llama (gated MLP): Q, V, w1 and w2, so 2 s b (2 h + 2 q + kv + f) +
    4 s b a; a GEMM input kept in FP8 does not apply, the outputs are 16-bit. Under TP each
    rank keeps its share; with sequence parallelism the input and the two reduce-scattered
    block outputs (saved collectives) are sequence shards, and w2's output is the
    full-sequence partial sum before its reduction: at TP8 that full-width copy can make the
    policy keep more than no checkpointing does (which keeps no block output)."""
    m = w.model
    h, t = float(m.hidden), p.tp.astype(np.float64)
    q, _ = mean_attn_dims(m)
    kept, _ = op_sac_gemms(m, t)
    # a rank's share of each kept output (the row-parallel ones whole-width partial sums)
    widths = sum((n_cols for _name, n_cols, _k in kept), np.zeros_like(t))
    block_outputs = np.where(p.sp, 2.0 * h / t, 0.0)  # reduce-scatter outputs (saved)
    layer_input = np.where(p.sp, h / t, h)
    lse = 2.0 * kind_mean(m, lambda v: v.heads) / t  # fp32: 4 bytes = 2 x 2
    out: FloatArray = 2.0 * s * b * (layer_input + widths + q / t + block_outputs + lse)
    return out


def memory_breakdown(w: Workload, p: Plans, cal: Calibration) -> MemoryBreakdown:
    """Memory per GPU of the stage that holds the most: of the first and the last stage
    and, where the layers differ in kind, the stages between them that may be fuller
    (:func:`~gpuscale.perf.stage_kinds.stage_candidates`)."""
    m = w.model
    # the ranks the sharded states spread over (all DP x CP ranks, or a hybrid shard group)
    groups = ShardGroups.of(w, p)
    # ZeRO-2 and FSDP under a pipeline hold whole weights and fp32 gradients, as the
    # distributed optimizer does (plan.memory_sharding)
    shard = memory_sharding(p)
    cands = stage_candidates(w, p)
    # per mix of layers: a model whose layers are all alike prices one for both ends
    by_mix: dict[int, tuple[FloatArray, FloatArray, FloatArray, FloatArray]] = {}
    for c in cands:
        if id(c.mix) not in by_mix:
            by_mix[id(c.mix)] = _states(w, p, cal, groups, shard, *candidate_params(w, p, c))
    states = [by_mix[id(c.mix)] for c in cands]
    # activations in flight: the first and the last pipeline stage (the same one without
    # PP), Megatron's warm-up for one between them
    first_mbs, last_mbs = in_flight(w, p)
    # MTP depths spread over the stages, as in params_per_gpu
    stages = pipeline_stages(w, p)
    mtp_stage = mtp_layer_equivalents(m, w.seq_len) / p.pp
    cols_p = _cols(p)
    no_rc = Plans.of(**{**cols_p, "recompute": 0})
    full_rc = Plans.of(**{**cols_p, "recompute": 2})
    acts_of: dict[int, tuple[FloatArray, FloatArray, FloatArray]] = {}
    for c in cands:
        if id(c.mix) not in acts_of:  # (plan's, no recompute, full) bytes a layer
            acts_of[id(c.mix)] = (
                activation_bytes_per_layer(w, p, mix=c.mix),
                activation_bytes_per_layer(w, no_rc, mix=c.mix),
                activation_bytes_per_layer(w, full_rc, mix=c.mix),
            )
    # the last stage's output layer and loss at its peak, one per MTP depth too
    s_loc = w.seq_len / p.cp
    logits = (1 + m.mtp_layers) * LOSS_BYTES[w.loss_kind] * s_loc * p.mbs * m.vocab / p.tp
    ovh = cal.mem_activation_overhead
    held, extra, rooms = [], [], []
    for c, (weights, grads, opt, buffers) in zip(cands, states, strict=True):
        first, last = c.rank == 0, c.rank == p.pp - 1
        mbs = np.where(first, first_mbs, np.where(last, last_mbs, _warmup(w, p, c.rank)))
        held.append((candidate_layers(p, c, stages) + mtp_stage) * mbs)
        extra.append(np.where(last, logits, 0.0))
        rooms.append(w.memory_capacity - (weights + grads + opt + buffers))

    def recompute_needed(k: int) -> FloatArray:
        """Partial recompute: the fraction r of a stage's layers recomputed that just fills
        the memory left (a recomputed layer keeps its input; one layer is re-materialised
        at a time); none where the stage fits without."""
        _, none_layer, full_layer = acts_of[id(cands[k].mix)]
        kept = none_layer * held[k] * ovh
        need = kept - (rooms[k] - (extra[k] + none_layer) * ovh)
        span = (none_layer - full_layer) * held[k] * ovh
        out: FloatArray = np.clip(need / np.maximum(span, 1.0), 0.0, 1.0)
        return np.where(kept + extra[k] * ovh <= rooms[k], 0.0, out)

    # The fraction is continuous, not whole layers: besides --recompute-num-layers, Megatron
    # recomputes chosen modules of every layer (--recompute-modules: norms, activations,
    # MoE parts), which trims memory in steps well below a layer. Rounding up to whole
    # layers of a virtual chunk turns Llama 3.1 405B's GB200 plan (one layer per chunk)
    # into full recomputation, 20 % slower than Megatron-Bridge measured. Every stage
    # recomputes the same fraction: the one the fullest stage needs.
    r_partial = recompute_needed(0)
    for k in range(1, len(cands)):
        r_partial = np.maximum(r_partial, recompute_needed(k))
    frac = np.select([p.recompute == 2, p.recompute == 3], [1.0, r_partial], 0.0)

    def stage_acts(k: int) -> FloatArray:
        per_layer_act, none_layer, full_layer = acts_of[id(cands[k].mix)]
        kept = np.where(
            p.recompute == 3,
            held[k] * (none_layer * (1.0 - frac) + full_layer * frac),
            per_layer_act * held[k],
        )
        # a recomputed layer is re-materialised whole, one at a time. The loss frees its
        # logits before the backward recomputes a layer, but the caching allocator's
        # reserved peak holds both: torchtitan's full-checkpointing runs on H100 (reserved
        # peaks of benchmarks/heldout/memory_published.csv) come out 4-8 % lower each when
        # the peak is the larger of the two instead
        out: FloatArray = (kept + np.where(frac > 0, none_layer, 0.0) + extra[k]) * ovh
        return out

    # the fullest stage's figures: its states, activations and buffers
    weights, grads, opt, buffers = states[0]
    acts = stage_acts(0)
    for k in range(1, len(cands)):
        acts_k = stage_acts(k)
        if cands[k].mix is cands[0].mix:  # the same layers: only the activations differ
            acts = np.maximum(acts, acts_k)
            continue
        w_k, g_k, o_k, b_k = states[k]
        more = w_k + g_k + o_k + b_k + acts_k > weights + grads + opt + buffers + acts
        weights, grads = np.where(more, w_k, weights), np.where(more, g_k, grads)
        opt, buffers = np.where(more, o_k, opt), np.where(more, b_k, buffers)
        acts = np.where(more, acts_k, acts)
    return MemoryBreakdown(weights, grads, opt, acts, buffers, w.memory_capacity, frac)


def _states(
    w: Workload,
    p: Plans,
    cal: Calibration,
    groups: ShardGroups,
    shard: IntArray,
    dense: FloatArray,
    expert: FloatArray,
    per_layer: FloatArray,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """(weights, gradients, optimizer states, buffers) of a stage holding ``dense`` and
    ``expert`` parameters a GPU, its average layer ``per_layer``."""
    d, d_exp = groups.dense, groups.expert
    cols = []
    for j in range(3):
        un = np.select([shard == k for k in _BYTES], [_BYTES[k][j][0] for k in _BYTES])
        sh = np.select([shard == k for k in _BYTES], [_BYTES[k][j][1] for k in _BYTES])
        cols.append(dense * (un + sh / d) + expert * (un + sh / d_exp))
    weights, grads, opt = cols
    # DeepSpeed's BF16 optimizer (DDP or ZeRO-1 plans): the 16-bit gradients the backward
    # writes (2 B) and the fp32 accumulators they are added into (4 B), whole
    grads = np.where(separate_accumulation(w, p), (dense + expert) * SEPARATE_GRAD_BYTES, grads)
    if w.precision in ("fp8", "fp4"):
        # the 1-byte FP8 weight copy (NVFP4: row- and column-wise 0.56-byte copies) is
        # sharded like the 16-bit weights under ZeRO-3/FSDP. With FP8 parameter gathers
        # Megatron's FP8 weights are the only model copy (the optimizer holds the fp32
        # master), while FSDP casts its sharded parameters to FP8 for each all-gather and
        # stores no FP8 shard
        z3 = shard == 4
        fp8_copy = np.where(z3, dense / d + expert / d_exp, dense + expert)
        weights = np.where(z3, weights, fp8_copy) if w.fp8_param_gather else weights + fp8_copy
    # FSDP under a pipeline holds what it gathered, whole: its 16-bit weights (FP8 with FP8
    # gathers), no persistent FP8 copy beside them
    weights = np.where(pipelined_zero3(p), (dense + expert) * w.gathered_weight_bytes, weights)
    # ZeRO-3 gathers a layer's full 16-bit (or FP8) weights and its 16-bit gradients while
    # computing it, with one more prefetched: 2 layers x (2 + 2) bytes per parameter
    zero3 = np.where(shard == 4, 2.0 * per_layer * (w.gathered_weight_bytes + 2.0), 0.0)
    buffers = np.full(len(p), cal.mem_reserved_bytes) + zero3
    return weights, grads, opt, buffers


def _warmup(w: Workload, p: Plans, rank: IntArray) -> FloatArray:
    """Micro-batches' worth of a stage's layers that pipeline rank ``rank`` holds at its
    peak: p - r under 1F1B; interleaved, Megatron's warm-up of 2 (p - 1 - r) + (v - 1) p
    chunks and the one in flight, over v; at most all m (:func:`in_flight` gives the ends)."""
    mb = p.microbatches(w).astype(np.float64)
    pp, v, r = p.pp.astype(np.float64), p.vpp.astype(np.float64), rank.astype(np.float64)
    held = np.where(p.vpp > 1, (2.0 * (pp - 1.0 - r) + (v - 1.0) * pp + 1.0) / v, pp - r)
    out: FloatArray = np.minimum(held, mb)
    return out


def in_flight(w: Workload, p: Plans) -> tuple[FloatArray, FloatArray]:
    """Micro-batches' worth of a stage's layers that the first and the last pipeline stage
    hold at their peak.

    1F1B: the first stage holds min(m, p), the last one. Interleaved (v chunks per stage),
    Megatron's warm-up runs 2(p - 1 - r) + (v - 1) p chunks on rank r before its first
    backward, so at the peak the first stage holds p (1 + (p - 1)/(p v)) micro-batches'
    worth (Korthikanti et al. 2022) and the last ((v - 1) p + 1)/v, both capped at all
    m v chunks. With m = p the last stage is kept at ((v - 1) p + 1)/v, not m: Megatron-LM's
    functional test of a 7B model at PP4 VPP8 and 4 micro-batches logs its last rank's peak
    at 56.4 GiB, 1.6 % under this model's figure and 7 % under the one with m in flight
    (``benchmarks/heldout/memory_published.csv``, ``mg-h100-pp4``).
    """
    mb = p.microbatches(w).astype(np.float64)
    pp = p.pp.astype(np.float64)
    v = p.vpp.astype(np.float64)
    first = np.where(p.vpp > 1, pp + (pp - 1.0) / v, pp)
    last = np.where(p.vpp > 1, ((v - 1.0) * pp + 1.0) / v, 1.0)
    return np.minimum(first, mb), np.minimum(last, mb)


def _cols(p: Plans) -> dict[str, np.ndarray]:
    return {k: getattr(p, k) for k in p.__dataclass_fields__}
