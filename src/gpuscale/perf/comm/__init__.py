"""Collective communication cost on a cluster fabric (NCCL-like algorithm choice).

``from gpuscale.perf.comm import Fabric, collective_time_s, estimate`` is the contract;
:mod:`.nccl` holds NCCL's published constants, :mod:`.fabric` the group placement,
:mod:`.algorithms` the per-algorithm alpha-beta costs, :mod:`.model` the choice, :mod:`.moe`
expert-parallel token dispatch, :mod:`.distinct` each distinct (size, group, placement)
costed once for many plans.
"""

from __future__ import annotations

from gpuscale.perf.comm.algorithms import ALGORITHMS
from gpuscale.perf.comm.fabric import Fabric, FloatArray, Placement, place
from gpuscale.perf.comm.model import (
    OPS,
    CommEstimate,
    busbw_factor,
    bytes_per_rank,
    check_op,
    collective_time_s,
    estimate,
)
from gpuscale.perf.comm.moe import EP_DISPATCH, domains_hit, moe_dispatch_time_s
from gpuscale.perf.comm.nccl import PROTOCOLS

__all__ = [
    "ALGORITHMS",
    "EP_DISPATCH",
    "OPS",
    "PROTOCOLS",
    "CommEstimate",
    "Fabric",
    "FloatArray",
    "Placement",
    "busbw_factor",
    "bytes_per_rank",
    "check_op",
    "collective_time_s",
    "domains_hit",
    "estimate",
    "moe_dispatch_time_s",
    "place",
]
