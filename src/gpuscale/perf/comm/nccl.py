"""NCCL's own published cost constants (not fitted here).

Sources, all read at https://github.com/NVIDIA/nccl/tree/5067397c2676d5aed50042fc39e5c8ee96eb0027
(``src/graph/tuning.cc``, ``src/include/device.h``), summarised in
``shared/research/comm-anchors.md`` section 3:

* base latencies per algorithm and protocol (``baseLat``), microseconds;
* hardware latencies per path (NVLink, PCI, NET), algorithm and protocol (``hwLat``);
* protocol bandwidth factors: LL carries 8 payload bytes in a 16-byte line with flags, so
  ring LL reaches at most 0.5 x the Simple bandwidth; LL128 carries 120 of 128 bytes and
  tuning.cc caps it at 0.92 x; Tree all-reduce is capped at 0.92 x the bus bandwidth;
* NVLS efficiency (``nvlsEfficiency``): Hopper 0.85, Blackwell 0.74;
* PAT is 0.75 x the ring bandwidth and only runs with one GPU per node.

Tables are indexed ``[path][algorithm][protocol]`` with protocol order (LL, LL128, Simple);
``None`` means NCCL does not run that combination.
"""

from __future__ import annotations

PROTOCOLS: tuple[str, ...] = ("LL", "LL128", "Simple")

US = 1e-6

BASE_LATENCY_S: dict[str, tuple[float, float, float]] = {
    "tree": (6.8 * US, 14.0 * US, 8.4 * US),
    "ring": (6.6 * US, 14.0 * US, 8.4 * US),
    "pat": (8.0 * US, 8.0 * US, 8.0 * US),
    "nvls": (0.0, 0.0, 0.0),
    "nvls_tree": (0.0, 0.0, 0.0),
    # point-to-point (all-to-all, send/recv) is not a tuned algorithm in NCCL; we give it the
    # ring's base latency as the closest published figure.
    "p2p": (6.6 * US, 14.0 * US, 8.4 * US),
}

_NVLINK = {
    "tree": (0.6, 1.25, 4.0),
    "ring": (0.6, 1.9, 3.4),
    "nvls": (0.0, 0.0, 25.0),
    "nvls_tree": (0.0, 0.0, 25.0),
    "pat": (0.0, 0.0, 4.0),
    "p2p": (0.6, 1.9, 3.4),
}
_PCI = {
    "tree": (1.0, 1.9, 4.0),
    "ring": (1.0, 2.5, 5.7),
    "nvls": (0.0, 0.0, 0.0),
    "nvls_tree": (0.0, 0.0, 0.0),
    "pat": (0.0, 0.0, 4.0),
    "p2p": (1.0, 2.5, 5.7),
}
_NET = {
    "tree": (5.0, 8.5, 14.0),
    "ring": (2.7, 4.0, 14.0),
    "nvls": (0.0, 0.0, 18.0),
    "nvls_tree": (0.0, 0.0, 20.9),
    "pat": (0.0, 0.0, 14.0),
    "p2p": (2.7, 4.0, 14.0),
}
HW_LATENCY_S: dict[str, dict[str, tuple[float, float, float]]] = {
    path: {a: (v[0] * US, v[1] * US, v[2] * US) for a, v in table.items()}
    for path, table in (("nvlink", _NVLINK), ("pci", _PCI), ("net", _NET))
}
REFERENCE_HOP = {
    "nvlink": HW_LATENCY_S["nvlink"]["ring"][0],
    "pci": HW_LATENCY_S["pci"]["ring"][0],
    "net": HW_LATENCY_S["net"]["ring"][0],
}
"""The entry a fitted hop latency replaces (ring/LL); the others keep NCCL's ratios to it."""

NET_OVERHEAD_S = {"intel": 1.0 * US, "arm": 1.0 * US, "amd": 2.0 * US}
"""Floor of a ring's intra-node step latency once it spans nodes (x3 for Simple), by host
CPU vendor (tuning.cc getNetOverhead: 2 us on AMD x86 hosts, 1 us otherwise)."""

PROTO_BW_FACTOR: tuple[float, float, float] = (0.5, 0.92, 1.0)
"""Fraction of the Simple protocol's bandwidth reached by LL, LL128, Simple."""

TREE_BW_FACTOR = 0.92
"""tuning.cc: Tree all-reduce bandwidth = min(0.92 x busBw, per-channel caps)."""

PAT_BW_FACTOR = 0.75

NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}


def nvls_efficiency(gpu_key: str) -> float:
    """NCCL's nvlsEfficiency for a catalog GPU key (Blackwell: b*/gb*, otherwise Hopper)."""
    k = gpu_key.lower()
    return NVLS_EFFICIENCY["blackwell"] if k.startswith(("b", "gb")) else NVLS_EFFICIENCY["hopper"]
