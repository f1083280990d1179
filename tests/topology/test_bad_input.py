"""Bad cluster specs fail through the CLI with exit code 2 and one line naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscale.cli import main
from gpuscale.errors import InputError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"

BASE = yaml.safe_load((EXAMPLES / "dgx-h100-superpod-1su.yaml").read_text())


def _run(capsys: Any, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def _spec(tmp_path: Path, **changes: Any) -> Path:
    raw = yaml.safe_load(yaml.safe_dump(BASE))
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = raw
        for p in parents:
            node = node[p]
        node[last] = value
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(
    ("changes", "field", "hint"),
    [
        ({"topology__oversubscription": {"leaf": 0.5}}, "topology.oversubscription.leaf", ">= 1"),
        ({"topology__oversubscription": {"leaf": "1:2"}}, "topology.oversubscription.leaf", ">= 1"),
        ({"nics_per_node": 12}, "nics_per_node", "10 PCIe slots"),
        ({"system": "dgx-h10"}, "system", "did you mean"),
        ({"fabric__kind": "ib-ndx"}, "fabric.kind", "ib-ndr"),
        ({"fabric__kind": "roce-400", "fabric__switch": "qm9700"}, "fabric.switch", "sn5600"),
        ({"nodes": 0}, "nodes", "positive integer"),
        ({"nodes": 3.5}, "nodes", "positive integer"),
        ({"nodes": "many"}, "nodes", "positive integer"),
        ({"topology__tiers": 4}, "topology.tiers", "2 or 3"),
        ({"topology__radix": 65}, "topology.radix", "at most 64"),
        ({"nic_gbps": 200}, "nic_gbps", ">= 400"),
        ({"topology__flavour": "x"}, "topology.flavour", "unknown key"),
        ({"host_cpu": "sparc"}, "host_cpu", "intel, amd or arm"),
        # the name becomes the exported files' names: a blank one would name none
        ({"name": "  "}, "name", "a non-blank name"),
    ],
)
def test_bad_field_is_one_line_exit_2(
    tmp_path: Path, capsys: Any, changes: dict[str, Any], field: str, hint: str
) -> None:
    err = _run(capsys, ["cluster", "show", str(_spec(tmp_path, **changes))])
    assert err.startswith(f"error: {field}=")
    assert hint in err


def test_missing_fabric_names_required_keys(tmp_path: Path, capsys: Any) -> None:
    raw = dict(BASE)
    del raw["fabric"]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert "fabric" in _run(capsys, ["cluster", "show", str(path)])


def test_malformed_yaml_names_line(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nsystem: [dgx-h100\nnodes: 4\n")
    err = _run(capsys, ["cluster", "show", str(path)])
    assert err.startswith("error: cluster=") and "well-formed YAML" in err and "line" in err


def test_missing_file(tmp_path: Path, capsys: Any) -> None:
    err = _run(capsys, ["cluster", "show", str(tmp_path / "nope.yaml")])
    assert "no such file; give a cluster YAML file" in err


def test_show_prints_tables_and_json(capsys: Any) -> None:
    import json

    main(["cluster", "show", str(EXAMPLES / "dgx-h100-superpod-4su.yaml"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["switches_total"] == 48
    assert data["bisection_bw_Bps"] == pytest.approx(25.6e12)
    main(["cluster", "show", str(EXAMPLES / "dgx-h100-superpod-4su.yaml")])
    text = capsys.readouterr().out
    assert "bill of materials" in text and "25.6 TB/s" in text and "204.8 Tb/s" in text


def test_host_cpu_sets_nccls_network_overhead(tmp_path: Path) -> None:
    # a DGX H100 SuperPOD has Intel hosts (1 us); the same boards with AMD EPYC hosts pay
    # NCCL's 2 us per network step (tuning.cc getNetOverhead)
    from gpuscale.topology.spec import load_cluster_spec

    intel = load_cluster_spec(_spec(tmp_path)).to_fabric()
    amd = load_cluster_spec(_spec(tmp_path, host_cpu="amd")).to_fabric()
    assert (intel.net_overhead_s, amd.net_overhead_s) == (1e-6, 2e-6)


@pytest.mark.parametrize(
    ("changes", "field", "hint"),
    [
        ({"nodes": 10**9}, "nodes", "up to 16,777,216"),
        ({"nodes": 10**7}, "nodes", "at most 2,097,152 dgx-h100 nodes"),
        ({"topology__nodes_per_su": 10**9}, "topology.nodes_per_su", "up to 16,777,216"),
        ({"placement__racks_per_row": 10**9}, "placement.racks_per_row", "up to 16,777,216"),
        ({"placement__power_feeds_per_rack": 10**6}, "placement.power_feeds_per_rack", "up to 64"),
    ],
)
def test_a_count_beyond_its_bound_is_refused(
    tmp_path: Path, capsys: Any, changes: dict[str, Any], field: str, hint: str
) -> None:
    err = _run(capsys, ["cluster", "show", str(_spec(tmp_path, **changes))])
    assert err.startswith(f"error: {field}=") and hint in err


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"nodes": 2_000_000}, "topology.tiers"),
        ({"nodes": 2_000_000, "topology__tiers": 3}, "nodes"),
    ],
)
def test_a_tree_too_small_is_refused_before_its_switches_are_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changes: dict[str, Any], field: str
) -> None:
    # two million nodes used to be laid out leaf by leaf (seconds, GBs at ten million)
    # before the tree's reach was checked
    from gpuscale.topology import layout
    from gpuscale.topology.spec import load_cluster_spec

    def no_leaves(*_: object) -> None:
        raise AssertionError("leaves listed before the tree's reach was checked")

    monkeypatch.setattr(layout, "LeafPlan", no_leaves)
    with pytest.raises(InputError) as exc:
        load_cluster_spec(_spec(tmp_path, **changes))
    assert exc.value.field == field


def test_a_partial_last_scalable_unit_is_said(tmp_path: Path, capsys: Any) -> None:
    # 32 nodes in units of 5: six whole units and a seventh of 2 nodes, whose rail leaves
    # are bought as a whole unit's
    main(["cluster", "show", str(_spec(tmp_path, topology__nodes_per_su=5))])
    assert "7 x 5 nodes (the last with 2)" in capsys.readouterr().out
