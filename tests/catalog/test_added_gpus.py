"""The H200 NVL, A10G, RTX A6000 and MI300A entries: sourced figures and names."""

from __future__ import annotations

import pytest

from gpuscale.catalog import get_gpu, gpus, system_for_gpu
from gpuscale.units import MiB


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("h200-nvl", "h200-nvl"),
        ("H200 NVL", "h200-nvl"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("H200-NVL-141GB", "h200-nvl"),
        ("A10G", "a10g"),
        ("NVIDIA A10G", "a10g"),
        ("RTX A6000", "rtx-a6000"),
        ("NVIDIA RTX A6000", "rtx-a6000"),
        ("MI300A", "mi300a"),
        ("AMD Instinct MI300A", "mi300a"),
    ],
)
def test_benchmark_spellings_resolve(name: str, key: str) -> None:
    assert get_gpu(name).key == key


def test_h200_nvl_is_the_h200_memory_at_the_nvl_power() -> None:
    g = gpus()
    nvl = g["h200-nvl"]
    # NVIDIA H200 page, NVL column: BF16 1,671 and FP8 3,341 TFLOP/s with sparsity
    assert nvl.peak_tflops["bf16"] == pytest.approx(1671 / 2)
    assert nvl.peak_tflops["fp8"] == pytest.approx(3341 / 2)
    assert (nvl.hbm_gb, nvl.hbm_tb_per_s, nvl.tdp_w) == (141, 4.8, 600)
    assert nvl.nvlink_gb_per_s == 450  # 900 GB/s bridge, bidirectional
    assert nvl.memory_bytes == g["h200"].memory_bytes == 143771 * MiB
    assert nvl.matmul_eff == g["h100-sxm"].matmul_eff


def test_a10g() -> None:
    a10g = get_gpu("A10G")
    assert a10g.hbm_gb == 24 and a10g.hbm_tb_per_s == 0.6
    assert a10g.peak_tflops == {"bf16": 70, "fp16": 70}  # no FP32/TF32 figure is sourced
    assert a10g.sms == 80 and a10g.nvlink_gb_per_s == 0
    assert a10g.memory_bytes == 23028 * MiB  # ECC on, as G5 instances report it


def test_the_workstation_part_takes_the_fp32_accumulate_rate() -> None:
    a6000 = get_gpu("RTX A6000")
    # GA102 whitepaper: 154.8 'Peak BF16 Tensor TFLOPS with FP32 Accumulate'
    assert a6000.peak_tflops["bf16"] == 154.8
    assert (a6000.hbm_gb, a6000.hbm_tb_per_s, a6000.sms) == (48, 0.768, 84)
    assert a6000.nvlink_gb_per_s == 112.5 / 2


def test_mi300a_is_six_of_the_mi300x_xcds() -> None:
    a, x = get_gpu("MI300A"), get_gpu("MI300X")
    assert a.arch == x.arch == "cdna3"
    assert (a.sms, x.sms) == (228, 304)
    # the same CDNA3 rate per CU and clock: peaks scale with the CU count
    for p in ("fp32", "tf32", "bf16", "fp8"):
        assert a.peak_tflops[p] == pytest.approx(x.peak_tflops[p] * 228 / 304, abs=0.1)
    assert a.peak_tflops["bf16"] == 980.6
    assert (a.hbm_gb, a.hbm_tb_per_s) == (128, 5.3)
    assert a.matmul_eff == x.matmul_eff


def test_mi300a_lives_in_a_four_apu_infinity_fabric_node() -> None:
    s = system_for_gpu(get_gpu("MI300A"))
    assert s.key == "mi300a-node"
    assert (s.gpus_per_node, s.nvlink_domain_gpus, s.scaleup_mesh) == (4, 4, True)
    assert s.scaleup_gb_per_s == get_gpu("MI300A").nvlink_gb_per_s == 3 * 128


@pytest.mark.parametrize(
    ("key", "system"),
    [
        ("h200-nvl", "pcie-8gpu-gen5"),  # as the H100 NVL
        ("a10g", "pcie-8gpu-gen4"),
        ("rtx-a6000", "pcie-8gpu-gen4"),
    ],
)
def test_pcie_parts_take_the_generic_server_of_their_generation(key: str, system: str) -> None:
    assert system_for_gpu(gpus()[key]).key == system


@pytest.mark.parametrize("key", ["h200-nvl", "a10g", "rtx-a6000", "mi300a"])
def test_each_says_where_its_figures_come_from(key: str) -> None:
    src = gpus()[key].source
    assert "http" in src and "[" in src
    assert "matmul_eff estimated" in src  # none of them has a MAMF measurement
