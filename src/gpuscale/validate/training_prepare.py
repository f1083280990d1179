"""How a published training row becomes a workload to predict.

:func:`prepare` reads a row of ``shared/validation/training_runs.csv``'s schema: the figure
it compares (its ``target`` and FLOP convention), the model, GPU, sizes and precision, the
software stack's kernels, the network it states, and the degrees it fixes; what it leaves
unstated is chosen later by gpuscale's plan search (:func:`.training.choose_plan`). A row
gpuscale cannot model is skipped with the reason. The rules are listed in
``validate/README.md``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from gpuscale.catalog import GPU, system_for_gpu
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import MAX_GPUS, PP_SPLITS, RECOMPUTE, SHARDING, Workload
from gpuscale.perf.recompute import op_sac_modelled
from gpuscale.perf.transformer import (
    model_flops_per_token,
)
from gpuscale.search.space import cp_degrees
from gpuscale.validate.numbers import count, num, positive
from gpuscale.validate.training_cells import (
    CONVENTIONS,
    MEASURED,
    TARGETS,
    read_gpu,
    read_precision,
    read_recompute,
    read_recompute_modules,
    read_seq_parallel,
    read_shard_group,
    read_sharding,
    read_target,
)
from gpuscale.validate.training_model import UnsupportedRowError, model_for
from gpuscale.validate.training_rows import (
    absent_degrees,
    batch_cell_in_tokens,
    megatron_split,
    nics_per_node,
    nvlink_domain,
    pipeline_schedule,
    sizes_from_notes,
    zero3_gathers,
)
from gpuscale.validate.training_stack import (
    attention_kernel,
    cuda_graphs,
    elementwise_kernels,
    ep_dispatch,
    grad_accumulation,
    loss_kernel,
    mentions,
    pipeline_split,
    pp_transfers,
    sequence_parallel_named,
    stack_text,
    tp_overlap,
)

HFU_RATIO_FULL_RECOMPUTE = 1.2
"""Hardware-over-model FLOPs ratio above which a run is taken to recompute fully (full
recomputation adds one forward, 4/3 of the model FLOPs)."""
HFU_RATIO_MAX = 1.6
"""Above it the two figures disagree (4/3 plus the attention and vocabulary terms a FLOP
count may add or leave out): no recompute is read from them."""
MIN_MFU = 0.01
"""A measured figure under this share of the GPU's dense peak is taken to be in another
unit: published LLM training runs sit at 10-60 % of peak."""


@dataclass(frozen=True)
class PreparedRow:
    """A row turned into a workload, a (partly) fixed plan and what to compare."""

    id: str
    group: str
    workload: Workload
    fixed: dict[str, Any]
    target: str
    convention: str
    measured: float
    notes: tuple[str, ...]
    figure: str = ""
    """What is compared, in the targets' terms: the target, or for an ``excluded`` row the
    figure it gives (tokens/s, TFLOP/s or MFU)."""

    @property
    def compared(self) -> str:
        return self.figure or self.target


PEFT = r"\b(q?lora|peft|adapter[- ](tuning|fine-tuning)|prefix[- ]tuning)\b"
"""Names of parameter-efficient fine-tuning in a row's stack text."""

FP8_PARAM_GATHER = r"fp[48][_ -]param[_ -]gather|float8[_ -]all[_ -]gather"
"""How a row names low-precision parameter gathers (Megatron's --fp8-param-gather and
--fp4-param-gather, torchao's enable_fsdp_float8_all_gather)."""

MAX_TOKENS_PER_STEP = 2**27
"""Tokens a step above which a row's global batch is read as tokens, not sequences: twice
DeepSeek-V3's 15,360 x 4,096 = 63 M (arXiv 2412.19437), the largest batch we know of."""


def source_group(source: str) -> str:
    head = re.split(r" \(|,| https?://|;", source, maxsplit=1)[0]
    return head.strip()[:48]


FLOP_TARGETS = ("tflops_per_gpu", "mfu")
"""The targets that compare FLOP rates: TFLOP/s per GPU, and the same over the dense peak."""


def _figure(row: dict[str, str], where: str) -> tuple[str, str, bool, float | None, list[str]]:
    """(figure compared, FLOP convention, excluded, its measured value, notes) of a row:
    its ``target``, or for a row reported but not scored (``excluded``) whichever figure it
    gives, or for a FLOP target whose figure is missing the other FLOP figure (said in the
    notes); an empty convention of a FLOP figure is ``unspecified``."""
    target = read_target(row["target"])
    if target not in TARGETS:
        raise InputError(f"{where}:target", row["target"], f"one of {', '.join(TARGETS)}")
    conv = row.get("flop_convention", "").strip().lower()
    if conv not in CONVENTIONS:
        raise InputError(
            f"{where}:flop_convention", conv, f"one of {', '.join(c for c in CONVENTIONS if c)}"
        )
    excluded = target == "excluded"
    if excluded and not row.get(MEASURED[target], "").strip():
        # reported, not scored: with whichever figure the row gives, in its own terms (from
        # here on ``target`` is the figure compared)
        given = [k for k in FLOP_TARGETS if row.get(MEASURED[k], "").strip()]
        target = given[0] if given else target
    notes = []
    if target in FLOP_TARGETS and not row.get(MEASURED[target], "").strip():
        # a FLOP figure named, the other one given: the same figure over the dense peak
        other = FLOP_TARGETS[1 - FLOP_TARGETS.index(target)]
        if not excluded and row.get(MEASURED[other], "").strip():
            notes.append(f"target {target}, only {MEASURED[other]} given: compared as {other}")
            target = other
        elif not excluded and row.get("measured_step_time_s", "").strip():
            # only the step time: the tokens/s per GPU it gives (the same run's rate)
            notes.append(
                f"target {target}, only measured_step_time_s given: compared as tokens/s per GPU"
            )
            target = "tokens_per_s_per_gpu"
    if not conv and target in FLOP_TARGETS:
        conv = "unspecified"  # an empty cell: the source does not say how it counts
    measured = positive(row, MEASURED[target], where)
    percent = "%" in row["target"] and not row[MEASURED[target]].strip().endswith("%")
    if target == "mfu" and measured is not None and 1 < measured <= 100 and percent:
        # "MFU (%)" labels a column of percentages: 41 there is 0.41
        notes.append(f"measured_mfu={measured:g} under the target label {row['target']!r}: %")
        measured /= 100.0
    if target == "mfu" and measured is not None and measured > 1:
        raise UnsupportedRowError(
            f"measured_mfu={row['measured_mfu']!r}: a fraction of peak, at most 1 (0.45 for 45 %)"
        )
    return target, conv, excluded, measured, notes


def _check_rate(rate: float, figure: str, gpu: GPU, precision: str) -> None:
    """A measured figure's FLOP/s per GPU must lie between MIN_MFU of the GPU's dense peak
    and the peak: beyond it, it is no per-GPU figure of this model; far under, its unit is
    likely another (milliseconds for seconds, a node's or a run's throughput)."""
    peak = gpu.peak_flops(precision)
    if rate > peak * (1.0 + 1e-9):
        raise UnsupportedRowError(
            f"{figure} means {rate / 1e12:,.0f} TFLOP/s per GPU, above {gpu.key}'s "
            f"{precision} dense peak of {peak / 1e12:,.0f}: not a per-GPU figure of this model"
        )
    if rate < MIN_MFU * peak:
        raise UnsupportedRowError(
            f"{figure} means {rate / 1e12:,.2f} TFLOP/s per GPU, under "
            f"{100 * MIN_MFU:g} % of {gpu.key}'s {precision} dense peak: check the "
            "column's unit (a step time in milliseconds, a throughput per node or per run)"
        )


def nemo_recipes(source: str) -> bool:
    """Whether a row's source names NVIDIA's NeMo / Megatron-Bridge performance recipes (a
    NeMo release or performance summary, an MLPerf ``..._nemo`` implementation): "NeMo" as
    a word of its own, not inside Nemotron, nor the Mistral NeMo model's name."""
    text = source.lower()
    if "megatron-bridge" in text:
        return True
    return any(
        not re.search(r"mistral\W{0,3}$", text[: m.start()])
        for m in re.finditer(r"(?<![a-z])nemo(?![a-z])", text)
    )


def prepare(row: dict[str, str], where: str) -> PreparedRow:
    target, conv, excluded, measured, swapped = _figure(row, where)
    measured_col = MEASURED[target]
    step_s = positive(row, "measured_step_time_s", where)
    if measured is None and step_s is None:
        raise UnsupportedRowError(f"no {measured_col} value")
    gpu, gpu_note = read_gpu(row["gpu"])
    text = stack_text(row)
    if mentions(text, PEFT):
        raise UnsupportedRowError(
            "parameter-efficient fine-tuning (LoRA, adapters) is not modelled: its frozen "
            "weights take no weight gradients, optimizer state or gradient reduction"
        )
    model, notes = model_for(row, where)
    notes = swapped + notes
    if gpu_note:
        notes.insert(0, gpu_note)
    n_gpus = count(row, "num_gpus", where)
    seq_cell = count(row, "seq_len", where)
    in_tokens = batch_cell_in_tokens(row.get("global_batch_seqs", ""), seq_cell)
    if in_tokens is not None:
        notes.append(in_tokens[1])
    gbs_cell = in_tokens[0] if in_tokens else count(row, "global_batch_seqs", where)
    seq, gbs, from_notes = sizes_from_notes(row.get("notes", ""), seq_cell, gbs_cell)
    notes.extend(from_notes)
    dp_stated, mbs_stated = count(row, "dp", where), count(row, "micro_batch", where)
    batch_assumed = False
    if gbs is None and dp_stated is not None and mbs_stated is not None:
        batch_assumed = True
        gbs = dp_stated * mbs_stated
        notes.append("global batch not stated: dp x micro-batch (no gradient accumulation)")
    degrees = [count(row, k, where) for k in ("tp", "pp", "cp")]
    if n_gpus is None and dp_stated is not None and None not in degrees[:2]:
        # every degree stated: the GPUs are their product (CP 1 when blank)
        n_gpus = math.prod(d or 1 for d in degrees) * dp_stated
        if n_gpus > MAX_GPUS:
            raise UnsupportedRowError(
                f"GPU count not stated, and tp x pp x cp x dp = {n_gpus:,} is more than "
                f"{MAX_GPUS:,}"
            )
        notes.append(f"GPU count not stated: tp x pp x cp x dp = {n_gpus:,.0f}")
    if n_gpus is None or seq is None or gbs is None:
        raise UnsupportedRowError("GPU count, sequence length or global batch not stated")
    if gbs * seq > MAX_TOKENS_PER_STEP and gbs >= seq:
        raise UnsupportedRowError(
            f"global_batch_seqs={gbs:,.0f} with seq_len={seq:,.0f} is {gbs * seq:,.0f} tokens "
            f"a step, beyond any published run's (at most {MAX_TOKENS_PER_STEP:,}); the cell "
            f"looks like a batch in tokens ({gbs:,.0f} tokens = {gbs / seq:,.6g} sequences): "
            "give it in sequences"
        )
    if measured is None:
        if target not in ("tokens_per_s_per_gpu", "excluded") or not step_s:
            raise UnsupportedRowError(f"no {measured_col} value")
        if batch_assumed:
            # the tokens a step trains are the row's figure: an assumed batch would make it
            raise UnsupportedRowError(
                "only a step time is measured and the global batch is not stated: its "
                "tokens/s per GPU cannot be derived"
            )
        # only the iteration time is given: the tokens it trains over its GPUs
        measured = gbs * seq / (step_s * n_gpus)
        notes.append("tokens/s per GPU from the measured step time: batch x sequence / (s x GPUs)")
    precision = read_precision(row.get("precision", ""), gpu, notes)
    if precision not in gpu.peak_tflops:
        raise UnsupportedRowError(f"{gpu.key} has no {precision} peak in the catalog")
    if target != "mfu":  # an MFU is at most 1, checked above
        figure = (
            f"{measured_col}={measured:g}"
            if row.get(measured_col, "").strip()
            else f"measured_step_time_s={step_s:g} ({measured:,.0f} tokens/s per GPU)"
        )
        if target == "tflops_per_gpu":
            rate = measured * 1e12
        else:  # the model FLOPs of the tokens each GPU trains per second
            rate = measured * model_flops_per_token(model, int(seq), causal=True)
        _check_rate(rate, figure, gpu, precision)
    (attention, why_a), (gathers, why_g) = attention_kernel(row, gpu.arch), zero3_gathers(row)
    (elementwise, why_e), (graphs, why_c) = elementwise_kernels(row), cuda_graphs(row)
    loss, why_l = loss_kernel(row)
    notes.extend(why for why in (why_a, why_g, why_e, why_l, why_c) if why)
    dispatch, why = ep_dispatch(row)
    if why and model.is_moe:
        notes.append(why)
    accumulation, why = grad_accumulation(row, precision)
    if why:
        notes.append(why)
    p2p, why = pp_transfers(row)
    if why and degrees[1] != 1:
        notes.append(why)
    fp8_gather = precision in ("fp8", "fp4") and mentions(text, FP8_PARAM_GATHER)
    if fp8_gather:
        notes.append("parameters gathered as FP8, no 16-bit weight copy, as the row names")
    system = system_for_gpu(gpu)
    system, why = nvlink_domain(row, system)
    if why:
        notes.append(why)
    links = nics_per_node(row, system.nic_gbps, system.gpus_per_node)
    if links is not None and links != (system.nics_per_node, system.nic_gbps):
        nics, gbps = links
        system = system.model_copy(update={"nics_per_node": nics, "nic_gbps": gbps})
        notes.append(f"scale-out: {nics} x {gbps:g} Gb/s NICs per node, as the row states")
    shard_group, why = read_shard_group(row, system.gpus_per_node)
    if why:
        notes.append(why)
    w = Workload(
        model,
        gpu,
        system,
        Fabric.from_system(system, int(n_gpus)),
        int(n_gpus),
        int(seq),
        int(gbs),
        precision,
        attention=attention,
        zero3_gathers=gathers,
        elementwise=elementwise,
        loss=loss,
        ep_dispatch=dispatch,
        fp8_param_gather=fp8_gather,
        cuda_graphs=graphs,
        grad_accumulation=accumulation,
        pp_p2p=p2p,
        shard_group=shard_group,
    )
    fixed: dict[str, Any] = {}
    for col, key in (
        ("tp", "tp"),
        ("pp", "pp"),
        ("dp", "dp"),
        ("cp", "cp"),
        ("ep", "ep"),
        ("vpp", "vpp"),
        ("micro_batch", "mbs"),
    ):
        v = count(row, col, where)
        if v is not None:
            fixed[key] = v
    model_par = math.prod(int(fixed.get(k, 1)) for k in ("tp", "pp", "cp"))
    if "dp" not in fixed and n_gpus % model_par:
        raise UnsupportedRowError(
            f"tp x pp x cp = {model_par:,} GPUs "
            + ("is more than" if model_par > n_gpus else "does not divide")
            + f" the row's num_gpus={n_gpus:,}: no whole number of data-parallel replicas"
        )
    notes.extend(absent_degrees(row.get("notes", ""), fixed))
    if "dp" in fixed and "tp" not in fixed and "pp" not in fixed:
        split = megatron_split(w, fixed)
        if split is not None:
            fixed["tp"], fixed["pp"] = split
            notes.append(
                f"TP/PP split not stated: TP{split[0]} PP{split[1]}, tensor parallel up to the "
                "node and pipeline across nodes (Narayanan et al. SC'21, takeaway 1)"
            )
    notes.extend(pipeline_schedule(row, fixed, int(gbs)))
    pp_split, why = pipeline_split(row, int(fixed.get("pp", 1)))
    if why:
        notes.append(why)
        w = replace(w, pp_split=pp_split)
        fixed["split"] = PP_SPLITS.index(pp_split)
    sp = read_seq_parallel(row.get("seq_parallel", ""))
    if sp is None and sequence_parallel_named(row):
        sp = True
        notes.append("sequence parallelism: on, as the row says the run used it")
    if sp is not None:
        fixed["sp"] = sp
        if fixed["sp"] and fixed.get("tp") == 1:
            # Megatron switches it off ("Disabling sequence parallelism because tensor model
            # parallel size is 1"): a table's SP column may be ticked for every row
            fixed["sp"] = False
            notes.append("sequence parallelism stated with TP 1: off, as Megatron turns it off")
    elif attention == "unfused":
        fixed["sp"] = False
        notes.append("sequence parallelism not stated: off, as in Megatron's unfused-attention era")
    titan_tp = "torchtitan" in text and int(fixed.get("tp", 1)) > 1
    if titan_tp and "sp" not in fixed:
        # torchtitan's TP plan shards the norms over the sequence (SequenceParallel)
        fixed["sp"] = True
        notes.append("sequence parallelism: on, as torchtitan's TP plan shards the norms")
    if titan_tp:
        # its TP collectives overlap the matmuls only with AsyncTP (micro-pipelined, through
        # symmetric memory); plain TP runs them in turn
        fixed["tp_overlap"] = mentions(text, r"async[ -]?tp")
        notes.append(
            "TP communication overlapped with the matmuls (AsyncTP)"
            if fixed["tp_overlap"]
            else "TP communication not overlapped (torchtitan without AsyncTP)"
        )
    rc = read_recompute(row.get("recompute", ""))
    if rc == "partial" and re.search(r"\d", row.get("recompute", "")):
        # Megatron's block method recomputes the layers a run sets; gpuscale prices partial
        # recomputation as the least that fits the memory (priced as a fraction of layers)
        notes.append(
            f"recompute {row['recompute'].strip()!r}: priced as the least partial "
            "recomputation that fits, not the layer count the row gives"
        )
    if not rc and conv == "megatron_sc21_hfu":
        rc = "full"
        notes.append("full recompute: the SC'21 FLOP convention counts a full recomputation")
    tf_meas = num(row, "measured_tflops_per_gpu", where)
    tok_meas = num(row, "measured_tokens_per_s_per_gpu", where)
    if not rc and tf_meas and tok_meas:
        # the row's own two figures: TFLOP/s above the model-FLOPs rate by a third means the
        # source counted a recomputed forward pass (HFU), i.e. the run recomputed fully
        ratio = tf_meas * 1e12 / (tok_meas * model_flops_per_token(model, int(seq), causal=False))
        if HFU_RATIO_FULL_RECOMPUTE < ratio <= HFU_RATIO_MAX:
            rc = "full"
            notes.append(f"full recompute: reported TFLOP/s are {ratio:.2f}x the model-FLOPs rate")
        elif ratio > HFU_RATIO_MAX:
            notes.append(
                f"the reported TFLOP/s are {ratio:.2f}x the model-FLOPs rate of its tokens/s, "
                "more than any recomputation adds: recompute not inferred from them"
            )
    if not rc and re.search(
        r"activation checkpointing on|full (activation )?recompute",
        row.get("notes", ""),
        re.IGNORECASE,
    ):
        rc = "full"
        notes.append("full recompute as stated in the notes")
    if rc:
        fixed["recompute"] = RECOMPUTE.index(rc)
    modules = read_recompute_modules(row.get("recompute", ""))
    if rc == "selective" and modules is None and "torchtitan" in text:
        # torchtitan's selective checkpointing is per operator by default
        # (selective_ac_option = "op"), not Megatron's attention-core recompute
        modules = ("ops",) if op_sac_modelled(w.model) else None
    if rc == "selective" and modules is not None and modules != w.recompute_modules:
        w = replace(w, recompute_modules=modules)
        notes.append(
            "selective recompute per operator, torchtitan's default (every other matmul's "
            "output kept)"
            if modules == ("ops",)
            else f"selective recompute of {', '.join(modules)} (Megatron-Core modules)"
        )
    sharding = read_sharding(row.get("dist_optimizer_or_zero", ""))
    recipes = nemo_recipes(row["source"])
    if sharding is not None:
        fixed["sharding"] = sharding
        if not w.shard_group:
            # a sharding the row names over all its data-parallel ranks: FSDP is FULL_SHARD
            # unless the cell says hybrid (read_shard_group), so no hybrid twin is searched
            fixed["shard_group"] = 0
    elif recipes:
        # the performance recipes run Megatron's distributed optimizer with gradients reduced
        # in bf16 (ddp.grad_reduce_in_fp32 = False): ZeRO-1's memory and traffic
        fixed["sharding"] = SHARDING.index("zero1")
        notes.append("sharding: Megatron's distributed optimizer, bf16 gradient reduction")
    tp_stated = int(fixed.get("tp", 1))
    if recipes and 1 < tp_stated <= w.fabric.scaleup_domain_gpus and fixed.get("sp") is not False:
        # the performance recipes overlap TP communication with the GEMMs whenever TP > 1
        # (tp_comm_overlap: Transformer Engine's userbuffers, under sequence parallelism,
        # within a scale-up domain)
        fixed["tp_overlap"] = True
        notes.append("TP communication overlapped with GEMMs (the recipes' tp_comm_overlap)")
    if "tp_overlap" not in fixed and not recipes and fixed.get("tp") != 1:
        overlap, why = tp_overlap(row)
        if overlap is not None:
            fixed["tp_overlap"] = overlap
            notes.append(why)
    free = [k for k in ("tp", "pp", "dp", "mbs", "recompute", "sharding") if k not in fixed]
    # the knobs a search sets only where they can matter: context parallelism, experts
    # over ranks (an MoE model), interleaving (under a pipeline), sequence parallelism
    # (under TP)
    free += [
        name
        for key, name, matters in (
            ("cp", "cp", len(cp_degrees(w.seq_len)) > 1),
            ("ep", "ep", w.model.is_moe),
            ("vpp", "vpp", fixed.get("pp") != 1),
            ("sp", "sequence parallelism", fixed.get("tp") != 1),
        )
        if key not in fixed and matters
    ]
    if free:
        notes.append(f"not stated, chosen by gpuscale's plan search: {', '.join(free)}")
    return PreparedRow(
        row["id"],
        source_group(row["source"]),
        w,
        fixed,
        "excluded" if excluded else target,
        conv,
        measured,
        tuple(notes),
        target,
    )
