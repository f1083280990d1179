"""Collective model: nccl-tests byte counts, contention, algorithm choice, CLI errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_system
from gpuscale.errors import InputError
from gpuscale.perf.comm import (
    OPS,
    Fabric,
    busbw_factor,
    bytes_per_rank,
    collective_time_s,
    estimate,
)

CAL = default_calibration()
H100 = Fabric.from_system(get_system("dgx-h100"), total_gpus=1024)
A100 = Fabric.from_system(get_system("dgx-a100"), total_gpus=1024)
GiB = 2**30


# --- bytes per rank: nccl-tests PERFORMANCE.md, computed by hand ---------------------------
@pytest.mark.parametrize(
    ("op", "size", "n", "expected"),
    [
        ("all_reduce", 1024, 8, 1792.0),  # 2(n-1)/n S = 2*7/8*1024
        ("all_reduce", 1000, 2, 1000.0),  # 2*1/2*1000
        ("all_gather", 1024, 8, 896.0),  # (n-1)/n S, S = total gathered buffer
        ("reduce_scatter", 4096, 4, 3072.0),  # 3/4*4096
        ("all_to_all", 1600, 16, 1500.0),  # 15/16*1600
        ("broadcast", 1234, 8, 1234.0),  # factor 1
        ("reduce", 1234, 8, 1234.0),
        ("send_recv", 777, 2, 777.0),
    ],
)
def test_bytes_per_rank_match_nccl_tests_formulas(
    op: str, size: int, n: int, expected: float
) -> None:
    assert float(bytes_per_rank(op, size, n)) == pytest.approx(expected)


def test_busbw_is_algbw_times_the_nccl_tests_factor() -> None:
    for op in OPS:
        e = estimate(op, 256 * 2**20, 16, H100, CAL)
        assert float(e.busbw_Bps) == pytest.approx(float(e.algbw_Bps * busbw_factor(op, 16)))
        assert float(e.algbw_Bps) == pytest.approx(256 * 2**20 / float(e.time_s))


def test_time_is_latency_plus_bandwidth_and_zero_for_one_gpu() -> None:
    e = estimate("all_reduce", np.array([8.0, GiB]), 64, H100, CAL)
    np.testing.assert_allclose(e.time_s, e.latency_s + e.bandwidth_s)
    assert float(collective_time_s("all_reduce", GiB, 1, H100, CAL)) == 0.0


# --- algorithm / protocol choice by size -------------------------------------------------
def test_small_messages_are_latency_bound_with_ll() -> None:
    e = estimate("all_reduce", 8, 64, H100, CAL)
    assert str(e.protocol) == "LL"
    assert str(e.algorithm) in ("tree", "ring")
    assert float(e.latency_s) > 10 * float(e.bandwidth_s)


def test_large_messages_are_bandwidth_bound_with_simple_ring_or_nvls() -> None:
    e = estimate("all_reduce", 8 * GiB, 8, H100, CAL)
    assert (str(e.algorithm), str(e.protocol)) == ("nvls", "Simple")
    e = estimate("all_reduce", 8 * GiB, 8, A100, CAL)  # no NVLink SHARP on A100
    assert (str(e.algorithm), str(e.protocol)) == ("ring", "Simple")
    assert float(e.bandwidth_s) > 10 * float(e.latency_s)


def test_tree_wins_on_two_nodes_and_beats_the_nic_rate() -> None:
    # nccl-tests issue 196: on two nodes tree busbw can exceed the network bottleneck
    # AWS p4de-like: 8 A100 per node, 400 Gb/s of EFA per node (50 GB/s node NIC rate)
    p4de = Fabric(**{**A100.__dict__, "nic_bw_Bps_per_gpu": 50e9 / 8})
    e = estimate("all_reduce", 8 * GiB, 16, p4de, CAL)
    assert str(e.algorithm) == "tree"
    assert float(e.busbw_Bps) > 50e9
    ring = estimate("all_reduce", 8 * GiB, 16, p4de, CAL, algorithm="ring")
    assert float(ring.busbw_Bps) < 50e9 < float(e.busbw_Bps)


def test_latency_grows_with_group_size() -> None:
    t = collective_time_s("all_reduce", 8, np.array([8, 16, 64, 512]), H100, CAL)
    assert np.all(np.diff(t) > 0)


def test_arrays_evaluate_many_points_at_once() -> None:
    sizes = 2.0 ** np.arange(3, 34)
    n = np.full_like(sizes, 64)
    t = collective_time_s("all_gather", sizes, n, H100, CAL, members_per_domain=8)
    assert t.shape == sizes.shape and np.all(np.diff(t) > 0)


# --- contention on the oversubscribed tier -----------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    op=st.sampled_from(OPS),
    nodes=st.integers(1, 64),
    leaf_nodes=st.integers(1, 32),
    over=st.floats(1.5, 8.0),
    log_size=st.integers(20, 34),
)
def test_oversubscription_lowers_busbw_only_for_groups_that_cross_it(
    op: str, nodes: int, leaf_nodes: int, over: float, log_size: int
) -> None:
    base = Fabric.from_system(get_system("dgx-h100"), total_gpus=1024)
    leaf_gpus = leaf_nodes * base.gpus_per_node
    flat = Fabric(**{**base.__dict__, "leaf_gpus": leaf_gpus})
    tapered = Fabric(**{**base.__dict__, "leaf_gpus": leaf_gpus, "oversubscription": over})
    n = nodes * base.gpus_per_node
    size = 2.0**log_size
    b_flat = float(estimate(op, size, n, flat, CAL).busbw_Bps)
    b_tap = float(estimate(op, size, n, tapered, CAL).busbw_Bps)
    if n <= leaf_gpus:
        assert b_tap == pytest.approx(b_flat)
    else:
        assert b_tap <= b_flat * (1 + 1e-12)
        if op in ("all_to_all", "send_recv"):
            assert b_tap < b_flat


def test_shared_nics_slow_a_group_spread_one_gpu_per_node() -> None:
    own = Fabric(**{**H100.__dict__, "nics_per_node": 8})
    shared = Fabric(
        **{**H100.__dict__, "nics_per_node": 2, "nic_bw_Bps_per_gpu": H100.nic_bw_Bps_per_gpu}
    )
    # same node bandwidth; with 2 NICs a lone GPU per node can use a whole (4x faster) NIC
    t_own = float(collective_time_s("all_reduce", GiB, 16, own, CAL, members_per_domain=1))
    t_shared = float(collective_time_s("all_reduce", GiB, 16, shared, CAL, members_per_domain=1))
    assert t_shared < t_own
    # a full node group is bound by the node total either way
    t8_own = float(collective_time_s("all_to_all", GiB, 16, own, CAL))
    t8_sh = float(collective_time_s("all_to_all", GiB, 16, shared, CAL))
    assert t8_sh >= t8_own * 0.999


# --- errors --------------------------------------------------------------------------------
def test_unknown_collective_and_oversized_group_are_input_errors() -> None:
    with pytest.raises(InputError, match="op='gather_all'"):
        estimate("gather_all", 8, 8, H100, CAL)
    with pytest.raises(InputError, match="gpus"):
        estimate("all_reduce", 8, 2048, H100, CAL)
    with pytest.raises(InputError, match="algorithm"):
        estimate("broadcast", 8, 16, H100, CAL, algorithm="nvls")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from gpuscale.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--gpus", "64", "--system", "dgx-h100", "--nodes", "2"], "--gpus=64"),
        (["--op", "allreduc", "--system", "dgx-h100", "--nodes", "2"], "op='allreduc'"),
        (["-b", "1G", "-e", "8", "--system", "dgx-h100", "--nodes", "2"], "-b/--minbytes"),
        (["-f", "0", "--system", "dgx-h100", "--nodes", "2"], "-f/--stepfactor=0.0"),
        (["-f", "-2", "--system", "dgx-h100", "--nodes", "2"], "-f/--stepfactor=-2.0"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(args: list[str], field: str) -> None:
    r = _cli("comm", "estimate", *args)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in r.stderr


def test_cli_estimate_json_rows() -> None:
    import json

    r = _cli(
        "comm",
        "estimate",
        "--system",
        "dgx-h100",
        "--nodes",
        "4",
        "--gpus",
        "32",
        "-b",
        "8",
        "-e",
        "1G",
        "-f",
        "32",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert [x["size_bytes"] for x in rows] == [8, 256, 8192, 262144, 8388608, 268435456]
    assert rows[0]["protocol"] == "LL" and rows[-1]["protocol"] == "Simple"


def test_a_full_mesh_gives_a_subgroup_only_its_direct_links() -> None:
    # MI300X platform: 8 OAM fully connected by 7 Infinity Fabric links of 64 GB/s; a TP2
    # group reaches its peer over one link, TP4 over three, TP8 over all seven (448 GB/s).
    # An NVSwitch node gives any subgroup the whole per-GPU rate
    from gpuscale.perf.comm.fabric import place

    cal = CAL
    amd = Fabric.from_system(get_system("mi300x-platform"), 64)
    for k, links in ((2, 1), (4, 3), (8, 7)):
        up = float(place(amd, cal, k, k).up_Bps)
        assert up == pytest.approx(links * 64e9 * cal.scaleup_eff)
    dgx = Fabric.from_system(get_system("dgx-h100"), 64)
    assert float(place(dgx, cal, 2, 2).up_Bps) == float(place(dgx, cal, 8, 8).up_Bps)


# --- latency assembly and NIC sharing ------------------------------------------------------
def test_a_ring_across_nodes_floors_each_nvlink_hop_at_the_net_overhead() -> None:
    # tuning.cc: once a ring spans nodes, each intra-node step costs max(NVLink hop, net
    # overhead) (1 us on Intel/ARM hosts, LL), not their sum. 8 B over 2 DGX H100 nodes,
    # ring LL: base 6.6 us + (30 - 2) intra steps + 2 network steps, plus the once-per-call
    # network latency
    e = estimate("all_reduce", 8, 16, H100, CAL, algorithm="ring")
    assert str(e.protocol) == "LL"
    intra = max(CAL.scaleup_latency_s, 1e-6)  # the fitted NVLink hop is the ring/LL entry
    want = 6.6e-6 + 28 * intra + 2 * CAL.scaleout_latency_s + CAL.scaleout_call_latency_s
    assert float(e.latency_s) == pytest.approx(want, rel=1e-9)
    # DGX A100's AMD EPYC hosts: NCCL takes a 2 us overhead (getNetOverhead)
    assert A100.net_overhead_s == 2e-6
    amd = estimate("all_reduce", 8, 16, A100, CAL, algorithm="ring")
    want_amd = 6.6e-6 + 28 * 2e-6 + 2 * CAL.scaleout_latency_s + CAL.scaleout_call_latency_s
    assert float(amd.latency_s) == pytest.approx(want_amd, rel=1e-9)
    # inside one node there is no net overhead: 14 steps of the NVLink hop alone
    one = estimate("all_reduce", 8, 8, H100, CAL, algorithm="ring")
    assert float(one.latency_s) == pytest.approx(6.6e-6 + 14 * CAL.scaleup_latency_s)


def test_concurrent_groups_share_a_nodes_few_nics() -> None:
    # 8 GPUs and 2 NICs a node, one member per node: a lone group (nccl-tests) has a whole
    # NIC per member, 4x its share; in training every GPU of the node runs such a group at
    # once, so each gets a quarter NIC, as if there were one NIC per GPU of the same rate
    node_bw = H100.nic_bw_Bps_per_gpu
    shared = Fabric(**{**H100.__dict__, "nics_per_node": 2, "nic_bw_Bps_per_gpu": node_bw})
    own = Fabric(**{**H100.__dict__, "nics_per_node": 8})

    def t(f: Fabric, conc: bool) -> float:
        return float(
            estimate(
                "all_gather", GiB, 16, f, CAL, members_per_domain=1, concurrent=conc
            ).bandwidth_s
        )

    assert t(shared, False) == pytest.approx(t(own, False) / 4, rel=1e-9)
    assert t(shared, True) == pytest.approx(t(own, True), rel=1e-9)
    assert t(own, True) == pytest.approx(t(own, False), rel=1e-9)  # one NIC a GPU: no change
