"""The cluster as a networkx graph: GPUs, NICs, NVLink switches, fabric switches, placement.

Vertex ids are readable strings (``gpu/n3/g5``, ``nic/n3/r5``, ``leaf/12``, ``rack/0``) and
every vertex has a ``kind``. Edges carry ``kind`` and, for fabric links, ``tier``
(``node-leaf``, ``leaf-spine``, ``spine-core``), ``links`` (parallel cables) and ``bw_Bps``
(one direction, all parallel links). Placement edges (``in_rack``, ``in_row``, ``powered_by``)
let later stages find failure domains; :func:`network_view` hides them for path questions.
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from gpuscale.topology.layout import Layout
from gpuscale.topology.spec import ClusterSpec

SWITCH_KINDS: frozenset[str] = frozenset({"nvswitch", "leaf", "spine", "core"})
NETWORK_EDGES: frozenset[str] = frozenset({"nvlink", "pcie", "link"})
FABRIC_TIERS: tuple[str, ...] = ("node-leaf", "leaf-spine", "spine-core")


def gpu_id(node: int, gpu: int) -> str:
    """The graph node id of GPU ``gpu`` of node ``node``: "gpu/n{node}/g{gpu}"."""
    return f"gpu/n{node}/g{gpu}"


def nic_id(node: int, rail: int) -> str:
    """The graph node id of the NIC on rail ``rail`` of node ``node``: "nic/n{node}/r{rail}"."""
    return f"nic/n{node}/r{rail}"


def _add_link(g: Any, a: str, b: str, tier: str, link_bw_Bps: float) -> None:
    if g.has_edge(a, b):
        g[a][b]["links"] += 1
        g[a][b]["bw_Bps"] += link_bw_Bps
    else:
        g.add_edge(a, b, kind="link", tier=tier, links=1, bw_Bps=link_bw_Bps)


def _add_nodes(g: Any, spec: ClusterSpec) -> None:
    gpn, rails, npd = spec.gpus_per_node, spec.nics_per_node, spec.nodes_per_domain
    pl = spec.placement
    for n in range(spec.nodes):
        rack = n // pl.nodes_per_rack
        domain = n // npd
        g.add_node(f"node/{n}", kind="node", rack=rack, row=rack // pl.racks_per_row, domain=domain)
        scaleup = f"nvswitch/d{domain}" if spec.domain_gpus > 1 else f"host/n{n}"
        g.add_node(scaleup, kind="nvswitch" if spec.domain_gpus > 1 else "pcie_host")
        for i in range(gpn):
            gid = gpu_id(n, i)
            g.add_node(gid, kind="gpu", node=n, domain=domain)
            g.add_edge(gid, f"node/{n}", kind="in_node")
            g.add_edge(
                gid,
                scaleup,
                kind="nvlink" if spec.domain_gpus > 1 else "pcie",
                bw_Bps=spec.system.scaleup_bw_Bps,
            )
        for r in range(rails):
            g.add_node(nic_id(n, r), kind="nic", node=n, rail=r)
        # GPU i uses NIC floor(i*rails/gpn); every NIC hangs off GPU floor(r*gpn/rails)
        pairs = {(i, i * rails // gpn) for i in range(gpn)}
        pairs |= {(r * gpn // rails, r) for r in range(rails)}
        for i, r in sorted(pairs):
            g.add_edge(gpu_id(n, i), nic_id(n, r), kind="pcie")


def _add_fabric(g: Any, spec: ClusterSpec, lay: Layout) -> None:
    bw = spec.link_bw_Bps
    model = spec.switch.key
    for lf in lay.leaves:
        g.add_node(f"leaf/{lf.index}", kind="leaf", su=lf.su, rail=lf.rail, pod=lf.pod, model=model)
        for n in lf.nodes:
            rails = [lf.rail] if lf.rail is not None else range(spec.nics_per_node)
            for r in rails:
                _add_link(g, nic_id(n, r), f"leaf/{lf.index}", "node-leaf", bw)
    for sp in lay.spines:
        g.add_node(f"spine/{sp.index}", kind="spine", pod=sp.pod, model=model)
    for c in range(lay.cores):
        g.add_node(f"core/{c}", kind="core", model=model)
    # uplinks round-robin over the pod's spines, spine uplinks over all cores
    for pod in range(len(lay.pods)):
        pod_spines = [sp.index for sp in lay.spines if sp.pod == pod]
        turn = 0
        for lf in (x for x in lay.leaves if x.pod == pod):
            for _ in range(lf.up):
                _add_link(
                    g,
                    f"leaf/{lf.index}",
                    f"spine/{pod_spines[turn % len(pod_spines)]}",
                    "leaf-spine",
                    bw,
                )
                turn += 1
    turn = 0
    for sp in lay.spines:
        for _ in range(sp.up):
            _add_link(g, f"spine/{sp.index}", f"core/{turn % lay.cores}", "spine-core", bw)
            turn += 1


def _add_placement(g: Any, spec: ClusterSpec) -> None:
    pl = spec.placement
    racks = -(-spec.nodes // pl.nodes_per_rack)
    for rack in range(racks):
        row = rack // pl.racks_per_row
        g.add_node(f"rack/{rack}", kind="rack", row=row)
        g.add_node(f"row/{row}", kind="row")
        g.add_edge(f"rack/{rack}", f"row/{row}", kind="in_row")
        for f in range(pl.power_feeds_per_rack):
            g.add_node(f"feed/w{row}/{f}", kind="feed", row=row)
            g.add_edge(f"rack/{rack}", f"feed/w{row}/{f}", kind="powered_by")
    for n in range(spec.nodes):
        g.add_edge(f"node/{n}", f"rack/{n // pl.nodes_per_rack}", kind="in_rack")


def build_graph(spec: ClusterSpec, lay: Layout | None = None) -> Any:
    """The whole cluster as an undirected ``networkx.Graph``."""
    g = nx.Graph(name=spec.name)
    _add_nodes(g, spec)
    _add_fabric(g, spec, lay or spec.layout())
    _add_placement(g, spec)
    return g


def network_view(g: Any, scaleup: bool = True) -> Any:
    """The data paths only (GPUs, NICs, switches); ``scaleup=False`` also hides NVLink."""
    kinds = {"gpu", "nic", "leaf", "spine", "core"}
    if scaleup:
        kinds |= {"nvswitch", "pcie_host"}

    def keep_node(v: str) -> bool:
        return str(g.nodes[v]["kind"]) in kinds

    def keep_edge(a: str, b: str) -> bool:
        return str(g[a][b]["kind"]) in NETWORK_EDGES

    return nx.subgraph_view(g, filter_node=keep_node, filter_edge=keep_edge)


def switch_hops(g: Any, path: list[str]) -> int:
    """Switches (NVSwitch, leaf, spine, core) a path traverses."""
    return sum(1 for v in path if g.nodes[v]["kind"] in SWITCH_KINDS)


def failure_domains(g: Any) -> dict[str, dict[str, list[int]]]:
    """Node ids grouped by rack, row and power feed (for reliability models)."""
    out: dict[str, dict[str, list[int]]] = {"rack": {}, "row": {}, "feed": {}}
    for v, data in g.nodes(data=True):
        if data["kind"] != "node":
            continue
        n = int(str(v).split("/")[1])
        rack = f"rack/{data['rack']}"
        out["rack"].setdefault(rack, []).append(n)
        out["row"].setdefault(f"row/{data['row']}", []).append(n)
        for feed in g.neighbors(rack):
            if g.nodes[feed]["kind"] == "feed":
                out["feed"].setdefault(str(feed), []).append(n)
    return out
