"""GPU names as published tables write them resolve to one catalog entry, or to none."""

from __future__ import annotations

import pytest

from gpuscale.catalog import get_gpu
from gpuscale.errors import InputError


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("a100-sxm-80gb", "a100-sxm-80gb"),  # key
        ("A100-SXM4-40GB", "a100-sxm-40gb"),  # alias
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),  # nvidia-smi's name
        ("A100-40G", "a100-sxm-40gb"),  # the size without its B, as some papers write it
        ("H100 SXM5", "h100-sxm"),
        ("DGX H100", "h100-sxm"),
        ("H100 PCIe", "h100-pcie"),
        ("H100 94GB", "h100-nvl"),  # the memory picks the part
        ("NVIDIA A100 (40GB)", "a100-sxm-40gb"),  # SXM unless PCIe is named
        ("A100 80GB PCIe", "a100-pcie-80gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
        ("Tesla V100", "v100-sxm2-32gb"),
        ("GB200 NVL72", "gb200"),
        ("AMD Instinct MI300X", "mi300x"),
        ("H20 96GB", "h20"),  # h20 is its own family, not a prefix of h200
        ("B300 (DGX-B300)", "b300"),  # HGX Blackwell Ultra, not the GB300 superchip
        ("GB300 (DGX-GB300)", "gb300"),
        ("AMD Instinct MI355X", "mi355x"),
        ("8x MI350X", "mi350x"),
        ("A800-SXM4-80GB", "a800-sxm-80gb"),
        ("MI250X", "mi250x"),
        ("NVIDIA H200 NVL", "h200-nvl"),  # nvidia-smi's name
        ("H200 NVL 141GB", "h200-nvl"),  # NVL named: not the SXM part
        ("NVIDIA H200", "h200"),  # SXM unless NVL is named
        ("AMD Instinct MI300A", "mi300a"),
    ],
)
def test_published_names_resolve(name: str, key: str) -> None:
    assert get_gpu(name).key == key


@pytest.mark.parametrize(
    "name", ["H100 64GB", "V100 16GB", "A800 40GB", "TPU v4", "RTX 4090", "A10", "RTX 3090"]
)
def test_names_the_catalog_does_not_hold_are_refused(name: str) -> None:
    with pytest.raises(InputError) as exc:
        get_gpu(name)
    assert exc.value.field == "gpu"
    assert "did you mean" in exc.value.valid or "known" in exc.value.valid


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("LLaMA-2 70B", "llama2-70b"),
        ("Llama2_13B", "llama2-13b"),
        ("Meta-Llama-3.1-8B", "llama3-8b"),
        ("DeepSeek V3", "deepseek-v3"),
        ("GPT-3 2.7B", "gpt3-2.7b"),  # the dot stays: 2.7B is not 27B
    ],
)
def test_model_spellings_resolve(name: str, key: str) -> None:
    from gpuscale.catalog import get_model

    assert get_model(name).key == key
