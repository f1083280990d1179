"""How ``validate training`` reads a row's stack: attention kernel and scale-out network."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.perf.plan import RECOMPUTE
from gpuscale.validate.training import UnsupportedRowError, choose_plan, predict, prepare
from gpuscale.validate.training_cells import COLUMNS
from gpuscale.validate.training_model import model_for
from gpuscale.validate.training_rows import (
    nics_per_node,
    sizes_from_notes,
    zero3_gathers,
)
from gpuscale.validate.training_stack import (
    attention_kernel,
    elementwise_kernels,
    ep_dispatch,
    grad_accumulation,
    mentions,
    pipeline_split,
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
        ("MosaicML llm-foundry benchmarks", "FSDP full shard", "hopper", "flash2"),
        ("GPT-NeoX run", "flash attention", "hopper", "flash2"),
        ("some H100 run", "flash_attn 2.5 kernels", "hopper", "flash2"),
        ("some H100 run", "FlashAttention-3 kernels", "hopper", "fused"),
        ("llm-foundry", "Megatron-style run, attention via cuDNN", "hopper", "fused"),
        ("Megatron-DeepSpeed", "Hugging Face tokenizer", "ampere", "unfused"),
        # SDPA's cuDNN backend, named, is the fused kernel (PyTorch's default on Hopper)
        ("plain PyTorch", "attention through SDPA, cuDNN backend", "hopper", "fused"),
        ("torchtitan", "SDPA with the cuDNN backend", "hopper", "fused"),
        ("plain PyTorch", "attention through SDPA", "hopper", "flash2"),
        # a cuDNN version names no attention kernel
        ("torchtitan", "NGC 24.05 (CUDA 12.4, cuDNN 9.1)", "hopper", "flash2"),
        ("Megatron-LM", "PyTorch 1.8, cuDNN 8.1", "ampere", "unfused"),
    ],
)
def test_attention_kernel_follows_the_stack(
    source: str, notes: str, arch: str, kernel: str
) -> None:
    got, why = attention_kernel({"source": source, "notes": notes}, arch)
    assert got == kernel
    # every kernel other than the default is explained in the row's reason
    assert why or (kernel == "fused" and not re.search("cudnn|attention-3", notes, re.I))


@pytest.mark.parametrize(
    ("inter_node", "notes", "nics"),
    [
        ("4x Omni-Path links per node (100 Gbps each)", "", (2, 200.0)),  # 400 = 2 x 200G
        ("8x 200 Gbps HDR InfiniBand", "", (8, 200.0)),
        ("", "sim config inter_node_bandwidth=800, intra_node_bandwidth=150", (4, 200.0)),
        ("400 Gb/s per GPU RDMA", "", None),  # per-GPU figure: the reference node already
        ("", "", None),
        # less than one reference NIC, or not a whole number of them: the row's own links
        ("1x 25Gb/s Ethernet", "", (1, 25.0)),
        ("3 x 100 Gbps RoCE", "", (3, 100.0)),
        ("", "inter_node_bandwidth=100", (1, 100.0)),
        ("", "inter_node_bandwidth=500", (2, 250.0)),
    ],
)
def test_stated_scale_out_becomes_nics_per_node(
    inter_node: str, notes: str, nics: tuple[int, float] | None
) -> None:
    assert nics_per_node({"inter_node": inter_node, "notes": notes}, 200.0) == nics


@pytest.mark.parametrize(
    ("source", "notes", "zero", "gathers"),
    [
        ("Narayanan et al. SC'21", "ZeRO-3 (DeepSpeed)", "zero3", "per-param"),
        ("a DeepSpeed run", "", "zero-3", "per-param"),
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


@pytest.mark.parametrize(
    ("source", "notes", "mode"),
    [
        (
            "Megatron-Bridge performance summary",
            "MoE: token distribution force-balanced",
            "hierarchical",
        ),
        ("some H100 run", "Megatron-Core alltoall dispatcher, EP 32", "all_to_all"),
        ("some run", "moe_token_dispatcher_type='alltoall'", "all_to_all"),
        ("torchtitan benchmarks", "DeepSeek-V3 16B, EP 8", "all_to_all"),
        ("some run", "flex dispatcher with DeepEP", "hierarchical"),
        ("some run", "token dispatcher: alltoall", "all_to_all"),
        ("some run", "alltoall token dispatcher, EP 16", "all_to_all"),
        ("some run", "A2A dispatcher", "all_to_all"),
        ("some run", "moe_token_dispatcher_type=allgather", "all_to_all"),
        ("some run", "NCCL all-to-all for expert parallelism", "all_to_all"),
        ("some run", "DeepSpeed-MoE, EP 8", "all_to_all"),
        # a named DeepEP/HybridEP wins over a mention of the collective it replaces
        ("some run", "flex dispatcher (DeepEP) instead of the alltoall dispatcher", "hierarchical"),
        ("some run", "HybridEP replaces the all-to-all dispatch", "hierarchical"),
        (
            "torchtitan",
            "DeepSeek-V3 with DeepEP (expert_parallel_comm_backend=deepep)",
            "hierarchical",
        ),
        ("some run", "all-to-all time measured apart", "hierarchical"),
    ],
)
def test_moe_dispatch_follows_the_stack(source: str, notes: str, mode: str) -> None:
    got, why = ep_dispatch({"source": source, "notes": notes})
    assert got == mode
    assert (why == "") == (mode == "hierarchical")


@pytest.mark.parametrize(
    ("cells", "precision", "mode"),
    [
        # BLOOM 176B: "ZeRO-1 via DeepSpeed BF16_Optimizer"
        ({"notes": "ZeRO-1 via DeepSpeed BF16_Optimizer"}, "bf16", "separate"),
        ({"notes": "bf16 optimizer of DeepSpeed"}, "bf16", "separate"),
        # DeepSpeed's engine with bf16 stated: its BF16 optimizer
        ({"model": "GPT 3.6B (Megatron-DeepSpeed)", "precision": "bf16"}, "bf16", "separate"),
        ({"notes": "DeepSpeed with Megatron", "precision": "BF16"}, "bf16", "separate"),
        ({"notes": "DeepSpeed pipeline engine", "precision": "bf16"}, "bf16", "separate"),
        # precision not stated (bf16 assumed): which optimizer ran is not known (MT-NLG's
        # 2021 bf16 run predates the BF16 optimizer)
        ({"source": "Using DeepSpeed and Megatron to Train MT-NLG 530B"}, "bf16", "fused"),
        ({"model": "GPT 3.6B (Megatron-DeepSpeed)"}, "bf16", "fused"),
        # bf16 before the BF16 optimizer, or without it: gradients stayed 16-bit
        (
            {
                "model": "200B (Megatron-DeepSpeed)",
                "precision": "bf16",
                "notes": "ZeRO-1 of the time, gradients accumulated in bf16 in place",
            },
            "bf16",
            "fused",
        ),
        ({"notes": "Megatron-DeepSpeed, no BF16_Optimizer", "precision": "bf16"}, "bf16", "fused"),
        # fp16: DeepSpeed's FP16 optimizers add into the 16-bit gradients in place
        ({"notes": "Megatron + DeepSpeed codebase", "precision": "fp16"}, "fp16", "fused"),
        # DeepSpeed named as a sharding scheme of another framework, not as the trainer
        ({"notes": "zero1=-1 shards across all ranks (DeepSpeed ZeRO-1)"}, "bf16", "fused"),
        ({"dist_optimizer_or_zero": "DeepSpeed ZeRO-3", "precision": "bf16"}, "bf16", "fused"),
        ({"source": "Megatron-Bridge performance summary"}, "bf16", "fused"),
        ({"notes": "Megatron-Core, BF16 optimizer states", "precision": "bf16"}, "bf16", "fused"),
        # a negation through a verb
        (
            {"notes": "Megatron-LM, not using DeepSpeed's pipeline engine", "precision": "bf16"},
            "bf16",
            "fused",
        ),
    ],
)
def test_gradient_accumulation_follows_the_trainer(
    cells: dict[str, str], precision: str, mode: str
) -> None:
    got, why = grad_accumulation(cells, precision)
    assert got == mode
    assert (why == "") == (mode == "fused")


def test_a_bf16_optimizer_row_is_priced_with_the_pass() -> None:
    row = _row(source="BLOOM", notes="ZeRO-1 via DeepSpeed BF16_Optimizer", precision="bf16")
    assert prepare(row, "test").workload.grad_accumulation == "separate"
    assert prepare(_row(source="BLOOM"), "test").workload.grad_accumulation == "fused"


@pytest.mark.parametrize(
    ("text", "used"),
    [
        ("flash attention", True),
        ("no flash attention", False),
        ("without the flash attention kernel", False),
        ("not using flash attention", False),
        ("flash attention: off", False),
        ("flash attention, not the unfused path", True),
    ],
)
def test_a_name_said_not_to_be_used_does_not_count(text: str, used: bool) -> None:
    assert mentions(text, r"flash[ -]?attention") is used


def _row(**cells: str) -> dict[str, str]:
    row = dict.fromkeys(COLUMNS, "")
    row.update(
        id="r",
        model="llama3-70b",
        gpu="H100-SXM5-80GB",
        num_gpus="64",
        seq_len="8192",
        global_batch_seqs="128",
        precision="bf16",
        measured_tokens_per_s_per_gpu="1000",
        target="tokens_per_s_per_gpu",
    )
    row.update(cells)
    return row


@pytest.mark.parametrize(
    ("source", "tp", "overlap"),
    [
        # the performance recipes overlap TP collectives with GEMMs whenever TP > 1
        ("Megatron-Bridge performance summary", "4", True),
        ("NeMo performance summary", "2", True),
        ("Megatron-Bridge performance summary", "1", None),
        ("Megatron-Bridge performance summary", "", None),  # TP searched: no overlap forced
        # a stack that does not name TP overlap: off; a Megatron stack: the search's choice
        ("some paper", "4", False),
        ("Megatron-LM README", "4", None),
        ("a torchtitan run with AsyncTP", "4", True),
        # userbuffers stay inside the 8-GPU NVLink domain: TP16 runs its collectives in turn
        ("Megatron-Bridge performance summary", "16", None),
    ],
)
def test_megatron_recipes_overlap_tp_communication(
    source: str, tp: str, overlap: bool | None
) -> None:
    pr = prepare(_row(source=source, tp=tp), "test")
    assert pr.fixed.get("tp_overlap") == overlap
    said = any("tp_comm_overlap" in n for n in pr.notes)
    assert said == (bool(overlap) and "summary" in source)  # the recipes' own note


@pytest.mark.parametrize(
    ("source", "zero", "sharding"),
    [
        # Megatron's distributed optimizer with bf16 gradients: ZeRO-1 memory and traffic
        ("Megatron-Bridge performance summary", "", 2),
        ("NeMo performance summary", "", 2),
        ("Megatron-Bridge performance summary", "fsdp", 4),  # a stated mode wins
        ("some paper", "", None),  # otherwise searched
        ("MLPerf results, eos_n64_ngc25.01_nemo implementation", "", 2),
        # a model's name is not the framework's
        ("NVIDIA 'Nemotron-4 340B Technical Report'", "", None),
        ("Mistral NeMo 12B model card", "", None),
        ("Mistral-NeMo report", "", None),
        ("Mistral (NeMo) 12B runs", "", None),
    ],
)
def test_megatron_recipes_fix_the_distributed_optimizer(
    source: str, zero: str, sharding: int | None
) -> None:
    pr = prepare(_row(source=source, dist_optimizer_or_zero=zero), "test")
    assert pr.fixed.get("sharding") == sharding


@pytest.mark.parametrize(
    ("cells", "tp", "pp"),
    [
        # Llama 3 70B (64 heads) on 8-GPU nodes: 512 GPUs at DP32 leave 16 for TP x PP
        ({"dp": "32", "num_gpus": "512"}, 8, 2),
        ({"dp": "32", "num_gpus": "128"}, 4, 1),  # model parallel smaller than a node
        ({"dp": "8", "cp": "2", "num_gpus": "512"}, 8, 4),  # CP takes its share first
        ({"dp": "32", "num_gpus": "512", "tp": "2"}, 2, None),  # a stated degree wins
        ({"num_gpus": "512"}, None, None),  # nothing stated: all searched
    ],
)
def test_unsplit_model_parallelism_fills_the_node_with_tp(
    cells: dict[str, str], tp: int | None, pp: int | None
) -> None:
    pr = prepare(_row(source="some paper", **cells), "test")
    assert pr.fixed.get("tp") == tp
    assert pr.fixed.get("pp") == pp


@pytest.mark.parametrize(
    ("source", "cells", "vpp", "mbs"),
    [
        # torchtitan: 2 stages per rank when interleaved, one micro-batch per stage
        ("torchtitan benchmarks", {"notes": "schedule interleaved-1f1b"}, 2, 2),
        ("torchtitan benchmarks", {"notes": "schedule 1f1b", "vpp": "1"}, 1, 4),
        # elsewhere: 1F1B unless interleaving is named, and the micro-batch as stated, one
        # per pipeline a step if it is the whole local batch (as a batch ramp-up starts)
        ("some paper", {"notes": "interleaved schedule"}, None, 32),
        ("some paper", {"notes": ""}, 1, 32),
        ("some paper", {"notes": "", "micro_batch": "2"}, 1, 2),
    ],
)
def test_pipeline_schedule_defaults(
    source: str, cells: dict[str, str], vpp: int | None, mbs: int | None
) -> None:
    # 512 GPUs as TP8 PP8 DP8, 256 sequences: a local batch of 32
    base = {"num_gpus": "512", "global_batch_seqs": "256", "tp": "8", "pp": "8", "dp": "8"}
    pr = prepare(_row(source=source, **{"micro_batch": "32", **base, **cells}), "test")
    assert pr.fixed.get("vpp") == vpp
    assert pr.fixed.get("mbs") == mbs


@pytest.mark.parametrize(
    ("notes", "gbs"),
    [
        ("'around 380 tokens/sec/GPU'; batch 4M tokens. Parallelism not stated", 512),
        ("global batch size of 16M tokens", 2048),
        ("batch 2.5M tokens", 320),  # 2.5 x 2^20 / 8192 = 320
        ("micro batch 4", None),  # not a global batch in tokens: the row is skipped
    ],
)
def test_global_batch_in_tokens_from_the_notes(notes: str, gbs: int | None) -> None:
    from gpuscale.validate.training import UnsupportedRowError

    row = _row(source="some paper", global_batch_seqs="", notes=notes)
    if gbs is None:
        with pytest.raises(UnsupportedRowError):
            prepare(row, "test")
    else:
        assert prepare(row, "test").workload.global_batch == gbs


def test_unsplit_model_parallelism_on_an_nvl72_rack() -> None:
    # 128 heads, 72-GPU NVLink domain: TP8 is the largest degree dividing heads and domain
    row = _row(
        source="some paper",
        model="llama3-405b",
        gpu="GB200",
        num_gpus="576",
        dp="4",
        measured_tokens_per_s_per_gpu="300",
    )
    pr = prepare(row, "test")
    assert (pr.fixed["tp"], pr.fixed["pp"]) == (8, 18)


@pytest.mark.parametrize(
    ("cell", "sharding"),
    [
        ("", None),
        ("ZeRO-1", 2),
        ("ZeRO stage 3", 4),
        ("FSDP (full shard)", 4),
        ("distributed optimizer", 1),
        ("DDP", 0),
        ("DDP (no dist-opt)", 0),  # a scheme named only to say it was not used
        ("without ZeRO", 0),
        ("ZeRO-1 (no FSDP)", 2),
        ("FSDP: off", 0),  # ... or switched off after its name
        ("use_distributed_optimizer=False", 0),
        ("dist_opt=0", 0),
        ("nondistributed optimizer", 0),
        ("distributed optimizer (not ZeRO-3)", 1),
        ("FSDP (SHARD_GRAD_OP)", 3),  # FSDP's own names: ZeRO-2 and plain DP
        ("FSDP (NO_SHARD)", 0),
        ("ZeRO-0", 0),
        ("FULL_SHARD", 4),  # FSDP's strategy enum and FSDP2's API name
        ("fully_shard", 4),
        ("FSDP (reshard_after_forward=False)", 3),  # FSDP2 keeping weights: SHARD_GRAD_OP
        ("FSDP SHARD_GRAD_OP (no reshard after forward)", 3),
        ("Yes", 1),  # a "distributed optimizer" column ticked
    ],
)
def test_sharding_spellings(cell: str, sharding: int | None) -> None:
    pr = prepare(_row(source="some paper", dist_optimizer_or_zero=cell), "test")
    assert pr.fixed.get("sharding") == sharding


@pytest.mark.parametrize(
    ("cell", "mode"),
    [
        ("selective (core attention)", 1),
        ("Full (uniform)", 2),
        ("activation checkpointing", 2),
        ("no", 0),
        ("no activation checkpointing", 0),
        ("without recomputation", 0),
        ("activation checkpointing: off", 0),
        ("gradient checkpointing=False", 0),
        ("activation checkpointing (disabled)", 0),
        ("no gradient checkpointing", 0),
        ("recompute: none", 0),
        ("none (no recompute)", 0),
        ("gradient checkpointing", 2),
        ("activation checkpointing: on", 2),
        ("block", 3),
    ],
)
def test_recompute_spellings(cell: str, mode: int) -> None:
    assert prepare(_row(source="some paper", recompute=cell), "test").fixed["recompute"] == mode


@pytest.mark.parametrize(
    ("col", "cell"),
    [
        ("recompute", "sometimes"),
        ("dist_optimizer_or_zero", "no ZeRO-3"),  # which stage it did use is unsaid
        ("dist_optimizer_or_zero", "ZeRO-1: no"),
    ],
)
def test_unknown_spellings_skip_the_row_with_the_cell(col: str, cell: str) -> None:
    from gpuscale.validate.training import UnsupportedRowError

    with pytest.raises(UnsupportedRowError, match=re.escape(cell)):
        prepare(_row(source="some paper", **{col: cell}), "test")


@pytest.mark.parametrize(
    ("cells", "seq", "gbs"),
    [
        ({"seq_len": "", "notes": "sequence length 8K; global batch 1,536"}, 8192, 1536),
        (
            {"seq_len": "", "notes": "context length: 4096, global batch size of 512 sequences"},
            4096,
            512,
        ),
        ({"notes": "global batch 2M tokens"}, 8192, 256),  # tokens over the row's sequence
        # a stated batch wins over dp x micro-batch (which assumes no accumulation)
        ({"notes": "global batch 256", "dp": "64", "micro_batch": "1"}, 8192, 256),
        ({"notes": "", "dp": "64", "micro_batch": "1"}, 8192, 64),
    ],
)
def test_sequence_and_batch_from_the_notes(cells: dict[str, str], seq: int, gbs: int) -> None:
    pr = prepare(_row(source="some paper", global_batch_seqs="", **cells), "test")
    assert (pr.workload.seq_len, pr.workload.global_batch) == (seq, gbs)


def test_a_bracketed_run_variant_keeps_the_catalog_model() -> None:
    model, notes = model_for({"model": "DeepSeekV3 (tokendrop)"}, "row 1")
    assert model.key == "deepseek-v3"
    assert any("tokendrop" in n for n in notes)
    model, notes = model_for({"model": "Qwen3_30B_a3B"}, "row 2")
    assert model.key.startswith("qwen3-30b") and notes == []


@pytest.mark.parametrize(
    ("cell", "precision"),
    [
        ("bf16", "bf16"),
        ("BF16 (amp_bf16)", "bf16"),
        ("torch.bfloat16", "bf16"),
        ("float16 with loss scaling", "fp16"),
        ("16-mixed", "fp16"),  # PyTorch Lightning's fp16 mixed precision
        ("FP8-CS (FP8-MX)", "fp8"),
        ("float8 (torchao rowwise)", "fp8"),
        ("FP8 (E4M3)", "fp8"),
        ("e4m3", "fp8"),
        ("bf16 (fp8 disabled)", "bf16"),
        ("BF16, no FP8", "bf16"),
        ("w/o fp8 (bf16)", "bf16"),
        ("BF16 (FP8 not used)", "bf16"),
        ("bf16, FP8=0", "bf16"),
        ("fp8 (no bf16 master weights)", "fp8"),  # what is off is not a precision
        ("FP8 (no delayed scaling)", "fp8"),
        ("FP8 (disabled for first/last layer)", "fp8"),  # off for some layers only
    ],
)
def test_precision_cells_as_tables_write_them(cell: str, precision: str) -> None:
    assert prepare(_row(precision=cell), "test").workload.precision == precision


@pytest.mark.parametrize("cell", ["mixed", "AMP", "FP8 off"])
def test_a_precision_cell_naming_no_format_assumes_bf16_and_says_so(cell: str) -> None:
    pr = prepare(_row(precision=cell), "test")
    assert pr.workload.precision == "bf16"
    assert "precision " in " ".join(pr.notes) and "bf16 assumed" in " ".join(pr.notes)


def test_mxfp8_runs_on_blackwell_and_skips_on_hopper() -> None:
    from gpuscale.validate.training_model import UnsupportedRowError

    row = _row(precision="MXFP8", gpu="B200 (DGX-B200)")
    assert prepare(row, "test").workload.precision == "fp8"
    row = _row(precision="MXFP8 (no NVFP4)", gpu="B200 (DGX-B200)")
    assert prepare(row, "test").workload.precision == "fp8"
    with pytest.raises(UnsupportedRowError, match="MX formats need tensor cores"):
        prepare(_row(precision="mxfp8"), "test")  # H100 scales per tensor, not per block


def test_a_precision_gpuscale_does_not_model_skips_the_row_naming_it() -> None:
    from gpuscale.validate.training_model import UnsupportedRowError

    with pytest.raises(UnsupportedRowError, match="int4"):
        prepare(_row(precision="int4"), "test")


def test_nvfp4_rows_run_fp4_gemms_and_skip_on_a_gpu_without_fp4() -> None:
    from gpuscale.validate.training_model import UnsupportedRowError

    row = _row(precision="NVFP4", gpu="GB200 (DGX-GB200)")
    assert prepare(row, "test").workload.precision == "fp4"
    with pytest.raises(UnsupportedRowError, match="no fp4 peak"):
        prepare(_row(precision="nvfp4"), "test")  # H100 has no FP4 tensor cores


def test_an_unnamed_pipeline_schedule_is_read_as_1f1b_and_said() -> None:
    pr = prepare(_row(tp="8", pp="4", dp="2", num_gpus="64"), "test")
    assert pr.fixed["vpp"] == 1
    assert any("1F1B" in n for n in pr.notes)
    for named in ("interleaved", "virtual pipeline stages", "LoopedBFS schedule"):
        pr = prepare(_row(tp="8", pp="4", dp="2", num_gpus="64", notes=named), "test")
        assert "vpp" not in pr.fixed


def test_mtp_variants_set_the_prediction_depths_and_say_so() -> None:
    without, notes = model_for({"model": "DeepSeekV3 (w/o MTP)"}, "row 1")
    assert (without.key, without.mtp_layers, without.mtp_weight_sets) == ("deepseek-v3", 0, 0)
    assert any("w/o MTP" in n for n in notes)
    with_mtp, _ = model_for({"model": "DeepSeekV3 (w/ MTP)"}, "row 2")
    assert with_mtp.mtp_layers == 1
    # unstated: the catalog's depth, as the model trains (DeepSeek-V3 report: D = 1)
    unstated, notes = model_for({"model": "DeepSeekV3"}, "row 3")
    assert unstated.mtp_layers == 1
    assert any(n.startswith("MTP not stated: 1 ") for n in notes)


def test_a_row_shape_that_contradicts_a_hybrid_or_windowed_model_skips_with_the_reason() -> None:
    from gpuscale.validate.training_model import UnsupportedRowError

    with pytest.raises(UnsupportedRowError, match="pattern has 52 blocks but layers=48"):
        model_for({"model": "Nemotron_3_Nano", "layers": "48"}, "row 1")
    with pytest.raises(UnsupportedRowError, match="window_layers=18 exceeds"):
        model_for({"model": "GPT OSS 120B", "layers": "12"}, "row 2")


# DBRX as a published row would give it without a catalog entry: the shape in the columns,
# the experts in the notes (databricks/dbrx-base config.json; 132 B total, 36 B active)
DBRX_ROW = {
    "model": "a 132B MoE",
    "params_b": "132",
    "layers": "40",
    "hidden": "6144",
    "ffn_hidden": "10752",
    "heads": "48",
    "kv_heads": "8",
    "vocab": "100352",
    "seq_len": "4096",
    "notes": "fine-grained MoE: 16 experts, top-4 routing",
}


def test_a_shape_row_takes_its_experts_from_the_notes_and_its_mlp_from_its_size() -> None:
    from gpuscale.perf.transformer import active_param_count, param_count

    m, notes = model_for(DBRX_ROW, "row 1")
    assert (m.num_experts, m.top_k, m.gated_mlp) == (16, 4, True)
    # per layer: Q and O 2 h^2, K and V 2 h (8 heads x 128), 16 experts x 3 h f, router
    # 16 h, 2 norms; a shape row ties its embeddings (V h once) and learns its 4096
    # positions (4096 h); final norm h
    h, f, layers, v = 6144, 10752, 40, 100352
    per_layer = 2 * h * h + 2 * h * 1024 + 16 * 3 * h * f + 16 * h + 2 * h
    assert param_count(m) == layers * per_layer + v * h + 4096 * h + h
    assert active_param_count(m) < param_count(m) / 3
    assert "16 experts, top-4, as the row says" in notes
    assert any("gated MLP" in n for n in notes)


def test_a_shape_row_keeps_a_plain_mlp_when_its_size_says_so() -> None:
    # GPT-3 13B's shape (40 layers, hidden 5120, 4h MLP) with 12.9 B stated: two MLP
    # matrices give 12.86 B, three would give 17.05 B
    row = {
        "model": "GPT 13B",
        "params_b": "12.9",
        "layers": "40",
        "hidden": "5120",
        "ffn_hidden": "20480",
        "heads": "40",
        "seq_len": "2048",
    }
    m, notes = model_for(row, "row 1")
    assert not m.gated_mlp and not any("gated" in n for n in notes)


LLAMA_7B_SHAPE = {
    "model": "Some 7B",
    "layers": "32",
    "hidden": "4096",
    "heads": "32",
    "vocab": "32000",
    "seq_len": "2048",
}
"""LLaMA 7B's shape (arXiv 2302.13971 Table 2), named as no catalog model."""


@pytest.mark.parametrize(
    ("notes", "position", "tied", "gated"),
    [
        ("", "learned", True, False),
        ("RoPE, untied embeddings, SwiGLU MLP", "rope", False, True),
        ("rotary position embeddings; separate output layer", "rope", False, False),
        ("no RoPE scaling; --untie-embeddings-and-output-weights", "rope", False, False),
        ("ALiBi instead of RoPE; GeGLU", "alibi", True, True),
        ("no rotary; tie_word_embeddings: false; gated_linear_unit=True", "learned", False, True),
        ("embeddings not tied; the figure is not tied to a release", "learned", False, False),
        ("the figure is not tied to a release; no separate output layer", "learned", True, False),
        ("not untied; ungated MLP; not SwiGLU", "learned", True, False),
    ],
)
def test_a_shape_row_takes_positions_embeddings_and_mlp_from_its_notes(
    notes: str, position: str, tied: bool, gated: bool
) -> None:
    from gpuscale.perf.transformer import param_count

    # with no size stated, an FFN of 4 x hidden reads as a plain MLP
    row = {**LLAMA_7B_SHAPE, "ffn_hidden": "16384", "seq_len": "4096", "notes": notes}
    m, said = model_for(row, "row 1")
    assert (m.position, m.tied_embeddings, m.gated_mlp) == (position, tied, gated)
    # learned positions add their table; an untied output layer adds V x h; a gated MLP adds
    # a third h x f matrix per layer
    h, f, v, layers = 4096, 16384, 32000, 32
    per_layer = 4 * h * h + (3 if gated else 2) * h * f + 2 * h
    table = 4096 * h if position == "learned" else 0
    assert param_count(m) == layers * per_layer + v * h * (1 if tied else 2) + table + h
    assert ("rotary position embeddings, as the row says" in said) == (position == "rope")
    assert ("output layer untied from the input embedding, as the row says" in said) == (not tied)
    assert any(n.startswith("gated MLP (") and "as the row says" in n for n in said) == gated


def test_a_gated_mlp_named_without_a_width_keeps_a_plain_mlps_parameters() -> None:
    from gpuscale.perf.transformer import param_count

    # LLaMA 7B's published shape (arXiv 2302.13971 Table 2) without its FFN width: the
    # 8/3 x hidden of a SwiGLU MLP keeps 6.7 B within the size check (4 x hidden with three
    # matrices would be 8.7 B and skip the row)
    row = {**LLAMA_7B_SHAPE, "params_b": "6.7", "notes": "SwiGLU, RoPE, untied"}
    m, said = model_for(row, "row 1")
    assert (m.gated_mlp, m.ffn_hidden) == (True, 10923)
    assert param_count(m) == pytest.approx(6.74e9, rel=1e-2)
    assert "gated MLP (SwiGLU) as the row says, FFN width 8/3 x hidden" in said
    # named, the MLP is not re-chosen by its parameter count
    assert not any("nearer the row's" in n for n in said)


def test_a_shape_row_that_misses_its_stated_size_skips_with_both_sizes() -> None:
    from gpuscale.validate.training_model import UnsupportedRowError

    no_experts = {**DBRX_ROW, "notes": ""}  # 12.2 B of shape against 132 B stated
    with pytest.raises(UnsupportedRowError, match=r"gives 1\d\.\d B parameters, not the 132 B"):
        model_for(no_experts, "row 1")


def test_a_shape_row_has_learned_positions_for_its_whole_sequence() -> None:
    from gpuscale.perf.transformer import param_count

    short, _ = model_for({**DBRX_ROW, "seq_len": "2048"}, "row 1")
    long, _ = model_for({**DBRX_ROW, "seq_len": "65536"}, "row 1")
    assert param_count(long) - param_count(short) == (65536 - 2048) * 6144


def test_a_row_with_only_its_step_time_is_scored_in_tokens_per_second() -> None:
    # 128 sequences of 8192 tokens on 64 GPUs in 16.384 s: 1,000 tokens/s per GPU
    pr = prepare(_row(measured_tokens_per_s_per_gpu="", measured_step_time_s="16.384"), "test")
    assert pr.measured == pytest.approx(128 * 8192 / (16.384 * 64), rel=1e-12)
    assert any("from the measured step time" in n for n in pr.notes)
    # a TFLOP/s target given only a step time is compared in the tokens/s that step gives
    flops = _row(
        target="tflops_per_gpu",
        measured_step_time_s="16.384",
        measured_tokens_per_s_per_gpu="",
        flop_convention="megatron_model_causal",
    )
    pr = prepare(flops, "test")
    assert pr.target == "tokens_per_s_per_gpu"
    assert pr.measured == pytest.approx(1000.0, rel=1e-12)
    assert "target tflops_per_gpu, only measured_step_time_s given" in pr.notes[0]
    # and with no batch stated, a step time gives no tokens/s: the row is skipped
    from gpuscale.validate.training_model import UnsupportedRowError

    no_batch = _row(
        model="llama3-8b",
        measured_tokens_per_s_per_gpu="",
        measured_step_time_s="7.6",
        global_batch_seqs="",
    )
    with pytest.raises(UnsupportedRowError, match="global batch is not stated"):
        prepare({**no_batch, "dp": "64", "micro_batch": "1", "tp": "1", "pp": "1"}, "test")
    # unless the notes state it ("GBS=512")
    stated = prepare({**no_batch, "dp": "64", "micro_batch": "1", "notes": "GBS=512"}, "test")
    assert stated.measured == pytest.approx(512 * 8192 / (7.6 * 64), rel=1e-12)


def test_a_shape_row_that_is_no_model_skips_with_the_reason() -> None:
    from gpuscale.validate.training_model import UnsupportedRowError

    with pytest.raises(UnsupportedRowError, match="top_k=16 exceeds num_experts=8"):
        model_for({**DBRX_ROW, "params_b": "", "notes": "8 experts, top-16"}, "row 1")


def test_a_runs_file_needs_only_the_columns_its_rows_use(tmp_path: Path) -> None:
    # a file of tokens/s rows with no FLOP-convention (or shape) columns, in its own order
    from gpuscale.calibrate import default_calibration
    from gpuscale.errors import InputError
    from gpuscale.validate.training import validate_training

    cols = (
        "target,measured_tokens_per_s_per_gpu,global_batch_seqs,seq_len,num_gpus,gpu,model,"
        "source,id"
    )
    f = tmp_path / "runs.csv"
    f.write_text(f"{cols}\ntokens_per_s_per_gpu,1000,128,8192,64,H100-SXM5-80GB,llama3-70b,a,r1\n")
    report = validate_training(f, default_calibration())
    assert [r.status for r in report.rows] == ["scored"]
    # a required column missing is named
    (tmp_path / "bad.csv").write_text("id,source\nr1,a\n")
    with pytest.raises(InputError, match="missing column"):
        validate_training(tmp_path / "bad.csv", default_calibration())


@pytest.mark.parametrize(
    "cells",
    [
        # Llama 3 70B trains at ~4.7e11 model FLOPs per token (8K context): 5,000 tokens/s
        # per H100 would be 2,300 TFLOP/s, above its 989 TFLOP/s BF16 dense peak
        {"measured_tokens_per_s_per_gpu": "5000"},
        {
            "target": "tflops_per_gpu",
            "flop_convention": "megatron_model_causal",
            "measured_tflops_per_gpu": "1200",
        },
        # 128 x 8192 tokens on 64 GPUs in 2 s: 8,192 tokens/s per GPU
        {"measured_tokens_per_s_per_gpu": "", "measured_step_time_s": "2"},
    ],
)
def test_a_figure_above_the_gpus_peak_skips_the_row_with_both_rates(cells: dict[str, str]) -> None:
    from gpuscale.validate.training_model import UnsupportedRowError

    with pytest.raises(UnsupportedRowError, match=r"above h100-sxm's bf16 dense peak of 989"):
        prepare(_row(**cells), "test")
    assert prepare(_row(), "test").measured == 1000.0  # 470 TFLOP/s: a possible figure


def test_a_row_recomputing_named_modules_prices_those_modules() -> None:
    row = _row(
        source="Megatron MoE Model Zoo",
        model="Qwen3_235B_a22B",
        num_gpus="256",
        seq_len="4096",
        global_batch_seqs="2048",
        tp="2",
        pp="8",
        ep="32",
        micro_batch="1",
        recompute="selective (norm, act)",
    )
    pr = prepare(row, "row")
    assert pr.workload.recompute_modules == ("layernorm", "moe_act")
    assert pr.fixed["recompute"] == 1
    assert any("selective recompute of layernorm, moe_act" in n for n in pr.notes)
    plain = prepare({**row, "recompute": "selective"}, "row")
    assert plain.workload.recompute_modules == ("core_attn",)
    # a module gpuscale does not know skips the row, naming it
    from gpuscale.validate.training import UnsupportedRowError

    with pytest.raises(UnsupportedRowError, match="'indexer'"):
        prepare({**row, "recompute": "selective (indexer)"}, "row")


@pytest.mark.parametrize(
    ("cells", "seq", "gbs"),
    [
        ({"seq_len": "8,192", "global_batch_seqs": "1,024"}, 8192, 1024),
        ({"seq_len": "8K", "global_batch_seqs": "128"}, 8192, 128),
        ({"seq_len": "128k", "global_batch_seqs": "~64"}, 131072, 64),
    ],
)
def test_numbers_as_tables_print_them(cells: dict[str, str], seq: int, gbs: int) -> None:
    pr = prepare(_row(**cells), "test")
    assert (pr.workload.seq_len, pr.workload.global_batch) == (seq, gbs)


def test_a_percent_mfu_is_a_fraction() -> None:
    row = _row(target="mfu", measured_mfu="43%", flop_convention="megatron_model_causal")
    assert prepare(row, "test").measured == pytest.approx(0.43)


@pytest.mark.parametrize(
    "model",
    ["meta-llama/Meta-Llama-3-70B", "meta-llama/Llama-3.1-70B-Instruct", "Llama-3.1-70B"],
)
def test_hugging_face_repository_ids_name_the_catalog_model(model: str) -> None:
    assert prepare(_row(model=model), "test").workload.model.key == "llama3-70b"


def test_a_model_built_from_the_row_shape_says_so() -> None:
    row = _row(model="Foo 13B", layers="40", hidden="5120", heads="40", vocab="32000")
    pr = prepare(row, "test")
    assert pr.workload.model.layers == 40
    assert any("not in the catalog: built from the row's shape" in n for n in pr.notes)


def test_sequence_parallel_ticked_with_tp_1_is_off_and_said() -> None:
    pr = prepare(_row(tp="1", pp="1", dp="64", seq_parallel="yes"), "test")
    assert pr.fixed["sp"] is False
    assert any("sequence parallelism stated with TP 1" in n for n in pr.notes)


def test_an_empty_flop_convention_on_a_tflops_row_is_unspecified() -> None:
    row = _row(target="tflops_per_gpu", measured_tflops_per_gpu="400")
    assert prepare(row, "test").convention == "unspecified"
    # a tokens/s row needs none
    assert prepare(_row(), "test").convention == ""


@pytest.mark.parametrize(
    ("cell", "nics"),
    [
        ("8x400Gbps", 8),
        ("InfiniBand 8x50 GB/s per node", 8),  # bytes: 8 x 400 Gb/s
        ("4\u00d7 Omni-Path 100 Gbps", 1),  # 400 Gb/s a node: one 400 Gb/s NIC's worth
        ("8x 0.4 Tbps", 8),
        ("400 Gb/s per GPU", None),  # a per-GPU figure states no node total
    ],
)
def test_scale_out_units(cell: str, nics: int | None) -> None:
    assert nics_per_node({"inter_node": cell}, 400.0) == (None if nics is None else (nics, 400.0))


@pytest.mark.parametrize(
    ("cell", "nics"),
    [
        # links counted per GPU: times the node's 8 GPUs
        ("1x 400Gb/s NDR per GPU", 8),
        ("2x 200Gb/s per GPU", 8),
        ("1 x 400G IB /GPU", 8),
        ("1x 400Gb/s (per GPU)", 8),
        # the node's links, one per GPU: no multiplying
        ("4x 200 Gb/s Slingshot (one per GPU)", 2),
        ("8x 400Gb/s, 1 per GPU", 8),
        ("8x 400Gb/s one NIC per GPU", 8),
        ("8 x 400 Gbps IB - one HCA per GPU", 8),
        ("8x400 Gb/s/GPU", 8),  # as many links as the node's GPUs: the node's
    ],
)
def test_links_counted_per_gpu_are_the_nodes_times_its_gpus(cell: str, nics: int) -> None:
    assert nics_per_node({"inter_node": cell}, 400.0, 8) == (nics, 400.0)
    pr = prepare(_row(inter_node=cell), "test")
    assert pr.workload.system.nics_per_node == nics


@pytest.mark.parametrize(
    ("source", "notes", "arch", "kernel"),
    [
        ("Megatron-LM", "no flash attention", "ampere", "unfused"),
        ("Megatron-LM", "flash attention on", "ampere", "fused"),
        ("NeMo", "FlashAttention-2 disabled", "hopper", "fused"),
        # a config taken from the Hugging Face hub is not the Hugging Face training stack
        (
            "NeMo https://huggingface.co/x",
            "shape from the Hugging Face config.json",
            "hopper",
            "fused",
        ),
        ("Hugging Face transformers Trainer", "", "hopper", "flash2"),
    ],
)
def test_negated_or_incidental_stack_names_do_not_count(
    source: str, notes: str, arch: str, kernel: str
) -> None:
    assert attention_kernel({"source": source, "notes": notes}, arch)[0] == kernel


@pytest.mark.parametrize(
    ("notes", "mode"),
    [
        ("torchtitan without torch.compile", "eager"),
        ("compile=False", "eager"),
        ("torch.compile", "fused"),
        ("torch.compile and float8 not used", "eager"),
        ("compile false; whether torch.compile was on is not stated", "eager"),
    ],
)
def test_a_negated_compile_is_eager(notes: str, mode: str) -> None:
    assert elementwise_kernels({"source": "torchtitan", "notes": notes})[0] == mode


@pytest.mark.parametrize(
    ("notes", "elementwise", "loss"),
    [
        ("eager PyTorch ops for RMSNorm, RoPE and SwiGLU; eager cross-entropy", "eager", "eager"),
        ("blocks compiled with torch.compile; eager cross-entropy", "fused", "eager"),
        ("blocks compiled with torch.compile", "fused", None),
        # "eager execution" says no CUDA graphs, nothing of the kernels
        ("eager execution (no CUDA graphs), selective recompute", "fused", None),
        ("the optimizer step, data loading and logging stay eager", "fused", None),
        ("PyTorch eager execution, no CUDA graphs", "fused", None),
        ("the loss ran eager", "fused", "eager"),
        ("no eager cross-entropy: Megatron's fused loss", "fused", None),
    ],
)
def test_eager_ops_and_an_eager_loss_are_read_where_named(
    notes: str, elementwise: str, loss: str | None
) -> None:
    from gpuscale.validate.training_stack import loss_kernel

    row = {"source": "plain PyTorch on one GPU", "notes": notes}
    assert elementwise_kernels(row)[0] == elementwise
    got, why = loss_kernel(row)
    assert got == loss
    assert bool(why) == (loss is not None)


def test_deepspeed_named_in_the_sharding_cell_selects_its_gathers() -> None:
    from gpuscale.validate.training_rows import zero3_gathers

    row = {"source": "a blog", "notes": "", "dist_optimizer_or_zero": "DeepSpeed ZeRO-3"}
    assert zero3_gathers(row)[0] == "per-param"


def test_stated_degrees_beyond_the_gpu_count_name_the_cells() -> None:
    from gpuscale.calibrate import default_calibration
    from gpuscale.validate.training import UnsupportedRowError, choose_plan

    pr = prepare(_row(tp="4", pp="4", dp="4", cp="2"), "test")  # 128 GPUs of 64
    with pytest.raises(UnsupportedRowError, match=r"tpxppxdpxcp = 4x4x4x2 = 128 GPUs, more"):
        choose_plan(pr, default_calibration())


@pytest.mark.parametrize(
    "said",
    [
        "E=16, k=4",
        "num_experts=16, top_k=4",
        "MoE with 16 routed experts, topk 4",
        "16 experts, 4 active experts per token",
        "E = 16; k = 4",
        "k=8 nodes, 16 experts, top-4",  # a bare k= elsewhere is not the top-k
        "n_routed_experts=16, num_experts_per_tok=4",
        "moe_router_topk=4, num_experts=16",
        "desktop 3 runs; 16 experts, top-4",  # "top" inside a word is no top-k
    ],
)
def test_expert_counts_are_read_as_configs_write_them(said: str) -> None:
    m, notes = model_for({**DBRX_ROW, "notes": said}, "row 1")
    assert (m.num_experts, m.top_k) == (16, 4)
    assert "16 experts, top-4, as the row says" in notes


def test_an_e_or_k_in_other_words_names_no_experts() -> None:
    # "E: 2024" is no expert count: the dense shape is kept (and here misses params_b, so
    # the row is skipped for its size, not read as a 2,024-expert model)
    from gpuscale.validate.training import UnsupportedRowError

    row = {**DBRX_ROW, "notes": "dense; E: 2024 paper, k: 2"}
    with pytest.raises(UnsupportedRowError) as err:
        model_for(row, "row 1")
    assert "gives 12.1 B parameters" in str(err.value)  # DBRX's shape without experts


def test_a_global_batch_given_in_tokens_is_skipped_naming_the_cell() -> None:
    from gpuscale.validate.training import UnsupportedRowError

    # 4M tokens written in the sequences column: 4,194,304 x 2,048 = 8.6e9 tokens a step
    with pytest.raises(UnsupportedRowError) as err:
        prepare(_row(seq_len="2048", global_batch_seqs="4194304"), "test")
    msg = str(err.value)
    assert "global_batch_seqs=4,194,304" in msg and "2,048 sequences" in msg
    # DeepSeek-V3's 15,360 sequences of 4,096 (63 M tokens) is a real batch and is read
    pr = prepare(_row(seq_len="4096", global_batch_seqs="15360", num_gpus="2048"), "test")
    assert pr.workload.global_batch == 15360


@pytest.mark.parametrize(
    ("notes", "overlap"),
    [
        ("FSDP32 x TP8 + torch.compile + Float8; 2d", False),
        ("FSDP32 x TP8 + torch.compile + Float8; 2d+AsyncTP", True),
        ("FSDP x TP8 x PP8 + compile + Float8 + Async TP", True),
    ],
)
def test_torchtitan_tp_is_sequence_parallel_and_overlapped_only_with_async_tp(
    notes: str, overlap: bool
) -> None:
    pr = prepare(_row(source="torchtitan benchmarks", tp="8", notes=notes), "test")
    assert pr.fixed["sp"] is True and pr.fixed["tp_overlap"] is overlap
    said = "overlapped with the matmuls (AsyncTP)" if overlap else "not overlapped"
    assert any(said in n for n in pr.notes)
    # TP 1: neither switch is set
    pr1 = prepare(_row(source="torchtitan benchmarks", tp="1", notes=notes), "test")
    assert "tp_overlap" not in pr1.fixed


@pytest.mark.parametrize(
    ("notes", "skipped"),
    [
        ("MLPerf Training Llama 2 70B LoRA fine-tuning", True),
        ("QLoRA, 4-bit base", True),
        ("PEFT adapters on a frozen base", True),
        ("MLA: kv_lora_rank 512, q_lora_rank 1536", False),  # MLA's ranks are no LoRA
        ("8 host channel adapters per node", False),
        ("no LoRA: full pre-training", False),
    ],
)
def test_parameter_efficient_fine_tuning_is_skipped_with_its_reason(
    notes: str, skipped: bool
) -> None:
    from gpuscale.validate.training import UnsupportedRowError

    row = _row(notes=notes)
    if skipped:
        with pytest.raises(UnsupportedRowError, match="parameter-efficient fine-tuning"):
            prepare(row, "test")
    else:
        assert prepare(row, "test").workload.num_gpus == 64


@pytest.mark.parametrize(
    ("notes", "precision", "gathered"),
    [
        ("torchao float8 with --float8.enable_fsdp_float8_all_gather", "fp8", True),
        ("Megatron --fp8-param-gather", "fp8", True),
        ("fp8_param_gather: false", "fp8", False),
        ("Megatron --fp8-param-gather", "bf16", False),  # nothing to gather in FP8
        ("FSDP", "fp8", False),
        ("NVFP4 recipe, --fp4-param-gather", "fp4", True),
    ],
)
def test_fp8_parameter_gathers_are_read_from_the_stack(
    notes: str, precision: str, gathered: bool
) -> None:
    gpu = "B200" if precision == "fp4" else "H100-SXM5-80GB"
    pr = prepare(_row(notes=notes, precision=precision, gpu=gpu), "test")
    assert pr.workload.fp8_param_gather is gathered


@pytest.mark.parametrize(
    ("cells", "sharding", "group"),
    [
        # FSDP's HYBRID_SHARD: full sharding within a node (8 GPUs), replicas across nodes
        ({"dist_optimizer_or_zero": "HSDP"}, 4, 8),
        ({"dist_optimizer_or_zero": "FSDP (HYBRID_SHARD)"}, 4, 8),
        # with TP 2 a node holds 4 data-parallel ranks
        ({"dist_optimizer_or_zero": "HSDP", "tp": "2"}, 4, 4),
        ({"dist_optimizer_or_zero": "_HYBRID_SHARD_ZERO2"}, 3, 8),
        # the group the cell sizes
        ({"dist_optimizer_or_zero": "HSDP (shard 16)"}, 4, 16),
        ({"dist_optimizer_or_zero": "HSDP dp_shard=32"}, 4, 32),
        ({"dist_optimizer_or_zero": "hybrid sharding, 16-way shard"}, 4, 16),
        ({"dist_optimizer_or_zero": "FSDP"}, 4, 0),
        # hybrid sharding said not to be used
        ({"dist_optimizer_or_zero": "FSDP (no HSDP)"}, 4, 0),
        ({"dist_optimizer_or_zero": "FSDP, not hybrid sharded"}, 4, 0),
        # a replica count is not a shard group: one node's ranks
        ({"dist_optimizer_or_zero": "HSDP (2 replicas)"}, 4, 8),
    ],
)
def test_hybrid_sharding_is_read_with_its_shard_group(
    cells: dict[str, str], sharding: int, group: int
) -> None:
    pr = prepare(_row(source="some paper", **cells), "test")
    assert pr.fixed["sharding"] == sharding
    assert pr.workload.shard_group == group
    if group:
        assert any("hybrid sharding" in n for n in pr.notes)


@pytest.mark.parametrize(
    ("text", "pp", "split"),
    [
        ("nanotron benchmark", 4, "balanced"),  # placed by compute cost
        ("Hugging Face Ultra-Scale Playbook, nanotron", 2, "balanced"),
        ("nanotron benchmark", 1, "even"),  # no pipeline, nothing to place
        ("Megatron-Bridge", 8, "even"),  # Megatron's default (an uneven count too)
        ("BigScience, Megatron-DeepSpeed", 12, "even"),  # its partition not named
        # DeepSpeed's partition giving each embedding a slot: (70 + 2) / 12 = 6 a stage
        ("Megatron-DeepSpeed --pp-partition-method 'type:transformer|embedding'", 12, "account"),
        ("bigscience/train/tr11-176B-ml/README.md", 12, "account"),  # its README names it
        ("bigscience/train/tr11-176B-ml/README.md", 10, "even"),  # 72 slots on 10: uneven
    ],
)
def test_pipeline_split_follows_the_stack(text: str, pp: int, split: str) -> None:
    got, why = pipeline_split({"source": text}, pp, pp, 70)
    assert got == split
    assert (why == "") == (split == "even")
    if split == "account":
        assert why.endswith("6 a stage (account split)")


def test_a_nanotron_pipeline_row_is_priced_balanced() -> None:
    row = _row(source="nanotron benchmark", pp="4", tp="1", dp="16")
    prepared = prepare(row, "test")
    assert prepared.workload.pp_split == "balanced"
    assert any("nanotron balances its stages" in n for n in prepared.notes)
    assert prepare(_row(source="Megatron-LM", pp="4"), "test").workload.pp_split == "even"


@pytest.mark.parametrize("size", ["0", "-0", "-70"])
def test_a_size_not_above_zero_skips_the_row(size: str) -> None:
    with pytest.raises(UnsupportedRowError, match=f"params_b='{size}': a model's size must be"):
        prepare(_row(params_b=size), "test")


def test_a_slower_stated_network_slows_the_prediction() -> None:
    # Llama 3 8B with FSDP on 64 H100 (eight 400 Gb/s NICs a node in the reference system):
    # a row stating one 100 Gb/s link a node is priced on it, and is slower
    base = dict(model="Llama-3-8B", num_gpus="64", tp="1", pp="1", dp="64", micro_batch="2")
    base["dist_optimizer_or_zero"] = "FSDP"
    ref = prepare(_row(**base), "test")
    slow = prepare(_row(**base, inter_node="1x 100Gb/s Ethernet"), "test")
    assert (slow.workload.system.nics_per_node, slow.workload.system.nic_gbps) == (1, 100.0)
    assert "scale-out: 1 x 100 Gb/s NICs per node, as the row states" in slow.notes
    cal = default_calibration()
    fast_s = predict(ref, choose_plan(ref, cal)[0], cal)
    slow_s = predict(slow, choose_plan(slow, cal)[0], cal)
    assert slow_s < 0.5 * fast_s


def test_fsdp_stated_is_full_sharding_and_the_searched_knobs_are_named() -> None:
    # FSDP is FULL_SHARD unless the cell says hybrid: on a slow network the search would
    # otherwise pick a hybrid-sharded twin the row never ran (hsdp8); the knobs it still
    # chooses are named in the reason
    cells = dict(model="Llama-3-8B", num_gpus="64", dp="64", micro_batch="2")
    cells.update(dist_optimizer_or_zero="FSDP", inter_node="1x 100Gb/s Ethernet")
    pr = prepare(_row(**cells), "test")
    assert pr.fixed["shard_group"] == 0
    plans, _ = choose_plan(pr, default_calibration())
    assert int(plans.shard_group[0]) == 0 and int(plans.sharding[0]) == 4
    # (TP1 PP1 from DP 64: no interleaving or sequence parallelism left to choose)
    assert pr.notes[-1] == "not stated, chosen by gpuscale's plan search: recompute, cp"
    bare = prepare(_row(model="Mixtral-8x7B", num_gpus="64"), "test")
    assert bare.notes[-1] == (
        "not stated, chosen by gpuscale's plan search: "
        "tp, pp, dp, mbs, recompute, sharding, cp, ep, vpp, sequence parallelism"
    )
    hybrid = prepare(_row(**{**cells, "dist_optimizer_or_zero": "HSDP"}), "test")
    assert "shard_group" not in hybrid.fixed and hybrid.workload.shard_group == 8


@pytest.mark.parametrize(
    ("gpu", "link", "domain"),
    [
        ("GB200 NVL4", "", 4),  # four GPUs on a board: no rack-wide NVLink
        ("GB200", "NVLink 5, NVL36", 36),
        ("GB200 NVL72", "", 72),  # the reference rack
        ("GB200 NVL72", "NVL36", 36),  # the link cell before the system's name
        ("H100 NVL", "", 1),  # the NVL card, not a domain size: its PCIe server's
    ],
)
def test_a_named_nvlink_domain_sets_the_scale_up_domain(gpu: str, link: str, domain: int) -> None:
    pr = prepare(_row(gpu=gpu, intra_node_link=link, num_gpus="72"), "test")
    assert pr.workload.system.nvlink_domain_gpus == domain
    assert pr.workload.fabric.domain_gpus == domain
    said = [n for n in pr.notes if n.startswith("scale-up: NVLink domains of")]
    assert len(said) == (domain not in (72, 1))


@pytest.mark.parametrize(
    ("notes", "seq", "batch"),
    [
        ("batch size of 4.2M tokens", 8192, 512),  # 4,194,304 tokens, rounded to 4.2M
        ("batch 3.2M tokens", 2048, 1536),  # GPT-3's 3.2M: 1,536 sequences of 2,048
        ("GBS=512, MBS=1", 8192, 512),
        ("global batch = 4,194,304 tokens", 8192, 512),
        # a micro-, mini- or per-GPU batch is no global batch
        ("micro batch = 16384 tokens", 8192, None),
        ("per-GPU batch = 8192 tokens", 8192, None),
        ("micro-batch size: 16384 tokens, global batch 1M tokens", 8192, 128),
    ],
)
def test_a_batch_the_notes_give(notes: str, seq: int, batch: int | None) -> None:
    assert sizes_from_notes(notes, seq, None)[1] == batch


def test_an_mfu_under_a_percent_label_is_a_percentage() -> None:
    pr = prepare(
        _row(target="MFU (%)", measured_mfu="41", measured_tokens_per_s_per_gpu=""), "test"
    )
    assert pr.measured == pytest.approx(0.41)
    assert "measured_mfu=41 under the target label 'MFU (%)': %" in pr.notes
    # a bare 45 under the mfu target: no run exceeds its GPU's peak, so it is 45 %
    bare = prepare(_row(target="mfu", measured_mfu="45", measured_tokens_per_s_per_gpu=""), "t")
    assert bare.measured == pytest.approx(0.45)
    assert "measured_mfu=45 read as 45 % (a fraction of peak is at most 1)" in bare.notes
    with pytest.raises(UnsupportedRowError, match="at most 1"):
        prepare(_row(target="mfu", measured_mfu="145", measured_tokens_per_s_per_gpu=""), "t")


@pytest.mark.parametrize(
    ("source", "notes", "overlap"),
    [
        # MegaScale's own words
        ("MegaScale paper", "TP/SP communication fused into and overlapped with the GEMMs", True),
        ("a paper", "--tp-comm-overlap", True),
        ("Megatron-DeepSpeed run", "", False),  # no such overlap in that stack
        # negations and other overlaps are no TP overlap
        ("a DeepSpeed run", "TP communication is not overlapped", False),
        ("Megatron-DeepSpeed", "overlap grad reduce, tp 4", False),
        ("a paper", "overlapping the DP all-reduce with the TP=4 compute", False),
        ("a paper", "AsyncTP not used", False),
        ("Megatron-LM", "tp_comm_overlap=False", False),
        # a Megatron stack whose notes begin with another switch: the search's choice
        ("Megatron-LM", "No CP", None),
        ("an mcore run", "", None),
    ],
)
def test_tp_overlap_as_the_row_names_it(source: str, notes: str, overlap: bool | None) -> None:
    pr = prepare(_row(source=source, tp="4", notes=notes), "test")
    assert pr.fixed.get("tp_overlap") is overlap


def test_a_low_precision_for_a_part_of_the_model_is_said() -> None:
    # "BF16 (MXFP8 experts)": FP8 GEMMs priced throughout, and the reason says so
    pr = prepare(_row(gpu="GB200", precision="BF16 (MXFP8 experts)"), "test")
    assert pr.workload.precision == "fp8"
    assert "a part of the model in fp8, priced as fp8 GEMMs throughout" in "; ".join(pr.notes)
    plain = prepare(_row(gpu="GB200", precision="BF16 w/ FP8 GEMMs"), "test")
    assert not any("a part of the model" in n for n in plain.notes)


def test_a_batch_cell_in_tokens_is_read_in_sequences() -> None:
    # "4M tokens" in the batch column: 4 x 2^20 / 8,192 = 512 sequences, and the reason says so
    pr = prepare(_row(global_batch_seqs="4M tokens", seq_len="8192"), "test")
    assert pr.workload.global_batch == 512
    assert "global batch '4M tokens': 512 sequences of 8192 tokens" in pr.notes


def test_deepspeeds_pipeline_engine_blocks_its_transfers() -> None:
    # a row naming DeepSpeed's pipeline engine: its sends and receives block the stages;
    # Megatron-DeepSpeed alone may run Megatron's schedules and keeps them overlapped
    named = _row(source="BigScience", pp="4", notes="DeepSpeed's pipeline engine and ZeRO-1")
    pr = prepare(named, "test")
    assert pr.workload.pp_p2p == "blocking"
    assert "pipeline sends and receives block the stages (DeepSpeed's pipeline engine)" in (
        pr.notes
    )
    plain = prepare(
        _row(
            model="GPT 3.6B (Megatron-DeepSpeed)",
            pp="4",
            layers="30",
            hidden="3072",
            heads="32",
            vocab="51200",
        ),
        "test",
    )
    assert plain.workload.pp_p2p == "overlapped"


@pytest.mark.parametrize(
    ("notes", "exchange"),
    [
        ("Megatron-LM --cp-comm-type a2a", "a2a"),
        ("cp_comm_type=['a2a']", "a2a"),
        ("DeepSpeed-Ulysses sequence parallelism", "a2a"),
        ("cp_comm_type: all_gather", "all_gather"),
        ("all-gather based context parallelism, as Llama 3", "all_gather"),
        ("KV all-gather across the CP group", "all_gather"),
        # the hierarchical exchange (all-to-alls inside, a ring across) is not Ulysses'
        ("cp_comm_type='a2a+p2p', hierarchical CP 2 x 4", "p2p"),
        ("ring attention (context parallel 8)", "p2p"),
        ("not Ulysses: ring attention", "p2p"),
    ],
)
def test_the_context_parallel_exchange_a_row_names(notes: str, exchange: str) -> None:
    # Llama 3 70B's 64 heads and 8 KV heads take Ulysses' CP8 at TP1
    pr = prepare(_row(notes=notes, tp="1", pp="1", cp="8", dp="8"), "test")
    assert pr.workload.cp_comm == exchange
    named = [n for n in pr.notes if n.startswith("context parallelism by")]
    assert len(named) == (exchange != "p2p")


@pytest.mark.parametrize(
    ("notes", "cell", "sp"),
    [
        # LLaMA's paper: "model and sequence parallelism" (Korthikanti et al.'s pairing)
        ("Parallelism not stated (paper mentions model+sequence parallelism)", "", True),
        ("tensor and sequence parallelism", "", True),
        ("TP with sequence parallelism", "", True),
        # a list of what a source does not state, or a run without it: not used
        ("Not stated: recompute, sequence parallelism, distributed optimizer", "", None),
        ("Not stated: tensor and sequence parallelism", "", None),
        ("tensor parallel without sequence parallel", "", None),
        ("no tensor and sequence parallelism", "", None),
        ("no sequence parallelism", "", None),
        # a launch script quoted from another version of a recipe says nothing of the run
        (
            "sequence parallelism not stated for this run (another version of the launch "
            "script sets --sequence-parallel)",
            "",
            None,
        ),
        # the cell, where filled, is what the row says
        ("model and sequence parallelism", "no", False),
    ],
)
def test_sequence_parallelism_named_in_the_notes(notes: str, cell: str, sp: bool | None) -> None:
    pr = prepare(_row(source="some paper", notes=notes, seq_parallel=cell), "test")
    assert pr.fixed.get("sp") == sp


@pytest.mark.parametrize(
    ("notes", "mode"),
    [
        ("activation checkpointing on for attention only", "selective"),
        ("selective recompute of the core attention", "selective"),
        ("activation checkpointing on", "full"),
        ("full activation recompute", "full"),
        # a negated mention is not the run's mode: left to the plan search
        ("no selective recompute", None),
    ],
)
def test_recomputation_the_notes_state(notes: str, mode: str | None) -> None:
    pr = prepare(_row(notes=notes, tp="8", pp="1", dp="8"), "test")
    assert pr.fixed.get("recompute") == (None if mode is None else RECOMPUTE.index(mode))


def test_a_batch_no_plan_spreads_over_every_gpu_is_skipped() -> None:
    # 64 sequences on 102,400 GPUs: the fastest plan uses a few thousand, and the row's
    # tokens/s per GPU count all of them, so nothing comparable can be priced
    pr = prepare(_row(num_gpus="102400", global_batch_seqs="64"), "test")
    with pytest.raises(UnsupportedRowError, match=r"no plan runs the global batch of 64 "):
        choose_plan(pr, default_calibration())


def test_a_skipped_row_names_the_sizes_it_lacks() -> None:
    with pytest.raises(UnsupportedRowError, match=r"^sequence length not stated$"):
        prepare(_row(seq_len=""), "test")
    with pytest.raises(UnsupportedRowError, match=r"^GPU count and global batch not stated$"):
        prepare(_row(num_gpus="", global_batch_seqs=""), "test")
