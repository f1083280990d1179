"""How ``validate training`` reads a row's stack: attention kernel and scale-out network."""

from __future__ import annotations

import pytest

from gpuscale.validate.training import (
    _nics_per_node,
    attention_kernel,
    elementwise_kernels,
    zero3_gathers,
)


@pytest.mark.parametrize(
    ("source", "notes", "arch", "kernel"),
    [
        ("torchtitan benchmarks", "FSDP + CP", "hopper", "flash2"),
        ("vTrain", "Measured with Megatron-DeepSpeed", "ampere", "unfused"),
        ("Narayanan et al. SC'21", "Megatron-LM", "ampere", "unfused"),
        ("some A100 run", "Megatron-LM with flash attention", "ampere", "fused"),
        ("Megatron-Bridge performance summary", "NeMo container", "hopper", "fused"),
        ("Megatron-Bridge performance summary", "NeMo container", "blackwell", "fused"),
        ("LLaMA paper", "xformers", "ampere", "fused"),
    ],
)
def test_attention_kernel_follows_the_stack(
    source: str, notes: str, arch: str, kernel: str
) -> None:
    got, why = attention_kernel({"source": source, "notes": notes}, arch)
    assert got == kernel
    assert (why == "") == (kernel == "fused")


@pytest.mark.parametrize(
    ("inter_node", "notes", "nics"),
    [
        ("4x Omni-Path links per node (100 Gbps each)", "", 2),  # 400 Gb/s = 2 x 200G
        ("8x 200 Gbps HDR InfiniBand", "", 8),
        ("", "sim config inter_node_bandwidth=800, intra_node_bandwidth=150", 4),
        ("400 Gb/s per GPU RDMA", "", None),  # per-GPU figure: the reference node already
        ("", "", None),
    ],
)
def test_stated_scale_out_becomes_nics_per_node(
    inter_node: str, notes: str, nics: int | None
) -> None:
    assert _nics_per_node({"inter_node": inter_node, "notes": notes}, 200.0) == nics


@pytest.mark.parametrize(
    ("source", "notes", "zero", "gathers"),
    [
        ("Narayanan et al. SC'21", "ZeRO-3 (DeepSpeed)", "zero3", "per-param"),
        ("torchtitan benchmarks", "FSDP + CP", "fsdp", "coalesced"),
        ("Megatron-Bridge performance summary", "NeMo container", "zero3", "coalesced"),
        ("Smith et al. 'Using DeepSpeed and Megatron'", "", "zero1", "coalesced"),
    ],
)
def test_zero3_gathers_follow_the_stack(source: str, notes: str, zero: str, gathers: str) -> None:
    row = {"source": source, "notes": notes, "dist_optimizer_or_zero": zero}
    got, why = zero3_gathers(row)
    assert got == gathers
    assert (why == "") == (gathers == "coalesced")


@pytest.mark.parametrize(
    ("source", "notes", "mode"),
    [
        ("torchtitan benchmarks", "fsdp; peak_mem_gib=82.4", "eager"),
        ("torchtitan benchmarks", "FSDP + CP + torch.compile + Float8", "fused"),
        ("Megatron-Bridge performance summary", "NeMo container", "fused"),
    ],
)
def test_elementwise_kernels_follow_the_stack(source: str, notes: str, mode: str) -> None:
    got, why = elementwise_kernels({"source": source, "notes": notes})
    assert got == mode
    assert (why == "") == (mode == "fused")
