"""Parameters one GPU of a pipeline stage holds: its layers' dense parameters split by TP,
its routed experts by EP, the embedding or output layer on the stages at the ends, the MTP
depths' weights spread over the stages; for the stage of each kind of layers that may hold the most
(:mod:`gpuscale.perf.stage_kinds`)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from gpuscale.perf.plan import FloatArrayT, Plans, Workload
from gpuscale.perf.stage_kinds import AVERAGE, StageCandidate, StageMix, stage_candidates, uniform
from gpuscale.perf.stages import Stages, pipeline_stages
from gpuscale.perf.transformer import (
    attn_weights,
    embedding_params,
    layer_shapes,
    mixer_extra_weights,
    mtp_param_count,
)

FloatArray = FloatArrayT


def params_per_gpu(
    w: Workload,
    p: Plans,
    mix: StageMix = AVERAGE,
    ends: NDArray[np.bool_] | bool = True,
    layers: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(dense, expert, per_layer_dense) parameters held by one GPU of a pipeline stage of
    ``layers`` layers (default: the fullest stage's) of the kinds ``mix`` gives (default: the
    model's average layer; :mod:`gpuscale.perf.stage_kinds`).

    Dense parameters are split by TP, routed experts by EP (expert TP = 1). The first
    stage also holds the input embedding, the last the output layer (or, tied, a copy of
    the embedding): the same parameter count, on a stage where ``ends``. The MTP layers run
    on the last stage; their weights are spread over the stages here, 1 / pp each. The
    stages' activations differ: :func:`memory_breakdown` prices the fullest stage.
    """
    m = w.model
    s = layer_shapes(m)
    tp = p.tp.astype(np.float64)
    layers_stage = pipeline_stages(w, p).fullest if layers is None else layers
    moe_frac = m.moe_layers / m.layers * mix.moe
    split = (
        attn_weights(m) * mix.attn
        + m.mlp_layers * s.mlp_dense * mix.mlp
        + m.moe_layers * (s.shared + s.latent_proj) * mix.moe
        + m.mamba_layers * s.mamba * mix.mamba
    ) / m.layers
    # DSA indexers (DeepSeek-V4's compressors and hyper-connections too) are whole on every
    # TP rank, as the router
    indexers = mixer_extra_weights(m) / m.layers
    dense_per_layer = split / tp + s.norms + moe_frac * s.router + indexers
    expert_per_layer = moe_frac * m.num_experts * s.expert / p.ep
    emb_stage = embedding_on_stage(w, p, ends)
    # MTP layers: on the one stage, or spread over the stages (1 / pp each): they run on
    # the last (perf/stages.py), whose weights this spreads, an approximation
    mtp_dense = mtp_param_count(m, experts=0)
    mtp_expert = mtp_param_count(m) - mtp_dense
    dense = layers_stage * dense_per_layer + emb_stage + mtp_dense / (tp * p.pp)
    expert = layers_stage * expert_per_layer + mtp_expert / (p.ep * p.pp)
    return dense, expert, dense_per_layer + expert_per_layer


def embedding_on_stage(w: Workload, p: Plans, ends: NDArray[np.bool_] | bool = True) -> FloatArray:
    """Embedding (or output-layer) parameters one GPU of a stage holds: the whole table
    without a pipeline, else half of the two (the input embedding on the first stage, the
    output layer on the last; a tied table's copy on each), split by TP; none on a stage
    between (``ends`` False)."""
    m = w.model
    emb = embedding_params(m)
    out: FloatArray = np.where(p.pp == 1, emb, emb / (1 if m.tied_embeddings else 2)) / p.tp
    if ends is not True:
        out = np.where(ends, out, 0.0)
    return out


def stage_param_sets(w: Workload, p: Plans) -> list[tuple[FloatArray, FloatArray]]:
    """(dense, expert) parameters of each stage that may be the slowest to reduce its
    gradients: the first for a model whose layers are all alike, else every one of
    :func:`~gpuscale.perf.stage_kinds.stage_candidates`."""
    if uniform(w):
        dense, expert, _ = params_per_gpu(w, p)
        return [(dense, expert)]
    return [candidate_params(w, p, c)[:2] for c in stage_candidates(w, p)]


def heaviest_stage_params(w: Workload, p: Plans) -> tuple[FloatArray, FloatArray]:
    """(dense, expert) parameters of the stage that holds the most, of
    :func:`stage_param_sets` (a pass over every parameter takes longest there)."""
    sets = stage_param_sets(w, p)
    dense, expert = sets[0]
    for d, e in sets[1:]:
        more = d + e > dense + expert
        dense, expert = np.where(more, d, dense), np.where(more, e, expert)
    return dense, expert


def candidate_params(
    w: Workload, p: Plans, c: StageCandidate
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """:func:`params_per_gpu` of a candidate stage of :func:`candidate_layers` layers, the
    embedding or output layer on the first and the last."""
    if c.mix is AVERAGE:
        return params_per_gpu(w, p)
    return params_per_gpu(w, p, c.mix, _ends(p, c), candidate_layers(p, c, pipeline_stages(w, p)))


def candidate_embedding(w: Workload, p: Plans, c: StageCandidate) -> FloatArray:
    """The embedding or output-layer parameters of a candidate stage's
    :func:`candidate_params` (:func:`embedding_on_stage`)."""
    return embedding_on_stage(w, p, _ends(p, c))


def _ends(p: Plans, c: StageCandidate) -> NDArray[np.bool_] | bool:
    """Whether a candidate stage is the first or the last (an average stage prices both)."""
    return True if c.mix is AVERAGE else (c.rank == 0) | (c.rank == p.pp - 1)


def candidate_layers(p: Plans, c: StageCandidate, st: Stages) -> FloatArray:
    """Layers of a candidate stage of the stages ``st``: the last stage its own, every other
    the fullest stage's (the first's in memory; one between them the step's upper bound
    where the chunks are uneven)."""
    out: FloatArray = np.where((c.rank == p.pp - 1) & (c.rank > 0), st.last, st.fullest)
    return out
