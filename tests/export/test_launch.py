"""Launch exports: sbatch and PyTorchJob ask for the right nodes, ranks and command."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscale.cli import main
from gpuscale.errors import InputError
from gpuscale.export import render_launch
from gpuscale.topology import load_cluster_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"
BENCH = "gpuscale.bench.collectives -b 8 -e 8G -f 2 -o all_reduce"


def _files(name: str, **kw: Any) -> tuple[str, dict[str, Any]]:
    files = render_launch(load_cluster_spec(EXAMPLES / f"{name}.yaml"), **kw)
    sbatch = next(t for n, t in files.files.items() if n.endswith(".sbatch"))
    manifest = yaml.safe_load(next(t for n, t in files.files.items() if n.endswith(".yaml")))
    return sbatch, manifest


def test_sbatch_runs_one_torchrun_per_node() -> None:
    sbatch, _ = _files("dgx-h100-superpod-4su", nodes=4)
    assert "#SBATCH --nodes=4\n" in sbatch
    assert "#SBATCH --ntasks-per-node=1\n" in sbatch
    assert "#SBATCH --gpus-per-node=8\n" in sbatch
    assert "srun --nodes=4 --ntasks-per-node=1" in sbatch
    assert "torchrun --nnodes=4 --nproc-per-node=8" in sbatch
    assert "--rdzv-backend c10d" in sbatch
    assert f"-m {BENCH}" in sbatch


def test_sbatch_is_valid_bash() -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    sbatch, _ = _files("gb200-nvl72-8rack")
    subprocess.run([bash, "-n"], input=sbatch, text=True, check=True)


def test_manifest_is_a_pytorchjob_with_one_pod_per_node() -> None:
    _, job = _files("dgx-h100-superpod-4su", nodes=16)
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 15
    container = specs["Worker"]["template"]["spec"]["containers"][0]
    cmd = container["command"]
    assert cmd[:3] == ["torchrun", "--nnodes=16", "--nproc-per-node=8"]
    assert cmd[cmd.index("--rdzv-backend") + 1] == "c10d"
    assert " ".join(cmd[cmd.index("-m") + 1 :]) == BENCH
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8


def test_all_nodes_by_default_and_single_node_has_no_workers() -> None:
    sbatch, job = _files("gb200-nvl72-8rack")
    assert "#SBATCH --nodes=144\n" in sbatch and "--nproc-per-node=4" in sbatch
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 143
    _, one = _files("gb200-nvl72-8rack", nodes=1)
    assert set(one["spec"]["pytorchReplicaSpecs"]) == {"Master"}


def _env(job: dict[str, Any]) -> dict[str, str]:
    c = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in c["env"]}


def test_nccl_env_follows_the_fabric() -> None:
    ib_sbatch, ib = _files("dgx-h100-superpod-1su")
    _, roce = _files("hgx-h200-roce-64n-2to1")
    nvl, gb = _files("gb200-nvl72-8rack")
    # DGX H100's compute ports by exact name (its user guide, Table 6): not mlx5_1, 2, 7, 8,
    # its storage and in-band ports, which a prefix match of mlx5_1 would also take
    dgx = "=mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1"
    assert _env(ib)["NCCL_IB_HCA"] == dgx
    # NCCL 2.21+ picks the RoCE v2 GID itself: no index is set
    assert "NCCL_IB_GID_INDEX" not in _env(ib) and "NCCL_IB_GID_INDEX" not in _env(roce)
    assert "NCCL_SOCKET_IFNAME" in _env(roce)
    assert _env(ib)["NCCL_CROSS_NIC"] == "0"  # rail-optimized
    # a system whose NIC names no guide gives: none set, and the file says how to name them
    assert _env(gb)["NCCL_MNNVL_ENABLE"] == "1" and "NCCL_IB_HCA" not in _env(gb)
    assert "# export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1" in nvl
    assert f"export NCCL_IB_HCA={dgx}" in ib_sbatch and "NCCL_MNNVL_ENABLE=1" in nvl
    # the run writes the JSON validate and calibrate read, naming the cluster it ran on
    assert "--system dgx-h100 --nodes 32 --json" in ib_sbatch
    spec = EXAMPLES / "hgx-h200-roce-64n-2to1.yaml"
    named = render_launch(load_cluster_spec(spec), nodes=2, spec_path=spec)
    sbatch = next(t for n, t in named.files.items() if n.endswith(".sbatch"))
    assert f"--model {spec.resolve()} --json" in sbatch and "--system" not in sbatch


def test_bad_nodes_and_bench_are_input_errors() -> None:
    spec = load_cluster_spec(EXAMPLES / "dgx-h100-superpod-1su.yaml")
    for bad in (0, -1, 33):
        with pytest.raises(InputError) as err:
            render_launch(spec, nodes=bad)
        assert err.value.field == "--nodes" and "1..32" in err.value.valid
    with pytest.raises(InputError) as err:
        render_launch(spec, bench="collective")
    assert "did you mean collectives" in str(err.value)


def test_cli_writes_both_files(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "launch"
    main(
        [
            "export",
            "launch",
            "--cluster",
            str(EXAMPLES / "hgx-h200-roce-64n-2to1.yaml"),
            "--bench",
            "collectives",
            "--nodes",
            "8",
            "--out",
            str(out),
        ]
    )
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "hgx-h200-roce-64n-2to1-collectives-8n.pytorchjob.yaml",
        "hgx-h200-roce-64n-2to1-collectives-8n.sbatch",
    ]
    assert "#SBATCH --nodes=8\n" in (out / names[1]).read_text()


def test_cli_bad_nodes_writes_nothing(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "launch"
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "export",
                "launch",
                "--cluster",
                str(EXAMPLES / "dgx-h100-superpod-1su.yaml"),
                "--nodes",
                "64",
                "--out",
                str(out),
            ]
        )
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --nodes=64") and "\n" not in err
    assert not out.exists()
