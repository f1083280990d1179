"""Rail-optimized fat trees against NVIDIA's published DGX SuperPOD switch counts.

Source of the reference counts: NVIDIA DGX SuperPOD H100 reference architecture, "Network
Fabrics", compute fabric component table
(https://docs.nvidia.com/dgx-superpod/reference-architecture-scalable-infrastructure-h100/latest/network-fabrics.html;
also /work/shared/reference/fabric_specs.csv f055/f056):
1 SU: 31 nodes, 8 leaf, 4 spine; 2 SU: 63 nodes, 16 leaf, 8 spine; 4 SU: 127 nodes, 32 leaf,
16 spine, 1020 node-leaf cables, 1024 spine-leaf cables. The RA fills one node slot per SU
with a UFM appliance; gpuscale models 32 DGX H100 per SU (the examples) and, as a check, the
127-node count too. The 16-SU three-tier counts (128 leaf, 128 spine, 64 core) are from the
DGX SuperPOD B200 RA (fabric_specs.csv f057), which keeps the same 8-rail, 32-node SU.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuscale.errors import InputError
from gpuscale.topology.bom import cluster_report
from gpuscale.topology.build import build_graph, failure_domains

NDR_Bps = 400e9 / 8.0


def _switches(report: Any) -> dict[str, int]:
    return {t.tier: t.switches for t in report.tiers_bom}


def test_one_su_has_eight_rail_leaves_and_four_spines(example: Any) -> None:
    r = cluster_report(example("dgx-h100-superpod-1su"))
    assert _switches(r) == {"leaf": 8, "spine": 4, "core": 0}
    assert {lf.rail for lf in example("dgx-h100-superpod-1su").layout().leaves} == set(range(8))


def test_two_su_matches_ra_sixteen_leaf_eight_spine(variant: Any) -> None:
    r = cluster_report(variant("dgx-h100-superpod-4su", nodes=64))
    assert _switches(r) == {"leaf": 16, "spine": 8, "core": 0}


def test_four_su_bom_matches_ra_32_leaf_16_spine(example: Any) -> None:
    r = cluster_report(example("dgx-h100-superpod-4su"))
    assert _switches(r) == {"leaf": 32, "spine": 16, "core": 0}
    assert r.switch_model == "qm9700" and r.switch_radix == 64
    # RA: 1024 spine-leaf cables; node-leaf 1020 = 127 x 8 + 4 UFM, here 128 x 8
    assert r.links_by_tier == {"node-leaf": 1024, "leaf-spine": 1024, "spine-core": 0}
    assert r.cables == 2048
    # every leaf and spine port in use: 48 switches x 64 ports
    assert sum(t.ports_used for t in r.tiers_bom) == 48 * 64
    # optics: one per NIC; twin-port OSFP cages on switches = 48 x 64 / 2
    assert r.transceivers_node_side == 1024
    assert r.transceivers_switch_side == 1536


def test_four_su_with_ra_127_nodes_keeps_switch_counts(variant: Any) -> None:
    r = cluster_report(variant("dgx-h100-superpod-4su", nodes=127))
    assert _switches(r) == {"leaf": 32, "spine": 16, "core": 0}
    assert r.links_by_tier["node-leaf"] == 1020 - 4  # RA count less its 4 UFM cables


def test_four_su_bisection_by_hand(example: Any) -> None:
    r = cluster_report(example("dgx-h100-superpod-4su"))
    # 128 nodes x 8 NICs x 400 Gb/s = 409.6 Tb/s injection; non-blocking: half crosses
    assert r.injection_bw_Bps_per_gpu == pytest.approx(NDR_Bps)
    assert r.injection_bw_Bps_total == pytest.approx(128 * 8 * NDR_Bps)
    assert r.bisection_bw_Bps == pytest.approx(128 * 8 * NDR_Bps / 2)  # 25.6 TB/s
    assert r.bisection_bw_Bps == pytest.approx(25.6e12)
    assert r.bisection_ratio == pytest.approx(1.0)


def test_hop_counts_node_rail_spine(example: Any) -> None:
    hops = {h.scope: h.switch_hops for h in cluster_report(example("dgx-h100-superpod-4su")).hops}
    assert hops["within node"] == 1  # NVSwitch
    assert hops["same rail, same leaf"] == 1
    assert hops["other rail, same SU (no PXN)"] == 3
    assert hops["other SU, across spine"] == 3


def test_sixteen_su_needs_three_tiers_and_matches_b200_ra(variant: Any) -> None:
    with pytest.raises(InputError) as err:
        variant("dgx-h100-superpod-4su", system="hgx-b200", nodes=512)
    assert err.value.field == "topology.tiers"
    r = cluster_report(
        variant("dgx-h100-superpod-4su", system="hgx-b200", nodes=512, topology__tiers=3)
    )
    assert _switches(r) == {"leaf": 128, "spine": 128, "core": 64}
    assert r.pods == 4
    hops = {h.scope: h.switch_hops for h in r.hops}
    assert hops["other pod, across core"] == 5
    assert r.bisection_ratio == pytest.approx(1.0)


def test_to_fabric_contract_for_the_4su_pod(example: Any) -> None:
    spec = example("dgx-h100-superpod-4su")
    f = spec.to_fabric()
    assert (spec.nodes, spec.total_gpus, spec.system.key) == (128, 1024, "dgx-h100")
    assert (f.domain_gpus, f.gpus_per_node, f.total_gpus) == (8, 8, 1024)
    assert f.scaleup_bw_Bps == pytest.approx(450e9)
    assert f.nic_bw_Bps_per_gpu == pytest.approx(NDR_Bps)
    assert f.nvls is True
    assert (f.leaf_gpus, f.oversubscription) == (1024, 1.0)


def test_placement_gives_racks_rows_and_feeds(example: Any) -> None:
    spec = example("dgx-h100-superpod-4su")
    domains = failure_domains(build_graph(spec))
    assert len(domains["rack"]) == 32 and all(len(v) == 4 for v in domains["rack"].values())
    assert len(domains["row"]) == 4 and all(len(v) == 32 for v in domains["row"].values())
    assert len(domains["feed"]) == 8  # 2 feeds per row
    r = cluster_report(spec)
    assert (r.racks, r.rows, r.power_feeds) == (32, 4, 8)
