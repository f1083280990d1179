"""A priced plan as Megatron-LM's command-line arguments (``pretrain_gpt.py``,
``pretrain_mamba.py``), so that it can be run the way gpuscale priced it.

The flags cover what the plan decides: parallel degrees, interleaving and the layers' place
on the pipeline stages, batch and sequence, activation recomputation, optimizer and gradient
sharding, TP communication overlap, precision, multi-token prediction and the MoE token
dispatcher. The model's shape (``--num-layers``, ``--hidden-size``, ...) comes from the
model's own Megatron recipe and is not repeated. What a Megatron-LM flag cannot say (a
DeepSpeed or PyTorch setting the plan was priced with) is returned as a note.

Flag names follow Megatron-LM's ``megatron/training/arguments.py`` (Megatron-Core 0.13+):
Megatron-FSDP is ``--use-megatron-fsdp`` with ``--data-parallel-sharding-strategy``
(``optim_grads``: ZeRO-2, ``optim_grads_params``: ZeRO-3) and ``--ckpt-format
fsdp_dtensor``; hybrid sharding is ``--num-distributed-optimizer-instances``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuscale.perf.plan import PP_SPLITS, RECOMPUTE, SHARDING
from gpuscale.perf.sharding import ShardGroups
from gpuscale.perf.training import TrainingEstimate


@dataclass(frozen=True)
class MegatronArgs:
    """Megatron-LM arguments for one plan, and what they leave out."""

    args: tuple[str, ...]
    notes: tuple[str, ...]

    def line(self) -> str:
        """The arguments as one shell-ready line."""
        return " ".join(self.args)


def _pipeline(e: TrainingEstimate, i: int, notes: list[str]) -> list[str]:
    """Interleaving and the layers' place on the stages."""
    w, p = e.workload, e.plans
    m = w.model
    pp, vpp = int(p.pp[i]), int(p.vpp[i])
    if pp == 1:
        return []
    out = ["--pipeline-model-parallel-size", str(pp)]
    gdn = m.mamba is not None and m.mamba.rule == "gated_delta"
    if gdn:
        # Megatron-LM builds these as transformer layers with a linear-attention variant:
        # its layer is the pattern's mixer and MLP blocks together
        notes.append(
            "Megatron-LM counts a Gated DeltaNet model's layers as mixer + MLP pairs, half "
            "the blocks gpuscale places: give the stages' layers accordingly"
        )
        return out
    layers = m.layers
    split = PP_SPLITS[int(p.split[i])]
    if split == "account":
        out += ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
    elif split == "balanced":
        # the last stage holds ``last`` layers beside the output layer, the others share the
        # rest, at most ceil(rest / (pp - 1)) each: Megatron's flags give the first and the
        # last stage's layers, the middle ones equal
        last = int(e.plan_stages(i).last[0])
        rest = layers - last
        middle = math.ceil(rest / (pp - 1))
        first = rest - (pp - 2) * middle
        if pp > 2 and first < 1:
            # no equal middle stages: ceil on some, floor on the others
            ceil_n = rest - (pp - 1) * (middle - 1)
            stages = [middle - 1] * (pp - 1 - ceil_n) + [middle] * ceil_n + [last]
            notes.append(
                "the balanced stages hold " + ", ".join(map(str, stages)) + " layers, first "
                "to last: give them as Megatron-Core's --pipeline-model-parallel-layout"
            )
            return out
        if pp > 2 and first != middle:
            out += ["--decoder-first-pipeline-num-layers", str(first)]
        out += ["--decoder-last-pipeline-num-layers", str(last)]
    elif layers % (pp * vpp):
        if vpp == 1 and layers - (pp - 1) * math.ceil(layers / pp) > 0:
            # gpuscale's even split: ceil(L / pp) a stage, the rest on the last
            last = layers - (pp - 1) * math.ceil(layers / pp)
            out += ["--decoder-last-pipeline-num-layers", str(last)]
        else:
            notes.append(
                f"{layers} layers do not divide into {pp * vpp} pipeline chunks: Megatron-LM "
                "needs their place given (--pipeline-model-parallel-layout, or first and "
                "last stage layers)"
            )
    if vpp > 1 and layers % (pp * vpp) == 0:
        out += ["--num-layers-per-virtual-pipeline-stage", str(layers // (pp * vpp))]
    elif vpp > 1:
        out += ["--num-virtual-stages-per-pipeline-rank", str(vpp)]
    return out


def _recompute(e: TrainingEstimate, i: int, notes: list[str]) -> list[str]:
    """Activation recomputation as priced."""
    w, p = e.workload, e.plans
    mode = RECOMPUTE[int(p.recompute[i])]
    if mode == "none":
        return []
    if mode == "full":
        return [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            "uniform",
            "--recompute-num-layers",
            "1",
        ]
    if mode == "partial":
        # whole layers of each virtual chunk, at least the fraction priced
        frac = float(e.memory.recompute_fraction[i])
        chunk = float(e.plan_stages(i).fullest[0]) / int(p.vpp[i])
        whole = min(math.ceil(frac * chunk - 1e-9), math.ceil(chunk))
        return [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            "block",
            "--recompute-num-layers",
            str(whole),
        ]
    mods = tuple(w.recompute_modules)
    if mods == ("ops",):
        notes.append(
            "per-operator selective checkpointing is torchtitan's (its activation_checkpoint "
            "mode selective, option op); Megatron-LM has no flag for it"
        )
        return []
    out = ["--recompute-granularity", "selective"]
    if mods != ("core_attn",):
        out += ["--recompute-modules", *mods]
    return out


def _sharding(e: TrainingEstimate, i: int) -> list[str]:
    """Optimizer, gradient and parameter sharding, hybrid sharding included."""
    w, p = e.workload, e.plans
    mode = SHARDING[int(p.sharding[i])]
    groups = ShardGroups.of(w, p.take(np.array([i])))
    replicas = round(float(groups.dense_replicas[0]))
    out: list[str] = []
    if mode == "none":
        return ["--overlap-grad-reduce"]
    if mode in ("dist-opt", "zero1"):
        out += ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"]
        if mode == "zero1":
            # gpuscale's zero1: the distributed optimizer with 16-bit gradients
            out.append("--grad-reduce-in-bf16")
    else:
        strategy = "optim_grads" if mode == "zero2" else "optim_grads_params"
        out += [
            "--use-megatron-fsdp",
            "--use-distributed-optimizer",
            "--data-parallel-sharding-strategy",
            strategy,
            "--no-gradient-accumulation-fusion",
            "--ckpt-format",
            "fsdp_dtensor",
            "--overlap-grad-reduce",
            "--overlap-param-gather",
        ]
    if replicas > 1:
        out += ["--num-distributed-optimizer-instances", str(replicas)]
    return out


def _precision(e: TrainingEstimate) -> list[str]:
    w = e.workload
    if w.precision == "fp16":
        return ["--fp16"]
    out = ["--bf16"]
    if w.precision == "fp8":
        # current (per-tensor) scaling: the quantisation passes gpuscale prices
        out += ["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]
        if w.fp8_param_gather:
            out.append("--fp8-param-gather")
    elif w.precision == "fp4":
        out += ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
    return out


def megatron_args(e: TrainingEstimate, i: int) -> MegatronArgs:
    """Megatron-LM arguments that run plan ``i`` of ``e`` as it was priced."""
    w, p = e.workload, e.plans
    m = w.model
    notes: list[str] = []
    args = ["--tensor-model-parallel-size", str(int(p.tp[i]))]
    args += _pipeline(e, i, notes)
    if int(p.cp[i]) > 1:
        args += ["--context-parallel-size", str(int(p.cp[i]))]
    if m.is_moe:
        # expert tensor parallelism 1, each GPU holding E / EP whole experts, as priced
        args += ["--expert-model-parallel-size", str(int(p.ep[i]))]
        args += ["--expert-tensor-parallel-size", "1"]
        if w.ep_dispatch == "hierarchical" and int(p.ep[i]) > 1:
            # one copy of a token per remote NVLink domain: DeepEP / HybridEP
            args += ["--moe-token-dispatcher-type", "flex", "--moe-enable-deepep"]
        else:
            args += ["--moe-token-dispatcher-type", "alltoall"]
    if bool(p.sp[i]):
        args.append("--sequence-parallel")
    if bool(p.tp_overlap[i]):
        args.append("--tp-comm-overlap")
    args += ["--micro-batch-size", str(int(p.mbs[i]))]
    args += ["--global-batch-size", str(w.global_batch), "--seq-length", str(w.seq_len)]
    args += _recompute(e, i, notes)
    args += _sharding(e, i)
    args += _precision(e)
    if m.mtp_layers:
        args += ["--mtp-num-layers", str(m.mtp_layers)]
    if w.attention == "flash2":
        args += ["--attention-backend", "flash"]
    elif w.attention == "unfused":
        args += ["--attention-backend", "unfused"]
    if w.cuda_graphs:
        notes.append(
            "whole steps replayed as CUDA graphs: Megatron-LM's full-iteration graphs "
            "(cuda_graph_impl full_iteration in Megatron-Bridge's recipes)"
        )
    if w.grad_accumulation == "separate":
        notes.append(
            "the gradients accumulate in a pass of their own, as DeepSpeed's BF16 optimizer "
            "does; Megatron-LM fuses it into the weight-gradient GEMMs"
        )
    if w.zero3_gathers == "per-param":
        notes.append("per-parameter ZeRO-3 gathers are DeepSpeed's; Megatron-FSDP coalesces them")
    if w.elementwise == "eager" or w.loss_kind == "eager":
        notes.append(
            "priced with eager PyTorch elementwise kernels or loss; Megatron-LM's are fused "
            "(--cross-entropy-loss-fusion for the loss)"
        )
    return MegatronArgs(tuple(args), tuple(notes))


def megatron_json(e: TrainingEstimate, i: int) -> dict[str, list[str]]:
    """The JSON form: ``args`` (one flag or value a string) and ``notes``."""
    a = megatron_args(e, i)
    return {"args": list(a.args), "notes": list(a.notes)}
