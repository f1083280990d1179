"""Oversubscribed leaves, NVL72 domains and non-rail fabrics."""

from __future__ import annotations

from typing import Any

import pytest

from gpuscale.errors import InputError
from gpuscale.topology.bom import cluster_report


def _tier(report: Any, tier: str) -> Any:
    return next(t for t in report.tiers_bom if t.tier == tier)


def test_two_to_one_halves_leaf_uplinks_and_spines(example: Any, variant: Any) -> None:
    over = cluster_report(example("hgx-h200-roce-64n-2to1"))
    flat = cluster_report(variant("hgx-h200-roce-64n-2to1", topology__oversubscription=1))
    assert _tier(flat, "leaf").uplinks == 512
    assert _tier(over, "leaf").uplinks == 256 == _tier(flat, "leaf").uplinks // 2
    assert _tier(over, "leaf").downlinks == _tier(flat, "leaf").downlinks == 512
    # SN5600 at 400 GbE: 128 ports -> 512 / 128 = 4 spines, 256 / 128 = 2
    assert (_tier(flat, "spine").switches, _tier(over, "spine").switches) == (4, 2)
    assert over.bisection_bw_Bps == pytest.approx(flat.bisection_bw_Bps / 2)
    # 64 x 8 x 400 Gb/s / 2 / 2 = 51.2 Tb/s = 6.4 TB/s
    assert over.bisection_bw_Bps == pytest.approx(6.4e12)


def test_oversubscribed_fabric_tells_the_collective_model(example: Any) -> None:
    f = example("hgx-h200-roce-64n-2to1").to_fabric()
    assert f.oversubscription == 2.0
    assert f.leaf_gpus == 32 * 8  # one SU of 32 nodes sits below the 2:1 tier
    assert f.total_gpus == 512


def test_ratio_strings_parse(variant: Any) -> None:
    spec = variant("hgx-h200-roce-64n-2to1", topology__oversubscription={"leaf": "3:1"})
    assert spec.oversubscription_leaf == 3.0


def test_gb200_nvl72_domain_spans_18_trays(example: Any) -> None:
    spec = example("gb200-nvl72-8rack")
    assert (spec.total_gpus, spec.domain_gpus, spec.nodes_per_domain) == (576, 72, 18)
    r = cluster_report(spec)
    hops = {h.scope: h.switch_hops for h in r.hops}
    assert hops["within NVLink domain, other node"] == 1
    assert r.racks == 8
    # 4 rails x 8 racks, one leaf each (18 down, 18 up); 576 uplinks / 64 = 9 spines
    assert (_tier(r, "leaf").switches, _tier(r, "spine").switches) == (32, 9)
    assert spec.to_fabric().domain_gpus == 72


def test_not_rail_optimized_puts_whole_nodes_on_one_leaf(variant: Any) -> None:
    spec = variant(
        "dgx-h100-superpod-4su", topology__rail_optimized=False, topology__nodes_per_su=None
    )
    lay = spec.layout()
    assert lay.nodes_per_su == 4  # 32 downlinks / 8 NICs
    assert len(lay.leaves) == 32 and all(lf.rail is None for lf in lay.leaves)
    hops = {h.scope: h.switch_hops for h in cluster_report(spec).hops}
    assert hops["same leaf"] == 1


def test_nvl72_nodes_must_fill_whole_racks(variant: Any) -> None:
    with pytest.raises(InputError) as err:
        variant("gb200-nvl72-8rack", nodes=100)
    assert err.value.field == "nodes" and "multiple of 18" in err.value.valid


def test_spine_oversubscription_needs_three_tiers(variant: Any) -> None:
    with pytest.raises(InputError) as err:
        variant("dgx-h100-superpod-4su", topology__oversubscription={"spine": 2})
    assert err.value.field == "topology.oversubscription.spine"
