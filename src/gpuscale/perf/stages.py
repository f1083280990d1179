"""Which layers each pipeline stage holds, and so which stage sets the pipeline's pace.

A pipeline runs at the speed of its slowest stage: every micro-batch crosses every stage,
and the bubble is that stage's time (p - 1) / v times over. The last stage also runs the
output layer and the loss, worth several layers for a small model with a large vocabulary
(nanotron's 1B: 2 V h / layer = 3.6 layers' forward FLOPs), a fraction of one for a large
model (Llama 3.1 405B: 0.63 at sequence 8,192).

Three placements (:data:`gpuscale.perf.plan.PP_SPLITS`):

- ``even``: L / (pp vpp) layers in every virtual chunk, the output layer beside the last
  stage's layers (Megatron-LM's default, torchtitan's even split); where they do not
  divide, as :func:`even_chunks` places them, the last stage holding fewer. The fullest
  stage sets the memory, with the first stage's in-flight micro-batches, and the pace,
  unless the last one's layers and output layer take longer.
- ``account``: the embedding and the loss each take a layer's place, (L + 2) / (pp vpp)
  places a chunk: the first stage holds one layer fewer beside the embedding, the last one
  fewer beside the output layer (Megatron-Core's ``account_for_embedding_in_pipeline_split``
  and ``account_for_loss_in_pipeline_split``, which assert that L + 2 divides into the
  chunks; Megatron-DeepSpeed's ``type:transformer|embedding`` partition).
- ``balanced``: the stages' forward FLOPs as even as whole layers allow, the output layer
  counted as its FLOPs in layers (``head_layers``; 3/4 of that under full recomputation,
  which runs each layer's forward twice): the last stage holds k layers and the
  output layer, the other p - 1 stages ceil((L - k) / (p - 1)) at most, with k minimising
  the larger of the two. nanotron balances its stages by compute cost (with a greedy
  threshold rule on its own cost estimate, which this min-max split approximates); a
  Megatron-Core ``pipeline_model_parallel_layout`` or ``decoder_first/last_pipeline_num_
  layers`` can do it by hand. Priced stage by stage, for pipelines without interleaving
  (``validity.placement_ok``). FLOPs are not time: a layer's recomputation, TP
  communication and fixed costs, which the output layer has not, can make a balanced plan
  slower than an even one; the step prices what each placement costs, and the search,
  which tries a balanced plan beside its even twin, keeps the faster.

The memory model takes the fullest stage without the output layer as the first stage
(``Stages.fullest``; under ``account`` the first stage itself holds one layer fewer and the
embedding, under ``balanced`` the fuller stages may sit later, where fewer micro-batches
are in flight: a bound either way).

Multi-token-prediction depths run on the last stage with the loss in all three, as
Megatron-Core places them (``mtp_num_layers`` builds them in the last stage's model chunk;
its layouts end ``...mL``): the last stage's load beside its layers is the output layer,
each depth's head and the depths themselves, in layers. Their weights are counted 1 / pp
on every stage (:func:`~gpuscale.perf.stage_params.params_per_gpu`), a memory
approximation of a few percent of a stage.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from gpuscale.catalog import Model
from gpuscale.perf.plan import PP_SPLITS, RECOMPUTE, FloatArrayT, Plans, Workload
from gpuscale.perf.transformer import (
    forward_flops_per_token,
    mtp_forward_flops_per_token,
    mtp_layer_equivalents,
)


def megatron_units(m: Model) -> int:
    """gpuscale's layers (blocks of a hybrid pattern) per Megatron-LM layer: 2 for a Gated
    DeltaNet model, which Megatron-LM builds of transformer layers each holding a mixer and
    an MLP, else 1 (Megatron's hybrid Mamba layers are single blocks). A pipeline places
    whole Megatron layers, so the splits count in them."""
    return 2 if m.gated_deltanet and m.hybrid and m.layers % 2 == 0 else 1


def placed_layers(m: Model) -> int:
    """The layers a pipeline places: Megatron-LM's (:func:`megatron_units` blocks each)."""
    return m.layers // megatron_units(m)


def even_chunks(layers: int, pp: int, vpp: int) -> list[int]:
    """Layers on each of the pp x vpp pipeline chunks under the even split, in the model's
    order (chunk k runs on stage k mod pp): ceil(L / (pp vpp)) each where they divide.
    Otherwise, without interleaving, Megatron-LM's own uneven split (``--decoder-last-
    pipeline-num-layers``): ceil(L / pp) on every stage but the last, which holds the rest
    (when at least one is left); with interleaving, which Megatron runs uneven only through
    a ``--pipeline-model-parallel-layout``, c = ceil(L / (pp vpp)) on the first chunks and
    c - 1 on the others, so that no stage holds more than (c - 1) vpp + ceil(full / pp)
    (``full`` chunks of c), what :meth:`~gpuscale.perf.plan.Plans.stage_layers` prices."""
    n = pp * vpp
    c = -(-layers // n)
    rest = layers - (n - 1) * c
    if vpp == 1 and rest >= 1:
        return [c] * (n - 1) + [rest]
    full = layers - n * (c - 1)  # chunks holding c layers; the others c - 1
    return [c] * full + [c - 1] * (n - full)


def balanced_chunks(layers: int, pp: int, last: int) -> list[int]:
    """Layers on each stage of a balanced pipeline (no interleaving) whose last stage holds
    ``last`` beside the output layer: the others share the rest, ceil of their share on the
    first ones and one fewer on the others."""
    body = layers - last
    c = -(-body // (pp - 1))
    full = body - (pp - 1) * (c - 1)  # stages holding c layers; the others c - 1
    return [*[c] * full, *[c - 1] * (pp - 1 - full), last]


def chunk_sizes(layers: int, pp: int, vpp: int, split: int, last: int, units: int) -> list[int]:
    """Blocks on each of the pp x vpp pipeline chunks, in the model's order, as the plan's
    ``split`` (an index into :data:`~gpuscale.perf.plan.PP_SPLITS`) places whole Megatron
    layers of ``units`` blocks: :func:`even_chunks`; the account split's (L + 2) / (pp vpp)
    places a chunk, the embedding taking one on the first, the loss one on the last;
    :func:`balanced_chunks` beside the ``last`` blocks with the output layer. What the step
    and the memory price, and the layout the exported Megatron-LM arguments give."""
    n = layers // units
    if split == PP_SPLITS.index("balanced"):
        sizes = balanced_chunks(n, pp, last // units)
    elif split == PP_SPLITS.index("account"):
        c = (n + 2) // (pp * vpp)  # validity keeps L + 2 a multiple of pp x vpp
        sizes = [c - 1, *[c] * (pp * vpp - 2), c - 1]
    else:
        sizes = even_chunks(n, pp, vpp)
    return [units * k for k in sizes]


@dataclass(frozen=True)
class Stages:
    """Layers per pipeline stage, one array element per plan (whole layers)."""

    fullest: FloatArrayT
    """Layers of the fullest stage without the output layer, priced as the first stage (the
    one that holds the most micro-batches in flight)."""
    last: FloatArrayT
    """Layers beside the output layer on the last stage (all of them without a pipeline)."""
    slowest: FloatArrayT
    """Layers on the stage that sets the pipeline's pace."""
    head: FloatArrayT
    """1 where that stage runs the output layer and the loss (and the MTP depths), else 0."""

    def at(self, i: int) -> Stages:
        """Plan ``i``'s stages alone (arrays of one element)."""
        return Stages(*(getattr(self, f.name)[i : i + 1] for f in fields(self)))


def head_layers(w: Workload) -> float:
    """The output layer's forward FLOPs per token in units of an average layer's: 2 V h
    over (model forward FLOPs - MTP depths - output layer) / L."""
    m = w.model
    head = 2.0 * m.vocab * m.hidden
    body = forward_flops_per_token(m, w.seq_len) - mtp_forward_flops_per_token(m, w.seq_len)
    return head / ((body - head) / m.layers)


def pipeline_stages(w: Workload, p: Plans) -> Stages:
    """The layers of the fullest, last and slowest stage of each plan, placed as the plan's
    ``split`` says (:data:`gpuscale.perf.plan.PP_SPLITS`)."""
    layers = w.model.layers
    # every split places whole Megatron layers (units blocks each)
    units = megatron_units(w.model)
    even_layers = units * p.stage_layers(layers // units)
    even_last = units * p.last_stage_layers(layers // units)
    placed = (p.split != PP_SPLITS.index("even")) & (p.pp > 1)
    if not placed.any() and (even_last == even_layers).all():
        # every stage alike: the last, with the output layer, sets the pace
        return Stages(even_layers, even_layers, even_layers, np.ones(len(p)))
    # the output layer in layers: its forward FLOPs, against a layer's forward, backward and,
    # under full recomputation, its forward again (4/3 of what its FLOPs say; the output
    # layer is not recomputed)
    # The multi-token-prediction depths and their heads run beside it on the last stage
    # (Megatron-Core's layouts place "m" before "L"; recomputed as the layers are)
    mtp = w.model.mtp_layers
    head = head_layers(w) * (1.0 + mtp)
    r = head / np.where(p.recompute == RECOMPUTE.index("full"), 4.0 / 3.0, 1.0)
    r = r + mtp_layer_equivalents(w.model, w.seq_len)
    # even: where the layers do not divide, the last stage holds fewer beside the output
    # layer (where they do, it holds as many and sets the pace)
    even = _placed(even_layers, even_last, r)
    pp = p.pp.astype(np.float64)
    # account: chunks of (L + 2) / (pp vpp) places, the embedding taking one on the first
    # stage and the loss one on the last (validity refuses plans whose chunks L + 2 does
    # not divide; rounded up here so that they still price)
    c = units * np.ceil((layers // units + 2.0) / (pp * p.vpp)) * p.vpp
    ends = np.minimum(c - units, layers)  # the first and the last stage's layers
    account = _placed(np.where(pp > 2, c, ends), ends, r)
    # balanced: the balance point k* = (L - (p - 1) r) / p, then the whole k around it that
    # gives the least load (ties: the larger k, fewer layers on the other stages), in
    # Megatron layers (the output layer's r blocks are r / units of them)
    n, r_m = layers // units, r / units
    others = np.maximum(pp - 1.0, 1.0)
    k0 = np.floor((n - (pp - 1.0) * r_m) / pp)
    top = np.maximum(n - (pp - 1.0), 0.0)  # every other stage keeps a layer
    best_k = np.zeros(len(p))
    best_load = np.full(len(p), np.inf)
    for dk in (-1.0, 0.0, 1.0, 2.0):
        k = np.clip(k0 + dk, 0.0, top)
        load = np.maximum(k + r_m, np.ceil((n - k) / others))
        better = load <= best_load
        best_k = np.where(better, k, best_k)
        best_load = np.where(better, load, best_load)
    balanced = _placed(units * np.ceil((n - best_k) / others), units * best_k, r)
    is_account = placed & (p.split == PP_SPLITS.index("account"))
    is_balanced = placed & (p.split == PP_SPLITS.index("balanced"))

    def pick(name: str) -> FloatArrayT:
        out: FloatArrayT = np.select(
            [is_account, is_balanced],
            [getattr(account, name), getattr(balanced, name)],
            default=getattr(even, name),
        )
        return out

    return Stages(
        fullest=pick("fullest"), last=pick("last"), slowest=pick("slowest"), head=pick("head")
    )


def _placed(fullest: FloatArrayT, last: FloatArrayT, r: FloatArrayT) -> Stages:
    """The stages of pipelines whose fullest stage without the output layer holds
    ``fullest`` layers and whose last stage ``last`` beside the output layer (``r``
    layers' FLOPs): the slower of the two by FLOPs sets the pace, a first guess the step
    model settles in time (:func:`~gpuscale.perf.step.step_breakdown`)."""
    head_on = last + r >= fullest
    return Stages(
        fullest=fullest,
        last=last,
        slowest=np.where(head_on, last, fullest),
        head=head_on.astype(np.float64),
    )
