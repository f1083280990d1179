"""The command-line options `gpuscale train estimate | search | scaling` share."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuscale.calibrate import Calibration

# Every workload option is None when not given: the value then comes from --workload's file,
# else the default its help names (cli/train_workload.py DEFAULTS)
WorkloadOpt = Annotated[
    Path | None,
    typer.Option(
        "--workload",
        help="Training job YAML (see the examples/workloads folder); flags override it.",
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option("--model", help="Catalog model (e.g. llama3-70b) or a config.json path."),
]
GpuOpt = Annotated[
    str | None, typer.Option("--gpu", help="Catalog GPU (e.g. h100-sxm, a100-sxm-80gb).")
]
GpusOpt = Annotated[int | None, typer.Option("--gpus", help="Number of GPUs.")]
SeqOpt = Annotated[
    int | None, typer.Option("--seq-len", help="Sequence length (tokens; default 2048).")
]
GbsOpt = Annotated[
    int | None,
    typer.Option("--global-batch", help="Global batch (sequences per step; default 512)."),
]
PrecOpt = Annotated[
    str | None,
    typer.Option(
        "--precision",
        help="bf16 (default; fp16 on GPUs without bf16), fp16, fp8 (FP8 GEMMs) or fp4 "
        "(NVFP4, Blackwell).",
    ),
]
AttnOpt = Annotated[
    str | None,
    typer.Option(
        "--attention",
        help="Attention kernel: fused (cuDNN/FA3-class; the default from Ampere on), flash2 "
        "(PyTorch SDPA) or unfused (Megatron's original softmax path; the default on Volta).",
    ),
]
GathersOpt = Annotated[
    str | None,
    typer.Option(
        "--zero3-gathers",
        help="ZeRO-3 parameter gathers: coalesced (one per layer: FSDP, Megatron-FSDP, "
        "default) or per-param (one per tensor from module hooks: DeepSpeed ZeRO-3).",
    ),
]
AccumOpt = Annotated[
    str | None,
    typer.Option(
        "--grad-accumulation",
        help="How gradients add up over micro-batches: fused (in the weight-gradient GEMMs: "
        "Megatron-Core, PyTorch DDP/FSDP; default) or separate (an fp32 pass after each "
        "micro-batch: DeepSpeed's BF16 optimizer).",
    ),
]
PpP2pOpt = Annotated[
    str | None,
    typer.Option(
        "--pp-p2p",
        help="How pipeline stages send and receive: overlapped (Megatron's schedules; "
        "default) or blocking (DeepSpeed's pipeline engine: each transfer stalls the stage).",
    ),
]
CpCommOpt = Annotated[
    str | None,
    typer.Option(
        "--cp-comm",
        help="How context parallelism exchanges attention's tensors (Megatron's "
        "--cp-comm-type): p2p (a ring passing K/V chunks, hidden behind each step's "
        "attention; default), a2a (Ulysses' all-to-alls to whole heads and back; heads "
        "and KV heads per TP rank divisible by cp) or all_gather (Llama 3's: K and V "
        "gathered, exposed); train search also takes best (searched under each, the "
        "fastest ranking kept).",
    ),
]
PpSplitOpt = Annotated[
    str | None,
    typer.Option(
        "--pp-split",
        help="How a pipeline's layers sit on its stages: even (L / (pp x vpp) per chunk, "
        "one more on the first chunks where they do not divide, the output layer beside "
        "the last stage's: Megatron-LM's default), account (the "
        "embedding and the loss take a layer's place each: Megatron's --account-for-"
        "embedding/loss-in-pipeline-split; L + 2 must divide into the chunks) or balanced "
        "(the stages' FLOPs as even as whole layers allow, the output layer counted: "
        "nanotron, hand-made layouts; no interleaving). estimate prices it; search and "
        "scaling try it beside the even split.",
    ),
]
ElemOpt = Annotated[
    str | None,
    typer.Option(
        "--elementwise",
        help="Norms, RoPE, activations and the loss: fused (TE/Apex or torch.compile "
        "kernels, default) or eager (one PyTorch kernel per op; the loss then holds three "
        "fp32 copies of the logits).",
    ),
]
Fp8GatherOpt = Annotated[
    bool | None,
    typer.Option(
        "--fp8-param-gather/--no-fp8-param-gather",
        help="Gather parameters in FP8 (1 byte): Megatron's --fp8-param-gather or "
        "--fp4-param-gather (no 16-bit weight copy kept), torchao's FSDP float8 all-gather. "
        "With fp8/fp4 precision and a sharded optimizer; default off.",
    ),
]
LossOpt = Annotated[
    str | None,
    typer.Option(
        "--loss",
        help="The cross-entropy: fused (one kernel: Megatron's, torch.compile's) or eager "
        "(PyTorch op by op, three fp32 copies of the logits at its peak). Default: as "
        "--elementwise.",
    ),
]
CudaGraphsOpt = Annotated[
    bool | None,
    typer.Option(
        "--cuda-graphs/--no-cuda-graphs",
        help="The whole training step replays as CUDA graphs (Megatron-Core's full_iteration "
        "scope, with its sync-free MoE dispatch): the host's fixed costs (per step, per "
        "micro-batch, an MoE layer's) are not charged; a layer's small kernels still run. "
        "Per-layer graphs (the default scope) do not remove them; default off.",
    ),
]
ModulesOpt = Annotated[
    str | None,
    typer.Option(
        "--recompute-modules",
        help="What --recompute selective runs again, comma-separated Megatron-Core module "
        "names: core_attn (default), layernorm, mla_up_proj, mlp, moe, moe_act, "
        "shared_experts, mamba; or ops alone: torchtitan's per-operator checkpointing.",
    ),
]
DispatchOpt = Annotated[
    str | None,
    typer.Option(
        "--ep-dispatch",
        help="MoE token dispatch: hierarchical (once per remote NVLink domain, forwarded "
        "over NVLink: DeepEP, HybridEP; default) or all_to_all (one NCCL all-to-all of "
        "every top-k copy).",
    ),
]
SysOpt = Annotated[
    str | None, typer.Option("--system", help="Catalog system (default: the GPU's reference node).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Write one JSON object to stdout.")]
MtpOpt = Annotated[
    int | None,
    typer.Option(
        "--mtp",
        help="Multi-token prediction depths trained (default: the model's, e.g. 1 for "
        "DeepSeek-V3; 0 turns them off).",
    ),
]
TokensOpt = Annotated[
    str | None, typer.Option("--tokens", help="Training tokens, e.g. 15T, for time and GPU-hours.")
]
HeadroomOpt = Annotated[
    float | None,
    typer.Option(
        "--memory-headroom",
        help="Fraction of each GPU's memory a plan must leave free (allocator "
        "fragmentation, a margin), 0 to 0.5; default 0: the memory model already holds "
        f"{Calibration.mem_reserved_bytes / 2**30:g} GiB a GPU of CUDA and NCCL workspace "
        f"(buffers) and {100 * (Calibration.mem_activation_overhead - 1):.0f} % more "
        "activation memory for the caching allocator.",
    ),
]
ShardGroupOpt = Annotated[
    int | None,
    typer.Option(
        "--shard-group",
        help="Hybrid sharding (HSDP): spread the sharded optimizer, ZeRO or FSDP states over "
        "groups of N data-parallel ranks and replicate them across groups (FSDP "
        "HYBRID_SHARD: N = GPUs per node; torchtitan's dp_shard; Megatron's distributed "
        "optimizer instances = DP / N). Default: all data-parallel ranks.",
    ),
]
CkptEveryOpt = Annotated[
    str | None,
    typer.Option(
        "--checkpoint-every",
        help="How often the run saves a checkpoint: a time (30min, 2h), steps (500steps), or "
        "best (the interval of highest goodput, with --gpu-mtbf); priced with "
        "--storage-write-bw.",
    ),
]
WriteBwOpt = Annotated[
    str | None,
    typer.Option(
        "--storage-write-bw",
        help="Aggregate write rate the storage gives the job (e.g. 200GB/s): checkpoint time.",
    ),
]
ReadBwOpt = Annotated[
    str | None,
    typer.Option(
        "--storage-read-bw",
        help="Aggregate read rate (e.g. 50GB/s) for the training data and for reloading a "
        "checkpoint after a failure.",
    ),
]
AsyncCkptOpt = Annotated[
    bool | None,
    typer.Option(
        "--async-checkpoint/--sync-checkpoint",
        help="Save in the background, training stalls only to set the save up (6 s, PyTorch "
        "DCP's) and copy to host memory (Megatron --async-save, DCP async_save); default "
        "synchronous.",
    ),
]
MtbfOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu-mtbf",
        help="GPU-time between interruptions of a job, any cause: the job MTBF times its "
        "GPUs (e.g. 2112d: Llama 3's 419 interruptions in 54 days on 16,384 H100), for "
        "goodput; with --restart-time and checkpoints.",
    ),
]
RestartOpt = Annotated[
    str | None,
    typer.Option(
        "--restart-time",
        help="Time to detect a failure and relaunch (e.g. 10min); reloading the checkpoint "
        "is added at --storage-read-bw.",
    ),
]
HtmlOpt = Annotated[
    Path | None,
    typer.Option(
        "--html",
        help="Also write the result as a self-contained HTML page (plots work offline).",
    ),
]
