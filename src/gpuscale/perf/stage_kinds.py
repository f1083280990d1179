"""The kinds of layers each pipeline stage holds, and so which stages can bound the memory.

A model whose layers differ by position puts different weights and activations on each
stage: DeepSeek-V3's first three layers are dense (each twice an MoE layer's parameters a
GPU under EP64), Llama 4 Maverick alternates dense and MoE layers, a hybrid's pattern
(Nemotron-H, Nemotron 3) places its Mamba, attention, MLP and MoE blocks unevenly. The first
stage holds the most micro-batches in flight and the embedding, the last the output layer
and its logits; a stage between them may hold the heavier layers. The memory model prices
every stage that can be the fullest (:func:`stage_candidates`) and keeps the largest.

The stages' layers are placed as :mod:`gpuscale.perf.stages` prices them and the exported
Megatron-LM layout runs them: ``even``, the chunks of
:func:`~gpuscale.perf.stages.even_chunks`, stage r holding chunks r, r + pp, r + 2 pp, ...;
``account``, the same over L + 2 places with the embedding in place 0 and the loss in the
last; ``balanced`` (no interleaving), the stages of
:func:`~gpuscale.perf.stages.balanced_chunks`; all in whole Megatron layers (a Gated
DeltaNet model's mixer and MLP together).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from gpuscale.perf.plan import FloatArrayT, IntArray, Plans, Workload
from gpuscale.perf.stages import chunk_sizes, megatron_units, pipeline_stages


@dataclass(frozen=True)
class StageMix:
    """How one pipeline stage's layers differ in kind from the model's average: per kind
    (attention, dense MLP, MoE, Mamba or Gated DeltaNet mixer), the kind's share of the
    stage's layers over its share of all layers, one array element per plan (exactly 1.0
    for a model whose layers are all alike, or without a pipeline). DeepSeek-V3's first
    stage under PP16: 3 dense layers of its 4, against 3 of 61 on average."""

    attn: FloatArrayT | float = 1.0
    mlp: FloatArrayT | float = 1.0
    moe: FloatArrayT | float = 1.0
    mamba: FloatArrayT | float = 1.0


AVERAGE = StageMix()
"""The model's average layer (every factor 1.0)."""

KINDS = {"attn": "*", "mlp": "-", "moe": "E", "mamba": "M"}
"""StageMix's kinds as hybrid-pattern letters."""


@dataclass(frozen=True)
class StageCandidate:
    """A pipeline stage that may hold the most memory: its rank (0 the first, pp - 1 the
    last) and its layers' kinds, one array element per plan."""

    rank: IntArray
    mix: StageMix


def layer_kinds(w: Workload) -> str:
    """One letter per layer (:data:`KINDS`): a hybrid's pattern, else each layer's MLP kind
    (every such layer also has attention): MoE from the first dense layers on, every
    ``moe_layer_step``-th (Llama 4 Maverick's odd layers, as Hugging Face's
    ``(i + 1) % interleave_moe_layer_step == 0``)."""
    m = w.model
    if m.pattern:
        return m.pattern
    if not m.is_moe:
        return "-" * m.layers
    k, step = m.first_dense_layers, m.moe_layer_step
    return "".join("E" if i >= k and (i - k) % step == step - 1 else "-" for i in range(m.layers))


def uniform(w: Workload) -> bool:
    """Whether every layer is of one kind (every stage then holds the average layer)."""
    return len(set(layer_kinds(w))) == 1


def stage_layers(kinds: str, pp: int, vpp: int, split: int, last: int, units: int = 1) -> list[str]:
    """The kinds of the layers on each of ``pp`` stages, placed as the module says (in
    whole Megatron layers of ``units`` blocks)."""
    n = len(kinds)
    if pp == 1:
        return [kinds]
    sizes = chunk_sizes(n, pp, vpp, split, last, units)
    starts = [0, *itertools.accumulate(sizes)]
    chunks = [kinds[a:b] for a, b in itertools.pairwise(starts)]
    return ["".join(chunks[v * pp + r] for v in range(vpp)) for r in range(pp)]


def _shares(kinds: str, held: str, pattern: bool) -> tuple[float, ...]:
    """A stage's :class:`StageMix` factors (1.0 for an empty stage or an absent kind)."""
    n = len(kinds)
    out = []
    for letter in KINDS.values():
        every = letter == "*" and not pattern  # attention in every layer of a plain model
        whole = n if every else kinds.count(letter)
        mine = len(held) if every else held.count(letter)
        out.append((mine / len(held)) / (whole / n) if whole and held else 1.0)
    return tuple(out)


def stage_candidates(w: Workload, p: Plans) -> list[StageCandidate]:
    """The stages whose memory the model prices: the first and the last (the same one
    without a pipeline) and, where the layers differ in kind, the earliest stage between
    them of every mix of kinds but the first stage's (a later stage of the same mix holds
    fewer micro-batches in flight). Plans with fewer candidates repeat their first."""
    last_rank = (p.pp - 1).astype(np.int64)
    first = StageCandidate(rank=np.zeros(len(p), dtype=np.int64), mix=AVERAGE)
    if uniform(w) or not (p.pp > 1).any():
        return [first, StageCandidate(rank=last_rank, mix=AVERAGE)]
    kinds = layer_kinds(w)
    st = pipeline_stages(w, p)
    cols = (p.pp, p.vpp, p.split, st.last)
    ints = [np.asarray(c).astype(np.int64) for c in cols]
    bases = [int(c.max()) + 1 for c in ints]
    key = np.zeros(len(p), dtype=np.int64)
    for c, base in zip(ints, bases, strict=True):
        key = key * base + c  # one integer per placement: few distinct ones
    uniq, inverse = np.unique(key, return_inverse=True)
    per_placement: list[list[tuple[int, tuple[float, ...]]]] = []
    for k in uniq.tolist():
        digits = []
        for base in reversed(bases):
            digits.append(k % base)
            k //= base
        last, split, vpp, pp = digits
        held = stage_layers(kinds, pp, vpp, split, last, megatron_units(w.model))
        shares = [_shares(kinds, h, bool(w.model.pattern)) for h in held]
        chosen = [(0, shares[0]), (pp - 1, shares[pp - 1])]
        # a stage between the ends of the first stage's mix holds less than the first
        # (fewer micro-batches in flight, no embedding); the last's mix, more in flight
        seen = {shares[0]}
        for r in range(1, pp - 1):
            if held[r] and shares[r] not in seen:
                seen.add(shares[r])
                chosen.append((r, shares[r]))
        per_placement.append(chosen)
    count = max(len(c) for c in per_placement)
    inv = inverse.ravel()
    out = []
    for j in range(count):
        rows = [c[j] if j < len(c) else c[0] for c in per_placement]
        rank = np.array([r for r, _ in rows], dtype=np.int64)[inv]
        table = np.array([s for _, s in rows], dtype=np.float64)[inv]
        mix = StageMix(*(table[:, i] for i in range(len(KINDS))))
        out.append(StageCandidate(rank=rank, mix=mix))
    return out
