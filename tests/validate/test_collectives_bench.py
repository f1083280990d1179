"""`gpuscale bench collectives --json` output as collective validation rows: scored (large
messages' bus bandwidth) and reported (small messages' time) on the cluster the bench names,
and the link constants calibrated on it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from cli_runner import run_cli

from gpuscale.calibrate import default_calibration
from gpuscale.calibrate.fitting import fit_runs
from gpuscale.catalog import get_system
from gpuscale.perf.comm import Fabric, estimate
from gpuscale.validate.collectives import validate_collectives

CAL = default_calibration()
GiB = 2**30
ROOT = Path(__file__).resolve().parents[2]


def _bench(tmp_path: Path, backend: str = "nccl", cluster: object = None) -> Path:
    """A bench file of an 8-rank all-reduce inside one DGX H100: 8 GiB at 400 GB/s bus
    bandwidth (below the 480 nccl-tests shows on such boxes) and 1 KiB in 30 us."""
    d: dict[str, object] = {
        "measured": {
            "op": "all_reduce",
            "ranks": 8,
            "backend": backend,
            "dtype": "float32",
            "emulated": False,
            "rows": [
                {"size_bytes": 8 * GiB, "oop_time_us": 37_581.0, "oop_busbw": 400.0},
                {"size_bytes": 1024, "oop_time_us": 30.0, "oop_busbw": 0.06},
            ],
        }
    }
    if cluster is not False:
        d["cluster"] = cluster or {"system": "dgx-h100", "nodes": 1}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(d))
    return path


def test_each_size_is_priced_on_the_cluster_the_bench_names(tmp_path: Path) -> None:
    rep = validate_collectives(_bench(tmp_path), CAL)
    big, small = rep.rows
    fabric = Fabric.from_system(get_system("dgx-h100"), total_gpus=8)
    est = estimate("all_reduce", 8 * GiB, 8, fabric, CAL)
    assert big.status == "scored" and big.metric == "busbw_GBps"
    assert big.predicted == pytest.approx(float(est.busbw_Bps) / 1e9)
    assert big.measured == 400.0
    assert small.status == "reported" and small.metric == "time_us"
    assert "torch.distributed" in small.reason


def test_calibrating_on_the_bench_moves_the_nvlink_efficiency(tmp_path: Path) -> None:
    path = _bench(tmp_path)
    (row,) = validate_collectives(path, CAL).scored
    assert row.predicted is not None
    fitted = fit_runs("collectives", path, None, ["scaleup_eff"])
    # the bus bandwidth of 8 GiB is NVLink's rate x scaleup_eff: scaled by measured/predicted
    assert fitted.cal.scaleup_eff == pytest.approx(
        CAL.scaleup_eff * 400.0 / row.predicted, rel=0.01
    )
    assert fitted.after["busbw_GBps_mape"] < 1.0


def test_gloo_rows_and_a_file_without_its_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = validate_collectives(_bench(tmp_path, backend="gloo"), CAL).rows
    assert all(r.status == "skipped" and "Gloo" in r.reason for r in rows)
    code, out, err = run_cli(
        ["validate", "collectives", "--runs", str(_bench(tmp_path, cluster=False))], capsys
    )
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert "--runs=" in line and "--system NAME --nodes N" in line
    bad = _bench(tmp_path, cluster={"system": "dgx-h100", "nodes": 0})
    code, _, err = run_cli(["calibrate", "collectives", "--runs", str(bad)], capsys)
    assert code == 2 and "bench.json:cluster.nodes=0" in err


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not importable")
def test_the_bench_records_the_cluster_it_priced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "b.json"
    args = ["bench", "collectives", "-N", "2", "-b", "1K", "-e", "4K", "-n", "2", "-w", "1"]
    code, _, err = run_cli(
        [*args, "--system", "dgx-h100", "--nodes", "1", "--json", str(out)], capsys
    )
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["cluster"] == {"system": "dgx-h100", "nodes": 1}
    # a CPU run is Gloo's: read, and every row skipped with that reason
    rep = validate_collectives(out, CAL)
    assert rep.rows and not rep.scored


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d["measured"].update(ranks="eight"), "measured.ranks='eight'"),
        (lambda d: d["measured"].update(ranks=1), "measured.ranks=1"),
        (lambda d: d["measured"].update(ranks=64), "at most the cluster's 8 GPUs"),
        (lambda d: d["measured"].update(op="x"), "measured.op='x'"),
        (lambda d: d["measured"].update(rows=[]), "measured.rows=[]"),
        (lambda d: d["measured"]["rows"].append("x"), "measured.rows="),
        (lambda d: d["measured"]["rows"][0].update(size_bytes=1e400), "rows[0]:size_bytes"),
        (lambda d: d["measured"].update(backend=None), "measured.backend=None"),
    ],
)
def test_malformed_bench_files_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: object, needle: str
) -> None:
    path = _bench(tmp_path)
    d = json.loads(path.read_text())
    edit(d)  # type: ignore[operator]
    path.write_text(json.dumps(d))
    code, out, err = run_cli(["validate", "collectives", "--runs", str(path)], capsys)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert needle in line, line


def test_a_cluster_yaml_travels_inside_the_bench_file(tmp_path: Path) -> None:
    from gpuscale.topology import load_cluster_spec
    from gpuscale.validate.collectives_bench import cluster_record

    yaml = ROOT / "examples/clusters/dgx-h100-superpod-4su.yaml"
    rec = cluster_record(None, None, yaml)
    path = _bench(tmp_path, cluster=rec)
    (row,) = validate_collectives(path, CAL).scored
    est = estimate("all_reduce", 8 * GiB, 8, load_cluster_spec(yaml).to_fabric(), CAL)
    assert row.predicted == pytest.approx(float(est.busbw_Bps) / 1e9)
