"""The fabric as the collective model sees it, and where a group of GPUs sits on it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from gpuscale.calibrate import Calibration
from gpuscale.catalog import System
from gpuscale.errors import InputError
from gpuscale.perf.comm.nccl import NET_OVERHEAD_S, nvls_efficiency

FloatArray = NDArray[np.float64]

TRANSPORTS: tuple[str, ...] = ("ib", "roce", "efa")


@dataclass(frozen=True)
class Fabric:
    """What the collective model needs to know of a cluster (SI units, per GPU, one way)."""

    domain_gpus: int
    """GPUs in one scale-up (NVLink) domain: 8 for an HGX node, 72 for an NVL72 rack."""
    gpus_per_node: int
    scaleup_bw_Bps: float
    """Per-GPU scale-up bandwidth, one direction (the PCIe figure where there is no NVLink)."""
    nic_bw_Bps_per_gpu: float
    """Scale-out injection bandwidth per GPU, one direction (node NICs / GPUs per node)."""
    nvls: bool = False
    """In-switch reduction (NVLink SHARP) available in the scale-up domain."""
    scaleup_mesh: bool = False
    """Scale-up by direct GPU-to-GPU links (a full mesh: AMD Infinity Fabric, GH200 NVLink):
    a group of k GPUs in the domain gets k - 1 of each GPU's domain - 1 links, not the whole
    rate."""
    total_gpus: int = 1 << 30
    """GPUs in the cluster (groups larger than this are rejected)."""
    leaf_gpus: int = 1 << 30
    """GPUs below one leaf / scalable-unit group, i.e. under the non-oversubscribed tier."""
    oversubscription: float = 1.0
    """Down:up bandwidth ratio of the tier above ``leaf_gpus`` (1 = non-blocking)."""
    nics_per_node: int = 0
    """Scale-out NICs (ports) per node; 0 = one per GPU. Fewer NICs than GPUs are shared."""
    nvls_efficiency: float = 0.85
    """NCCL's nvlsEfficiency of the GPU generation (Hopper 0.85, Blackwell 0.74)."""
    transport: str = "ib"
    """Scale-out transport: ib, roce (same latency class) or efa (AWS SRD, higher latency)."""
    net_overhead_s: float = NET_OVERHEAD_S["intel"]
    """NCCL's per-step network proxy overhead on the hosts' CPUs (1 us Intel/ARM, 2 us AMD)."""

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise InputError("transport", self.transport, f"one of {', '.join(TRANSPORTS)}")

    @classmethod
    def from_system(cls, system: System, total_gpus: int = 1 << 30) -> Fabric:
        return cls(
            domain_gpus=system.nvlink_domain_gpus if system.nvlink_domain_gpus > 1 else 1,
            gpus_per_node=system.gpus_per_node,
            scaleup_bw_Bps=system.scaleup_bw_Bps,
            nic_bw_Bps_per_gpu=system.nic_bw_Bps_per_gpu,
            nvls=system.nvls,
            scaleup_mesh=system.scaleup_mesh,
            total_gpus=total_gpus,
            nics_per_node=system.nics_per_node,
            nvls_efficiency=nvls_efficiency(system.gpu),
            net_overhead_s=NET_OVERHEAD_S[system.host_cpu],
        )

    @property
    def scaleup_domain_gpus(self) -> int:
        """GPUs that talk without the NIC: the NVLink domain, at least one node (PCIe)."""
        return max(self.domain_gpus, self.gpus_per_node)

    @property
    def intra_path(self) -> str:
        return "nvlink" if self.domain_gpus > 1 else "pci"


@dataclass(frozen=True)
class Placement:
    """Where a group sits and what each member gets (arrays broadcast to one shape)."""

    n: FloatArray
    """Ranks in the group."""
    k: FloatArray
    """Members per scale-up domain."""
    m: FloatArray
    """Scale-up domains spanned."""
    up_Bps: FloatArray
    """Achieved per-GPU scale-up bandwidth (one direction)."""
    net_Bps: FloatArray
    """Achieved per-member scale-out bandwidth after NIC sharing and oversubscription."""
    net_one_nic_Bps: FloatArray
    """Per-member bandwidth when a rank cannot stripe over several NICs (all-to-all, p2p)."""


def place(
    fabric: Fabric,
    cal: Calibration,
    n: ArrayLike,
    members_per_domain: ArrayLike | None,
    concurrent: bool = False,
) -> Placement:
    """Group geometry: balanced over domains by default (two racks of 64 for 128 ranks).

    ``concurrent``: every GPU of a node runs a group like this one at the same time, as in
    training, where each tensor/pipeline rank has its own data-parallel group. The node's
    NICs are then shared by all its GPUs, whatever a single group's members per node.
    """
    nn = np.asarray(n, dtype=np.float64)
    dom = float(fabric.scaleup_domain_gpus)
    if members_per_domain is None:
        m = np.ceil(nn / dom)
        k = np.ceil(nn / np.maximum(m, 1.0))
    else:
        k = np.clip(np.asarray(members_per_domain, dtype=np.float64), 1.0, None)
        k = np.minimum(np.minimum(k, nn), dom)
        k = np.maximum(k, 1.0)
        m = np.ceil(nn / k - 1e-9)
    m = np.maximum(m, 1.0)
    g = float(fabric.gpus_per_node)
    k_node = np.minimum(k, g)
    nics = float(fabric.nics_per_node or fabric.gpus_per_node)
    node_total = fabric.nic_bw_Bps_per_gpu * g
    # members of one node stripe over the NICs they can reach; a lone member still gets a
    # whole NIC where NICs are fewer than GPUs (NCCL PXN) and its own share where more,
    # unless the node's other GPUs run groups of their own at the same time
    node_share = k_node / g if concurrent else np.minimum(1.0, np.maximum(k_node / g, 1.0 / nics))
    net = node_total * node_share / k_node * cal.scaleout_eff
    one_nic = np.minimum(net, node_total / nics * cal.scaleout_eff)
    # traffic crossing the oversubscribed tier: (L-1)/L of it when the group spans L leaves
    footprint = np.ceil(nn / k_node) * g
    leaves = np.ceil(footprint / float(fabric.leaf_gpus))
    cross = np.where(leaves > 1.0, (leaves - 1.0) / leaves, 0.0)
    slow = 1.0 + cross * (max(fabric.oversubscription, 1.0) - 1.0)
    up = np.full_like(nn, fabric.scaleup_bw_Bps * cal.scaleup_eff)
    if fabric.scaleup_mesh and dom > 1:
        # on a full mesh a member reaches the group's other k - 1 GPUs over as many links
        up = up * np.minimum(np.maximum(k - 1.0, 1.0) / (dom - 1.0), 1.0)
    return Placement(n=nn, k=k, m=m, up_Bps=up, net_Bps=net / slow, net_one_nic_Bps=one_nic / slow)
