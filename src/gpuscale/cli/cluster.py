"""`gpuscale cluster show cluster.yaml [--json]`: spec summary, BOM, bandwidth, hop counts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gpuscale.cli._common import emit_json, out
from gpuscale.units import fmt_rate

app = typer.Typer(no_args_is_help=True)

Spec = Annotated[Path, typer.Argument(help="Cluster spec YAML (see examples/clusters/).")]
Json = Annotated[bool, typer.Option("--json", help="Write one JSON object to stdout.")]


def _bw(x_Bps: float) -> str:
    return f"{fmt_rate(x_Bps, 'B/s')} ({fmt_rate(x_Bps * 8.0, 'b/s')})"


@app.command("show")
def show(spec: Spec, json: Json = False) -> None:
    """Summary, bill of materials, bisection and injection bandwidth, hop counts."""
    from gpuscale.topology import load_cluster_spec
    from gpuscale.topology.bom import cluster_report

    r = cluster_report(load_cluster_spec(spec))
    if json:
        emit_json(r.to_dict())
        return
    s = Table(title=f"cluster {r.name}", show_header=False)
    s.add_column("item")
    s.add_column("value")
    over = f"leaf {r.oversubscription_leaf:g}:1"
    if r.tiers == 3:
        over += f", spine {r.oversubscription_spine:g}:1"
    for k, v in (
        ("system", f"{r.system}: {r.nodes} nodes x {r.gpus_per_node} GPUs = {r.total_gpus} GPUs"),
        ("NVLink domain", f"{r.domain_gpus} GPUs"),
        ("NICs", f"{r.nics_per_node} per node at {r.link_gbps:g} Gb/s"),
        ("fabric", f"{r.fabric} ({r.protocol}), {r.switch_model} radix {r.switch_radix}"),
        (
            "topology",
            f"{r.tiers}-tier fat tree, "
            f"{'rail-optimized' if r.rail_optimized else 'not rail-optimized'}, {over}",
        ),
        ("scalable units", _units(r.nodes, r.scalable_units, r.nodes_per_su, r.pods)),
        ("placement", f"{r.racks} racks in {r.rows} row(s), {r.power_feeds} power feeds"),
    ):
        s.add_row(k, v)
    out.print(s)

    b = Table(title="bill of materials (compute fabric)")
    for col in ("tier", "switches", "downlinks", "uplinks", "ports used / avail", "transceivers"):
        b.add_column(col, justify="left" if col == "tier" else "right")
    for t in r.tiers_bom:
        if t.switches:
            b.add_row(
                t.tier,
                str(t.switches),
                str(t.downlinks),
                str(t.uplinks),
                f"{t.ports_used} / {t.ports_available}",
                str(t.transceivers),
            )
    b.add_row("total", str(r.switches_total), "", "", "", str(r.transceivers_switch_side))
    out.print(b)
    out.print(
        "  transceivers: switch ports only; the links and optics below add the node side's",
        style="dim",
    )
    c = Table(title="links and optics")
    c.add_column("item")
    c.add_column("count", justify="right")
    for tier, n in r.links_by_tier.items():
        if n:
            c.add_row(f"{tier} cables", str(n))
    c.add_row("cables total", str(r.cables))
    c.add_row("transceivers, node side", str(r.transceivers_node_side))
    c.add_row("transceivers, switch side", str(r.transceivers_switch_side))
    out.print(c)

    w = Table(title="bandwidth (one direction)", show_header=False)
    w.add_column("item")
    w.add_column("value", justify="right")
    w.add_row("injection per GPU", _bw(r.injection_bw_Bps_per_gpu))
    w.add_row("injection total", _bw(r.injection_bw_Bps_total))
    w.add_row("bisection", _bw(r.bisection_bw_Bps))
    w.add_row("bisection / half injection", f"{r.bisection_ratio:.2f}")
    out.print(w)

    h = Table(title="hop counts (switches traversed, shortest path)")
    for col in ("scope", "switch hops", "path"):
        h.add_column(col, justify="right" if col == "switch hops" else "left")
    for hop in r.hops:
        h.add_row(hop.scope, str(hop.switch_hops), hop.path)
    out.print(h)
    for note in r.notes:
        out.print(f"note: {note}")


def _units(nodes: int, units: int, per_unit: int, pods: int) -> str:
    """The scalable units, the last one's nodes where it is partial (its rail leaves are
    bought whole: the unit's size is the design's)."""
    last = nodes - (units - 1) * per_unit
    partial = f" (the last with {last})" if units > 1 and last < per_unit else ""
    return f"{units} x {per_unit} nodes{partial}, {pods} pod(s)"
