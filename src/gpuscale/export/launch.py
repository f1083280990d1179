"""Render a benchmark launch for a cluster spec: sbatch (srun + torchrun) and a PyTorchJob.

Everything is rendered and checked in memory (the manifest parses as YAML with the right
replica count, the sbatch asks for the right node count and command); only then are the
files written, each through a temporary file and an atomic rename.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import yaml

from gpuscale.errors import InputError, unknown
from gpuscale.export import templates
from gpuscale.topology.spec import ClusterSpec

BENCHES: dict[str, tuple[str, tuple[str, ...]]] = {
    "collectives": (
        "gpuscale.bench.collectives",
        ("-b", "8", "-e", "8G", "-f", "2", "-o", "all_reduce"),
    ),
}
"""Bench name -> (python module, arguments): nccl-tests-style sweep 8 B .. 8 GB, x2 steps."""

RDZV_PORT = 29500
"""torchrun's default rendezvous/master port."""
DEFAULT_IMAGE = "gpuscale:latest"
"""Placeholder image: any image with PyTorch (CUDA, NCCL) and gpuscale installed."""
DEFAULT_TIME_LIMIT = "00:30:00"


@dataclass(frozen=True)
class LaunchFiles:
    """Rendered launch files: file name -> text, plus what they were rendered for."""

    job_name: str
    nodes: int
    gpus_per_node: int
    command: tuple[str, ...]
    files: dict[str, str]


def nccl_env(spec: ClusterSpec) -> list[tuple[str, str]]:
    """NCCL environment for the spec's fabric (ordered name, value pairs).

    * ``NCCL_IB_HCA``: the compute NICs, ``mlx5_0:1`` .. one per NIC (port 1); both IB and
      RoCE go through NCCL's IB verbs transport.
    * ``NCCL_SOCKET_IFNAME``: bootstrap/out-of-band interface; excludes loopback and docker.
    * RoCE: ``NCCL_IB_GID_INDEX=3`` (the RoCE v2 IPv4 GID on the default mlx5 GID table).
    * ``NCCL_CROSS_NIC``: 0 on a rail-optimized fabric (keep each ring on its rail), 1 otherwise.
    * ``NCCL_NVLS_ENABLE`` where the NVLink domain has SHARP; ``NCCL_MNNVL_ENABLE`` where the
      NVLink domain spans nodes (NVL72).
    """
    env: list[tuple[str, str]] = [
        ("NCCL_DEBUG", "WARN"),
        ("NCCL_SOCKET_IFNAME", "^lo,docker"),
        ("NCCL_IB_HCA", ",".join(f"mlx5_{i}:1" for i in range(spec.nics_per_node))),
    ]
    if spec.protocol == "roce":
        env.append(("NCCL_IB_GID_INDEX", "3"))
    env.append(("NCCL_CROSS_NIC", "0" if spec.rail_optimized else "1"))
    if spec.system.nvls:
        env.append(("NCCL_NVLS_ENABLE", "1"))
    if spec.nodes_per_domain > 1:
        env.append(("NCCL_MNNVL_ENABLE", "1"))
    return env


def _dns_name(text: str) -> str:
    """A Kubernetes DNS-1123 label from ``text``."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].strip("-")
    return name or "gpuscale"


def _check(files: LaunchFiles, sbatch_name: str, manifest_name: str) -> None:
    """Refuse to write launch files that do not say what they were rendered for."""
    sb = files.files[sbatch_name]
    want = " ".join(files.command)
    if f"#SBATCH --nodes={files.nodes}\n" not in sb or want not in sb:
        raise RuntimeError(f"rendered {sbatch_name} lacks the node count or command")
    doc = yaml.safe_load(files.files[manifest_name])
    specs = doc["spec"]["pytorchReplicaSpecs"]
    if sum(int(r["replicas"]) for r in specs.values()) != files.nodes:
        raise RuntimeError(f"rendered {manifest_name} has the wrong replica count")


def render_launch(
    spec: ClusterSpec,
    bench: str = "collectives",
    nodes: int | None = None,
    image: str = DEFAULT_IMAGE,
    job_name: str | None = None,
) -> LaunchFiles:
    """Render sbatch + PyTorchJob for ``bench`` on ``nodes`` nodes of ``spec`` (all by default)."""
    if bench not in BENCHES:
        raise unknown("--bench", bench, BENCHES)
    n = spec.nodes if nodes is None else nodes
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n > spec.nodes:
        raise InputError("--nodes", nodes, f"an integer 1..{spec.nodes} (nodes in {spec.name})")
    module, args = BENCHES[bench]
    job = _dns_name(job_name or f"{spec.name}-{bench}-{n}n")
    roles: list[tuple[str, int]] = [("Master", 1)] + ([("Worker", n - 1)] if n > 1 else [])
    ctx: dict[str, Any] = {
        "spec_name": spec.name,
        "system": spec.system.key,
        "fabric": spec.fabric.key,
        "fabric_name": spec.fabric.name,
        "protocol": spec.protocol,
        "rail_optimized": spec.rail_optimized,
        "spec_nodes": spec.nodes,
        "nodes": n,
        "gpus_per_node": spec.gpus_per_node,
        "job_name": job,
        "time_limit": DEFAULT_TIME_LIMIT,
        "rdzv_port": RDZV_PORT,
        "env": nccl_env(spec),
        "module": module,
        "args": list(args),
        "image": image,
        "roles": roles,
        "roles_text": " + ".join(f"{r} x{c}" for r, c in roles),
        "gpus": n * spec.gpus_per_node,
        "multinode_nvlink": spec.nodes_per_domain > 1,
    }
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
    )
    env.filters["sh"] = shlex.quote
    sbatch_name, manifest_name = f"{job}.sbatch", f"{job}.pytorchjob.yaml"
    files = LaunchFiles(
        job_name=job,
        nodes=n,
        gpus_per_node=spec.gpus_per_node,
        command=(module, *args),
        files={
            sbatch_name: env.from_string(templates.SBATCH).render(ctx),
            manifest_name: env.from_string(templates.PYTORCHJOB).render(ctx),
        },
    )
    _check(files, sbatch_name, manifest_name)
    return files


def write_launch(files: LaunchFiles, out_dir: Path) -> list[Path]:
    """Write every file of ``files`` under ``out_dir`` (temporary file + rename each)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError("--out", str(out), "a directory (it exists as a file)")
    out.mkdir(parents=True, exist_ok=True)
    staged: list[tuple[str, Path]] = []
    try:
        for name, text in files.files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=out)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            staged.append((tmp, out / name))
        written = []
        for tmp, final in staged:
            os.replace(tmp, final)
            if final.suffix == ".sbatch":
                final.chmod(0o755)
            written.append(final)
        return written
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
