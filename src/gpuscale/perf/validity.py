"""Which parallelism plans are valid, and why not: the structural rules every plan is
filtered by (vectorised over many plans), and for one plan a user gave, the first rule it
breaks as an error naming the flag and the values that would be valid."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from gpuscale.errors import InputError
from gpuscale.perf.attn_kinds import heads_said, kv_heads_said
from gpuscale.perf.plan import (
    PP_SPLITS,
    SHARDING,
    BoolArray,
    IntArray,
    Plans,
    Workload,
    shard_group_of,
)
from gpuscale.perf.stages import placed_layers


def _shown(values: IntArray) -> str:
    """The distinct nonzero values of ``values``, for a rule's message."""
    return ", ".join(str(int(v)) for v in np.unique(values) if v) or "0"


Rule = tuple[BoolArray, str]
"""A structural rule: the plans that keep it, and what a plan that breaks it breaks."""


def validity(w: Workload, p: Plans) -> tuple[BoolArray, list[tuple[BoolArray, str]]]:
    """Which plans are structurally valid, and the named rules each violates."""
    rules: list[Rule] = [
        (p.gpus_used() <= w.num_gpus, "tp*pp*dp*cp exceeds the GPU count"),
        (
            w.global_batch % np.maximum(p.dp * p.mbs, 1) == 0,
            "global batch not divisible by dp x micro-batch",
        ),
        *_tensor_split_rules(w, p),
        *_context_and_pipeline_rules(w, p),
        *_cp_comm_rules(w, p),
        *_expert_rules(w, p),
        *_sequence_parallel_rules(w, p),
        # Megatron: "--fp8-param-gather only supported with distributed optimizer, torch
        # fsdp2, megatron fsdp"; without sharding nothing is gathered
        (
            (p.sharding != SHARDING.index("none")) | (not w.fp8_param_gather),
            "FP8 parameter gathers need a sharded optimizer (dist-opt, ZeRO or FSDP)",
        ),
        _mixer_rule(w, p),
        *_shard_group_rules(w, p),
        (p.tp <= max(w.fabric.domain_gpus, 1) * 2**10, "tp too large"),
    ]
    ok = np.ones(len(p), dtype=bool)
    for mask, _ in rules:
        ok &= mask
    return ok, rules


def _tensor_split_rules(w: Workload, p: Plans) -> list[Rule]:
    """Tensor parallelism splits every kind of attention layer's heads (Step 3.5's
    windowed layers have heads of their own), GQA's KV heads (or replicates each of them)
    and the FFN."""
    m = w.model
    heads_ok = m.heads % p.tp == 0
    kv_ok = (m.kv_heads % p.tp == 0) | (p.tp % m.kv_heads == 0) | (m.mla is not None)
    for heads, kv in m.head_counts[1:]:
        heads_ok = heads_ok & (heads % p.tp == 0)
        kv_ok = kv_ok & ((kv % p.tp == 0) | (p.tp % kv == 0))
    return [
        (heads_ok, f"heads ({heads_said(m)}) not divisible by tp"),
        (kv_ok, f"kv heads ({kv_heads_said(m)}) and tp do not divide one another"),
        (m.ffn_hidden % p.tp == 0, f"ffn hidden ({m.ffn_hidden}) not divisible by tp"),
    ]


def _context_and_pipeline_rules(w: Workload, p: Plans) -> list[Rule]:
    """How context parallelism cuts the sequence, and how a pipeline places the layers
    and schedules the micro-batches."""
    n = placed_layers(w.model)  # Megatron's layers: a Gated DeltaNet's mixer + MLP each
    return [
        # causal context parallelism balances its load by splitting the sequence into 2 x cp
        # chunks, each rank taking one from either end (Megatron-Core, Transformer Engine)
        (
            (p.cp == 1) | (w.seq_len % (2 * p.cp) == 0),
            f"sequence ({w.seq_len}) not divisible by 2 x cp (load-balanced causal chunks)",
        ),
        # the embedding and the loss may each take a pipeline chunk of their own (Megatron's
        # account_for_embedding/loss_in_pipeline_split: 126 layers + 2 on PP16 x VPP8)
        (
            p.pp * p.vpp <= n + np.where(p.pp > 1, 2, 0),
            f"pp x vpp exceeds the {n} layers (+ embedding and loss chunks): at most {n + 2}",
        ),
        (
            placement_ok(w, p),
            f"--pp-split account needs layers + 2 ({n + 2}) divisible by pp x vpp; "
            "balanced, no interleaving (vpp 1)",
        ),
        (
            (p.vpp == 1) | ((p.pp > 1) & (p.microbatches(w) % p.pp == 0)),
            "interleaving (vpp > 1) needs pp > 1 and micro-batches divisible by pp",
        ),
    ]


def _cp_comm_rules(w: Workload, p: Plans) -> list[Rule]:
    """What the context-parallel exchange (``Workload.cp_comm``) needs of the attention
    layers. Ulysses' all-to-alls hand each CP rank whole heads: Transformer Engine asserts
    that the query heads and the KV heads a TP rank holds (one, where TP replicates them)
    both divide by cp. Its MLA attention (K and V head widths differ) runs only the ring,
    and its ring refuses windowed layers, which run the all-to-alls under ``p2p``.
    DeepSeek Sparse Attention runs only Megatron's all-gather (``Workload.cp_exchange``)."""
    m = w.model
    one = p.cp == 1
    if m.sparse is not None:
        # DeepSeek Sparse Attention: Megatron's all-gather only (the ring priced as it)
        if w.cp_comm != "a2a":
            return []
        return [(one, "--cp-comm a2a with DeepSeek Sparse Attention (Megatron's is allgather)")]
    if w.cp_comm == "p2p":
        if not m.window or not m.window_layers:
            return []
        heads, kv = m.head_counts[-1]  # the windowed layers' own, where they have their own
        return [
            (
                one | _whole_heads(heads, kv, p),
                f"--cp-comm p2p runs the windowed layers' context parallelism as all-to-alls "
                f"(Transformer Engine's ring refuses them), which need the query heads "
                f"({heads} / tp) and KV heads ({kv} / tp, at least 1) a tensor-parallel rank "
                "holds divisible by cp",
            )
        ]
    if m.mla is not None:
        return [
            (one, f"--cp-comm {w.cp_comm} with MLA attention (Transformer Engine runs it as p2p)")
        ]
    if w.cp_comm == "all_gather":
        return []
    split = np.ones(len(p), dtype=bool)
    for heads, kv in m.head_counts:
        split &= _whole_heads(heads, kv, p)
    return [
        (
            one | split,
            f"--cp-comm a2a needs the query heads ({heads_said(m)} / tp) and KV heads "
            f"({kv_heads_said(m)} / tp, at least 1) a tensor-parallel rank holds divisible "
            "by cp",
        )
    ]


def _whole_heads(heads: int, kv: int, p: Plans) -> BoolArray:
    """Plans whose CP ranks each get whole heads from the all-to-alls: the query heads and
    the KV heads a TP rank holds (one, where TP replicates them) divide by cp."""
    out: BoolArray = ((heads // p.tp) % p.cp == 0) & (np.maximum(kv // p.tp, 1) % p.cp == 0)
    return out


def _expert_rules(w: Workload, p: Plans) -> list[Rule]:
    """Expert parallelism: only on an MoE model, its degree dividing the experts and the
    ranks an expert-parallel group is cut from."""
    m = w.model
    return [
        ((p.ep == 1) | m.is_moe, "ep > 1 on a dense model"),
        (
            (p.ep == 1) | ((m.num_experts % p.ep == 0) & ((p.tp * p.dp * p.cp) % p.ep == 0)),
            "ep must divide the experts and tp x dp x cp",
        ),
    ]


def _sequence_parallel_rules(w: Workload, p: Plans) -> list[Rule]:
    """Sequence parallelism and the TP communication overlap that needs it (Megatron's
    argument checks)."""
    return [
        (~p.sp | (p.tp > 1), "sequence parallel needs tp > 1"),
        # sequence parallelism splits each context-parallel rank's tokens over TP (Megatron:
        # "seq_length must be divisible by tensor_model_parallel_size" with SP)
        (
            ~p.sp | ((w.seq_len % p.cp == 0) & ((w.seq_len // np.maximum(p.cp, 1)) % p.tp == 0)),
            f"sequence ({w.seq_len}) per context-parallel rank not divisible by tp "
            "(sequence parallelism splits it)",
        ),
        # Megatron-Core's MoE layers take the sequence-parallel shard (its arguments assert
        # "When using MoE and tensor parallelism, sequence parallelism must be used")
        (
            ~(p.tp > 1) | p.sp | (not w.model.is_moe),
            "an MoE model with tp > 1 needs sequence parallelism",
        ),
        # Megatron overlaps the TP collectives with GEMMs only under sequence parallelism
        # (tp_comm_overlap asserts sequence_parallel)
        (
            ~p.tp_overlap | p.sp,
            "tp communication overlap needs tp > 1 with sequence parallelism",
        ),
        # the overlap's engines move the GEMM's operands GPU to GPU through shared memory
        # handles (Transformer Engine's userbuffers, PyTorch's symmetric memory for AsyncTP):
        # a TP group that spans nodes over the NICs runs its collectives in turn
        (
            ~p.tp_overlap | (p.tp <= w.fabric.scaleup_domain_gpus),
            "tp communication overlap needs the TP group inside one scale-up domain: tp at "
            f"most {w.fabric.scaleup_domain_gpus}",
        ),
    ]


def _mixer_rule(w: Workload, p: Plans) -> Rule:
    """How TP and CP split a Mamba-2 mixer's heads and B/C groups, or a Gated DeltaNet's
    value and key heads (every plan keeps it on a model without such mixers)."""
    m = w.model
    mamba_ok: BoolArray = np.ones(len(p), dtype=bool)
    mixer_rule = "Mamba-2 heads and groups not divisible by tp (heads by tp x cp)"
    if m.mamba is not None:  # TP splits a Mamba-2 mixer's heads and B/C groups
        mamba_ok = (m.mamba.heads % p.tp == 0) & (m.mamba.groups % p.tp == 0)
        # and context parallelism re-splits each TP rank's heads (Megatron-Core's
        # MambaContextParallel: heads divisible by tp x cp; a Gated DeltaNet's key heads too,
        # its q and k sections split the same way)
        mamba_ok &= m.mamba.heads % (p.tp * p.cp) == 0
        if m.mamba.rule == "gated_delta":
            mamba_ok &= m.mamba.groups % (p.tp * p.cp) == 0
            mixer_rule = "Gated DeltaNet value and key heads not divisible by tp x cp"
    return mamba_ok, mixer_rule


def _shard_group_rules(w: Workload, p: Plans) -> list[Rule]:
    """Hybrid sharding splits the data-parallel ranks into equal shard groups, and shards
    something: a DDP plan has no states to spread."""
    d = p.dp * p.cp
    sg = shard_group_of(w, p)
    replicas = np.maximum(d // np.maximum(sg, 1), 1)
    return [
        (
            (sg == 0) | (d <= sg) | (d % np.maximum(sg, 1) == 0),
            f"dp x cp is not a multiple of the shard group ({_shown(sg)})",
        ),
        # Megatron: "expert DP size must be divisible by the number of optimizer instances"
        (
            (sg == 0) | (d <= sg) | (not w.model.is_moe) | ((d * p.tp // p.ep) % replicas == 0),
            "expert data-parallel ranks (dp x cp x tp / ep) not a multiple of the shard "
            "group's replicas",
        ),
        (
            (sg == 0) | (p.sharding != SHARDING.index("none")),
            "hybrid sharding (a shard group) needs a sharded optimizer (dist-opt, ZeRO, FSDP)",
        ),
    ]


def placement_ok(w: Workload, p: Plans) -> BoolArray:
    """Plans whose layer placement a framework runs: Megatron's account-for-embedding/loss
    split asserts that the layers + 2 divide into the pp x vpp chunks; the balanced
    placement is priced stage by stage, for pipelines without interleaving (nanotron has
    none; Megatron-Core asks interleaved stages to split into whole chunks)."""
    account = p.split == PP_SPLITS.index("account")
    balanced = p.split == PP_SPLITS.index("balanced")
    fits = (placed_layers(w.model) + 2) % (p.pp * p.vpp) == 0
    ok: BoolArray = (p.pp == 1) | ~((account & ~fits) | (balanced & (p.vpp > 1)))
    return ok


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, smallest first."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


DEGREES = ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs")
"""Plan sizes a user can fix: parallel degrees, interleaving, micro-batch."""


def check_degrees(w: Workload, degrees: Mapping[str, object]) -> None:
    """Each given plan size is a whole number from 1 to its bound: the GPU count for a
    parallel degree, the layers for interleaving, the global batch for the micro-batch."""
    for key in DEGREES:
        v = degrees.get(key)
        if v is None:
            continue
        top, what = {
            "mbs": (w.global_batch, "the global batch"),
            "vpp": (placed_layers(w.model), "the layers"),
        }.get(key, (w.num_gpus, "the GPU count"))
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top:
            raise InputError(key, v, f"a whole number from 1 to {top:,} ({what})")


def check_plan(w: Workload, p: Plans) -> None:
    """Raise an :class:`InputError` for the first rule a single plan breaks."""
    m = w.model
    tp, pp, cp, dp = int(p.tp[0]), int(p.pp[0]), int(p.cp[0]), int(p.dp[0])
    check_degrees(w, {k: int(getattr(p, k)[0]) for k in DEGREES})
    if tp * pp * cp * dp > w.num_gpus:
        # fewer is a plan that leaves GPUs idle (the CLI's --dp); more are not there
        raise InputError(
            "tp*pp*cp*dp",
            tp * pp * cp * dp,
            f"at most the {w.num_gpus} GPUs (tp={tp}, pp={pp}, cp={cp}, dp={dp})",
        )
    if any(heads % tp for heads, _ in m.head_counts):
        raise InputError("tp", tp, f"must divide the {heads_said(m)} attention heads of {m.key}")
    if cp > 1 and w.seq_len % (2 * cp):
        # causal context parallelism splits the sequence into 2 x cp load-balanced chunks
        room = w.num_gpus // (tp * pp)  # the GPUs each tensor x pipeline group may span
        fits = [c for c in divisors(room) if c == 1 or w.seq_len % (2 * c) == 0]
        raise InputError(
            "cp",
            cp,
            f"a degree whose 2 x cp load-balanced chunks divide the sequence length "
            f"{w.seq_len}: one of {', '.join(map(str, fits))} (with tp={tp}, pp={pp} on "
            f"{w.num_gpus} GPUs)",
        )
    _check_batch(w, p)
    _check_experts(w, p)
    _check_placement(w, p)
    _check_shard_group(w, p)
    _check_rules(w, p)


def _check_batch(w: Workload, p: Plans) -> None:
    """The micro-batch divides each data-parallel rank's sequences, and dp x micro-batch the
    global batch."""
    dp, mb = int(p.dp[0]), int(p.mbs[0])
    per_rank = w.global_batch // dp
    if mb > 1 and w.global_batch % dp == 0 and per_rank % mb:
        raise InputError(
            "mbs",
            mb,
            f"a divisor of the {per_rank} sequences each of the {dp} data-parallel ranks takes "
            f"a step: one of {', '.join(map(str, divisors(per_rank)))}",
        )
    if w.global_batch % (dp * mb):
        raise InputError(
            "global-batch",
            w.global_batch,
            f"must be divisible by dp x micro-batch = {dp} x {mb} = {dp * mb}",
        )


def _check_experts(w: Workload, p: Plans) -> None:
    """Expert parallelism only on an MoE model, dividing its experts and tp x dp x cp."""
    m, ep = w.model, int(p.ep[0])
    if ep > 1 and not m.is_moe:
        raise InputError("ep", ep, f"1 for a dense model ({m.key} has no experts)")
    if ep > 1:
        group = int(p.tp[0] * p.dp[0] * p.cp[0])
        fits = [e for e in range(1, group + 1) if m.num_experts % e == 0 and group % e == 0]
        if ep not in fits:
            raise InputError(
                "ep",
                ep,
                f"must divide the {m.num_experts} experts of {m.key} and tp x dp x cp = "
                f"{group}: one of {', '.join(map(str, fits))}",
            )


def _check_placement(w: Workload, p: Plans) -> None:
    """Interleaving needs a pipeline, and the layer placement must fit the plan's chunks."""
    m, pp, vpp = w.model, int(p.pp[0]), int(p.vpp[0])
    if vpp > 1 and pp == 1:
        raise InputError("vpp", vpp, "1 unless pipeline parallel (pp > 1) is used")
    if placement_ok(w, p)[0]:  # the placement rule of validity, named
        return
    if PP_SPLITS[int(p.split[0])] == "balanced":
        raise InputError(
            "pp-split",
            "balanced",
            f"a placement for this plan: balanced is priced stage by stage, without "
            f"interleaving (vpp 1, not {vpp}); use even or account with --vpp",
        )
    raise InputError(
        "pp-split",
        "account",
        f"a placement for this plan: the embedding and the loss in a layer's place each "
        f"make {placed_layers(m) + 2} places, which pp x vpp = {pp * vpp} chunks do not "
        "divide (Megatron asserts it); use even or balanced, or pp x vpp dividing "
        f"{placed_layers(m) + 2}",
    )


def _check_rules(w: Workload, p: Plans) -> None:
    """The first rule of :func:`validity` the plan breaks, naming the flag that breaks it
    where one does, else the plan."""
    ok, rules = validity(w, p)
    if ok[0]:
        return
    pp, vpp = int(p.pp[0]), int(p.vpp[0])
    flags = {
        "tp communication overlap": ("tp-overlap", "on"),
        "FP8 parameter gathers": ("fp8-param-gather", "on"),
        "pp x vpp exceeds": ("vpp", vpp) if vpp > 1 else ("pp", pp),
        "sequence parallel needs": ("sp", "on"),
        "hybrid sharding": ("shard-group", int(shard_group_of(w, p)[0])),
        "--cp-comm": ("cp", int(p.cp[0])),
    }
    for mask, why in rules:
        if not mask[0]:
            field, value = next(
                (f for start, f in flags.items() if why.startswith(start)), ("plan", None)
            )
            if value is None:
                raise InputError("plan", p.label(0), why)
            raise InputError(field, value, f"{why} (plan {p.label(0)})")


def _check_shard_group(w: Workload, p: Plans) -> None:
    """The shard-group rules of :func:`validity` for one plan, naming the shard group."""
    sg, d = int(shard_group_of(w, p)[0]), int(p.dp[0] * p.cp[0])
    if sg == 0:
        return
    if int(p.sharding[0]) == SHARDING.index("none"):
        raise InputError(
            "shard-group",
            sg,
            "0 (no hybrid sharding) unless the optimizer is sharded "
            "(--dist-opt or --zero): a plan without sharding has no states to spread",
        )
    if d <= sg:  # one group of all ranks: full sharding
        return
    if d % sg:
        raise InputError(
            "shard-group",
            sg,
            f"a divisor of the plan's dp x cp = {d} data-parallel ranks "
            f"({', '.join(map(str, divisors(d)[:-1]))}), {d} or more for full sharding, or 0",
        )
    expert_dp, replicas = d * int(p.tp[0]) // int(p.ep[0]), d // sg
    if w.model.is_moe and expert_dp % replicas:
        raise InputError(
            "shard-group",
            sg,
            f"a size whose replicas ({d} / {sg} = {replicas}) divide the "
            f"{expert_dp} expert data-parallel ranks (dp x cp x tp / ep)",
        )
