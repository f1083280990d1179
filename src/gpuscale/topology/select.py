"""The cluster a command prices collectives on: a cluster YAML, or a catalog system and a
node count (the same choice ``comm estimate --cluster`` and ``bench collectives --model``
offer)."""

from __future__ import annotations

from pathlib import Path

from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric


def fabric_for(
    cluster: Path | None, system: str | None, nodes: int | None, cluster_flag: str = "--cluster"
) -> Fabric:
    """A Fabric from a cluster YAML (``cluster_flag``) or from ``--system NAME --nodes N``,
    not both; each flag's error names it, the value and what is valid."""
    if cluster is not None and (system is not None or nodes is not None):
        given = " ".join(f for f, v in (("--system", system), ("--nodes", nodes)) if v is not None)
        raise InputError(
            cluster_flag,
            str(cluster),
            f"give either {cluster_flag} or --system/--nodes, not {given} too",
        )
    if cluster is not None:
        from gpuscale.topology.spec import load_cluster_spec

        return load_cluster_spec(cluster).to_fabric()
    if system is None:
        raise InputError(
            cluster_flag, "(missing)", "a cluster YAML, or --system NAME with --nodes N"
        )
    from gpuscale.catalog import get_system

    sys_ = get_system(system, field="--system")
    if nodes is None or nodes < 1:
        raise InputError(
            "--nodes",
            "(missing)" if nodes is None else nodes,
            "a node count of at least 1 with --system",
        )
    return Fabric.from_system(sys_, total_gpus=nodes * sys_.gpus_per_node)
