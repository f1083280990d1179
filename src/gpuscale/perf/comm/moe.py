"""Expert-parallel token dispatch and combine: how many bytes really cross the network.

An MoE layer sends each token to the ranks holding its ``top_k`` experts (dispatch) and
brings the expert outputs back (combine). Two ways of doing it:

* ``all_to_all``: one NCCL all-to-all of the ``top_k`` copies (Megatron-Core's ``alltoall``
  dispatcher, torchtitan). A token with several experts in one remote domain crosses the
  network once per expert: ``top_k (n - k) / n`` copies per token leave the domain.
* ``hierarchical``: a token crosses the network at most once per remote scale-up domain,
  to the GPU of the same local index, which forwards it over NVLink to the experts' GPUs;
  the combine reduces inside the domain before sending back. This is DeepEP's "normal"
  kernels (NVLink/RDMA forwarding, built for DeepSeek-V3's node-limited routing, DeepSeek-V3
  report sec. 3.2.2) and NVIDIA's HybridEP, Megatron-Core's ``flex`` dispatcher that the
  Megatron-Bridge MoE recipes use.

With balanced routing over E experts spread evenly over m domains, a token misses a given
domain with probability prod_{i < top_k} (E - E/m - i) / (E - i) (drawing top_k distinct
experts), so it crosses the network (m - 1)(1 - that) times instead of top_k (m - 1)/m.
For 512 experts, top-22, over 8 domains: 6.65 crossings, not 19.25.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from gpuscale.calibrate import Calibration
from gpuscale.errors import InputError
from gpuscale.perf.comm.algorithms import p2p_candidates
from gpuscale.perf.comm.fabric import Fabric, FloatArray, place
from gpuscale.perf.comm.model import collective_time_s, group_arrays

EP_DISPATCH: tuple[str, ...] = ("hierarchical", "all_to_all")
"""How expert-parallel tokens travel: once per remote domain, or once per expert."""


def domains_hit(
    top_k: int, experts: int, domains: FloatArray, groups: int = 1, topk_groups: int = 0
) -> FloatArray:
    """Expected number of *other* domains a token's ``top_k`` distinct experts fall in, with
    ``experts`` spread evenly over ``domains`` domains and uniform routing. A fractional
    count (a group that fills its last domain only partly) holds ``experts / domains`` in
    the token's own domain and the rest elsewhere, weighted as ``domains - 1`` domains.

    Group-limited routing (DeepSeek-V2/V3: the experts in ``groups`` contiguous groups, a
    token's experts drawn from ``topk_groups`` of them) bounds the domains: with at least a
    group per domain's worth of domains, the token's experts lie in ``topk_groups`` groups'
    domains; with several groups per domain, in the domains holding a chosen group. The
    token's own domain is one of those as often as any other (a (m - 1) / m share remote).
    """
    m = np.maximum(np.asarray(domains, dtype=np.float64), 1.0)

    def hit_any(e: float, d: FloatArray) -> FloatArray:
        """Domains (own included) that top_k distinct experts of e over d domains touch."""
        miss = np.ones_like(d)
        for i in range(top_k):
            miss = miss * np.clip((e - e / d - i) / (e - i), 0.0, 1.0)
        return d * (1.0 - miss)

    any_expert = hit_any(float(experts), m)
    uniform = (m - 1.0) / m * any_expert
    if topk_groups <= 0 or topk_groups >= groups:
        return uniform
    # domains per group >= 1: the chosen groups' domains, top_k experts among theirs
    d_sel = np.maximum(m / groups, 1.0) * topk_groups
    within = hit_any(experts * topk_groups / groups, d_sel)
    # several groups a domain: the domains that hold at least one chosen group
    per = np.maximum(groups / m, 1.0)
    miss_g = np.ones_like(m)
    for i in range(topk_groups):
        miss_g = miss_g * np.clip((groups - per - i) / (groups - i), 0.0, 1.0)
    holding = m * (1.0 - miss_g)
    limited = np.where(m >= groups, within, np.minimum(holding, any_expert))
    out: FloatArray = np.minimum(uniform, (m - 1.0) / m * limited)
    return out


def moe_dispatch_time_s(
    size_bytes: ArrayLike,
    n: ArrayLike,
    members_per_domain: ArrayLike,
    top_k: int,
    experts: int,
    fabric: Fabric,
    cal: Calibration,
    dispatch: str = "hierarchical",
    groups: int = 1,
    topk_groups: int = 0,
    concurrent: bool = False,
) -> FloatArray:
    """Seconds of one dispatch (or combine) of ``size_bytes`` per rank (all ``top_k`` copies
    of its tokens) over an expert-parallel group of ``n`` ranks, ``members_per_domain`` of
    them per scale-up domain; ``groups`` / ``topk_groups``: group-limited routing;
    ``concurrent``: every GPU of a node dispatches at once (see :func:`.fabric.place`)."""
    if dispatch not in EP_DISPATCH:
        raise InputError("ep-dispatch", dispatch, f"one of {', '.join(EP_DISPATCH)}")
    # forwarding needs a scale-up fabric (DeepEP and HybridEP run over NVLink): without one,
    # every copy travels on its own
    if dispatch == "all_to_all" or fabric.domain_gpus <= 1:
        return collective_time_s(
            "all_to_all", size_bytes, n, fabric, cal, members_per_domain, concurrent
        )
    s, nn, kk = group_arrays(size_bytes, n, members_per_domain, fabric)
    pl = place(fabric, cal, nn, kk, concurrent)
    n_, k, m = pl.n, pl.k, pl.m
    local = (k - 1.0) / n_ * s  # copies to experts on other GPUs of the own domain
    remote = (n_ - k) / n_ * s  # copies to experts in other domains
    # n / k domains of E k / n experts each: a last, partly filled domain counts as the
    # fraction it is, so a token's remote copies never exceed top_k (n - k) / n
    net_b = s / top_k * domains_hit(top_k, experts, n_ / k, groups, topk_groups)
    # the GPU a remote copy lands on forwards it over NVLink to its expert's GPU
    up_b = local + remote * (k - 1.0) / np.maximum(k, 1.0)
    bw_t = np.maximum(up_b / pl.up_Bps, net_b / pl.net_one_nic_Bps)
    # NCCL's protocols and latencies, as its all-to-all: the fastest of LL and Simple
    best = np.min([lat + bw for _, _, lat, bw in p2p_candidates(bw_t, pl, fabric, cal)], axis=0)
    lat_s = np.where(m > 1.0, cal.scaleout_call_latency_s, 0.0)
    t: FloatArray = np.where(nn <= 1.0, 0.0, best + lat_s)
    return t
