"""Render a benchmark launch for a cluster spec: sbatch (srun + torchrun) and a PyTorchJob.

Everything is rendered and checked in memory (the manifest parses as YAML with the right
replica count and image, the sbatch asks for the right node count and command); then every
target path is checked, and only then are the files written, each through a temporary file
and an atomic rename, all or none.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import yaml

from gpuscale.errors import InputError, unknown
from gpuscale.export import templates
from gpuscale.paths import path_kind
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
    image: str = DEFAULT_IMAGE


_DGX_H100_HCAS = ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")
COMPUTE_HCAS: dict[str, tuple[str, ...]] = {"dgx-h100": _DGX_H100_HCAS, "dgx-h200": _DGX_H100_HCAS}
"""The compute NICs' RDMA device names of systems whose guide lists them: the DGX H100/H200
User Guide, Table 6 (network modules: OSFP ports to ConnectX-7 devices, mlx5_0, 3, 4, 5,
6, 9, 10, 11; mlx5_1, 2, 7, 8 are the storage and in-band ports). Named exactly (``=``):
NCCL otherwise matches by prefix, and mlx5_1 would also take mlx5_10 and mlx5_11."""


def nccl_env(spec: ClusterSpec) -> list[tuple[str, str]]:
    """NCCL environment for the spec's fabric (ordered name, value pairs).

    * ``NCCL_IB_HCA``: the compute NICs by exact name (``=mlx5_0:1,...``, port 1) where the
      system's are known (:data:`COMPUTE_HCAS`); elsewhere NCCL takes the NICs nearest each
      GPU and the files say how to name them. Both IB and RoCE go through NCCL's IB verbs.
    * ``NCCL_SOCKET_IFNAME``: bootstrap/out-of-band interface; excludes loopback and docker.
    * RoCE: no ``NCCL_IB_GID_INDEX``: NCCL 2.21 and later picks the RoCE v2 GID itself.
    * ``NCCL_CROSS_NIC``: 0 on a rail-optimized fabric (keep each ring on its rail), 1 otherwise.
    * ``NCCL_NVLS_ENABLE`` where the NVLink domain has SHARP; ``NCCL_MNNVL_ENABLE`` where the
      NVLink domain spans nodes (NVL72).
    """
    env: list[tuple[str, str]] = [
        ("NCCL_DEBUG", "WARN"),
        ("NCCL_SOCKET_IFNAME", "^lo,docker"),
    ]
    hcas = COMPUTE_HCAS.get(spec.system.key)
    if hcas is not None and len(hcas) == spec.nics_per_node:
        env.append(("NCCL_IB_HCA", "=" + ",".join(f"{h}:1" for h in hcas)))
    env.append(("NCCL_CROSS_NIC", "0" if spec.rail_optimized else "1"))
    if spec.system.nvls:
        env.append(("NCCL_NVLS_ENABLE", "1"))
    if spec.nodes_per_domain > 1:
        env.append(("NCCL_MNNVL_ENABLE", "1"))
    return env


_IMAGE_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_DOMAIN = (
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
    r"|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
)
IMAGE_RE = re.compile(
    rf"(?:{_IMAGE_DOMAIN}/)?{_IMAGE_PART}(?:/{_IMAGE_PART})*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    re.ASCII,
)
"""A container image reference, [registry[:port]/]name[:tag][@digest] (the grammar of
github.com/distribution/reference: lower-case repository path, tag of word characters)."""
IMAGE_VALID = (
    "a container image reference, registry/name:tag or name@sha256:<hex> "
    "(e.g. nvcr.io/nvidia/pytorch:24.05-py3; lower-case name; "
    "no spaces, quotes or control characters)"
)


def check_image(image: str) -> str:
    """``image`` if it is a container image reference, else an :class:`InputError`."""
    if not isinstance(image, str) or len(image) > 1024 or not IMAGE_RE.fullmatch(image):
        raise InputError("--image", image, IMAGE_VALID)
    return image


def check_cluster_name(name: str) -> str:
    """``name`` (the spec's ``name:``) if it can go into a comment line, else an InputError.

    The name is written into comment lines of the sbatch script and the manifest: a line
    break (or any other control or separator character) would end the comment and turn the
    rest of the name into shell commands or YAML.
    """
    if not name.isprintable():
        raise InputError(
            "name",
            name,
            "a cluster name of printable characters (no newlines, tabs or control characters)",
        )
    return name


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
    for role in specs.values():
        container = role["template"]["spec"]["containers"][0]
        if container["image"] != files.image:
            raise RuntimeError(f"rendered {manifest_name} has the wrong image")


def render_launch(
    spec: ClusterSpec,
    bench: str = "collectives",
    nodes: int | None = None,
    image: str = DEFAULT_IMAGE,
    job_name: str | None = None,
    spec_path: Path | None = None,
) -> LaunchFiles:
    """Render sbatch + PyTorchJob for ``bench`` on ``nodes`` nodes of ``spec`` (all by default).
    The sbatch's run writes its JSON naming the cluster it ran on: the spec file at
    ``spec_path`` (its fabric, as `validate collectives` then prices it), else the spec's
    catalog system and node count (the system's reference fabric)."""
    if bench not in BENCHES:
        raise unknown("--bench", bench, BENCHES)
    n = spec.nodes if nodes is None else nodes
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n > spec.nodes:
        raise InputError("--nodes", nodes, f"an integer 1..{spec.nodes} (nodes in {spec.name})")
    check_cluster_name(spec.name)
    check_image(image)
    module, args = BENCHES[bench]
    job = _dns_name(job_name or f"{spec.name}-{bench}-{n}n")
    roles: list[tuple[str, int]] = [("Master", 1)] + ([("Worker", n - 1)] if n > 1 else [])
    nccl = nccl_env(spec)
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
        "env": nccl,
        "cluster_args": (
            ["--model", shlex.quote(str(spec_path.resolve()))]
            if spec_path is not None
            else ["--system", spec.system.key, "--nodes", str(n)]
        ),
        "hca_named": any(k == "NCCL_IB_HCA" for k, _ in nccl),
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
        image=image,
        files={
            sbatch_name: env.from_string(templates.SBATCH).render(ctx),
            manifest_name: env.from_string(templates.PYTORCHJOB).render(ctx),
        },
    )
    _check(files, sbatch_name, manifest_name)
    return files


MODES = {".sbatch": 0o755}
"""File mode by suffix: the sbatch script is executable; the other files are 0644."""
DEFAULT_MODE = 0o644


def _out_error(out: Path, valid: str) -> InputError:
    return InputError("--out", str(out), valid)


def _missing_dirs(out: Path) -> list[Path]:
    """The directories to create for ``out``, outermost first.

    An :class:`InputError` if ``out`` or a parent exists but is not a directory, or if the
    nearest existing directory is not writable.
    """
    missing: list[Path] = []
    p = out
    while path_kind(p, "--out") != "dir":  # a name too long for the system: an error
        if os.path.lexists(p):
            where = "it exists" if p == out else f"{p} exists"
            raise _out_error(out, f"a directory ({where} and is not a directory)")
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    if not os.access(p, os.W_OK | os.X_OK):
        where = "it is" if p == out else f"{p} is"
        raise _out_error(out, f"a writable directory ({where} not writable)")
    return missing[::-1]


def _check_targets(files: LaunchFiles, out: Path) -> None:
    """No target may be a directory (a file there is replaced)."""
    for name in files.files:
        if name != Path(name).name or name in ("", ".", ".."):
            raise RuntimeError(f"launch file name {name!r} is not a plain file name")
        if (out / name).is_dir():
            raise _out_error(out, f"a directory where {name} can be written (it is a directory)")


def _backup(final: Path, out: Path) -> str | None:
    """A hard link to (or else a copy of) what is at ``final``, to restore on rollback."""
    if not os.path.lexists(final):
        return None
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.old.", dir=out)
    os.close(fd)
    try:
        os.unlink(tmp)
        os.link(final, tmp, follow_symlinks=False)
    except OSError:
        shutil.copy2(final, tmp, follow_symlinks=False)
    return tmp


def _rollback(replaced: list[Path], backups: dict[Path, str | None]) -> None:
    """Put back what was at each replaced path (best effort)."""
    for final in reversed(replaced):
        old = backups.get(final)
        with contextlib.suppress(OSError):
            if old is None:
                final.unlink()
            else:
                os.replace(old, final)


def write_launch(files: LaunchFiles, out_dir: Path) -> list[Path]:
    """Write every file of ``files`` under ``out_dir``: all of them or none.

    Before anything is created, ``out_dir`` (or its nearest existing parent) must be a
    writable directory and no target may be a directory. Each file is staged as a temporary
    file with its final mode (0755 for the sbatch script, 0644 otherwise) and only then are
    all renamed into place; if one rename fails, the ones done are rolled back, and the
    directories created for ``out_dir`` are removed again.
    """
    out = Path(out_dir)
    missing = _missing_dirs(out)
    _check_targets(files, out)
    made: list[Path] = []
    staged: list[tuple[str, Path]] = []
    backups: dict[Path, str | None] = {}
    replaced: list[Path] = []
    ok = False
    try:
        try:
            for d in missing:
                d.mkdir()
                made.append(d)
            for name, text in files.files.items():
                fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=out)
                staged.append((tmp, out / name))
                with os.fdopen(fd, "w") as fh:
                    os.fchmod(fh.fileno(), MODES.get(Path(name).suffix, DEFAULT_MODE))
                    fh.write(text)
            for _, final in staged:
                backups[final] = _backup(final, out)
            for tmp, final in staged:
                os.replace(tmp, final)
                replaced.append(final)
        except OSError as exc:
            _rollback(replaced, backups)
            raise _out_error(
                out, f"a directory the launch files can be written to ({exc.strerror or exc})"
            ) from None
        ok = True
        return replaced
    finally:
        leftovers = [tmp for tmp, _ in staged] + [b for b in backups.values() if b is not None]
        for tmp in leftovers:
            with contextlib.suppress(OSError):
                if os.path.lexists(tmp):
                    os.unlink(tmp)
        if not ok:
            for d in reversed(made):
                with contextlib.suppress(OSError):
                    d.rmdir()
