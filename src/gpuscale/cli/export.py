"""`gpuscale export launch --cluster cluster.yaml --bench collectives [--nodes N] [--out DIR]`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuscale.cli._common import out

app = typer.Typer(no_args_is_help=True)


@app.command("launch")
def launch(
    cluster: Annotated[Path, typer.Option("--cluster", help="Cluster spec YAML.")],
    bench: Annotated[str, typer.Option("--bench", help="Benchmark to launch.")] = "collectives",
    nodes: Annotated[
        int | None, typer.Option("--nodes", help="Nodes to run on (default: all).")
    ] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="Directory for the files.")] = Path("."),
    image: Annotated[
        str, typer.Option("--image", help="Container image for the Kubernetes manifest.")
    ] = "gpuscale:latest",
) -> None:
    """Write a Slurm sbatch script and a Kubeflow PyTorchJob that run the benchmark."""
    from gpuscale.export import render_launch, write_launch
    from gpuscale.topology import load_cluster_spec

    spec = load_cluster_spec(cluster)
    files = render_launch(spec, bench=bench, nodes=nodes, image=image, spec_path=cluster)
    for path in write_launch(files, out_dir):
        out.print(f"wrote {path}", highlight=False)
    out.print(
        f"{files.nodes} nodes x {files.gpus_per_node} GPUs: {' '.join(files.command)}",
        highlight=False,
    )
