"""The plan space the search enumerates: every combination of the knobs a caller did not fix.

The space is at least Calculon's ``llm-optimal-execution`` (TP, PP, DP, interleaving,
micro-batch, recomputation, sequence parallelism, optimizer sharding, TP overlap), plus
context and expert parallelism, hybrid sharding (each ZeRO-3/FSDP plan again with its
states sharded within one scale-up domain and replicated across domains), and, with
``--pp-split balanced`` or ``account``, each pipelined plan again with its layers so
placed. Interleaving takes every degree that divides a stage's layers (NVIDIA's recipes
run up to 24). Structural knobs (TP, CP, PP, VPP, EP, DP, micro-batch) are listed in Python
(thousands of tuples); the switch knobs (recompute x SP x sharding x overlap) are crossed
with NumPy into one :class:`Plans` of arrays. DP may leave GPUs idle when no exact
factorisation exists: its candidates are the divisors of the global batch within a factor
of two of the largest that fits, and the largest that fits on half the GPUs.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection
from dataclasses import fields, replace
from typing import Any

import numpy as np

from gpuscale.perf.plan import (
    PP_SPLITS,
    RECOMPUTE,
    SHARDING,
    BoolArray,
    Plans,
    Workload,
    pipelined_fsdp,
)
from gpuscale.perf.stages import pipeline_stages, placed_layers
from gpuscale.perf.validity import divisors, placement_ok

MAX_MBS = 16
CP_MIN_SEQ = 4096
"""The shortest sequence a context-parallel rank is given (its two load-balanced chunks
together): shorter shards leave the ring's exchange exposed."""


def cp_degrees(seq_len: int) -> list[int]:
    """The context-parallel degrees the search tries for a sequence: 1, and those that cut
    it into two load-balanced chunks a rank of at least CP_MIN_SEQ tokens together."""
    return [
        c
        for c in (1, 2, 4, 8, 16, 32)
        if c == 1 or (seq_len % (2 * c) == 0 and seq_len // c >= CP_MIN_SEQ)
    ]


def _powers_of_two(n: int) -> list[int]:
    """1, 2, 4, ... up to n."""
    return [1 << k for k in range(n.bit_length()) if 1 << k <= n]


def _fixed_or(fx: dict[str, Any], name: str, default: list[int]) -> list[int]:
    """The value the caller fixed for knob ``name`` (``fx``: knob -> value), else
    ``default``, the values the search tries."""
    return [int(fx[name])] if name in fx and fx[name] is not None else default


def _tp_degrees(w: Workload) -> list[int]:
    """The tensor-parallel degrees the search tries: divisors of the heads that divide the
    scale-up domain, the FFN and the KV heads (or that the KV heads divide, each then
    replicated), for every kind of attention layer."""
    m = w.model
    n = w.num_gpus
    dom = max(w.fabric.domain_gpus, 1)
    kinds = m.head_counts[1:]
    return [
        t
        for t in divisors(m.heads)
        # a TP group lies inside one scale-up domain: its size divides the domain's
        if max(dom, w.fabric.gpus_per_node) % t == 0
        and t <= n
        and m.ffn_hidden % t == 0
        and (m.mla is not None or m.kv_heads % t == 0 or t % m.kv_heads == 0)
        # Step 3.5's windowed layers: their own heads split too
        and all(heads % t == 0 and (kv % t == 0 or t % kv == 0) for heads, kv in kinds)
    ]


def _pp_degrees(w: Workload) -> list[int]:
    """The pipeline degrees the search tries: those that split the layers evenly, or
    evenly once the embedding and the output layer count as one layer each (Megatron's
    account-for-embedding/loss split), the powers of two with uneven stages (Megatron's
    first/last-stage layer counts: DeepSeek-V3's 61 layers ran on PP16), and the divisors
    of the GPU count, without which a count such as 24 (three 8-GPU nodes) could only be
    filled by a plan no model divides (TP3) and its best plan would leave GPUs idle; an
    uneven plan is priced on its fullest stage."""
    layers = placed_layers(w.model)  # Megatron's: a Gated DeltaNet's mixer + MLP each
    n = w.num_gpus
    return sorted(
        {
            p
            for p in divisors(layers) + divisors(layers + 2) + _powers_of_two(layers) + divisors(n)
            if 1 <= p <= min(n, layers)
        }
    )


def _dp_degrees(
    w: Workload, fx: dict[str, Any], mp: int, batch_divs: list[int], extra_dp: Collection[int]
) -> list[int]:
    """The data-parallel degrees tried beside a model-parallel group of ``mp`` GPUs: the
    caller's, or the divisors of the global batch (``batch_divs``) within a factor of two
    of the largest that fits, the largest that fits on half the GPUs and those of
    ``extra_dp`` that fit; none where no divisor fits."""
    n = w.num_gpus
    if "dp" in fx and fx["dp"] is not None:
        return [int(fx["dp"])]
    cands = [d for d in batch_divs if d * mp <= n]
    if not cands:
        return []
    top_dp = max(cands)
    dps = [d for d in cands if d * 2 > top_dp]
    # and the largest on half the GPUs: a plan that leaves them idle can beat all
    # that use them (a small batch through a deep pipeline), and the caller's
    # (the best plans of a scaling curve's smaller points)
    half = [d for d in cands if d * mp <= n // 2]
    more = ({max(half)} if half else set()) | (set(extra_dp) & set(cands))
    dps += sorted(more - set(dps))
    return dps


def _structural_rows(
    w: Workload, fx: dict[str, Any], extra_dp: Collection[int]
) -> list[tuple[int, ...]]:
    """Every (tp, cp, pp, vpp, ep, dp, mbs) the search tries, those ``fx`` fixes fixed:
    the model-parallel degrees that fit the GPUs, the data-parallel degrees beside them,
    the micro-batches that divide a rank's share of the batch, and the interleavings that
    divide a stage's layers (interleaving needs a pipeline and micro-batches divisible by
    its degree)."""
    m = w.model
    n = w.num_gpus
    tps = _fixed_or(fx, "tp", _tp_degrees(w))
    cps = _fixed_or(fx, "cp", cp_degrees(w.seq_len))
    pps = _fixed_or(fx, "pp", _pp_degrees(w))
    eps = _fixed_or(fx, "ep", [e for e in divisors(m.num_experts) if e <= n] if m.is_moe else [1])
    batch_divs = divisors(w.global_batch)
    rows: list[tuple[int, ...]] = []
    for tp, cp, pp in itertools.product(tps, cps, pps):
        mp = tp * cp * pp
        if mp > n:
            continue
        for dp in _dp_degrees(w, fx, mp, batch_divs, extra_dp):
            per_rank = w.global_batch // dp if w.global_batch % dp == 0 else 0
            if per_rank == 0:
                continue
            mbss = _fixed_or(fx, "mbs", [b for b in divisors(per_rank) if b <= MAX_MBS])
            for mbs in mbss:
                if per_rank % mbs:
                    continue
                mbatches = per_rank // mbs
                stage_layers = -(-placed_layers(m) // pp)
                vpps = _fixed_or(
                    fx,
                    "vpp",
                    [
                        v
                        for v in divisors(stage_layers)
                        if v == 1 or (pp > 1 and mbatches % pp == 0)
                    ],
                )
                for vpp, ep in itertools.product(vpps, eps):
                    rows.append((tp, cp, pp, vpp, ep, dp, mbs))
    return rows


def _with_switches(base: np.ndarray, fx: dict[str, Any]) -> Plans:
    """Each structural row of ``base`` crossed with every combination of the switch knobs
    (recompute, sharding, SP, TP overlap) the caller did not fix."""
    rec = _fixed_or(fx, "recompute", list(range(len(RECOMPUTE))))
    shard = _fixed_or(fx, "sharding", list(range(len(SHARDING))))
    sp_opts = [bool(fx["sp"])] if "sp" in fx and fx["sp"] is not None else [False, True]
    ov_opts = (
        [bool(fx["tp_overlap"])]
        if "tp_overlap" in fx and fx["tp_overlap"] is not None
        else [False, True]
    )
    switches = np.array(list(itertools.product(rec, shard, sp_opts, ov_opts)), dtype=np.int64)
    nb, ns = base.shape[0], switches.shape[0]
    b = np.repeat(base, ns, axis=0)
    s = np.tile(switches, (nb, 1))
    return Plans.of(
        tp=b[:, 0],
        cp=b[:, 1],
        pp=b[:, 2],
        vpp=b[:, 3],
        ep=b[:, 4],
        dp=b[:, 5],
        mbs=b[:, 6],
        recompute=s[:, 0],
        sharding=s[:, 1],
        sp=s[:, 2].astype(bool),
        tp_overlap=s[:, 3].astype(bool),
    )


def _distinct(w: Workload, plans: Plans, fx: dict[str, Any]) -> BoolArray:
    """The plans worth pricing: switches that do nothing at TP = 1 are dropped (they would
    only duplicate plans), and so, unless the caller fixed the sharding, are ZeRO-2 under a
    pipeline (it costs there what the distributed optimizer costs, plan.pipelined_fsdp)
    and the sharded twins of a plan with one data-parallel replica."""
    keep = (plans.tp > 1) | (~plans.sp & ~plans.tp_overlap)
    if "sharding" not in fx or fx["sharding"] is None:
        keep &= ~pipelined_fsdp(plans)
        # with one data-parallel replica (of the dense and of the expert weights) there is
        # nothing to shard: every sharding is the plain plan
        d = plans.dp * plans.cp
        alone = (d == 1) & ((d * plans.tp <= plans.ep) | (not w.model.is_moe))
        keep &= ~alone | (plans.sharding == SHARDING.index("none"))
    return keep


def enumerate_plans(
    w: Workload, fixed: dict[str, Any] | None = None, extra_dp: Collection[int] = ()
) -> Plans:
    """Every combination of knobs not fixed by the caller (``fixed`` maps knob -> value);
    ``extra_dp``: data-parallel degrees to try beside the usual ones."""
    fx = dict(fixed or {})
    rows = _structural_rows(w, fx, extra_dp)
    if not rows:
        return Plans.of(tp=np.zeros(0, dtype=np.int64))
    plans = _with_switches(np.array(rows, dtype=np.int64), fx)
    plans = _with_placement(w, plans.take(_distinct(w, plans, fx)), fx.get("split"))
    # a caller that fixes the shard group (0: all data-parallel ranks), or a workload that
    # names one, gets no hybrid twins, and each plan it splits (more data-parallel ranks than
    # the group, its states sharded) carries it, as a searched hybrid twin does (hsdpN)
    group = fx.get("shard_group")
    if group is None:
        if w.shard_group == 0:
            return _with_hybrid_sharding(w, plans)
        group = w.shard_group
    return plans.sharded_over(int(group))


def _with_placement(w: Workload, plans: Plans, fixed: int | None) -> Plans:
    """``plans`` placed as the caller fixed (``fixed``: an index into PP_SPLITS), or evenly
    and, for each pipelined plan whose stages the workload's placement changes, again so
    placed (``--pp-split balanced`` or ``account`` in a search: tried beside the even split)."""
    if fixed is not None:
        return replace(plans, split=np.full(len(plans), int(fixed), dtype=np.int64))
    if w.pp_split == "even":
        return plans
    alt = replace(plans, split=np.full(len(plans), PP_SPLITS.index(w.pp_split), dtype=np.int64))
    a, e = pipeline_stages(w, alt), pipeline_stages(w, plans)
    moved = (a.fullest != e.fullest) | (a.last != e.last) | (a.slowest != e.slowest)
    # only placements a framework can run (validity's rules): account where the layers + 2
    # divide into the chunks, balanced without interleaving
    ok = placement_ok(w, alt)
    return _concat(plans, alt.take((plans.pp > 1) & (moved | (a.head != e.head)) & ok))


def _concat(a: Plans, b: Plans) -> Plans:
    """The plans of ``a`` then those of ``b``."""
    return Plans(
        **{f.name: np.concatenate([getattr(a, f.name), getattr(b, f.name)]) for f in fields(Plans)}
    )


def _with_hybrid_sharding(w: Workload, plans: Plans) -> Plans:
    """``plans`` and, for each fully sharded one (ZeRO-3/FSDP, whose gathers run every
    micro-batch) whose data-parallel ranks span more than one scale-up domain, its
    hybrid-sharded twin (FSDP's HYBRID_SHARD): the states sharded over the ranks of one
    domain (the largest divisor of DP x CP that fits), replicated across domains. The
    other shardings gather and reduce once a step, where hybrid sharding only adds memory
    and an all-reduce; ``--shard-group`` prices them that way when asked."""
    zero3 = plans.take(plans.sharding == SHARDING.index("zero3"))
    if len(zero3) == 0:
        return plans
    d = zero3.dp * zero3.cp
    # a shard group counts DP x CP ranks: a domain holds domain / TP of them
    per_domain = np.maximum(w.fabric.scaleup_domain_gpus // zero3.tp, 1)
    # the largest divisor of d within a domain, once per distinct (d, ranks per domain)
    span = int(per_domain.max()) + 1
    keys, inverse = np.unique(d * span + per_domain, return_inverse=True)
    group = np.array(
        [max(x for x in divisors(int(k // span)) if x <= k % span) for k in keys],
        dtype=np.int64,
    )[inverse.reshape(-1)]
    twin = (group > 1) & (group < d)
    if not twin.any():
        return plans
    return _concat(plans, replace(zero3.take(twin), shard_group=group[twin]))
