"""Collective cost: the one entry point every model asks for collective times.

Sizes follow nccl-tests' conventions (``size`` is the per-rank buffer for all-reduce,
broadcast, reduce and send/recv; the *total* gathered/scattered buffer for all-gather and
reduce-scatter; the per-rank send buffer for all-to-all), and so do algbw = size / time and
busbw = algbw x factor (nccl-tests doc/PERFORMANCE.md).

For every point the model costs each (algorithm, protocol) NCCL could run there (see
:mod:`.algorithms`) and keeps the fastest, as NCCL's tuner does. Everything is vectorised:
``size_bytes``, ``n`` and ``members_per_domain`` broadcast to one shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from gpuscale.calibrate import Calibration
from gpuscale.errors import InputError
from gpuscale.perf.comm.algorithms import ALGORITHMS, CANDIDATES
from gpuscale.perf.comm.fabric import Fabric, FloatArray, place
from gpuscale.perf.comm.nccl import PROTOCOLS

OPS: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "all_to_all",
    "send_recv",
)


def check_op(op: str) -> None:
    """Refuses an ``op`` that is not one of :data:`OPS`, with an error listing them."""
    if op not in OPS:
        raise InputError("op", op, f"one of {', '.join(OPS)}")


def busbw_factor(op: str, n: ArrayLike) -> FloatArray:
    """nccl-tests bus-bandwidth factor: busbw = algbw x factor."""
    check_op(op)
    nn = np.asarray(n, dtype=np.float64)
    if op == "all_reduce":
        return 2.0 * (nn - 1.0) / nn
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (nn - 1.0) / nn
    return np.ones_like(nn)


def bytes_per_rank(op: str, size_bytes: ArrayLike, n: ArrayLike) -> FloatArray:
    """Bytes each rank sends (and receives) with a bandwidth-optimal algorithm."""
    return np.asarray(size_bytes, dtype=np.float64) * busbw_factor(op, n)


@dataclass(frozen=True)
class CommEstimate:
    """Per-point prediction with its breakdown (arrays of one shape)."""

    op: str
    size_bytes: FloatArray
    n: FloatArray
    time_s: FloatArray
    latency_s: FloatArray
    """The alpha part of ``time_s`` (base + per-hop latencies)."""
    bandwidth_s: FloatArray
    """The beta part of ``time_s`` (bytes over the bottleneck bandwidth)."""
    algbw_Bps: FloatArray
    busbw_Bps: FloatArray
    algorithm_idx: NDArray[np.int64]
    protocol_idx: NDArray[np.int64]
    members_per_domain: FloatArray
    domains: FloatArray

    @property
    def algorithm(self) -> NDArray[np.str_]:
        return np.asarray(ALGORITHMS)[self.algorithm_idx]

    @property
    def protocol(self) -> NDArray[np.str_]:
        return np.asarray(PROTOCOLS)[self.protocol_idx]


def group_arrays(
    size_bytes: ArrayLike, n: ArrayLike, members_per_domain: ArrayLike | None, fabric: Fabric
) -> tuple[FloatArray, FloatArray, FloatArray | None]:
    """Byte counts, group sizes and members per domain as float arrays of one shape, each
    group of 1 to the cluster's GPUs and each byte count 0 or more, else an error naming the
    first bad value."""
    arrays = [np.asarray(size_bytes, dtype=np.float64), np.asarray(n, dtype=np.float64)]
    if members_per_domain is not None:
        arrays.append(np.asarray(members_per_domain, dtype=np.float64))
    size, nn, *kk = np.broadcast_arrays(*arrays)
    if np.any(nn < 1.0):
        raise InputError("n", float(nn.min()), "a group of at least 1 GPU")
    if np.any(nn > fabric.total_gpus):
        raise InputError("gpus", float(nn.max()), f"at most the cluster's {fabric.total_gpus} GPUs")
    if np.any(size < 0.0):
        raise InputError("size_bytes", float(size.min()), "a non-negative byte count")
    return size, nn, (kk[0] if kk else None)


def estimate(
    op: str,
    size_bytes: ArrayLike,
    n: ArrayLike,
    fabric: Fabric,
    cal: Calibration,
    members_per_domain: ArrayLike | None = None,
    algorithm: str | None = None,
    concurrent: bool = False,
) -> CommEstimate:
    """Time, algbw and busbw of one collective per point, with the chosen algorithm.

    ``members_per_domain`` is how many of the group's GPUs share one scale-up domain
    (default: the group spread evenly over as few domains as hold it). A data-parallel
    group behind TP = 8 has ``members_per_domain = 1`` and moves every byte over its own
    NIC. ``algorithm`` forces one (like ``NCCL_ALGO``): ring, tree, nvls, nvls_tree, pat, p2p.
    ``concurrent``: every GPU of a node runs such a group at once (training), so a group
    with fewer members per node than GPUs does not get spare NICs (see :func:`.fabric.place`).
    """
    check_op(op)
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise InputError("algorithm", algorithm, f"one of {', '.join(ALGORITHMS)}")
    size, nn, kk = group_arrays(size_bytes, n, members_per_domain, fabric)
    pl = place(fabric, cal, nn, kk, concurrent)
    cands = CANDIDATES[op](size, pl, fabric, cal)
    if algorithm is not None:
        cands = [c for c in cands if c[0] == algorithm]
        if not cands:
            valid = sorted({c[0] for c in CANDIDATES[op](size, pl, fabric, cal)})
            raise InputError("algorithm", algorithm, f"{op} runs here on {', '.join(valid)}")
    lat = np.stack([np.broadcast_to(c[2], size.shape) for c in cands])
    bw = np.stack([np.broadcast_to(c[3], size.shape) for c in cands])
    total = lat + bw
    best = np.argmin(total, axis=0)
    pick = np.take_along_axis(total, best[None], axis=0)[0]
    if algorithm is not None and not np.all(np.isfinite(pick)):
        raise InputError("algorithm", algorithm, f"not available to {op} for every group here")
    # paid once by every algorithm that crosses the network, so it does not change the choice
    lat_s = np.take_along_axis(lat, best[None], axis=0)[0] + np.where(
        pl.m > 1.0, cal.scaleout_call_latency_s, 0.0
    )
    pick = lat_s + np.take_along_axis(bw, best[None], axis=0)[0]
    bw_s = np.take_along_axis(bw, best[None], axis=0)[0]
    single = nn <= 1.0
    t = np.where(single, 0.0, pick)
    algo_of = np.array([ALGORITHMS.index(c[0]) for c in cands], dtype=np.int64)
    proto_of = np.array([c[1] for c in cands], dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(t > 0.0, size / t, 0.0)
    return CommEstimate(
        op=op,
        size_bytes=size,
        n=nn,
        time_s=t,
        latency_s=np.where(single, 0.0, lat_s),
        bandwidth_s=np.where(single, 0.0, bw_s),
        algbw_Bps=algbw,
        busbw_Bps=algbw * busbw_factor(op, nn),
        algorithm_idx=algo_of[best],
        protocol_idx=proto_of[best],
        members_per_domain=pl.k,
        domains=pl.m,
    )


def collective_time_s(
    op: str,
    size_bytes: ArrayLike,
    n: ArrayLike,
    fabric: Fabric,
    cal: Calibration,
    members_per_domain: ArrayLike | None = None,
    concurrent: bool = False,
) -> FloatArray:
    """Time of one collective of ``size_bytes`` over groups of ``n`` GPUs (see :func:`estimate`)."""
    return estimate(
        op, size_bytes, n, fabric, cal, members_per_domain, concurrent=concurrent
    ).time_s
