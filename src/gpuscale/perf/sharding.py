"""Hybrid sharding: over how many ranks a plan's sharded states are spread, and how many
copies of them are kept (PyTorch FSDP's HYBRID_SHARD, Megatron's distributed-optimizer
instances)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscale.perf.plan import FloatArrayT, Plans, Workload, shard_group_of


@dataclass(frozen=True)
class ShardGroups:
    """Over how many ranks each plan's sharded states are spread, and how many copies of
    them are kept: dense parameters over ``dense`` of the DP x CP ranks, expert parameters
    over ``expert`` of their expert-data-parallel ranks (DP x CP x TP / EP), each replicated
    ``dense_replicas`` / ``expert_replicas`` times (1 without hybrid sharding)."""

    dense: FloatArrayT
    expert: FloatArrayT
    dense_replicas: FloatArrayT
    expert_replicas: FloatArrayT

    @classmethod
    def of(cls, w: Workload, p: Plans) -> ShardGroups:
        d = (p.dp * p.cp).astype(np.float64)
        d_exp = np.maximum(d * p.tp / p.ep, 1.0)
        sg = shard_group_of(w, p).astype(np.float64)
        g = np.where(sg > 0, np.minimum(d, sg), d)
        # as Megatron's distributed-optimizer instances, the replicas split the expert
        # ranks too: each holds d_exp / replicas of them (at least one)
        g_exp = np.maximum(d_exp / (d / g), 1.0)
        return cls(g, g_exp, d / g, d_exp / g_exp)
