"""Fat-tree layout: how many leaf, spine and core switches a spec needs, and their port use.

Pure arithmetic over the spec, no graph. Rules (stated here so the README can point to them):

* A leaf of radix ``k`` with down:up ratio ``o`` serves ``d = floor(k*o/(1+o))`` downlinks and
  has ``ceil(down/o)`` uplinks (non-blocking: 32 down + 32 up on a 64-port switch).
* Rail-optimized: a scalable unit (SU) of ``nodes_per_su`` nodes has, per rail (= NIC index),
  ``ceil(nodes_per_su/d)`` leaves; NIC ``r`` of every node in the SU lands on rail ``r``'s leaf.
  Not rail-optimized: all NICs of a node land on one leaf, ``floor(d/nics)`` nodes per leaf.
* 2 tiers: ``ceil(leaf uplinks / k)`` spines, every leaf reaching every spine (so at most
  ``k`` leaves). 3 tiers: pods of whole SUs under ``d2 = floor(k*o2/(1+o2))``-down spines,
  ``ceil(pod leaf uplinks / d2)`` spines per pod, ``ceil(spine uplinks / k)`` core switches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuscale.errors import InputError

if TYPE_CHECKING:
    from gpuscale.topology.spec import ClusterSpec


@dataclass(frozen=True)
class LeafPlan:
    index: int
    su: int
    rail: int | None
    """NIC index carried by this leaf (None when not rail-optimized: all NICs of a node)."""
    pod: int
    nodes: tuple[int, ...]
    down: int
    up: int


@dataclass(frozen=True)
class SpinePlan:
    index: int
    pod: int
    down: int
    up: int


@dataclass(frozen=True)
class Layout:
    leaf_down_max: int
    nodes_per_su: int
    sus: tuple[tuple[int, ...], ...]
    """Node ids of each scalable unit (leaf group)."""
    leaves: tuple[LeafPlan, ...]
    spines: tuple[SpinePlan, ...]
    cores: int
    pods: tuple[tuple[int, ...], ...]
    """SU ids of each pod (3-tier; one pod holding every SU in a 2-tier tree)."""
    leaf_group_gpus: int
    pod_gpus: int


def down_ports(radix: int, ratio: float) -> int:
    """Most downlinks a switch of ``radix`` ports serves at down:up ``ratio``."""
    d = math.floor(radix * ratio / (1.0 + ratio))
    while d > 0 and d + math.ceil(d / ratio) > radix:
        d -= 1
    return d


def _split(n: int, parts: int) -> list[int]:
    """``n`` items in ``parts`` nearly equal parts (larger first)."""
    q, r = divmod(n, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def plan_layout(spec: ClusterSpec) -> Layout:
    """The fat tree a cluster spec needs: its nodes in scalable units (one leaf per rail, or one
    leaf for all NICs of a node), leaves with their uplinks at the leaf oversubscription,
    spines (per pod in a 3-tier tree, with uplinks at the spine oversubscription), the core
    switches, and the GPUs under one leaf group and one pod. A spec the tree of
    ``radix``-port switches cannot reach is an :class:`InputError`."""
    k = spec.radix
    o1, o2 = spec.oversubscription_leaf, spec.oversubscription_spine
    d = down_ports(k, o1)
    rails = spec.nics_per_node
    if spec.rail_optimized:
        default = d
        if spec.nodes_per_domain > 1:  # keep NVLink racks whole inside one SU
            default = max(1, d // spec.nodes_per_domain) * spec.nodes_per_domain
        per_su = spec.nodes_per_su_requested or default
    else:
        per_leaf = d // rails
        if per_leaf == 0:
            raise InputError(
                "nics_per_node",
                rails,
                f"at most {d} when all NICs of a node share one {k}-port leaf; "
                "or set topology.rail_optimized: true",
            )
        per_su = spec.nodes_per_su_requested or per_leaf
        if per_su > per_leaf:
            raise InputError(
                "topology.nodes_per_su",
                per_su,
                f"at most {per_leaf} nodes ({rails} NICs each) under one {k}-port leaf at {o1:g}:1",
            )
    per_su = min(per_su, spec.nodes)

    def su_leaves(su_nodes: int) -> int:
        return rails * math.ceil(su_nodes / d) if spec.rail_optimized else 1

    # the tree's reach, counted before any switch is listed: a spec far too large for it
    # is refused at once, however many nodes it names
    full_sus, rest = divmod(spec.nodes, per_su)
    n_sus = full_sus + (rest > 0)
    n_leaves = full_sus * su_leaves(per_su) + (su_leaves(rest) if rest else 0)
    leaves_per_su = su_leaves(per_su)
    if spec.tiers == 2:
        if n_leaves > k:
            raise InputError(
                "topology.tiers",
                2,
                f"3 ({n_leaves} leaves exceed the {k} that a 2-tier tree of "
                f"{k}-port switches can join)",
            )
        sus_per_pod = n_sus
    else:
        sus_per_pod = max(1, down_ports(k, o2) // leaves_per_su)
        if math.ceil(n_sus / sus_per_pod) > k:
            raise InputError(
                "nodes",
                spec.nodes,
                f"at most {k} pods of {sus_per_pod} SUs in a 3-tier tree of {k}-port switches",
            )

    sus = tuple(tuple(range(s, min(s + per_su, spec.nodes))) for s in range(0, spec.nodes, per_su))

    leaves_by_su: list[list[LeafPlan]] = []
    idx = 0
    for su_id, su_nodes in enumerate(sus):
        mine: list[LeafPlan] = []
        if spec.rail_optimized:
            parts = _split(len(su_nodes), math.ceil(len(su_nodes) / d))
            for rail in range(rails):
                start = 0
                for size in parts:
                    nodes = su_nodes[start : start + size]
                    start += size
                    mine.append(LeafPlan(idx, su_id, rail, 0, nodes, size, math.ceil(size / o1)))
                    idx += 1
        else:
            down = len(su_nodes) * rails
            mine.append(LeafPlan(idx, su_id, None, 0, su_nodes, down, math.ceil(down / o1)))
            idx += 1
        leaves_by_su.append(mine)

    spine_down_max = k if spec.tiers == 2 else down_ports(k, o2)
    pods = tuple(
        tuple(range(p, min(p + sus_per_pod, len(sus)))) for p in range(0, len(sus), sus_per_pod)
    )

    leaves: list[LeafPlan] = []
    spines: list[SpinePlan] = []
    only_leaf = n_leaves == 1
    for pod_id, pod_sus in enumerate(pods):
        pod_leaves = [
            LeafPlan(lf.index, lf.su, lf.rail, pod_id, lf.nodes, lf.down, 0 if only_leaf else lf.up)
            for s in pod_sus
            for lf in leaves_by_su[s]
        ]
        leaves.extend(pod_leaves)
        uplinks = sum(lf.up for lf in pod_leaves)
        if uplinks == 0:
            continue
        for down in _split(uplinks, math.ceil(uplinks / spine_down_max)):
            up = math.ceil(down / o2) if spec.tiers == 3 else 0
            spines.append(SpinePlan(len(spines), pod_id, down, up))
    core_links = sum(s.up for s in spines)
    cores = math.ceil(core_links / k) if core_links else 0
    g = spec.gpus_per_node
    group = per_su if spec.rail_optimized else len(sus[0])
    pod_gpus = max(sum(len(sus[s]) for s in pod) for pod in pods) * g
    return Layout(
        leaf_down_max=d,
        nodes_per_su=per_su,
        sus=sus,
        leaves=tuple(leaves),
        spines=tuple(spines),
        cores=cores,
        pods=pods,
        leaf_group_gpus=group * g,
        pod_gpus=pod_gpus,
    )
