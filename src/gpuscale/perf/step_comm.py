"""Communication of one training micro-batch on the slowest pipeline stage, term by term.

  TP comm     4 all-reduces (or all-gather + reduce-scatter pairs with SP) of s b h 16-bit
              values per layer, 6 with full recompute; tp_overlap of it hidden when overlap on.
  CP comm     ring attention passes K/V chunks; exposed where it exceeds attention compute;
              the all-gather (Llama 3) and all-to-all (Ulysses) exchanges, exposed;
              Mamba-2 mixers all-to-all their input to head shards and back (exposed).
  EP comm     2 all-to-alls forward and 2 backward per MoE layer (dispatch, combine);
              ep_overlap of them hidden behind other micro-batches' compute, at most the
              compute the CP ring does not already hide behind (each second of compute
              hides one second of communication; the DP collectives get what is left).
  PP comm     one activation send forward and one gradient send backward per chunk, hidden
              behind compute unless they block the stage (DeepSpeed's pipeline engine).
:mod:`gpuscale.perf.step` adds them to the micro-batch's stage time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.perf.attn_kinds import windowed_share
from gpuscale.perf.comm.distinct import collective_s, per_distinct
from gpuscale.perf.comm.moe import moe_dispatch_time_s
from gpuscale.perf.plan import FloatArrayT, Plans, Workload
from gpuscale.perf.step_gemms import mamba_widths
from gpuscale.perf.transformer import attn_core_dims

FloatArray = FloatArrayT


@dataclass(frozen=True)
class StageMicroBatch:
    """One micro-batch on the slowest pipeline stage, per plan: what its communication
    (and :mod:`gpuscale.perf.step`'s other terms) depends on."""

    w: Workload
    p: Plans
    cal: Calibration
    tokens: FloatArray
    """Tokens per GPU per micro-batch."""
    s_loc: FloatArray
    """The sequence length a context-parallel rank holds."""
    tp: FloatArray
    cp: FloatArray
    layers_stage_mtp: FloatArray
    """The stage's layers, multi-token-prediction depths included (their FLOP-equivalent)."""
    full_frac: FloatArray
    """Fraction of the stage's layers fully recomputed."""
    a_frac: float
    """Share of each block type per layer: attention, dense MLP, MoE, Mamba-2."""
    mlp_frac: float
    moe_frac: float
    mamba_frac: float
    sub: float
    """Norms, residuals and TP reductions per layer, / 2."""

    def per_layer(
        self, attn: FloatArray, mlp: FloatArray, moe: FloatArray, mamba: FloatArray
    ) -> FloatArray:
        """One average layer's figure from a block of each type's, weighed by the types'
        shares."""
        out: FloatArray = (
            self.a_frac * attn + self.mlp_frac * mlp + self.moe_frac * moe + self.mamba_frac * mamba
        )
        return out

    @property
    def act_bytes(self) -> FloatArray:
        """One micro-batch's 16-bit hidden states on a GPU."""
        act: FloatArray = self.tokens * float(self.w.model.hidden) * 2.0
        return act


def tp_comm_s(c: StageMicroBatch) -> FloatArray:
    """Exposed tensor-parallel collectives of one micro-batch."""
    m, f, p, cal, tp = c.w.model, c.w.fabric, c.p, c.cal, c.tp
    mods = c.w.recompute_modules
    tp_k = np.minimum(tp, float(f.scaleup_domain_gpus))
    tp_ar = collective_s("all_reduce", c.act_bytes, tp, tp_k, f, cal)
    tp_pair = collective_s("all_gather", c.act_bytes, tp, tp_k, f, cal) + collective_s(
        "reduce_scatter", c.act_bytes, tp, tp_k, f, cal
    )
    tp_one = np.where(p.sp, tp_pair, tp_ar)
    # one collective forward and one backward (and one more when recomputed) per TP-split
    # block: attention, Mamba mixer, dense MLP; an MoE block only for its TP-split shared
    # experts or latent projections, as its routed experts (expert TP = 1) take the
    # sequence-parallel shard and reach their tokens by the all-to-all alone
    moe_tp = 1.0 if (m.shared_experts or m.moe_latent) else 0.0
    tp_blocks = 2.0 * c.sub - c.moe_frac * (1.0 - moe_tp)
    # a selectively recomputed MLP or MoE layer repeats its forward TP collective
    sel_tp = c.mlp_frac * ("mlp" in mods) + c.moe_frac * moe_tp * ("moe" in mods)
    # per-op checkpointing saves the reduce-scatters' outputs but not the all-gathers'
    # (sequence parallelism) that feed the attention and MLP: it gathers them again
    sel_tp = sel_tp + ("ops" in mods) * tp_blocks / 2.0
    n_tp = (2.0 + c.full_frac) * tp_blocks + np.where(p.recompute == 1, sel_tp, 0.0)
    tp_hidden = np.where(p.tp_overlap, cal.tp_overlap, 0.0)
    tp_mb = c.layers_stage_mtp * n_tp * tp_one * (1.0 - tp_hidden)
    tp_mb = tp_mb + np.where(p.tp > 1, 2.0 * tp_one, 0.0)  # embedding/output-layer reductions
    return tp_mb


def cp_comm_s(
    c: StageMicroBatch, kv_rank: FloatArray, attn_fwd: FloatArray, attn_bwd: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Exposed context-parallel communication of one micro-batch: the attention layers'
    exchange (``Workload.cp_comm``: the ring's K/V beyond the attention core's forward and
    backward seconds, or the all-gathers' or all-to-alls', exposed) and Mamba-2's
    all-to-alls; ``kv_rank`` is the K (and the V) width a TP rank holds. Also returns the
    seconds of the micro-batch's compute (its first forward and its backward, not a
    recomputed forward) that the ring occupies hiding behind it, which no other collective
    can hide behind as well."""
    m, f, p, cal, tp, cp = c.w.model, c.w.fabric, c.p, c.cal, c.tp, c.cp
    mods = c.w.recompute_modules
    # K and V of each local token, per TP rank
    kv_chunk = 2.0 * p.mbs * c.s_loc * kv_rank * 2.0
    cp_k = np.clip(f.scaleup_domain_gpus / tp, 1.0, cp)
    # a recomputed attention core (full recompute, or selective of core_attn) runs its
    # forward exchange once more
    cp_again = c.full_frac + np.where((p.recompute == 1) & ("core_attn" in mods), 1.0, 0.0)
    layers = c.layers_stage_mtp * c.a_frac * np.where(p.cp > 1, 1.0, 0.0)
    if c.w.cp_exchange == "p2p":
        # Transformer Engine's ring refuses windowed attention ("not sliding_window_attn or
        # cp_comm_type in [a2a, all_gather]"): those layers run the all-to-alls (Megatron
        # takes --cp-comm-type per layer)
        windowed = windowed_share(m)
        # the ring's steps are sends to the next rank: one that spans scale-up domains is
        # paced by its hops between them, each one GPU's send through one NIC (not an NCCL
        # all-gather striped over every NIC of a domain)
        ring_k = np.where(cp_k >= cp, cp_k, 1.0)
        cp_fwd = collective_s("all_gather", kv_chunk * cp, cp, ring_k, f, cal)
        cp_exposed = (1.0 + cp_again) * np.maximum(cp_fwd - attn_fwd, 0.0) + np.maximum(
            2.0 * cp_fwd - attn_bwd, 0.0
        )
        ring = layers * (1.0 - windowed)
        cp_mb = ring * cp_exposed
        hidden = ring * (np.minimum(cp_fwd, attn_fwd) + np.minimum(2.0 * cp_fwd, attn_bwd))
        if windowed:
            fwd, bwd = _cp_exchange_s(c, kv_chunk, cp_k, "a2a")
            cp_mb = cp_mb + layers * windowed * ((1.0 + cp_again) * fwd + bwd)
    else:
        fwd, bwd = _cp_exchange_s(c, kv_chunk, cp_k, c.w.cp_exchange)
        cp_mb, hidden = layers * ((1.0 + cp_again) * fwd + bwd), np.zeros_like(kv_chunk)
    if m.mamba is not None:
        # a Mamba-2 scan cannot split the sequence: Megatron-Core's Mamba context parallel
        # turns the mixer's input from sequence- to head-sharded by an all-to-all and its
        # output back, forward and backward, exposed (the scan waits for its input)
        d_in, in_w, _ = mamba_widths(m)
        a2a_in = collective_s("all_to_all", c.tokens * in_w / tp * 2.0, cp, cp_k, f, cal)
        a2a_out = collective_s("all_to_all", c.tokens * d_in / tp * 2.0, cp, cp_k, f, cal)
        cp_mb = cp_mb + c.layers_stage_mtp * c.mamba_frac * np.where(
            p.cp > 1, 2.0 * (a2a_in + a2a_out), 0.0
        )
    return cp_mb, hidden


def _cp_exchange_s(
    c: StageMicroBatch, kv_chunk: FloatArray, cp_k: FloatArray, kind: str
) -> tuple[FloatArray, FloatArray]:
    """Forward and backward seconds of one attention layer's exposed context-parallel
    exchange without the ring (Transformer Engine's ``context_parallel.py``), K and V
    (``kv_chunk`` bytes of the local tokens together) each a collective of its own.
    ``all_gather``: K and V gathered before the forward's kernels, gathered again in the
    backward, dK and dV reduce-scattered after it. ``a2a``: Q, K and V all-to-all'd before
    the forward's kernel and its output after it; in the backward the saved output and dO
    before, dQ, dK and dV after. An all-to-all moves (cp - 1)/cp of a tensor a rank holds,
    its size unchanged. ``kind`` is one of those two (a windowed layer under the ring runs
    the all-to-alls); Q and the output at the full layers' width."""
    w, f, p, cal, cp = c.w, c.w.fabric, c.p, c.cal, c.cp

    def coll(op: str, size: FloatArray) -> FloatArray:
        return collective_s(op, size, cp, cp_k, f, cal)

    if kind == "all_gather":
        gather = 2.0 * coll("all_gather", kv_chunk * cp / 2.0)
        return gather, gather + 2.0 * coll("reduce_scatter", kv_chunk * cp / 2.0)
    q_w, v_w = attn_core_dims(w.model)
    q = coll("all_to_all", p.mbs * c.s_loc * q_w / c.tp * 2.0)
    kv = 2.0 * coll("all_to_all", kv_chunk / 2.0)
    out = coll("all_to_all", p.mbs * c.s_loc * v_w / c.tp * 2.0)
    return q + kv + out, 2.0 * out + q + kv


def ep_comm_s(c: StageMicroBatch, window: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Exposed expert-parallel all-to-alls of one micro-batch, hidden up to ``ep_overlap``
    and the compute seconds ``window`` that no other collective hides behind; and the
    seconds of that window they occupy."""
    w, m, f, p, cal = c.w, c.w.model, c.w.fabric, c.p, c.cal
    if not m.is_moe:
        zero = np.zeros_like(c.tokens)
        return zero, zero
    mw = float(m.moe_width)  # LatentMoE's routed experts work in a narrower width
    a2a_bytes = c.tokens / c.tp * m.top_k * mw * 2.0  # sequence-parallel shards dispatch
    ep_k = np.clip(float(f.scaleup_domain_gpus), 1.0, p.ep)
    a2a = per_distinct(
        lambda s, nn, kk: moe_dispatch_time_s(
            s,
            nn,
            kk,
            m.top_k,
            m.num_experts,
            f,
            cal,
            w.ep_dispatch,
            m.route_groups,
            m.route_topk_groups,
            concurrent=True,
        ),
        a2a_bytes,
        p.ep.astype(np.float64),
        ep_k,
    )
    # recomputing a whole MoE layer (Megatron-Core checkpoints router, dispatch,
    # experts and combine together) repeats its forward dispatch and combine
    redo = np.where((p.recompute == 1) & ("moe" in w.recompute_modules), 2.0, 0.0)
    n_a2a = 4.0 + 2.0 * c.full_frac + redo
    ep_all = c.layers_stage_mtp * c.moe_frac * n_a2a * np.where(p.ep > 1, a2a, 0.0)
    ep_mb: FloatArray = np.maximum(ep_all * (1.0 - cal.ep_overlap), ep_all - window)
    return ep_mb, ep_all - ep_mb


def pp_comm_s(c: StageMicroBatch) -> FloatArray:
    """Exposed pipeline point-to-point sends of one micro-batch."""
    f, p, cal, tp = c.w.fabric, c.p, c.cal, c.tp
    # the residual stream a stage hands on: hyper-connections' n streams (DeepSeek-V4)
    sent = c.act_bytes * c.w.model.residual_streams
    p2p_bytes = np.where(p.sp, sent / tp, sent)
    # ranks run tp, cp, dp, then pp: stage k's ranks follow stage k - 1's, so a hop stays in
    # the scale-up domain only where the whole pipeline does (with smaller stages some
    # hops, and interleaving's wrap-around, cross it, and the slowest sets the pace)
    in_domain = tp * c.cp * p.dp * p.pp <= f.scaleup_domain_gpus
    # a pipeline needs two GPUs at least: on one GPU no plan sends anything
    if f.total_gpus >= 2:
        p2p = collective_s("send_recv", p2p_bytes, 2.0, np.where(in_domain, 2.0, 1.0), f, cal)
    else:
        p2p = np.zeros_like(p2p_bytes)
    # one activation sent forward and one gradient backward per chunk: all but 1 -
    # pp_overlap of them hidden where they overlap (Megatron's schedules), none where they
    # block the stage (DeepSpeed's engine). Pricing the receives too (four transfers a
    # micro-batch) put BigScience's 02-28 runs, which name that engine, 5-15 % slow
    # (benchmarks/heldout/training_deepspeed.csv: median error 11 % against 7 %)
    sends = 2.0 * p.vpp * p2p
    exposed = sends if c.w.pp_p2p == "blocking" else sends * (1.0 - cal.pp_overlap)
    pp_mb: FloatArray = np.where(p.pp > 1, exposed, 0.0)
    return pp_mb


@dataclass(frozen=True)
class MicroBatchComm:
    """Exposed communication seconds of one micro-batch on the stage, per plan, by kind."""

    tp_s: FloatArray
    cp_s: FloatArray
    ep_s: FloatArray
    pp_s: FloatArray
    hidden_s: FloatArray
    """The micro-batch's compute seconds that the CP ring and the EP all-to-alls hide
    behind, which the data-parallel collectives cannot hide behind as well."""


def micro_batch_comm(
    c: StageMicroBatch,
    kv_rank: FloatArray,
    attn_fwd: FloatArray,
    attn_bwd: FloatArray,
    compute_mb: FloatArray,
) -> MicroBatchComm:
    """The exposed TP, CP, EP and PP communication of one micro-batch whose GEMMs and
    attention take ``compute_mb`` seconds (its attention cores ``attn_fwd`` and
    ``attn_bwd`` a layer). One micro-batch's compute hides each collective once: the ring's
    K/V exchange takes the attention cores' time it overlaps, the all-to-alls what is left
    of the compute, and the data-parallel collectives (perf/data_parallel.py) what they
    leave."""
    cp_mb, cp_hidden = cp_comm_s(c, kv_rank, attn_fwd, attn_bwd)
    ep_mb, ep_hidden = ep_comm_s(c, compute_mb - cp_hidden)
    return MicroBatchComm(
        tp_s=tp_comm_s(c),
        cp_s=cp_mb,
        ep_s=ep_mb,
        pp_s=pp_comm_s(c),
        hidden_s=cp_hidden + ep_hidden,
    )
