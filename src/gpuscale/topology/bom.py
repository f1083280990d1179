"""What a cluster spec costs in parts and what its fabric delivers: BOM, bandwidth, hops.

Everything is read off the graph of :mod:`.build`. Counting rules:

* links: one cable per logical port-to-port link (node-leaf, leaf-spine, spine-core);
* transceivers: one per NIC port on the node side; on the switch side one per cage, a cage
  carrying ``ports_per_cage`` logical ports at the fabric speed (twin-port OSFP on Quantum-2
  and Spectrum-4), counted per switch as ``ceil(used ports / ports_per_cage)``;
* injection bandwidth per GPU = NICs x link rate / GPUs per node (one direction);
* bisection = min(half the injection, half the leaf uplinks, half the spine uplinks when
  there are several pods), one direction: the cut that splits the leaves (and pods) in half.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import networkx as nx

from gpuscale.topology.build import build_graph, gpu_id, network_view, nic_id, switch_hops
from gpuscale.topology.layout import Layout
from gpuscale.topology.spec import ClusterSpec


@dataclass(frozen=True)
class TierBOM:
    tier: str
    """``leaf``, ``spine`` or ``core``."""
    switches: int
    ports_used: int
    ports_available: int
    downlinks: int
    uplinks: int
    transceivers: int


@dataclass(frozen=True)
class HopCount:
    scope: str
    switch_hops: int
    path: str
    """Vertex kinds along the shortest path, e.g. ``gpu>nic>leaf>nic>gpu``."""


@dataclass(frozen=True)
class ClusterReport:
    name: str
    system: str
    nodes: int
    gpus_per_node: int
    total_gpus: int
    domain_gpus: int
    nics_per_node: int
    link_gbps: float
    fabric: str
    protocol: str
    switch_model: str
    switch_radix: int
    rail_optimized: bool
    tiers: int
    oversubscription_leaf: float
    oversubscription_spine: float
    nodes_per_su: int
    scalable_units: int
    pods: int
    tiers_bom: tuple[TierBOM, ...]
    links_by_tier: dict[str, int]
    cables: int
    transceivers_node_side: int
    transceivers_switch_side: int
    injection_bw_Bps_per_gpu: float
    injection_bw_Bps_total: float
    bisection_bw_Bps: float
    bisection_ratio: float
    """Bisection / half the injection (1 = full bisection)."""
    hops: tuple[HopCount, ...]
    racks: int
    rows: int
    power_feeds: int
    notes: tuple[str, ...]

    @property
    def switches_total(self) -> int:
        return sum(t.switches for t in self.tiers_bom)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["switches_total"] = self.switches_total
        return d


def _tier_bom(g: Any, spec: ClusterSpec, tier: str) -> TierBOM:
    per_cage = spec.switch.cage_ports(spec.fabric.port_gbps)
    switches = [v for v, k in g.nodes(data="kind") if k == tier]
    up_tier = {"leaf": "leaf-spine", "spine": "spine-core", "core": ""}[tier]
    used = down = up = xcvr = 0
    for v in switches:
        mine = 0
        for _, _, e in g.edges(v, data=True):
            if e["kind"] != "link":
                continue
            mine += e["links"]
            if e["tier"] == up_tier:
                up += e["links"]
            else:
                down += e["links"]
        used += mine
        xcvr += math.ceil(mine / per_cage)
    return TierBOM(tier, len(switches), used, len(switches) * spec.radix, down, up, xcvr)


def _path_kinds(g: Any, path: list[str]) -> str:
    return ">".join(str(g.nodes[v]["kind"]) for v in path)


def _hops(g: Any, spec: ClusterSpec, lay: Layout) -> tuple[HopCount, ...]:
    full, net = network_view(g), network_view(g, scaleup=False)
    out: list[HopCount] = []

    def add(scope: str, view: Any, a: str, b: str) -> None:
        path = nx.shortest_path(view, a, b)
        out.append(HopCount(scope, switch_hops(g, path), _path_kinds(g, path)))

    gpn, rails = spec.gpus_per_node, spec.nics_per_node
    if gpn > 1:
        add("within node", full, gpu_id(0, 0), gpu_id(0, 1))
    if spec.nodes_per_domain > 1:
        add("within NVLink domain, other node", full, gpu_id(0, 0), gpu_id(1, 0))

    def gpu_on_rail(node: int, rail: int) -> str:
        return next(str(u) for u in g.neighbors(nic_id(node, rail)) if g.nodes[u]["kind"] == "gpu")

    npd = spec.nodes_per_domain
    shared = next((lf for lf in lay.leaves if len(lf.nodes) > npd), None)
    if shared is not None:
        a, b = shared.nodes[0], shared.nodes[npd]
        rail = shared.rail or 0
        label = "same rail, same leaf" if spec.rail_optimized else "same leaf"
        add(label, net, gpu_on_rail(a, rail), gpu_on_rail(b, rail))
        if spec.rail_optimized and rails > 1:
            add("other rail, same SU (no PXN)", net, gpu_on_rail(a, 0), gpu_on_rail(b, 1))
    pod0 = lay.pods[0]
    if len(pod0) > 1:
        a, b = lay.sus[pod0[0]][0], lay.sus[pod0[1]][0]
        add("other SU, across spine", net, gpu_on_rail(a, 0), gpu_on_rail(b, 0))
    if len(lay.pods) > 1:
        a, b = lay.sus[lay.pods[0][0]][0], lay.sus[lay.pods[1][0]][0]
        add("other pod, across core", net, gpu_on_rail(a, 0), gpu_on_rail(b, 0))
    return tuple(out)


def cluster_report(spec: ClusterSpec) -> ClusterReport:
    """Build the graph and read the BOM, bandwidths and hop counts off it."""
    lay = spec.layout()
    g = build_graph(spec, lay)
    tiers = tuple(_tier_bom(g, spec, t) for t in ("leaf", "spine", "core"))
    links = {"node-leaf": 0, "leaf-spine": 0, "spine-core": 0}
    cap = {"node-leaf": 0.0, "leaf-spine": 0.0, "spine-core": 0.0}
    for _, _, e in g.edges(data=True):
        if e["kind"] == "link":
            links[e["tier"]] += e["links"]
            cap[e["tier"]] += e["bw_Bps"]
    inj_gpu = spec.nic_bw_Bps_per_gpu
    inj_total = inj_gpu * spec.total_gpus
    bisection = inj_total / 2.0
    if lay.spines:
        bisection = min(bisection, cap["leaf-spine"] / 2.0)
    if len(lay.pods) > 1 and lay.cores:
        bisection = min(bisection, cap["spine-core"] / 2.0)
    kinds = [k for _, k in g.nodes(data="kind")]
    return ClusterReport(
        name=spec.name,
        system=spec.system.key,
        nodes=spec.nodes,
        gpus_per_node=spec.gpus_per_node,
        total_gpus=spec.total_gpus,
        domain_gpus=spec.domain_gpus,
        nics_per_node=spec.nics_per_node,
        link_gbps=spec.link_gbps,
        fabric=spec.fabric.key,
        protocol=spec.protocol,
        switch_model=spec.switch.key,
        switch_radix=spec.radix,
        rail_optimized=spec.rail_optimized,
        tiers=spec.tiers,
        oversubscription_leaf=spec.oversubscription_leaf,
        oversubscription_spine=spec.oversubscription_spine,
        nodes_per_su=lay.nodes_per_su,
        scalable_units=len(lay.sus),
        pods=len(lay.pods),
        tiers_bom=tiers,
        links_by_tier=links,
        cables=sum(links.values()),
        transceivers_node_side=links["node-leaf"],
        transceivers_switch_side=sum(t.transceivers for t in tiers),
        injection_bw_Bps_per_gpu=inj_gpu,
        injection_bw_Bps_total=inj_total,
        bisection_bw_Bps=bisection,
        bisection_ratio=bisection / (inj_total / 2.0),
        hops=_hops(g, spec, lay),
        racks=kinds.count("rack"),
        rows=kinds.count("row"),
        power_feeds=kinds.count("feed"),
        notes=spec.notes,
    )
