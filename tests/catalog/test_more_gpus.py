"""The A40, A30, L40, L20, RTX 6000 Ada and H800 PCIe entries: datasheet figures and names."""

from __future__ import annotations

import pytest

from gpuscale.catalog import get_gpu, gpus, system_for_gpu
from gpuscale.validate.training_cells import read_gpu

NEW = ["a40", "a30", "l40", "l20", "rtx-6000-ada", "h800-pcie"]


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("A40", "a40"),
        ("NVIDIA A40", "a40"),
        ("A30", "a30"),
        ("NVIDIA A30", "a30"),
        ("L40", "l40"),
        ("NVIDIA L40", "l40"),
        ("L20", "l20"),
        ("NVIDIA L20", "l20"),
        ("RTX 6000 Ada", "rtx-6000-ada"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),  # nvidia-smi's name
        ("H800 PCIe", "h800-pcie"),
        ("NVIDIA H800 PCIe", "h800-pcie"),
    ],
)
def test_published_spellings_resolve_in_validation_rows(name: str, key: str) -> None:
    gpu, note = read_gpu(name)
    assert gpu.key == key and note == ""


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("H800", "h800"),  # a bare H800 stays the SXM part
        ("H800 (SXM)", "h800"),
        ("L40S", "l40s"),  # L40 does not capture the L40S
        ("L40S PCIe", "l40s"),
        ("RTX A6000", "rtx-a6000"),  # the Ampere workstation card, not the Ada one
    ],
)
def test_the_new_names_leave_the_neighbours_alone(name: str, key: str) -> None:
    assert get_gpu(name).key == key


def test_a40() -> None:
    g = get_gpu("A40")
    # NVIDIA A40 datasheet: BF16 (FP32 accumulate) 149.7 | 299.4*, TF32 74.8 | 149.6*
    assert g.peak_tflops["bf16"] == pytest.approx(299.4 / 2)
    assert g.peak_tflops["tf32"] == pytest.approx(149.6 / 2)
    assert g.peak_tflops["fp32"] == 37.4
    assert "fp8" not in g.peak_tflops  # Ampere has no FP8 tensor cores
    # 48 GB GDDR6, 696 GB/s, 300 W, 84 SMs; NVLink bridge 112.5 GB/s both ways
    assert (g.hbm_gb, g.hbm_tb_per_s, g.tdp_w, g.sms) == (48, 0.696, 300, 84)
    assert g.nvlink_gb_per_s == 112.5 / 2


def test_a30() -> None:
    g = get_gpu("A30")
    # NVIDIA A30 datasheet (lamonoai/gpumap): BF16 330* and TF32 165* with sparsity
    assert g.peak_tflops["bf16"] == g.peak_tflops["fp16"] == 330 / 2
    assert g.peak_tflops["tf32"] == 165 / 2
    # GA100: 24 GB HBM2 at 933 GB/s, 165 W, 56 SMs
    assert (g.hbm_gb, g.hbm_tb_per_s, g.tdp_w, g.sms) == (24, 0.933, 165, 56)


def test_l40() -> None:
    g = get_gpu("L40")
    # NVIDIA L40 datasheet: BF16 181.05 | 362.1*, FP8 362 | 724*, FP32 90.5
    assert g.peak_tflops["bf16"] == pytest.approx(362.1 / 2)
    assert g.peak_tflops["fp8"] == 724 / 2
    assert g.peak_tflops["fp32"] == 90.5
    # 48 GB GDDR6, 864 GB/s, 300 W (the L40S: 350 W), 142 SMs, no NVLink
    assert (g.hbm_gb, g.hbm_tb_per_s, g.tdp_w, g.sms) == (48, 0.864, 300, 142)
    assert g.nvlink_gb_per_s == 0
    assert g.peak_tflops["bf16"] < get_gpu("L40S").peak_tflops["bf16"] / 1.9


def test_l20() -> None:
    g = get_gpu("L20")
    # LLM-Prof hardware_spec.md and xDiT docs: FP16 119.5 TF dense, INT8 239 TOPS
    assert g.peak_tflops["bf16"] == g.peak_tflops["fp16"] == 119.5
    assert g.peak_tflops["fp8"] == 239
    # AD102 cut to 92 SMs, 48 GB GDDR6 at 864 GB/s, 275 W (topcpu.net, TechPowerUp data)
    assert (g.hbm_gb, g.hbm_tb_per_s, g.tdp_w, g.sms) == (48, 0.864, 275, 92)


def test_rtx_6000_ada() -> None:
    g = get_gpu("RTX 6000 Ada")
    # RTX 6000 Ada datasheet: 1,457.0 TFLOPS effective FP8 with sparsity, 91.1 TF FP32
    assert g.peak_tflops["fp8"] == 1457.0 / 2
    assert g.peak_tflops["bf16"] == 1457.0 / 4  # half the FP8 rate (Ada)
    assert g.peak_tflops["fp32"] == 91.1
    # 48 GB GDDR6, 960 GB/s, 300 W, 142 SMs, NVLink: No
    assert (g.hbm_gb, g.hbm_tb_per_s, g.tdp_w, g.sms) == (48, 0.96, 300, 142)
    assert g.nvlink_gb_per_s == 0


def test_h800_pcie_is_the_h100_pcie_board() -> None:
    g, h100 = get_gpu("H800 PCIe"), get_gpu("H100 PCIe")
    # Lenovo Press LP1814: BF16 1,513 TFLOPS with sparsity; FP8 3,026 sparse
    assert g.peak_tflops["bf16"] == 1513 / 2
    assert g.peak_tflops["fp8"] == 3026 / 2
    assert (g.hbm_gb, g.hbm_tb_per_s, g.sms, g.pcie_gen, g.tdp_w) == (80, 2.0, 114, 5, 350)
    assert (g.sms, g.hbm_tb_per_s, g.tdp_w) == (h100.sms, h100.hbm_tb_per_s, h100.tdp_w)
    assert g.matmul_eff == h100.matmul_eff


@pytest.mark.parametrize(
    ("key", "system"),
    [
        ("a40", "pcie-8gpu-gen4"),
        ("a30", "pcie-8gpu-gen4"),
        ("l40", "pcie-8gpu-gen4"),
        ("l20", "pcie-8gpu-gen4"),
        ("rtx-6000-ada", "pcie-8gpu-gen4"),
        ("h800-pcie", "pcie-8gpu-gen5"),  # as the H100 PCIe
    ],
)
def test_pcie_parts_take_the_generic_server_of_their_generation(key: str, system: str) -> None:
    assert system_for_gpu(gpus()[key]).key == system


@pytest.mark.parametrize("key", NEW)
def test_each_says_where_its_figures_come_from(key: str) -> None:
    g = gpus()[key]
    assert "http" in g.source and "[" in g.source
    assert "matmul_eff estimated" in g.source  # none of them has a MAMF measurement
    # the estimate is the measured fraction of a part of the same family
    closest = {"ampere": "a100-pcie-80gb", "ada": "h100-sxm", "hopper": "h100-sxm"}[g.arch]
    assert g.matmul_eff == gpus()[closest].matmul_eff
