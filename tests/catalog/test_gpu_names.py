"""GPU names as published tables write them resolve to one catalog entry, or to none."""

from __future__ import annotations

from collections.abc import Callable

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
        ("A100-SXM4-80GB x 8", "a100-sxm-80gb"),  # a count after the name
        ("A100-40GB x 8 GPUs", "a100-sxm-40gb"),
        ("H100 SXM × 8", "h100-sxm"),
        ("GB200 NVL72 (4 GPUs/tray)", "gb200"),  # "tray" is no misspelled "Cray"
        ("A800-SXM4-80GB", "a800-sxm-80gb"),
        ("MI250X", "mi250x"),
        ("NVIDIA H200 NVL", "h200-nvl"),  # nvidia-smi's name
        ("H200 NVL 141GB", "h200-nvl"),  # NVL named: not the SXM part
        ("NVIDIA H200", "h200"),  # SXM unless NVL is named
        ("AMD Instinct MI300A", "mi300a"),
        ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),  # nvidia-smi's name
        ("V100 16GB", "v100-sxm2-16gb"),  # SXM2 unless PCIe is named
        ("Tesla V100-PCIE-16GB", "v100-pcie-16gb"),
        ("Tesla V100-SXM3-32GB", "v100-sxm3-32gb"),  # DGX-2H, nvidia-smi's name
        ("V100 SXM3", "v100-sxm3-32gb"),
        # the A10 beside its neighbours' names: A10G (AWS) and A100 keep their own
        ("A10", "a10"),
        ("NVIDIA A10", "a10"),
        ("A10G", "a10g"),
        ("A100", "a100-sxm-80gb"),
    ],
)
def test_published_names_resolve(name: str, key: str) -> None:
    assert get_gpu(name).key == key


@pytest.mark.parametrize(
    "name",
    [
        "H100 64GB",
        "V100 24GB",
        "A800 40GB",
        "TPU v4",
        "RTX 4090",
        "T4",
        "RTX 3090",
        "A100 x 40",  # a size without its unit, not 40 GPUs: no part is picked for it
    ],
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
        ("codellama/CodeLlama-34b-hf", "llama2-34b"),  # Llama 2's unreleased 34B shape
    ],
)
def test_model_spellings_resolve(name: str, key: str) -> None:
    from gpuscale.catalog import get_model

    assert get_model(name).key == key


@pytest.mark.parametrize(
    ("name", "suggested"),
    [
        ("h100-pcei", "h100-pcie"),  # a misspelled form factor is not dropped
        ("a100-sxm-40", "a100-sxm-40gb"),  # a bare 40 is not the 80 GB part
        ("h100-sxm5-94gb", "h100-sxm"),  # 94 GB is the NVL part, which is not SXM
        ("l40s-sxm", "l40s"),  # the L40S is a PCIe card
        ("mi300x-typo", "mi300x"),  # an unknown word is not dropped
    ],
)
def test_names_that_contradict_or_misspell_the_part_are_refused(name: str, suggested: str) -> None:
    assert_refused_with_suggestion(get_gpu, "gpu", name, suggested)


def assert_refused_with_suggestion(
    lookup: Callable[[str], object], field: str, name: str, suggested: str
) -> None:
    """``lookup(name)`` is an unknown-name error on ``field`` that suggests ``suggested``."""
    with pytest.raises(InputError) as exc:
        lookup(name)
    assert exc.value.field == field
    assert exc.value.value == name
    assert "did you mean" in exc.value.valid
    assert suggested in exc.value.valid


def test_the_field_is_named_in_the_refusal() -> None:
    with pytest.raises(InputError) as exc:
        get_gpu("h100-pcei", field="--gpu")
    assert str(exc.value).startswith("--gpu='h100-pcei' is invalid: unknown; did you mean")


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("H100-SXM5-80GB (DGX-H100)", "h100-sxm"),  # alias with the system in brackets
        ("H100-SXM5-80GB (DGX H100 per recipe text)", "h100-sxm"),  # a bracketed note
        ("H100-SXM5-80GB (Grand Teton, 700W TDP, HBM3)", "h100-sxm"),  # sized: not 96 GB
        ("A100 (p4de instance type)", "a100-sxm-80gb"),
        ("NVIDIA Ampere (A100-class; exact SKU not in sources read)", "a100-sxm-80gb"),
        ("B200 (HGX/DGX; 1000W)", "b200"),
        ("8 x H100 80GB SXM5", "h100-sxm"),  # a count, a size, a form factor it has
        ("DGX A100", "a100-sxm-80gb"),  # a system that houses the part
        ("HGX H100", "h100-sxm"),
        ("H100 Grand Teton", "h100-sxm-96gb"),  # the system picks the part
        ("B300 288GB", "b300"),  # marketed size, within 10 % of the 279 GB usable
        ("H100 (PCIe)", "h100-pcie"),
        ("L40S PCIe", "l40s"),
        ("MI300X OAM", "mi300x"),
        ("NVIDIA H100 GPU", "h100-sxm"),
    ],
)
def test_descriptions_with_extra_words_resolve(name: str, key: str) -> None:
    assert get_gpu(name).key == key


@pytest.mark.parametrize(
    "name",
    [
        "V100 SXM4",  # the V100 is SXM2
        "H100 OAM",
        "AMD H100",  # the vendor contradicts the part, also on the alias path
        "NVIDIA MI300X",
        "Hopper A100",  # the architecture contradicts the part
        "H100 (A100)",  # two families
        "H100 (DGX H100 640GB)",  # a size in brackets is still a size
        "h100 sxm5 94",  # a bare number is not a size
    ],
)
def test_contradicting_words_refuse_the_part(name: str) -> None:
    with pytest.raises(InputError):
        get_gpu(name)


def test_every_catalog_name_and_alias_resolves_to_its_own_entry() -> None:
    from gpuscale.catalog import gpus

    for key, gpu in gpus().items():
        for name in (key, gpu.name, *gpu.aliases):
            assert get_gpu(name).key == key, name


@pytest.mark.parametrize(
    ("name", "suggested"),
    [
        ("llama3-70bb", "llama3-70b"),
        ("llama3-8b-typo", "llama3-8b"),
        ("Meta-Llama-3.1-8B-typo", "llama3-8b"),
        ("meta-llama/Llama-3.1-8B-typo", "llama3-8b"),
    ],
)
def test_model_typos_are_refused_with_suggestions(name: str, suggested: str) -> None:
    from gpuscale.catalog import get_model

    assert_refused_with_suggestion(get_model, "model", name, suggested)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H100 Tensor Core GPU", "h100-sxm"),  # NVIDIA's product page
        ("NVIDIA A100 Tensor Core GPU", "a100-sxm-80gb"),  # the family's own alias
        ("NVIDIA GH200 Grace Hopper Superchip", "gh200"),
        ("NVIDIA GB200 Grace Blackwell Superchip", "gb200"),  # "Grace" is GH200's word too
        ("AMD Instinct MI300X Accelerator", "mi300x"),
        ("NVIDIA B300 SXM6 AC", "b300"),  # nvidia-smi's name; SXM6 fits an SXM part
        ("H100 80GB SXM with NVLink", "h100-sxm"),
        ("NVIDIA H100 SXM5 80GB HBM3 700W", "h100-sxm"),  # a power figure names no part
        ("NVIDIA H100 PCIe Tensor Core GPU", "h100-pcie"),  # the named form factor counts
        ("H100 PCIe 350W", "h100-pcie"),
        ("NVIDIA H100 80GB HBM3 (2 nodes)", "h100-sxm"),  # a bracketed note may count
    ],
)
def test_official_names_with_words_the_catalog_does_not_know_resolve(name: str, key: str) -> None:
    assert get_gpu(name).key == key


@pytest.mark.parametrize(
    ("name", "suggested"),
    [
        ("H100 pcei", "h100-pcie"),  # a misspelled catalog word on its own still refuses
        ("H100 sxn", "h100-sxm"),
        ("H100 (pcei)", "h100-pcie"),  # also in brackets
        ("B200 blackwel", "b200"),
        ("NVIDIA H100 SXM4", "h100-sxm"),  # another SXM generation than the part's SXM5
        ("H100 SXM6", "h100-sxm"),
        ("H100 Tensor Core GPU 94", "h100"),  # a bare number is still not a size
        ("A100 Tensor Core GPU (AMD)", "a100"),  # another vendor, in brackets too
    ],
)
def test_misspelt_or_contradicting_words_on_their_own_refuse(name: str, suggested: str) -> None:
    assert_refused_with_suggestion(get_gpu, "gpu", name, suggested)


@pytest.mark.parametrize(
    ("name", "first"),
    [
        ("mi300x-typo", "mi300x"),
        ("a100-sxm-40", "a100-sxm-40gb"),
        ("h100-pcei", "h100-pcie"),  # the misspelling read as the word it misspells
        ("l40s-sxm", "l40s"),
        ("H100 sxn", "h100-sxm"),
    ],
)
def test_the_closest_key_is_suggested_first(name: str, first: str) -> None:
    with pytest.raises(InputError) as exc:
        get_gpu(name)
    assert exc.value.valid.startswith(f"unknown; did you mean {first},") or exc.value.valid == (
        f"unknown; did you mean {first}?"
    )


def test_words_joined_to_the_family_must_all_fit() -> None:
    """Spelled like a key, every word counts: "h100-tensor-core" is no H100 part, though
    "H100 Tensor Core" is."""
    assert get_gpu("H100 Tensor Core").key == "h100-sxm"
    with pytest.raises(InputError):
        get_gpu("h100-tensor-core")


def test_a_truncated_list_of_known_gpus_says_so() -> None:
    from gpuscale.catalog import gpus

    with pytest.raises(InputError) as exc:
        get_gpu("zzzz")
    valid = exc.value.valid
    assert valid.startswith("unknown; known: ")
    shown = valid.removeprefix("unknown; known: ").split(", ")
    assert shown[-1] == f"… ({len(gpus()) - len(shown) + 1} more)"
    assert all(k in gpus() for k in shown[:-1])


def test_the_dgx2h_gpu_is_housed_in_its_16_gpu_nvswitch_node() -> None:
    from gpuscale.catalog import system_for_gpu

    gpu = get_gpu("V100-SXM3-32GB")
    node = system_for_gpu(gpu)
    # 2.1 PFLOPS over 16 GPUs (NVIDIA) ~ 131 TF; ADLR's 62.4 TF = 48 % of peak gives 130
    assert gpu.peak_tflops["fp16"] == 130 and gpu.tdp_w == 450
    assert (node.gpus_per_node, node.nvlink_domain_gpus, node.nics_per_node) == (16, 16, 8)
    assert node.node_power_kw == 12.0


def test_a_bare_family_name_is_said_with_the_parts_it_could_be() -> None:
    from gpuscale.catalog import get_gpu
    from gpuscale.catalog.gpu_names import family_default

    said = family_default("a100", get_gpu("a100"))
    assert said == (
        "gpu 'a100' is read as a100-sxm-80gb (NVIDIA A100 SXM4 80GB); the catalog also has "
        "a100-sxm-40gb, a100-pcie-40gb, a100-pcie-80gb"
    )
    # a full name, or a family of one part, says nothing
    for name in ("A100-SXM4-80GB", "h100-sxm", "b200"):
        assert family_default(name, get_gpu(name)) is None
