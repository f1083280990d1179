"""Collective communication cost: the one module every model asks for collective times.

A collective over a group of ``n`` GPUs is costed with an alpha-beta model per level of
the fabric: inside an NVLink/NVSwitch domain (scale-up) and across the scale-out network.
Sizes follow nccl-tests' conventions (``size`` is the per-rank buffer for all-reduce,
broadcast, reduce and send/recv; the *total* gathered/scattered buffer for all-gather and
reduce-scatter; the per-rank send buffer for all-to-all), and so do algbw = size / time and
busbw = algbw x factor (nccl-tests doc/PERFORMANCE.md).

Everything is vectorised: ``size_bytes`` and ``n`` may be NumPy arrays of any matching
shape, so a search evaluates many (op, size, group) points in one call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from gpuscale.calibrate import Calibration
from gpuscale.catalog import System
from gpuscale.errors import InputError

OPS: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "all_to_all",
    "send_recv",
)

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Fabric:
    """What the collective model needs to know of a cluster (SI units, per GPU, one way)."""

    domain_gpus: int
    """GPUs in one scale-up (NVLink) domain: 8 for an HGX node, 72 for an NVL72 rack."""
    gpus_per_node: int
    scaleup_bw_Bps: float
    """Per-GPU scale-up bandwidth, one direction."""
    nic_bw_Bps_per_gpu: float
    """Scale-out injection bandwidth per GPU, one direction (node NICs / GPUs per node)."""
    nvls: bool = False
    """In-switch reduction (NVLink SHARP) available in the scale-up domain."""
    total_gpus: int = 1 << 30
    """GPUs in the cluster (groups larger than this are rejected)."""
    leaf_gpus: int = 1 << 30
    """GPUs below one leaf / scalable-unit group, i.e. under the non-oversubscribed tier."""
    oversubscription: float = 1.0
    """Down:up bandwidth ratio of the tier above ``leaf_gpus`` (1 = non-blocking)."""

    @classmethod
    def from_system(cls, system: System, total_gpus: int = 1 << 30) -> Fabric:
        return cls(
            domain_gpus=system.nvlink_domain_gpus if system.nvlink_domain_gpus > 1 else 1,
            gpus_per_node=system.gpus_per_node,
            scaleup_bw_Bps=system.scaleup_bw_Bps,
            nic_bw_Bps_per_gpu=system.nic_bw_Bps_per_gpu,
            nvls=system.nvls,
            total_gpus=total_gpus,
        )


def check_op(op: str) -> None:
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


def _steps(op: str, n: FloatArray) -> FloatArray:
    """Latency steps of the ring (or pairwise) algorithm."""
    if op == "all_reduce":
        return 2.0 * (n - 1.0)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return n - 1.0
    if op in ("broadcast", "reduce"):
        return np.ceil(np.log2(np.maximum(n, 2.0)))
    return np.ones_like(n)


def collective_time_s(
    op: str,
    size_bytes: ArrayLike,
    n: ArrayLike,
    fabric: Fabric,
    cal: Calibration,
    members_per_domain: ArrayLike | None = None,
) -> FloatArray:
    """Time of one collective of ``size_bytes`` over groups of ``n`` GPUs.

    ``members_per_domain`` is how many of the group's GPUs share one scale-up domain
    (default: as many as fit, i.e. the group is packed). A group spread one GPU per node
    (e.g. data parallel behind TP = 8) has ``members_per_domain = 1`` and moves every byte
    over its own NIC; a packed group across nodes runs hierarchically and its scale-out
    bandwidth is ``members_per_domain`` NICs' worth.
    """
    check_op(op)
    nn = np.asarray(n, dtype=np.float64)
    size = np.asarray(size_bytes, dtype=np.float64)
    if members_per_domain is None:
        k = np.minimum(nn, float(fabric.domain_gpus))
    else:
        k = np.minimum(np.asarray(members_per_domain, dtype=np.float64), nn)
    k = np.maximum(k, 1.0)
    intra = nn <= k
    up_bw = fabric.scaleup_bw_Bps * cal.scaleup_eff
    if fabric.domain_gpus <= 1:
        # no NVLink: GPUs in a node talk over PCIe (scaleup_bw is the PCIe figure)
        up_bw = fabric.scaleup_bw_Bps * cal.scaleup_eff
    net_bw = fabric.nic_bw_Bps_per_gpu * cal.scaleout_eff
    # a group that spans the oversubscribed tier shares its uplinks
    span = nn / k * np.minimum(k, float(fabric.gpus_per_node))
    net_bw_eff = np.where(span > fabric.leaf_gpus, net_bw / fabric.oversubscription, net_bw)
    factor = busbw_factor(op, nn)
    steps = _steps(op, nn)
    if op == "all_to_all":
        # intra-domain share over NVLink, the rest over this GPU's NIC, in parallel
        t_up = size * (k - 1.0) / nn / up_bw
        t_net = size * (nn - k) / nn / net_bw_eff
        bw_time = np.maximum(t_up, t_net)
    else:
        cross_bw = np.minimum(up_bw, k * net_bw_eff)
        bw = np.where(intra, up_bw, cross_bw)
        bw_time = size * factor / bw
    lat = np.where(intra, cal.scaleup_latency_s, cal.scaleout_latency_s)
    t = steps * lat + bw_time
    return np.where(nn <= 1.0, 0.0, t)
