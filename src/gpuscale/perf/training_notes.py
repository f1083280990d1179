"""What a training estimate tells the user beyond its figures: notes on one plan (a context
extension, an uneven pipeline split, idle GPUs, recompute, optimizer sharding, tight memory,
tensor or expert parallelism across domains) and on a run's checkpoints and failures."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from gpuscale.catalog import Model
from gpuscale.ops.reliability import Reliability
from gpuscale.perf.comm import domains_hit
from gpuscale.perf.kernels import softmax_factors
from gpuscale.perf.memory import MemoryBreakdown
from gpuscale.perf.plan import (
    CP_COMM,
    PP_SPLITS,
    RECOMPUTE,
    SHARDING,
    FloatArrayT,
    Plans,
    Workload,
    pipelined_fsdp,
)
from gpuscale.perf.recompute import DEFAULT_MODULES
from gpuscale.perf.stages import (
    Stages,
    even_chunks,
    head_layers,
    megatron_units,
    placed_layers,
)
from gpuscale.perf.step import StepBreakdown
from gpuscale.perf.storage import StorageCost, StoragePolicy
from gpuscale.perf.transformer import attn_core_dims
from gpuscale.units import fmt_bytes, fmt_time

FIXED_NOTE_SHARE = 0.05
"""The share of a step from which its notes say what the fixed overhead is."""

CP_EXCHANGES = {
    "p2p": "the ring",
    "a2a": "Ulysses' all-to-alls",
    "all_gather": "Llama 3's K/V all-gather",
}
"""How a note names each of :data:`~gpuscale.perf.plan.CP_COMM`."""

TIGHT = 0.95
"""A plan using more than this share of a GPU's memory, with no headroom asked for, gets a
note that allocator fragmentation may not leave it room."""


class PlanNotes:
    """The notes of :class:`~gpuscale.perf.training.TrainingEstimate`, a base of it: what
    plan ``i`` asks of the user, read from the estimate's workload, plans and memory."""

    workload: Workload
    plans: Plans
    memory: MemoryBreakdown
    step: StepBreakdown
    step_s: FloatArrayT

    def _step_at(self, i: int, frac: float) -> tuple[float, float] | None:
        """Plan ``i``'s step time with ``frac`` of its layers fully recomputed, and its step
        time as priced, where the notes can price the first (an estimate that keeps its
        calibration), else None."""
        return None

    def _priced_as(self, i: int, w: Workload) -> tuple[float, bool] | None:
        """Plan ``i``'s step time and whether it fits, priced for workload ``w`` (this one
        with another setting), where the notes can price it and the plan is valid there,
        else None."""
        return None

    def notes(self, i: int = 0) -> list[str]:
        """What the user should know about plan ``i`` that its figures do not say."""
        out = self._context_notes()
        out.extend(self._stage_notes(i))
        out.extend(self._idle_gpu_notes(i))
        out.extend(self._recompute_notes(i))
        out.extend(self._sharding_notes(i))
        out.extend(self._partial_recompute_notes(i))
        out.extend(self._tight_memory_notes(i))
        out.extend(self._tensor_domain_notes(i))
        out.extend(self._cp_exchange_notes(i))
        out.extend(self._expert_domain_notes(i))
        out.extend(softmax_notes(self.workload))
        out.extend(self._fixed_overhead_notes(i))
        return out

    def _fixed_overhead_notes(self, i: int) -> list[str]:
        """What the fixed overhead is, where it is :data:`FIXED_NOTE_SHARE` of the step or
        more."""
        share = float(self.step.overhead_s[i]) / float(self.step_s[i])
        if share < FIXED_NOTE_SHARE:
            return []
        head = (
            f"fixed overhead ({100 * share:.0f} % of the step) is time the GPUs spend beyond "
            "their kernels' work, its constants fitted on measured runs: "
        )
        if self.workload.cuda_graphs:
            return [
                head + "each layer's small kernels at their minimum time (the step replays "
                "whole as CUDA graphs, so none of it is the host's)"
            ]
        return [
            head + "each layer's small kernels at their minimum time and launch, an MoE "
            "layer's router, token counts sent to the host and permutation, the framework's "
            "loop per micro-batch and per step, and the GPUs waiting on the host's launches "
            "where a micro-batch's kernels take less time than issuing them; --cuda-graphs "
            "prices a step replayed whole as CUDA graphs, without the host's part"
        ]

    def _context_notes(self) -> list[str]:
        """A sequence beyond the model's trained context: a context-extension run, and with
        a learned position table, one that needs the table grown."""
        w, m = self.workload, self.workload.model
        if w.seq_len > m.max_seq and m.position == "learned":
            # a learned position table has a row per position: longer sequences need new rows
            return [
                f"sequence {w.seq_len:,} is beyond {m.name}'s learned position table of "
                f"{m.max_seq:,} rows: a run at this length needs the table grown (its weights "
                "priced at their stated size)"
            ]
        if w.seq_len > m.max_seq:
            return [
                f"sequence {w.seq_len:,} is beyond {m.name}'s trained context of "
                f"{m.max_seq:,}: priced as a context-extension run"
            ]
        return []

    def _idle_gpu_notes(self, i: int) -> list[str]:
        """Plan ``i`` leaves GPUs idle: its rates per GPU count only those it uses."""
        w = self.workload
        used = int(self.plans.gpus_used()[i])
        if used < w.num_gpus:
            return [
                f"the plan uses {used:,} of the {w.num_gpus:,} GPUs ({w.num_gpus - used:,} "
                "idle): its rates per GPU count the GPUs it uses (train scaling counts all)"
            ]
        return []

    def _sharding_notes(self, i: int) -> list[str]:
        """How plan ``i``'s optimizer sharding runs where a framework runs it otherwise than
        its name says: ZeRO-1 under Megatron-Core's features as its distributed optimizer
        with 16-bit gradients, ZeRO-2 under a pipeline as the distributed optimizer."""
        w = self.workload
        out = []
        vpp = int(self.plans.vpp[i])
        megatron = vpp > 1 or int(self.plans.cp[i]) > 1 or bool(self.plans.tp_overlap[i])
        # (DeepSpeed's gradient pass keeps its own fp32 accumulators: not Megatron's choice)
        megatron = megatron and w.grad_accumulation == "fused"
        if int(self.plans.sharding[i]) == SHARDING.index("zero1") and megatron:
            grads = float(self.memory.gradients[i])
            out.append(
                "zero1 with Megatron-Core's interleaving, context parallelism or TP overlap "
                "is its distributed optimizer with 16-bit gradients (ddp.grad_reduce_in_fp32 "
                "off, as the NeMo and Megatron-Bridge recipes run); Megatron-LM's default "
                f"keeps fp32 gradients (dist-opt): {fmt_bytes(grads)} more a GPU here"
            )
        if bool(pipelined_fsdp(self.plans)[i]):
            out.append(
                "zero2 under a pipeline: the weights stay gathered and the fp32 gradients "
                "whole until the last micro-batch (FSDP under PyTorch's pipeline schedules), "
                "so it is priced as the distributed optimizer (one gather and one "
                "reduce-scatter a step; 16-bit weights and fp32 gradients held whole)"
            )
        return out

    def _partial_recompute_notes(self, i: int) -> list[str]:
        """Plan ``i``'s partial recompute: the share of layers it recomputes and the
        Megatron flags that come nearest (whole layers per virtual chunk), with what they
        cost; or that even full recomputation does not fit."""
        w = self.workload
        if int(self.plans.recompute[i]) != RECOMPUTE.index("partial"):
            return []
        frac = float(self.memory.recompute_fraction[i])
        stage = float(self.plan_stages(i).fullest[0])
        if not bool(self.memory.fits[i]):
            return ["partial recompute: even recomputing every layer, the plan does not fit"]
        if frac == 0.0:
            return [
                "partial recompute: the plan fits without recomputing any layer; Megatron "
                "runs it without recompute flags"
            ]
        # Megatron counts --recompute-num-layers per virtual pipeline chunk, in its
        # own layers (a Gated DeltaNet model's: mixer + MLP blocks)
        vpp = int(self.plans.vpp[i])
        whole, chunk = block_recompute_layers(w.model, frac, stage, vpp)
        mlm = stage / megatron_units(w.model)
        # the stage's chunks hold chunk layers or one fewer: whole of each, at most all
        recomputed = min(whole * vpp, round(mlm))
        per = f" of each {chunk_words(chunk, vpp, round(mlm))}" if vpp > 1 else ""
        steps = self._step_at(i, min(recomputed / mlm, 1.0))
        cost = (
            f": a step of {fmt_time(steps[0])}, {100 * (steps[0] / steps[1] - 1):.1f} % longer"
            if steps is not None
            else ""
        )
        return [
            f"partial recompute: the activations of {100 * frac:.0f} % of the layers "
            f"are recomputed (~{frac * mlm:.1f} of the stage's {mlm:.0f}), the "
            "least that fits; in Megatron, --recompute-method block "
            f"--recompute-num-layers {whole}{per} (whole layers: {recomputed} of "
            f"the stage's {mlm:.0f}, more memory free and more recompute than "
            f"priced{cost}), or selective --recompute-modules that free as much"
        ]

    def _tight_memory_notes(self, i: int) -> list[str]:
        """Plan ``i`` fits with more than :data:`TIGHT` of the GPU's memory and no headroom
        asked for: allocator fragmentation may not leave it room."""
        w = self.workload
        cap = w.gpu.memory_bytes
        used_mem = float(self.memory.total[i])
        if w.memory_headroom == 0.0 and bool(self.memory.fits[i]) and used_mem > TIGHT * cap:
            return [
                f"memory is {100 * used_mem / cap:.0f} % of the GPU's: little margin for "
                "fragmentation beyond what the model allows for; --memory-headroom 0.1 ranks "
                "plans that leave 10 % free"
            ]
        return []

    def _tensor_domain_notes(self, i: int) -> list[str]:
        """Plan ``i``'s tensor parallelism spans scale-up domains: its collectives cross the
        scale-out network."""
        w = self.workload
        tp, scaleup = int(self.plans.tp[i]), max(w.fabric.scaleup_domain_gpus, 1)
        if tp > scaleup:
            return [
                f"tensor parallelism spans {-(-tp // scaleup)} "
                f"scale-up domains of {scaleup} GPUs: its collectives, "
                "several per layer and micro-batch, cross the scale-out network"
            ]
        return []

    def _cp_exchange_notes(self, i: int) -> list[str]:
        """Plan ``i`` runs context parallelism: its step with each of the other exchanges
        (``--cp-comm``), which the plan's figures do not weigh."""
        w, cp = self.workload, int(self.plans.cp[i])
        if cp > 1 and w.model.sparse is not None:
            return [
                f"context parallelism (CP{cp}) is priced as {CP_EXCHANGES['all_gather']}: "
                "Megatron's DeepSeek Sparse Attention runs no other (--cp-comm-type allgather)"
            ]
        # Transformer Engine runs MLA's context parallelism as the ring only: nothing to weigh
        here = self._priced_as(i, w) if cp > 1 and w.model.mla is None else None
        if here is None:
            return []
        alts = []
        for kind in CP_COMM:
            if kind == w.cp_comm:
                continue
            got = self._priced_as(i, replace(w, cp_comm=kind))
            name = f"{CP_EXCHANGES[kind]} (--cp-comm {kind})"
            if got is None:
                held = "the query and KV heads a tensor-parallel rank holds"
                alts.append(f"{name} need {held} divisible by {cp}")
                continue
            step, fits = got
            fit = "" if fits == here[1] else (", fits" if fits else ", does not fit")
            change = (step / here[0] - 1.0) * 100.0
            alts.append(f"{name} would take {fmt_time(step)} a step ({change:+.1f} %{fit})")
        said = f"context parallelism (CP{cp}) is priced as {CP_EXCHANGES[w.cp_comm]}"
        return [f"{said}; " + "; ".join(alts)]

    def _expert_domain_notes(self, i: int) -> list[str]:
        """Plan ``i``'s expert parallelism spans NVLink domains: how many times a token
        crosses the network under the workload's dispatch, and under the other."""
        w, m = self.workload, self.workload.model
        ep = int(self.plans.ep[i])
        dom = w.fabric.domain_gpus
        if not (m.is_moe and dom > 1 and ep > dom):
            return []
        # expert-parallel ranks are the innermost: EP fills whole scale-up domains, the
        # last one perhaps partly (as step.py places the group)
        domains = -(-ep // dom)
        hits = float(
            domains_hit(
                m.top_k,
                m.num_experts,
                np.array([ep / dom]),
                m.route_groups,
                m.route_topk_groups,
            )[0]
        )
        flat = m.top_k * (ep - dom) / ep
        limit = (
            f", drawn from {m.route_topk_groups} of {m.route_groups} expert groups"
            if 0 < m.route_topk_groups < m.route_groups
            else ""
        )
        if w.ep_dispatch == "hierarchical":
            how = (
                f"{hits:.2f} times, once per remote domain holding one of its experts{limit} "
                f"(an NCCL all-to-all of every top-{m.top_k} copy would make {flat:.2f})"
            )
        else:
            how = (
                f"{flat:.2f} times, once per top-{m.top_k} copy bound for a remote domain "
                f"(a hierarchical dispatch, DeepEP or HybridEP, would make {hits:.2f})"
            )
        return [
            f"expert parallelism spans {domains} NVLink domains: a token crosses the network {how}"
        ]

    def plan_stages(self, i: int) -> Stages:
        """Plan ``i``'s pipeline stages, the one that sets its pace the step's (the slower in
        time of the fullest and the last)."""
        return self.step.pace.at(i)

    def _stage_notes(self, i: int) -> list[str]:
        """How plan ``i``'s pipeline places its layers, when that sets its pace."""
        w, m = self.workload, self.workload.model
        pp, vpp = int(self.plans.pp[i]), int(self.plans.vpp[i])
        if pp == 1:
            return []
        chunks = pp * vpp
        st = self.plan_stages(i)
        # in the layers a pipeline places (Megatron's: a Gated DeltaNet's mixer + MLP)
        n, units = placed_layers(m), megatron_units(m)
        fullest, last = float(st.fullest[0]) / units, float(st.last[0]) / units
        r = head_layers(w) / units
        head = f"the output layer ({r:.2g} layers' forward FLOPs)"
        if m.mtp_layers:  # they run beside it, with a head each
            n_mtp = m.mtp_layers
            head += (
                ", the MTP depth and its head"
                if n_mtp == 1
                else f", the {n_mtp} MTP depths and their heads"
            )
        slowest = "the last stage" if st.head[0] else "the fullest stage"
        split = PP_SPLITS[int(self.plans.split[i])]
        if split != "even":
            return [
                f"pipeline ({split} split): {fullest:.0f} layers on the fullest stage "
                f"without the output layer, {last:.0f} and {head} on the last; "
                f"{slowest} sets the pace"
            ]
        # with the embedding and the loss in a layer's place each (Megatron's
        # account_for_embedding/loss_in_pipeline_split) the layers + 2 split evenly
        account = (n + 2) % chunks == 0
        # the balanced placement is priced for pipelines without interleaving only
        others = [s for s, ok in (("account", account), ("balanced", vpp == 1)) if ok]
        other = f"--pp-split {' or '.join(others)}"
        if n != pp * fullest:  # stages of unequal layers
            why = (
                "; --pp-split account would split them evenly, the embedding and the loss "
                "taking a layer's place each"
                if account
                else ""
            )
            return [
                f"pipeline (even split): {n} layers over {chunks} chunks are uneven, "
                f"{fullest:.0f} on the fullest stage{_fullest_chunks(n, pp, vpp)}, "
                f"{last:.0f} and {head} on the last; {slowest} sets the pace{why}"
            ]
        if r >= 0.5 and others and w.pp_split == "even":  # (a search with another kept this one)
            return [
                f"the last stage runs {head} beside its {last:.0f} layers and sets the "
                f"pace: {other} prices placing fewer layers there"
            ]
        return []

    def _recompute_notes(self, i: int) -> list[str]:
        """Recompute modules that change nothing for plan ``i``: the plan does not recompute
        selectively, or the model has no attention core (the default module). The workload
        refuses the other modules a model lacks."""
        w, m = self.workload, self.workload.model
        mods = w.recompute_modules
        if int(self.plans.recompute[i]) != RECOMPUTE.index("selective"):
            if mods == DEFAULT_MODULES:
                return []
            return [f"recompute modules {', '.join(mods)} apply to selective recompute only"]
        if "core_attn" in mods and m.attn_layers == 0:
            return [f"{m.name} has no core_attn to recompute"]
        return []


FREQUENT_SAVE_S = 300.0
"""Saving more often than this makes the checkpoint volume a question for the storage."""


def chunk_words(chunk: int, vpp: int, stage: int) -> str:
    """A stage's virtual chunks in words: "4-layer chunk" where its ``vpp`` chunks hold
    ``chunk`` layers each, "chunk of up to 4 layers" where some hold one fewer."""
    return f"{chunk}-layer chunk" if chunk * vpp == stage else f"chunk of up to {chunk} layers"


def block_recompute_layers(m: Model, frac: float, stage: float, vpp: int) -> tuple[int, int]:
    """Megatron's ``--recompute-num-layers`` under ``--recompute-method block`` for a stage
    of ``stage`` layers (gpuscale's) of which ``frac`` are recomputed: the fewest whole
    Megatron layers of each virtual chunk that cover the fraction, and the layers of the
    stage's fullest chunk (its chunks hold that many or one fewer)."""
    chunk = math.ceil(stage / vpp / megatron_units(m) - 1e-9)
    return min(math.ceil(frac * chunk - 1e-9), chunk), chunk


def _run_notes(
    cost: StorageCost | None, storage: StoragePolicy | None, rel: Reliability | None
) -> list[str]:
    """What a run's checkpoints and failures ask of the cluster beyond the figures."""
    out = []
    if cost is not None and storage is not None and cost.checkpoint_every_steps:
        interval = cost.checkpoint_interval_s + cost.checkpoint_stall_s
        if interval < FREQUENT_SAVE_S:
            per_day = cost.checkpoint_bytes * 86400.0 / interval
            out.append(
                f"saving every {fmt_time(interval)} writes {fmt_bytes(per_day, binary=False)} "
                "a day: check the storage's capacity, retention and endurance for that volume"
            )
        if storage.asynchronous and cost.checkpoint_write_s > 0.5 * interval:
            out.append(
                f"the background writes keep the storage busy "
                f"{100 * min(cost.checkpoint_write_s / interval, 1.0):.0f} % of the time, "
                "competing with data loading and other jobs for its bandwidth"
            )
    if rel is not None and rel.restart_s >= rel.job_mtbf_s:
        out.append(
            f"a restart ({fmt_time(rel.restart_s)}) takes longer than the time between "
            f"failures ({fmt_time(rel.job_mtbf_s)}): the job spends most of its time "
            "restarting; restart and reload faster, or run on fewer GPUs"
        )
    return out


def softmax_notes(w: Workload) -> list[str]:
    """Where the workload's attention runs at the pace of the GPU's exponential units (its
    head dimension below the GPU's ``softmax_head_dim``, fused kernels)."""
    bal = w.gpu.softmax_head_dim
    m = w.model
    if bal is None or w.attention == "unfused" or m.attn_layers == 0:
        return []
    qk_w, _ = attn_core_dims(m)
    d = qk_w / m.heads
    fwd, bwd = softmax_factors(w.gpu, d)
    if fwd == 1.0:
        return []
    return [
        f"attention heads of {d:.0f} are below the {w.gpu.key}'s softmax balance of "
        f"{bal:.0f}: its exponential units, one exponential a score against 4 x {d:.0f} "
        f"FLOPs of the forward's GEMMs, set the forward's pace ({fwd:.1f} x its "
        f"tensor-core time{'' if bwd == 1.0 else f', the backward {bwd:.1f} x'})"
    ]


def _fullest_chunks(layers: int, pp: int, vpp: int) -> str:
    """The chunks of the fullest stage under the even split, in words (nothing without
    interleaving): " (3 chunks of 4)" or " (chunks of 2, 1 and 1)"."""
    if vpp == 1:
        return ""
    sizes = even_chunks(layers, pp, vpp)
    held = max((sizes[r::pp] for r in range(pp)), key=sum)
    if len(set(held)) == 1:
        return f" ({vpp} chunks of {held[0]})"
    return f" (chunks of {', '.join(map(str, held[:-1]))} and {held[-1]})"
