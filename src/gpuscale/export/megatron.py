"""A priced plan as Megatron-LM's command-line arguments (``pretrain_gpt.py``,
``pretrain_mamba.py``), so that it can be run the way gpuscale priced it.

The flags cover what the plan decides: parallel degrees; interleaving and the layers' place
on the pipeline stages (Megatron's first/last stage layer counts or its account-for-
embedding/loss flags where they say it, else Megatron-Core's
``--pipeline-model-parallel-layout``; a Mamba hybrid's stages as ``|`` in its
``--hybrid-layer-pattern``); batch and sequence; activation recomputation; optimizer and
gradient sharding; TP communication overlap; precision; multi-token prediction, DeepSeek
Sparse Attention (``--experimental-attention-variant dsa`` and its indexer's sizes), the
MoE token dispatcher, and DeepSeek-V4's compressed attention (``dsv4_hybrid``: its ratios,
window, grouped output projection and hyper-connections). The model's shape
(``--num-layers``, ``--hidden-size``, ...) comes from the model's own Megatron recipe and
is not repeated. What a Megatron-LM flag cannot say (a DeepSpeed or PyTorch setting the
plan was priced with, GPUs left idle, windowed layers with heads of their own) is returned
as a note.

Flag names follow Megatron-LM's ``megatron/training/arguments.py`` of 2026:
Megatron-FSDP is ``--use-megatron-fsdp`` with ``--data-parallel-sharding-strategy``
(``optim_grads``: ZeRO-2, ``optim_grads_params``: ZeRO-3) and ``--ckpt-format
fsdp_dtensor``; hybrid sharding is ``--num-distributed-optimizer-instances``; the DeepEP
and HybridEP dispatchers are ``--moe-token-dispatcher-type flex`` with
``--moe-flex-dispatcher-backend``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscale.catalog import Model
from gpuscale.perf.plan import PP_SPLITS, RECOMPUTE, SHARDING, Workload, pipelined_fsdp
from gpuscale.perf.sharding import ShardGroups
from gpuscale.perf.stages import chunk_sizes, megatron_units
from gpuscale.perf.training import TrainingEstimate
from gpuscale.perf.training_notes import block_recompute_layers, chunk_words
from gpuscale.perf.transformer import indexer_layers, layer_ratios, sparse_layers


@dataclass(frozen=True)
class MegatronArgs:
    """Megatron-LM arguments for one plan, and what they leave out."""

    args: tuple[str, ...]
    notes: tuple[str, ...]
    script: str = "pretrain_gpt.py"
    """Megatron-LM's entry point for the model: ``pretrain_mamba.py`` for a Mamba hybrid."""

    def line(self) -> str:
        """The arguments as one shell-ready line."""
        return " ".join(self.args)


def _chunks(e: TrainingEstimate, i: int) -> list[int]:
    """Layers (gpuscale's: blocks of a hybrid) on each pipeline chunk, in the model's order,
    as the plan's placement prices them (:func:`~gpuscale.perf.stages.chunk_sizes`)."""
    p, m = e.plans, e.workload.model
    last = int(e.plan_stages(i).last[0])
    return chunk_sizes(
        m.layers, int(p.pp[i]), int(p.vpp[i]), int(p.split[i]), last, megatron_units(m)
    )


def _layout(chunks: list[int], mtp: int) -> str:
    """Megatron-Core's ``--pipeline-model-parallel-layout``: ``t`` a layer, ``|`` between
    chunks, ``E`` the embedding on the first, the ``mtp`` MTP depths (``m``) and ``L`` the
    loss on the last."""
    parts = ["t" * n for n in chunks]
    return "|".join(["E" + parts[0], *parts[1:-1], parts[-1] + "m" * mtp + "L"])


def _pipeline(e: TrainingEstimate, i: int) -> list[str]:
    """Interleaving and the layers' place on the stages, as priced."""
    w, p = e.workload, e.plans
    m = w.model
    pp, vpp = int(p.pp[i]), int(p.vpp[i])
    if pp == 1:
        return []
    out = ["--pipeline-model-parallel-size", str(pp)]
    if PP_SPLITS[int(p.split[i])] == "account" and not m.hybrid:
        # (L + 2) / (pp vpp) places a chunk, the embedding and the loss in one each
        out += ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
        if vpp > 1:
            out += ["--num-virtual-stages-per-pipeline-rank", str(vpp)]
        return out
    chunks = _chunks(e, i)
    if m.hybrid and not m.gated_deltanet:
        # Megatron's hybrid (Mamba) models take their stages from | in the layer pattern
        pieces, at = [], 0
        for n in chunks:
            pieces.append(m.pattern[at : at + n])
            at += n
        out += ["--hybrid-layer-pattern", "|".join(pieces)]
        if vpp > 1:
            out += ["--num-virtual-stages-per-pipeline-rank", str(vpp)]
        return out
    # Megatron-LM builds a Gated DeltaNet model of transformer layers with a linear-
    # attention variant: its layer is a mixer block and its MLP block together, and the
    # chunks hold whole ones (_chunks)
    units = megatron_units(m)
    chunks = [n // units for n in chunks]
    if len(set(chunks)) == 1:
        if vpp > 1:
            out += ["--num-layers-per-virtual-pipeline-stage", str(chunks[0])]
        return out
    middle = chunks[1:-1]
    if vpp == 1 and chunks[-1] > 0 and len(set(middle)) <= 1:
        # first and last stage layers, the middle ones equal
        if middle and chunks[0] != middle[0]:
            out += ["--decoder-first-pipeline-num-layers", str(chunks[0])]
        out += ["--decoder-last-pipeline-num-layers", str(chunks[-1])]
        return out
    out += ["--pipeline-model-parallel-layout", _layout(chunks, m.mtp_layers)]
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
        # whole layers of each virtual chunk, at least the fraction priced (none when the
        # plan fits without)
        frac = float(e.memory.recompute_fraction[i])
        if frac <= 0.0:
            return []
        stage = float(e.plan_stages(i).fullest[0])
        vpp = int(p.vpp[i])
        whole, chunk = block_recompute_layers(w.model, frac, stage, vpp)
        if whole > chunk * frac * 1.001:  # more whole layers than the fraction priced
            notes.append(
                f"priced recomputing {100 * frac:.0f} % of the layers' activations, the least "
                f"that fits; the block method recomputes whole layers, {whole} of each "
                f"{chunk_words(chunk, vpp, round(stage / megatron_units(w.model)))} "
                f"({100 * min(whole / chunk, 1.0):.0f} %), slower than "
                "priced: selective --recompute-modules that free as much run as priced (the "
                "estimate's note gives the block method's step time)"
            )
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


def _sharding(e: TrainingEstimate, i: int, notes: list[str]) -> list[str]:
    """Optimizer, gradient and parameter sharding, hybrid sharding included. The gradient
    reduction overlaps the backward (``--overlap-grad-reduce``) as Megatron runs it; gpuscale
    prices it exposed beyond the fitted overlap, an upper bound."""
    w, p = e.workload, e.plans
    mode = SHARDING[int(p.sharding[i])]
    one = p.take(np.array([i]))
    groups = ShardGroups.of(w, one)
    replicas = round(float(groups.dense_replicas[0]))
    fp16 = w.precision == "fp16"
    # fp32 gradients as priced (Megatron keeps fp16 ones under --fp16 unless told)
    fp32_grads = ["--accumulate-allreduce-grads-in-fp32"] if fp16 else []
    out: list[str] = []
    if mode == "zero2" and bool(pipelined_fsdp(one)[0]):
        # ZeRO-2 under a pipeline is priced as the distributed optimizer
        notes.append(
            "zero2 under a pipeline is priced as Megatron's distributed optimizer (weights and "
            "fp32 gradients whole, one gather and one reduce-scatter a step): its flags"
        )
        mode = "dist-opt"
    if mode == "none":
        return ["--overlap-grad-reduce", *fp32_grads]
    if mode in ("dist-opt", "zero1"):
        out += ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"]
        if mode == "dist-opt":
            out += fp32_grads
        elif not fp16:
            # gpuscale's zero1: the distributed optimizer with 16-bit gradients
            out.append("--grad-reduce-in-bf16")
    else:
        if mode == "zero3" and int(p.pp[i]) > 1:
            notes.append(
                "Megatron-FSDP under a pipeline: memory is priced with each stage's gathered "
                "weights and fp32 gradients held over the step (as torchtitan's pipelined "
                "FSDP runs), more than a per-layer reshard keeps"
            )
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
    """Mixed precision: FP8 with current scaling, or on Blackwell MXFP8 as NVIDIA's recipes
    run it (gpuscale prices the two recipes' quantisation passes alike), NVFP4."""
    w = e.workload
    if w.precision == "fp16":
        return ["--fp16"]
    out = ["--bf16"]
    if w.precision == "fp8":
        recipe = "mxfp8" if w.gpu.arch == "blackwell" else "tensorwise"
        out += ["--fp8-format", "e4m3" if recipe == "mxfp8" else "hybrid", "--fp8-recipe", recipe]
        if w.fp8_param_gather:
            out.append("--fp8-param-gather")
    elif w.precision == "fp4":
        out += ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
        if w.fp8_param_gather:
            out.append("--fp4-param-gather")
    return out


def _compressed_attention(m: Model, tp: int, notes: list[str]) -> list[str]:
    """DeepSeek-V4's attention as Megatron-Core's ``dsv4_hybrid`` variant: MLA's low-rank
    query flags for its query latent, the shared K = V head as the value head (the last
    64 dimensions rotary, as DeepSeek-V4's), the grouped output projection, the window and
    each layer's and MTP depth's compression ratio, and the hyper-connections' streams."""
    if tp > 1:
        notes.append(
            "DeepSeek-V4 at TP > 1 is priced with its query heads and output groups "
            "split over TP; Megatron-Bridge's DeepSeek-V4 recipes run TP1"
        )
    c = m.compressed
    assert c is not None
    main, mtp = layer_ratios(m)
    ratios = "[" + ",".join(str(r) for r in main + mtp) + "]"
    args = ["--multi-latent-attention", "--q-lora-rank", str(c.q_lora_rank)]
    args += ["--v-head-dim", str(m.head_dim), "--o-groups", str(c.o_groups)]
    args += ["--o-lora-rank", str(c.o_lora_rank)]
    args += ["--experimental-attention-variant", "dsv4_hybrid"]
    args += ["--csa-window-size", str(c.window), "--csa-compress-ratios", ratios]
    if m.residual_streams > 1:
        args += ["--enable-hyper-connections"]
        args += ["--num-residual-streams", str(m.residual_streams)]
    return args


def _sparse_attention(m: Model, notes: list[str]) -> list[str]:
    """DeepSeek Sparse Attention as Megatron-Core's experimental attention variant, its
    indexer's sizes (with DeepSeek-V4's, the indexer of its CSA layers), and notes for the
    indexer's loss and the layers the recipe must say."""
    x = m.sparse
    assert x is not None
    args = [] if m.compressed is not None else ["--experimental-attention-variant", "dsa"]
    args += ["--dsa-indexer-n-heads", str(x.heads), "--dsa-indexer-head-dim", str(x.head_dim)]
    args += ["--dsa-indexer-topk", str(x.topk)]
    example = (
        "0.01 with --dsa-indexer-use-sparse-loss in Megatron-LM's DeepSeek-V4 examples"
        if m.compressed is not None
        else "0.001 in Megatron-Bridge's GLM-5.2 runs"
    )
    notes.append(
        "the DSA indexer is priced as trained on its own loss (--dsa-indexer-loss-coeff "
        f"as the recipe sets it; {example})"
    )
    n_sparse, n_index = sparse_layers(m), indexer_layers(m)
    if n_sparse < m.attn_layers and m.compressed is None:
        notes.append(
            f"{n_sparse} of the {m.attn_layers} attention layers attend to the top-k, the "
            "others to every key: the model's recipe says which"
        )
    if n_index < n_sparse:
        notes.append(
            f"{n_index} of the {n_sparse} sparse-attention layers run an indexer, the "
            "others reuse a neighbour's selection: the model's recipe says which"
        )
    return args


def megatron_args(e: TrainingEstimate, i: int) -> MegatronArgs:
    """Megatron-LM arguments that run plan ``i`` of ``e`` as it was priced."""
    w, p = e.workload, e.plans
    m = w.model
    notes: list[str] = []
    tp = int(p.tp[i])
    args = ["--tensor-model-parallel-size", str(tp)]
    few = [kv for _, kv in m.head_counts if kv % tp]
    if m.mla is None and few:
        # priced with each rank holding a copy of a KV head, as inference engines run it
        notes.append(
            f"TP{tp} exceeds the {few[0]} KV heads, priced with each rank holding a copy of "
            f"one; Megatron-LM refuses it ('num_query_groups ({few[0]}) must be a multiple "
            f"of tensor_model_parallel_size ({tp})'): a TP dividing {few[0]} runs there"
        )
    args += _pipeline(e, i)
    if int(p.cp[i]) > 1:
        args += ["--context-parallel-size", str(int(p.cp[i]))]
        if m.sparse is not None:  # Megatron's DSAttention checks for this spelling
            args += ["--cp-comm-type", "allgather"]
        elif w.cp_comm != "p2p":  # Transformer Engine dispatches on all_gather, not allgather
            args += ["--cp-comm-type", w.cp_comm]
    if m.is_moe and m.moe_layers > 0:
        args += _experts(w, int(p.ep[i]), notes)
    if bool(p.sp[i]):
        args.append("--sequence-parallel")
    if bool(p.tp_overlap[i]):
        args.append("--tp-comm-overlap")
    args += ["--micro-batch-size", str(int(p.mbs[i]))]
    args += ["--global-batch-size", str(w.global_batch), "--seq-length", str(w.seq_len)]
    args += _recompute(e, i, notes)
    args += _sharding(e, i, notes)
    args += _precision(e)
    if m.mtp_layers:
        args += ["--mtp-num-layers", str(m.mtp_layers)]
    notes += _layer_notes(m)
    if m.compressed is not None:
        args += _compressed_attention(m, int(p.tp[i]), notes)
    if m.sparse is not None:
        args += _sparse_attention(m, notes)
    if w.precision == "fp16" and m.is_moe and int(p.ep[i]) > 1:
        notes.append("Megatron-Core runs expert parallelism in bf16, not fp16")
    used = int(p.gpus_used()[i])
    if used < w.num_gpus:
        notes.append(
            f"run on {used} of the {w.num_gpus} GPUs: Megatron-LM takes the data-parallel "
            "degree from the world size"
        )
    if w.attention == "flash2":
        args += ["--attention-backend", "flash"]
    elif w.attention == "unfused":
        args += ["--attention-backend", "unfused"]
    notes += _stack_notes(w)
    mamba = m.hybrid and not m.gated_deltanet
    script = "pretrain_mamba.py" if mamba else "pretrain_gpt.py"
    return MegatronArgs(tuple(args), tuple(notes), script)


def _experts(w: Workload, ep: int, notes: list[str]) -> list[str]:
    """An MoE model's expert parallelism and token dispatcher: expert tensor parallelism 1,
    each GPU holding E / EP whole experts, as priced; one copy of a token per remote NVLink
    domain by DeepEP (HybridEP on NVL72 racks) where the dispatch is hierarchical, else
    Megatron's all-to-all (also before Hopper, which DeepEP and HybridEP need)."""
    args = ["--expert-model-parallel-size", str(ep), "--expert-tensor-parallel-size", "1"]
    nvlink = w.fabric.scaleup_domain_gpus > 1  # DeepEP forwards inside an NVLink domain
    hierarchical = w.ep_dispatch == "hierarchical" and ep > 1 and nvlink
    if hierarchical and w.gpu.arch in ("volta", "ampere"):
        notes.append(
            "DeepEP and HybridEP need Hopper or later GPUs: Megatron-LM's all-to-all "
            "dispatcher sends a token once per remote expert, more than the hierarchical "
            "dispatch priced (--ep-dispatch all_to_all prices it)"
        )
        hierarchical = False
    if hierarchical:
        backend = "hybridep" if w.fabric.scaleup_domain_gpus > 8 else "deepep"
        return [
            *args,
            "--moe-token-dispatcher-type",
            "flex",
            "--moe-flex-dispatcher-backend",
            backend,
        ]
    return [*args, "--moe-token-dispatcher-type", "alltoall"]


def _layer_notes(m: Model) -> list[str]:
    """What the model's layers have that Megatron-LM's flags do not say as priced."""
    notes = []
    if m.window_attn is not None:
        x = m.window_attn
        notes.append(
            f"the {m.window_layers} windowed layers have {x.heads} query heads and {x.kv_heads} "
            f"KV heads of {x.head_dim} (the others {m.heads}, {m.kv_heads} of {m.head_dim}): "
            "Megatron-LM has no flag for heads per layer (its heterogeneous layer config sets "
            "only num_query_groups); Megatron-Bridge's Step-3.5 provider builds such layers"
        )
    if m.k_eq_v or (m.window_attn is not None and m.window_attn.k_eq_v):
        notes.append(
            "K and V come from one projection in some attention layers (Gemma 4's full "
            "layers): Megatron-LM has no flag for it and builds a V projection there"
        )
    return notes


def _stack_notes(w: Workload) -> list[str]:
    """The software the workload is priced as that Megatron-LM does not run so."""
    notes = []
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
    if w.pp_p2p == "blocking":
        notes.append(
            "pipeline sends and receives block the stages, as DeepSpeed's pipeline engine runs "
            "them; Megatron-LM's schedules overlap them"
        )
    if w.zero3_gathers == "per-param":
        notes.append("per-parameter ZeRO-3 gathers are DeepSpeed's; Megatron-FSDP coalesces them")
    if w.elementwise == "eager" or w.loss_kind == "eager":
        notes.append(
            "priced with eager PyTorch elementwise kernels or loss; Megatron-LM's are fused "
            "(--cross-entropy-loss-fusion for the loss)"
        )
    return notes


def megatron_json(e: TrainingEstimate, i: int) -> dict[str, list[str]]:
    """The JSON form: ``args`` (one flag or value a string) and ``notes``."""
    a = megatron_args(e, i)
    return {"args": list(a.args), "notes": list(a.notes)}
