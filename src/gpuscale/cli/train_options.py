"""The command-line options `gpuscale train estimate | search | scaling` share."""

from __future__ import annotations

from typing import Annotated

import typer

ModelOpt = Annotated[
    str, typer.Option("--model", help="Catalog model (e.g. llama3-70b) or a config.json path.")
]
GpuOpt = Annotated[str, typer.Option("--gpu", help="Catalog GPU (e.g. h100-sxm, a100-sxm-80gb).")]
GpusOpt = Annotated[int, typer.Option("--gpus", help="Number of GPUs.")]
SeqOpt = Annotated[int, typer.Option("--seq-len", help="Sequence length (tokens).")]
GbsOpt = Annotated[int, typer.Option("--global-batch", help="Global batch (sequences per step).")]
PrecOpt = Annotated[
    str,
    typer.Option(
        "--precision", help="bf16, fp16, fp8 (FP8 GEMMs) or fp4 (NVFP4 GEMMs, Blackwell)."
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
    str,
    typer.Option(
        "--zero3-gathers",
        help="ZeRO-3 parameter gathers: coalesced (one per layer: FSDP, Megatron-FSDP, "
        "default) or per-param (one per tensor from module hooks: DeepSpeed ZeRO-3).",
    ),
]
ElemOpt = Annotated[
    str,
    typer.Option(
        "--elementwise",
        help="Norms, RoPE, activations: fused (TE/Apex or torch.compile kernels, default) "
        "or eager (one PyTorch kernel per op).",
    ),
]
Fp8GatherOpt = Annotated[
    bool,
    typer.Option(
        "--fp8-param-gather",
        help="Gather parameters in FP8 (1 byte): Megatron's --fp8-param-gather or "
        "--fp4-param-gather (no 16-bit weight copy kept), torchao's FSDP float8 all-gather. "
        "With fp8/fp4 precision and a sharded optimizer.",
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
    str,
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
        help="Multi-token-prediction depths trained (default: the model's, e.g. 1 for "
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
        "fragmentation, a margin), 0 to 0.5; default 0.",
    ),
]
