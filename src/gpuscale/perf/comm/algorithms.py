"""Candidate (algorithm, protocol) costs per collective: alpha-beta per level of the fabric.

Each candidate returns ``(latency_s, bandwidth_s)`` arrays; the model picks the fastest per
point, as NCCL's tuner does with its own cost table. Notation: ``S`` nccl-tests size,
``n`` ranks, ``k`` members per scale-up domain, ``m`` domains spanned, ``up`` and ``net``
the achieved per-GPU scale-up and scale-out bandwidths (see :mod:`.fabric`).

Bandwidth terms (bytes a rank must push through its bottleneck, per op):

* ring all-reduce: 2(n-1)/n S over min(up, k net) - each of k parallel rings crosses
  a domain boundary through its own NIC (nccl-tests PERFORMANCE.md; NCCL channels);
* tree / hierarchical all-reduce: a chain inside the domain (each GPU sends 2S: the reduce
  upward and the broadcast downward) pipelined with a double binary tree across domains
  where each domain sends 2(m-1)/m S over its k NICs (S on two nodes: why busbw can beat
  the NIC rate there, nccl-tests issue 196);
* NVLS all-reduce: a GPU sends S + S/k to the switch and receives as much (multimem
  reduce then multicast), at nvlsEfficiency of the link;
* all-gather / reduce-scatter ring: (n-1)/n S; all-to-all: (k-1)/n S over NVLink and
  (n-k)/n S over the rank's own NIC, concurrently (all-to-all cannot stripe over NICs,
  nccl-tests issue 267); broadcast / reduce: S through a pipelined chain.

Latency terms follow tuning.cc's assembly (comm-anchors.md section 3).
"""

from __future__ import annotations

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.perf.comm import nccl
from gpuscale.perf.comm.fabric import Fabric, FloatArray, Placement

Candidate = tuple[str, int, FloatArray, FloatArray]
"""(algorithm, protocol index, latency_s, bandwidth_s)."""

LL, LL128, SIMPLE = 0, 1, 2


class _Lat:
    """Hop latencies with the fitted LL/ring hops and NCCL's ratios for the rest."""

    def __init__(self, fabric: Fabric, cal: Calibration) -> None:
        self.intra_path = fabric.intra_path
        self.up_scale = cal.scaleup_latency_s / nccl.REFERENCE_HOP["nvlink"]
        net = cal.scaleout_latency_efa_s if fabric.transport == "efa" else cal.scaleout_latency_s
        self.net_scale = net / nccl.REFERENCE_HOP["net"]
        self.net_overhead = fabric.net_overhead_s

    def intra(self, algo: str, p: int) -> float:
        return nccl.HW_LATENCY_S[self.intra_path][algo][p] * self.up_scale

    def inter(self, algo: str, p: int) -> float:
        return nccl.HW_LATENCY_S["net"][algo][p] * self.net_scale


def _log2(x: FloatArray) -> FloatArray:
    return np.log2(np.maximum(x, 1.0))


def _ring_lat(
    lat: _Lat, pl: Placement, p: int, nsteps: FloatArray, ninter: FloatArray
) -> FloatArray:
    multi = pl.m > 1.0
    # a ring that spans nodes still launches every step through the network proxy:
    # tuning.cc raises the intra-node hop latency to that overhead (a floor, not a sum)
    over = lat.net_overhead * (3.0 if p == SIMPLE else 1.0)
    intra = np.where(multi, max(lat.intra("ring", p), over), lat.intra("ring", p))
    # one GPU per node: tuning.cc takes the Tree NET latency for the ring's network hops
    inter = np.where(pl.k <= 1.0, lat.inter("tree", p), lat.inter("ring", p))
    return nccl.BASE_LATENCY_S["ring"][p] + (nsteps - ninter) * intra + ninter * inter


def _ring_bw(pl: Placement) -> FloatArray:
    return np.where(pl.m > 1.0, np.minimum(pl.up_Bps, pl.k * pl.net_Bps), pl.up_Bps)


def _combine(a: FloatArray, b: FloatArray, overlap: float) -> FloatArray:
    """Two pipelined phases: the longer one plus the part of the shorter not hidden."""
    return np.maximum(a, b) + (1.0 - overlap) * np.minimum(a, b)


def all_reduce(s: FloatArray, pl: Placement, f: Fabric, cal: Calibration) -> list[Candidate]:
    """All-reduce candidates, each (algorithm, protocol, latency s, bandwidth s) for ``s`` bytes:
    Ring with LL, LL128 and Simple (2 (n - 1) / n x s bytes at the ring's rate), Tree with the
    three (the intra-domain chain pipelined with 2 (m - 1) / m x s over the network), and, on an
    NVLS fabric, NVLS within one domain and NVLS-Tree across domains (Simple only)."""
    lat = _Lat(f, cal)
    n, k, m = pl.n, pl.k, pl.m
    out: list[Candidate] = []
    ring_bytes = 2.0 * (n - 1.0) / n * s
    ring_bw = _ring_bw(pl)
    inter_t = 2.0 * (m - 1.0) / m * s / (k * pl.net_Bps)
    for p in (LL, LL128, SIMPLE):
        pf = nccl.PROTO_BW_FACTOR[p]
        out.append(
            (
                "ring",
                p,
                _ring_lat(lat, pl, p, 2.0 * (n - 1.0), 2.0 * (m - 1.0)),
                ring_bytes / (pf * ring_bw),
            )
        )
        tree_lat = nccl.BASE_LATENCY_S["tree"][p] + 2.0 * (
            (k - 1.0) * lat.intra("tree", p) + _log2(m) * lat.inter("tree", p)
        )
        chain_t = 2.0 * s / pl.up_Bps
        tree_t = _combine(chain_t, inter_t, cal.hier_overlap) / nccl.TREE_BW_FACTOR
        out.append(("tree", p, tree_lat, tree_t / pf))
    if f.nvls and f.domain_gpus > 1:
        nvls_bw = pl.up_Bps * f.nvls_efficiency * k / (k + 1.0)
        intra_t = s / nvls_bw
        single = m <= 1.0
        nvls_lat = lat.intra("nvls", SIMPLE) + np.zeros_like(n)
        out.append(("nvls", SIMPLE, np.where(single & (k > 1.0), nvls_lat, np.inf), intra_t))
        tree_lat = (
            nccl.BASE_LATENCY_S["nvls_tree"][SIMPLE]
            + lat.intra("nvls_tree", SIMPLE)
            + 2.0 * _log2(m) * lat.inter("nvls_tree", SIMPLE)
        )
        out.append(
            (
                "nvls_tree",
                SIMPLE,
                np.where(~single & (k > 1.0), tree_lat, np.inf),
                _combine(intra_t, inter_t, cal.hier_overlap),
            )
        )
    return out


def gather_scatter(s: FloatArray, pl: Placement, f: Fabric, cal: Calibration) -> list[Candidate]:
    """All-gather and reduce-scatter: Ring, NVLS (one domain), PAT (one GPU per node)."""
    lat = _Lat(f, cal)
    n, k, m = pl.n, pl.k, pl.m
    per_rank = (n - 1.0) / n * s
    out: list[Candidate] = []
    for p in (LL, LL128, SIMPLE):
        pf = nccl.PROTO_BW_FACTOR[p]
        out.append(
            ("ring", p, _ring_lat(lat, pl, p, n - 1.0, m - 1.0), per_rank / (pf * _ring_bw(pl)))
        )
    if f.nvls and f.domain_gpus > 1:
        nvls_lat = np.where((m <= 1.0) & (k > 1.0), lat.intra("nvls", SIMPLE), np.inf)
        out.append(("nvls", SIMPLE, nvls_lat, per_rank / (pl.up_Bps * f.nvls_efficiency)))
    pat_ok = (k <= 1.0) & (m > 1.0)
    pat_lat = (
        nccl.BASE_LATENCY_S["pat"][SIMPLE] + _log2(m) * lat.inter("pat", SIMPLE) / 3.5 + 2.8e-6 * n
    )
    out.append(
        (
            "pat",
            SIMPLE,
            np.where(pat_ok, pat_lat, np.inf),
            per_rank / (nccl.PAT_BW_FACTOR * pl.net_Bps),
        )
    )
    return out


def rooted(s: FloatArray, pl: Placement, f: Fabric, cal: Calibration) -> list[Candidate]:
    """Broadcast and reduce: NCCL runs them on the ring only (a pipelined chain)."""
    lat = _Lat(f, cal)
    out: list[Candidate] = []
    for p in (LL, LL128, SIMPLE):
        pf = nccl.PROTO_BW_FACTOR[p]
        out.append(("ring", p, _ring_lat(lat, pl, p, pl.n, pl.m - 1.0), s / (pf * _ring_bw(pl))))
    return out


def _p2p_lat(lat: _Lat, pl: Placement, p: int) -> FloatArray:
    return nccl.BASE_LATENCY_S["p2p"][p] + np.where(
        pl.m > 1.0, lat.inter("p2p", p), lat.intra("p2p", p)
    )


def p2p_candidates(bw_s: FloatArray, pl: Placement, f: Fabric, cal: Calibration) -> list[Candidate]:
    """A point-to-point exchange of ``bw_s`` seconds of bytes at full rate, with NCCL's LL
    and Simple protocols (one hop, over the network when the group spans domains)."""
    lat = _Lat(f, cal)
    return [("p2p", p, _p2p_lat(lat, pl, p), bw_s / nccl.PROTO_BW_FACTOR[p]) for p in (LL, SIMPLE)]


def all_to_all(s: FloatArray, pl: Placement, f: Fabric, cal: Calibration) -> list[Candidate]:
    """All-to-all as a point-to-point exchange: the slower of (k - 1) / n x s bytes over scale-up
    and (n - k) / n x s bytes over one NIC, in seconds (:func:`p2p_candidates`)."""
    n, k = pl.n, pl.k
    t_up = (k - 1.0) / n * s / pl.up_Bps
    t_net = (n - k) / n * s / pl.net_one_nic_Bps
    return p2p_candidates(np.maximum(t_up, t_net), pl, f, cal)


def send_recv(s: FloatArray, pl: Placement, f: Fabric, cal: Calibration) -> list[Candidate]:
    """Send/receive candidates, LL and Simple: ``s`` bytes over one NIC when the group spans
    domains, else over scale-up, as (algorithm, protocol, latency s, bandwidth s)."""
    lat = _Lat(f, cal)
    bw = np.where(pl.m > 1.0, pl.net_one_nic_Bps, pl.up_Bps)
    return [
        ("p2p", p, _p2p_lat(lat, pl, p), s / (nccl.PROTO_BW_FACTOR[p] * bw)) for p in (LL, SIMPLE)
    ]


CANDIDATES = {
    "all_reduce": all_reduce,
    "all_gather": gather_scatter,
    "reduce_scatter": gather_scatter,
    "broadcast": rooted,
    "reduce": rooted,
    "all_to_all": all_to_all,
    "send_recv": send_recv,
}
ALGORITHMS: tuple[str, ...] = ("ring", "tree", "nvls", "nvls_tree", "pat", "p2p")
