"""How `gpuscale validate collectives` reads the spellings published rows use: message sizes
with prefixes, operation and algorithm names, NIC and NVLink descriptions, absent optional
columns; and which rows it skips because their figures cannot be as stated."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from test_collectives_bad_rows import GOOD

from gpuscale.calibrate import default_calibration
from gpuscale.cli import main
from gpuscale.validate.collectives import (
    OPTIONAL,
    REQUIRED,
    SkipRowError,
    message_bytes,
    read_algorithm,
    read_op,
    validate_collectives,
)
from gpuscale.validate.collectives_fabric import parse_nics, row_fabric
from gpuscale.validate.report import RowResult

GiB = 2**30
# the bad-row tests' good row, as an H100 row spells its board
H100 = {**GOOD, "id": "h100", "gpu": "H100", "intra_node": "NVLink4 via NVSwitch"}
SMALL = {**H100, "id": "small", "message_bytes": "8", "busbw_gbps": "0.00", "time_us": "30"}
# c038 of the shared file: 32 GB200 trays of 4 GPUs, two NVL72 racks, 128 ranks
GB200 = {
    **H100,
    "id": "gb200",
    "system": "OCI BM.GPU.GB200 (two racks)",
    "gpu": "GB200",
    "num_nodes": "32",
    "gpus_per_node": "4",
    "intra_node": "NVLink5 MNNVL (NVL72 rack domain); 1.8 TB/s bidir per GPU",
    "inter_node": "shape not stated for this run",
    "algbw_gbps": "403.04",
    "busbw_gbps": "799.79",
}


def write(path: Path, rows: list[dict[str, str]], columns: list[str] | None = None) -> Path:
    cols = columns or [*REQUIRED, *OPTIONAL]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def run(tmp_path: Path, *rows: dict[str, str]) -> list[RowResult]:
    return validate_collectives(
        write(tmp_path / "runs.csv", list(rows)), default_calibration()
    ).rows


# 1. message sizes: K/M/G/T binary, "GB" too (nccl-tests' -e 16G is 16 GiB)
@pytest.mark.parametrize(
    ("cell", "size"),
    [
        ("17179869184", 16 * GiB),
        ("17,179,869,184", 16 * GiB),
        ("16G", 16 * GiB),
        ("16g", 16 * GiB),
        ("16 GB", 16 * GiB),
        ("16GiB", 16 * GiB),
        ("16,384 MB", 16 * GiB),
        ("1GiB", GiB),
        ("128M", 128 * 2**20),
        ("4K", 4096),
        ("32KB", 32768),
        ("1.5K", 1536),
        ("8B", 8),
        ("8 B", 8),
        ("8 bytes", 8),
        ("2T", 2 * 2**40),
        ("", None),
    ],
)
def test_a_message_size_is_read_with_its_binary_prefix(cell: str, size: int | None) -> None:
    assert message_bytes({"message_bytes": cell}, "runs.csv:line 2") == size


def test_a_size_with_a_prefix_is_predicted_as_its_bytes(tmp_path: Path) -> None:
    plain, prefixed = run(tmp_path, H100, {**H100, "id": "g", "message_bytes": "8G"})
    assert prefixed.status == "scored"
    assert prefixed.detail["size_bytes"] == 8 * GiB
    assert prefixed.predicted == plain.predicted


def test_a_negative_size_with_a_prefix_skips_the_row(tmp_path: Path) -> None:
    (row,) = run(tmp_path, {**H100, "message_bytes": "-8K"})
    assert row.status == "skipped" and "message_bytes='-8K'" in row.reason


@pytest.mark.parametrize("cell", ["16 GB/s", "sixteen G", "16 Gi", "1e400"])
def test_a_size_that_is_no_size_is_a_located_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cell: str
) -> None:
    path = write(tmp_path / "runs.csv", [H100, {**H100, "id": "bad", "message_bytes": cell}])
    with pytest.raises(SystemExit) as exc:
        main(["validate", "collectives", "--runs", str(path)])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1
    assert f"runs.csv:line 3:message_bytes={cell!r}" in err and "16G" in err


# 2. operation names
@pytest.mark.parametrize(
    ("cell", "op"),
    [
        ("all_reduce", "all_reduce"),
        ("all reduce", "all_reduce"),
        ("all_reduce_perf", "all_reduce"),
        ("AllReduce", "all_reduce"),
        ("ncclAllReduce", "all_reduce"),
        ("all_reduce (in-place)", "all_reduce"),
        ("all-gather", "all_gather"),
        ("ReduceScatter", "reduce_scatter"),
        ("reduce_scatter_perf", "reduce_scatter"),
        ("alltoall", "all_to_all"),
        ("all2all", "all_to_all"),
        ("All-to-All", "all_to_all"),
        ("send/recv", "send_recv"),
        ("sendrecv", "send_recv"),
        ("p2p", "send_recv"),
        ("broadcast", "broadcast"),
        ("reduce", "reduce"),
        ("hypercube", None),
        ("", None),
    ],
)
def test_an_operation_name_maps_to_the_modelled_op(cell: str, op: str | None) -> None:
    assert read_op(cell) == op


# 3. algorithm names
@pytest.mark.parametrize(
    ("cell", "algo"),
    [
        ("NVLS_Tree", "nvls_tree"),
        ("nvls-tree", "nvls_tree"),
        ("NVLSTree", "nvls_tree"),
        ("auto", None),
        ("default", None),
        ("NCCL default", None),
        ("", None),
        ("NCCL_ALGO=Ring", "ring"),
        ("Ring (forced)", "ring"),
        ("RING", "ring"),
        ("Tree", "tree"),
    ],
)
def test_an_algorithm_name_maps_to_the_forced_algorithm(cell: str, algo: str | None) -> None:
    assert read_algorithm(cell) == algo


def test_an_unknown_algorithm_skips_naming_it() -> None:
    with pytest.raises(SkipRowError, match="algorithm 'CollNet' not modelled"):
        read_algorithm("CollNet")


# 4. NICs: 8 x 400 Gb/s = 3200 Gb/s = 400e9 bytes/s a node, 50e9 a GPU of 8
@pytest.mark.parametrize(
    ("text", "node_Bps", "nics"),
    [
        ("8 x 400 Gbps", 400e9, 8),
        ("8x ConnectX-7 400Gb/s InfiniBand", 400e9, 8),
        ("8 NICs x 400 Gbps", 400e9, 8),
        ("8 × 400 Gb/s", 400e9, 8),
        ("400 Gb/s NDR per GPU", 400e9, 8),
        ("400GbE per GPU", 400e9, 8),
        ("8 x 400 Gbps (one per GPU)", 400e9, 8),
        ("400 Gbps EFAv1 per node", 50e9, 0),
        ("3200 Gbps EFAv2 (32 EFA devices)", 400e9, 32),
        ("8 x 2 x 400 Gb/s RoCE = 6.4 Tb/s per node", 800e9, 8),
        ("0 x 400 Gbps", 0.0, 0),
    ],
)
def test_a_nic_description_gives_the_nodes_rate(text: str, node_Bps: float, nics: int) -> None:
    assert parse_nics(text, 8) == (pytest.approx(node_Bps), nics)


@pytest.mark.parametrize("text", ["8x ConnectX-7 400Gb/s InfiniBand", "400 Gb/s NDR per GPU"])
def test_a_rows_nics_set_the_per_gpu_rate(text: str) -> None:
    rf = row_fabric({**H100, "num_nodes": "2", "inter_node": text}, "row 1")
    assert rf.nics_from == "row"
    assert rf.fabric.nic_bw_Bps_per_gpu == pytest.approx(50e9)
    assert rf.fabric.nics_per_node == 8


def test_no_nics_skips_the_row(tmp_path: Path) -> None:
    (row,) = run(tmp_path, {**H100, "num_nodes": "2", "inter_node": "0 x 400 Gbps"})
    assert row.status == "skipped"
    assert row.reason == "inter_node='0 x 400 Gbps': no scale-out bandwidth (0 NICs or 0 Gb/s)"


# 5. the NVLink domain
@pytest.mark.parametrize(
    "intra",
    ["", "NVLink5 1.8 TB/s", "NVLink5 via NVSwitch", GB200["intra_node"]],
)
@pytest.mark.parametrize("gpu", ["GB200", "GB200 NVL72"])
def test_a_gb200_tray_is_in_its_racks_nvlink_domain(intra: str, gpu: str) -> None:
    fabric = row_fabric({**GB200, "gpu": gpu, "intra_node": intra}, "row 1").fabric
    assert (fabric.domain_gpus, fabric.scaleup_bw_Bps, fabric.nvls) == (72, 900e9, True)


def test_a_gb300_tray_is_in_its_racks_nvlink_domain() -> None:
    fabric = row_fabric({**GB200, "gpu": "GB300", "intra_node": ""}, "row 1").fabric
    assert fabric.domain_gpus == 72


def test_a_gb200_with_mnnvl_off_is_a_four_gpu_domain() -> None:
    row = {**GB200, "intra_node": "NVLink5, MNNVL disabled"}
    assert row_fabric(row, "row 1").fabric.domain_gpus == 4


def test_c038_without_intra_node_is_predicted_as_with_it(tmp_path: Path) -> None:
    stated, empty = run(tmp_path, GB200, {**GB200, "id": "empty", "intra_node": ""})
    assert empty.status == stated.status == "scored"
    assert empty.predicted == stated.predicted
    assert empty.detail["algorithm"] == "nvls_tree"


@pytest.mark.parametrize(
    ("gpu", "intra", "gpn", "domain", "up_GBps"),
    [
        # PCIe: NCCL's x16 figure of the GPU's generation (Gen5 48 GB/s, Gen4 24 GB/s)
        ("H100", "PCIe", 8, 1, 48),
        ("H100", "PCIe Gen5, no NVLink", 8, 1, 48),
        ("H100", "PCIe only (no NVLink)", 8, 1, 48),
        ("H100", "without NVLink", 8, 1, 48),
        ("A100-SXM4-80GB", "PCIe only", 8, 1, 24),
        # bridges join pairs: eight GPUs' ring crosses PCIe, a pair is its own domain
        ("H100", "NVLink bridge (pairs)", 8, 1, 48),
        ("H100 NVL", "NVLink bridge (pairs)", 2, 2, 300),
        ("H100", "NVLink4 via NVSwitch; PCIe Gen5 to the host", 8, 8, 450),
        ("H100", "", 8, 8, 450),
        ("L40S", "NVSwitch", 8, 1, 24),  # no NVLink on the GPU
    ],
)
def test_the_scale_up_a_row_describes(
    gpu: str, intra: str, gpn: int, domain: int, up_GBps: float
) -> None:
    row = {**H100, "gpu": gpu, "intra_node": intra, "gpus_per_node": str(gpn)}
    fabric = row_fabric(row, "row 1").fabric
    assert fabric.domain_gpus == domain
    assert fabric.scaleup_bw_Bps == pytest.approx(up_GBps * 1e9)


# 6. figures in another unit
@pytest.mark.parametrize(
    ("change", "status"),
    [
        # H100 node: (450 NVLink + 8 x 400 Gb/s / 8 = 50 NIC) x 2 (NVLS) = 1000 GB/s
        ({"busbw_gbps": "3840"}, "skipped"),  # 480 GB/s written in Gbit/s
        ({"busbw_gbps": "1101"}, "skipped"),
        ({"busbw_gbps": "1099"}, "scored"),
        # all_gather has no in-switch reduction: 1.1 x 500 = 550 GB/s
        ({"collective": "all_gather", "busbw_gbps": "551"}, "skipped"),
        ({"collective": "all_gather", "busbw_gbps": "549"}, "scored"),
        # only algbw: busbw = 630 x 2 x 7/8 = 1102.5 GB/s
        ({"busbw_gbps": "", "algbw_gbps": "630"}, "skipped"),
        # A100 node, no NVLS: 1.1 x (300 + 8 x 200 Gb/s / 8 = 25) = 357.5 GB/s
        ({"gpu": "A100-SXM4-80GB", "busbw_gbps": "358"}, "skipped"),
        ({"gpu": "A100-SXM4-80GB", "busbw_gbps": "357"}, "scored"),
    ],
)
def test_a_busbw_beyond_the_links_is_in_another_unit(
    tmp_path: Path, change: dict[str, str], status: str
) -> None:
    (row,) = run(tmp_path, {**H100, **change})
    assert row.status == status
    if status == "skipped":
        assert "check the unit (Gbit/s, not GB/s?)" in row.reason


def test_the_busbw_bound_names_the_peak(tmp_path: Path) -> None:
    (row,) = run(tmp_path, {**H100, "busbw_gbps": "3840"})
    assert row.reason.startswith(
        "busbw_gbps='3840': a busbw of 3840 GB/s is over 1.1 x the 1000 GB/s a GPU here can move"
    )


@pytest.mark.parametrize(("time_us", "status"), [("0.1643", "skipped"), ("1", "scored")])
def test_a_time_under_a_microsecond_is_in_another_unit(
    tmp_path: Path, time_us: str, status: str
) -> None:
    (row,) = run(tmp_path, {**SMALL, "time_us": time_us})
    assert row.status == status
    if status == "skipped":
        assert row.reason == (
            "time_us='0.1643' is under 1 us, faster than any NCCL collective: "
            "check the unit (ms, not us?)"
        )


# 7. busbw / algbw fixes the rank count
@pytest.mark.parametrize(
    ("change", "status"),
    [
        # 480 / 274.29 = 1.750 = 2 x 7/8: eight ranks, as 1 x 8
        ({"algbw_gbps": "274.29"}, "scored"),
        ({"algbw_gbps": "274.29", "num_nodes": "2"}, "skipped"),  # 16 ranks: 1.875
        # all_gather 1 x 8: 350 / 400 = 7/8
        ({"collective": "all_gather", "busbw_gbps": "350", "algbw_gbps": "400"}, "scored"),
        ({"collective": "all_gather", "busbw_gbps": "350", "algbw_gbps": "350"}, "skipped"),
        # c044: alltoall 48 x 4 = 192 ranks, 62.49 / 62.82 = 0.99475 vs 191/192 = 0.99479,
        # within the printed digits (+-0.00016)
        (
            {
                **GB200,
                "num_nodes": "48",
                "collective": "alltoall",
                "algbw_gbps": "62.82",
                "busbw_gbps": "62.49",
            },
            "scored",
        ),
        # printed 0.00 for a tiny message: nothing to compare
        (
            {"message_bytes": "8", "algbw_gbps": "0.00", "busbw_gbps": "0.00", "time_us": "20"},
            "scored",
        ),
    ],
)
def test_the_busbw_algbw_ratio_must_match_the_ranks(
    tmp_path: Path, change: dict[str, str], status: str
) -> None:
    (row,) = run(tmp_path, {**H100, **change})
    assert row.status == status, row.reason


def test_a_ratio_for_other_ranks_names_them(tmp_path: Path) -> None:
    (row,) = run(tmp_path, {**H100, "algbw_gbps": "274.29", "num_nodes": "2"})
    assert row.reason == (
        "busbw_gbps/algbw_gbps = 1.7500 means 8 ranks for all_reduce, not the 1.8750 of "
        "num_nodes x gpus_per_node = 16: the ranks or a figure are not as stated"
    )


# 8. optional columns
@pytest.mark.parametrize("absent", OPTIONAL)
def test_an_absent_optional_column_reads_as_empty(tmp_path: Path, absent: str) -> None:
    row = {**H100, "intra_node": "", "system": "", "algorithm": "", "algbw_gbps": ""}
    cols = [c for c in (*REQUIRED, *OPTIONAL) if c != absent]
    with_col = validate_collectives(write(tmp_path / "a.csv", [row]), default_calibration())
    without = validate_collectives(write(tmp_path / "b.csv", [row], cols), default_calibration())
    assert without.rows[0].status == "scored"
    assert without.rows[0].predicted == with_col.rows[0].predicted


def test_a_file_of_the_required_columns_only_is_scored(tmp_path: Path) -> None:
    path = write(tmp_path / "runs.csv", [H100], list(REQUIRED))
    (row,) = validate_collectives(path, default_calibration()).rows
    assert row.status == "scored" and row.measured == 480.0


@pytest.mark.parametrize(
    ("text", "node_gbytes", "nics"),
    [
        ("400 Gb/s (one per GPU)", 400.0, 8),  # one 400 Gb/s NIC a GPU: 8 x 50 GB/s
        ("InfiniBand NDR 400Gb/s x 8", 400.0, 8),  # the count after the rate
        ("8x400G", 400.0, 8),  # a NIC's bare G is Gb/s
        ("4x200G HDR", 100.0, 4),
    ],
)
def test_nic_spellings_of_other_tables(text: str, node_gbytes: float, nics: int) -> None:
    from gpuscale.validate.collectives_fabric import parse_nics

    got = parse_nics(text, 8)
    assert got is not None
    assert (got[0] / 1e9, got[1]) == pytest.approx((node_gbytes, nics))


@pytest.mark.parametrize(
    ("text", "gpu", "domain"),
    [
        ("HGX baseboard, NICs on PCIe Gen5 switches", "h100-sxm", 8),  # PCIe of the NICs
        ("NVLink4 via NVSwitch, PCIe Gen5 to host", "h100-sxm", 8),
        ("PCIe (NVLink disabled)", "h100-sxm", 1),
        ("NCCL_MNNVL_ENABLE=0", "gb200", 4),  # the tray, not the rack
        ("", "gb200", 72),
    ],
)
def test_scale_up_spellings_of_other_tables(text: str, gpu: str, domain: int) -> None:
    from gpuscale.catalog import get_gpu, system_for_gpu
    from gpuscale.validate.collectives_fabric import scale_up

    g = get_gpu(gpu)
    gpn = 4 if gpu == "gb200" else 8
    assert scale_up(text, g, system_for_gpu(g), gpn)[0] == domain
