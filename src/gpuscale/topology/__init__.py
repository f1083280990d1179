"""The cluster as a graph: spec (YAML) -> layout (switch counts) -> networkx graph -> report.

Public contract (see README.md beside this file):

* :func:`load_cluster_spec` (path) -> :class:`ClusterSpec`; ``ClusterSpec.to_fabric()`` ->
  :class:`gpuscale.perf.comm.Fabric` for the collective model.
* :func:`build_graph` (spec) -> ``networkx.Graph`` of GPUs, NICs, switches, racks, feeds.
* :func:`cluster_report` (spec) -> :class:`ClusterReport` (BOM, bisection, injection, hops).
"""

from __future__ import annotations

from gpuscale.topology.fabrics import FabricTech, Switch, fabrics, get_fabric, get_switch, switches
from gpuscale.topology.layout import Layout, plan_layout
from gpuscale.topology.spec import ClusterSpec, Placement, load_cluster_spec, parse_cluster_spec

__all__ = [
    "ClusterSpec",
    "FabricTech",
    "Layout",
    "Placement",
    "Switch",
    "fabrics",
    "get_fabric",
    "get_switch",
    "load_cluster_spec",
    "parse_cluster_spec",
    "plan_layout",
    "switches",
]
