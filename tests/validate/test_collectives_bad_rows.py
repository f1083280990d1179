"""`gpuscale validate collectives` on bad rows: a row gpuscale cannot score is skipped with a
reason naming the CSV column and value; a malformed cell is one line naming
file:line:column with exit code 2."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.cli import main
from gpuscale.validate.collectives import OPTIONAL, REQUIRED, validate_collectives

GOOD = {
    "id": "good",
    "source": "https://github.com/NVIDIA/nccl-tests",
    "system": "DGX H100",
    "gpu": "H100-SXM5-80GB",
    "num_nodes": "1",
    "gpus_per_node": "8",
    "intra_node": "NVLink4",
    "inter_node": "",
    "collective": "all_reduce",
    "algorithm": "",
    "message_bytes": "8589934592",
    "algbw_gbps": "",
    "busbw_gbps": "480",
    "time_us": "",
}
SMALL = {**GOOD, "message_bytes": "1024", "busbw_gbps": "", "time_us": "30"}


def write(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=[*REQUIRED, *OPTIONAL])
        w.writeheader()
        for r in rows:
            w.writerow(r)
    return path


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"busbw_gbps": "0"}, "busbw_gbps='0'"),
        ({"busbw_gbps": "-480"}, "busbw_gbps='-480'"),
        ({"busbw_gbps": "", "algbw_gbps": "0"}, "algbw_gbps='0'"),
        ({"gpus_per_node": "0"}, "gpus_per_node='0'"),
        ({"num_nodes": "0"}, "num_nodes='0'"),
        ({"num_nodes": "1.5"}, "num_nodes='1.5'"),
        ({"num_nodes": "-2"}, "num_nodes='-2'"),
        ({"message_bytes": "0"}, "message_bytes='0'"),
        ({"message_bytes": "-8"}, "message_bytes='-8'"),
        ({**SMALL, "message_bytes": "1.5"}, "message_bytes='1.5': must be a whole number"),
        ({"message_bytes": "1e30"}, "message_bytes='1e30': must be a whole number of bytes up to"),
        ({"message_bytes": "2000T"}, "message_bytes='2000T'"),
        # a prefix that takes a finite number past the float range
        ({"message_bytes": "1e308G"}, "message_bytes='1e308G': must be a whole number"),
        ({**SMALL, "time_us": "0"}, "time_us='0'"),
        ({**SMALL, "time_us": "-5"}, "time_us='-5'"),
        ({**SMALL, "time_us": "", "busbw_gbps": "0"}, "busbw_gbps='0'"),
        ({"collective": "send_recv", "gpus_per_node": "1"}, "gpus_per_node='1'"),
    ],
)
def test_bad_row_is_skipped_naming_the_column(
    tmp_path: Path, change: dict[str, str], names: str
) -> None:
    path = write(tmp_path / "runs.csv", [GOOD, {**GOOD, **change, "id": "bad"}])
    rep = validate_collectives(path, default_calibration())
    good, bad = rep.rows
    assert good.status == "scored"
    assert bad.status == "skipped"
    assert names in bad.reason


def test_a_printed_zero_busbw_of_a_timed_tiny_message_is_still_scored(tmp_path: Path) -> None:
    # nccl-tests prints 0.00 GB/s for 8-byte messages; the row is scored on its time
    tiny = {**SMALL, "message_bytes": "8", "algbw_gbps": "0.0", "busbw_gbps": "0.0"}
    rep = validate_collectives(write(tmp_path / "runs.csv", [tiny]), default_calibration())
    assert rep.rows[0].status == "scored" and rep.rows[0].metric == "time_us"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gpus_per_node": "x"}, "runs.csv:line 3:gpus_per_node='x'"),
        ({"message_bytes": "8 GB/s"}, "runs.csv:line 3:message_bytes='8 GB/s'"),
        ({"busbw_gbps": "NaN"}, "runs.csv:line 3:busbw_gbps='NaN'"),
        ({"busbw_gbps": "inf"}, "runs.csv:line 3:busbw_gbps='inf'"),
    ],
)
def test_malformed_cell_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, str], field: str
) -> None:
    path = write(tmp_path / "runs.csv", [GOOD, {**GOOD, **change, "id": "bad"}])
    with pytest.raises(SystemExit) as exc:
        main(["validate", "collectives", "--runs", str(path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert field in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("system", "gpu", "overhead_us"),
    [
        # NCCL's net overhead follows the host CPUs (tuning.cc getNetOverhead): 2 us on AMD
        ("AWS p5.48xlarge", "H100", 2.0),  # EPYC 7R13
        ("AWS p5en.48xlarge", "H200", 1.0),  # Xeon Sapphire Rapids
        ("AWS p4de.24xlarge", "A100-SXM4-80GB", 1.0),  # Xeon 8275CL, not DGX A100's EPYC
        ("NVIDIA DGX-A100 (NVIDIA internal)", "A100-SXM4-80GB", 2.0),  # the catalog's EPYC
        ("8x H200 node, dual EPYC 9654", "H200", 2.0),
        ("OCI BM.GPU.GB200.4", "GB200", 1.0),  # Grace
    ],
)
def test_a_rows_host_cpu_sets_nccls_net_overhead(system: str, gpu: str, overhead_us: float) -> None:
    from gpuscale.validate.collectives_fabric import row_fabric

    row = {
        "system": system,
        "gpu": gpu,
        "gpus_per_node": "8",
        "intra_node": "NVSwitch",
        "inter_node": "",
    }
    rf = row_fabric(row, "row 1")
    assert rf.fabric.net_overhead_s == pytest.approx(overhead_us * 1e-6)
