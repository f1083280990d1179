"""Invariants of any buildable fat tree: ports fit, every NIC cabled once, bisection bounded."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscale.errors import InputError
from gpuscale.topology import parse_cluster_spec
from gpuscale.topology.bom import cluster_report


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(1, 300),
    rail=st.booleans(),
    tiers=st.sampled_from([2, 3]),
    leaf=st.sampled_from([1.0, 1.5, 2.0, 3.0]),
    spine=st.sampled_from([1.0, 2.0]),
    fabric=st.sampled_from(["ib-ndr", "roce-400", "ib-hdr"]),
)
def test_any_buildable_tree_fits_its_ports(
    nodes: int, rail: bool, tiers: int, leaf: float, spine: float, fabric: str
) -> None:
    system = "dgx-a100" if fabric == "ib-hdr" else "dgx-h100"
    raw = {
        "name": "prop",
        "system": system,
        "nodes": nodes,
        "fabric": {"kind": fabric},
        "topology": {
            "rail_optimized": rail,
            "tiers": tiers,
            "oversubscription": {"leaf": leaf, "spine": spine if tiers == 3 else 1},
        },
    }
    try:
        spec = parse_cluster_spec(raw)
    except InputError as err:  # e.g. too many leaves for 2 tiers: a clear refusal is fine
        assert err.field in ("topology.tiers", "nics_per_node", "nodes")
        return
    r = cluster_report(spec)
    for t in r.tiers_bom:
        assert t.ports_used <= t.ports_available
    assert r.links_by_tier["node-leaf"] == nodes * spec.nics_per_node
    assert r.bisection_bw_Bps <= r.injection_bw_Bps_total / 2 * (1 + 1e-12)
    leaf_tier = next(t for t in r.tiers_bom if t.tier == "leaf")
    if leaf_tier.switches > 1:
        assert leaf_tier.uplinks * leaf >= leaf_tier.downlinks - 1e-9
    assert spec.to_fabric().total_gpus == spec.total_gpus == nodes * spec.gpus_per_node


@pytest.mark.parametrize("ratio", [1.0, 2.0, 3.0])
def test_bisection_scales_inversely_with_leaf_ratio(ratio: float) -> None:
    raw = {
        "name": "r",
        "system": "dgx-h100",
        "nodes": 128,
        "fabric": {"kind": "ib-ndr"},
        "topology": {"nodes_per_su": 32, "oversubscription": ratio},
    }
    r = cluster_report(parse_cluster_spec(raw))
    # 32 downlinks per leaf, ceil(32 / ratio) whole uplinks: 32, 16, 11 -> 1, 1/2, 11/32
    assert r.bisection_ratio == pytest.approx(math.ceil(32 / ratio) / 32)
