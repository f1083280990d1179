"""The plan a published training row states, and what it leaves to the plan search.

:func:`stated_plan` reads, from a row of ``shared/validation/training_runs.csv``'s schema,
the degrees it fixes (TP, PP, DP, CP, EP, VPP, micro-batch), the TP/PP split and pipeline
schedule its stated sizes imply, and the settings its cells and software stack name:
sequence parallelism, TP communication overlap, recompute and optimizer sharding. Each
rule that fires gives a reason printed with the row; the knobs it leaves unstated are
chosen by gpuscale's plan search (:func:`.training.choose_plan`), and the last reason
names them. The rules are listed in ``validate/README.md``.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

from gpuscale.perf.plan import PP_SPLITS, RECOMPUTE, SHARDING, Workload
from gpuscale.perf.recompute import op_sac_modelled
from gpuscale.perf.stages import placed_layers
from gpuscale.perf.transformer import model_flops_per_token
from gpuscale.search.space import cp_degrees
from gpuscale.validate.numbers import count, num
from gpuscale.validate.training_cells import (
    read_recompute,
    read_recompute_modules,
    read_seq_parallel,
    read_sharding,
)
from gpuscale.validate.training_model import UnsupportedRowError
from gpuscale.validate.training_rows import absent_degrees, megatron_split, pipeline_schedule
from gpuscale.validate.training_stack import (
    mentions,
    pipeline_split,
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

STATED_DEGREES = (
    ("tp", "tp"),
    ("pp", "pp"),
    ("dp", "dp"),
    ("cp", "cp"),
    ("ep", "ep"),
    ("vpp", "vpp"),
    ("micro_batch", "mbs"),
)
"""The row's columns that fix a plan degree, and the plan's names for them."""


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


def stated_plan(
    row: dict[str, str], where: str, w: Workload, convention: str
) -> tuple[Workload, dict[str, Any], list[str]]:
    """The plan a row states: the knobs the plan search keeps (``fixed``), the workload
    with the pipeline split and recomputed modules the row names, and the reasons in the
    order the rules apply (``convention`` is the row's FLOP convention, which may imply a
    recompute); the last reason names the knobs left to the search."""
    fixed, notes = _stated_degrees(row, where, w)
    pp = int(fixed.get("pp") or 1)
    chunks = pp * int(fixed.get("vpp") or 1)
    pp_split, why = pipeline_split(row, pp, chunks, placed_layers(w.model))
    if why:
        notes.append(why)
        w = replace(w, pp_split=pp_split)
        fixed["split"] = PP_SPLITS.index(pp_split)
    notes.extend(_sequence_parallel(row, fixed, w.attention))
    notes.extend(_torchtitan_tp(row, fixed))
    rc, why_rc = _recompute_mode(row, where, w, convention)
    notes.extend(why_rc)
    if rc:
        fixed["recompute"] = RECOMPUTE.index(rc)
    w, why = _recomputed_modules(row, w, rc)
    if why:
        notes.append(why)
    notes.extend(_sharding(row, w, fixed))
    notes.extend(_tp_overlap(row, w, fixed))
    notes.extend(_left_to_search(w, fixed))
    return w, fixed, notes


def _schedule_only(cell: str) -> bool:
    """A vpp cell that names a pipeline schedule in words and no number of stages ("1F1B
    interleaved", "interleaved", "1F1B"): read by :func:`.training_rows.pipeline_schedule`
    as the row's notes are, not as a malformed number."""
    text = cell.lower()
    named = re.search(r"interleav|looped|virtual|1f1b", text)
    return named is not None and not re.search(r"\d", text.replace("1f1b", ""))


def _stated_degrees(
    row: dict[str, str], where: str, w: Workload
) -> tuple[dict[str, Any], list[str]]:
    """The degrees and micro-batch a row's cells state, and the reasons: TP x PP x CP must
    leave a whole number of data-parallel replicas of the row's GPUs when DP is blank; the
    degrees the notes say the run did without are 1; a stated DP with no TP or PP gets
    Megatron's split (TP up to the node, PP across nodes); then the pipeline schedule's
    defaults (:func:`.training_rows.pipeline_schedule`)."""
    fixed: dict[str, Any] = {}
    for col, key in STATED_DEGREES:
        if col == "vpp" and _schedule_only(row.get(col, "")):
            continue  # "interleaved", "1F1B": a schedule named, its stages not
        v = count(row, col, where)
        if v is not None:
            fixed[key] = v
    n_gpus = w.num_gpus
    model_par = math.prod(int(fixed.get(k, 1)) for k in ("tp", "pp", "cp"))
    if "dp" not in fixed and n_gpus % model_par:
        raise UnsupportedRowError(
            f"tp x pp x cp = {model_par:,} GPUs "
            + ("is more than" if model_par > n_gpus else "does not divide")
            + f" the row's num_gpus={n_gpus:,}: no whole number of data-parallel replicas"
        )
    notes = absent_degrees(row.get("notes", ""), fixed)
    if "dp" in fixed and "tp" not in fixed and "pp" not in fixed:
        split = megatron_split(w, fixed)
        if split is not None:
            fixed["tp"], fixed["pp"] = split
            notes.append(
                f"TP/PP split not stated: TP{split[0]} PP{split[1]}, tensor parallel up to the "
                "node and pipeline across nodes (Narayanan et al. SC'21, takeaway 1)"
            )
    notes.extend(pipeline_schedule(row, fixed, w.global_batch))
    return fixed, notes


def _sequence_parallel(row: dict[str, str], fixed: dict[str, Any], attention: str) -> list[str]:
    """Sequence parallelism as the row's cell states it, or on where its text says the run
    used it; off with TP 1 whatever the cell says (Megatron turns it off), and off when
    unstated on Megatron's unfused-attention path. Returns the reasons."""
    notes: list[str] = []
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
    return notes


def _torchtitan_tp(row: dict[str, str], fixed: dict[str, Any]) -> list[str]:
    """Tensor parallelism as torchtitan runs it, where the row names torchtitan and TP > 1:
    sequence parallelism on unless stated (its TP plan shards the norms), and the TP
    collectives overlapped with the matmuls only under AsyncTP. Returns the reasons."""
    text = stack_text(row)
    notes: list[str] = []
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
    return notes


SELECTIVE_IN_NOTES = (
    r"(activation checkpointing|recomput\w*)\b[^.;]{0,40}?\b(attention([\s_-]*core)?[\s_-]*only"
    r"|core[\s_-]*attention|selective)|selective (activation )?(checkpointing|recomput\w*)"
)
"""Notes that say recomputation was on for the attention core only ("activation
checkpointing on for attention only", "selective recompute"): Megatron's selective mode."""


def _recompute_mode(
    row: dict[str, str], where: str, w: Workload, convention: str
) -> tuple[str, list[str]]:
    """The RECOMPUTE mode of a row ("" when not stated), and the reasons: its cell (a
    partial recompute priced as the least that fits, not the layers the cell counts); else
    full under the SC'21 FLOP convention, or where the row's TFLOP/s are 1.2-1.6 x the
    model-FLOPs rate of its tokens/s (the source counted a recomputed forward), or where
    the notes say activation checkpointing or full recompute was on."""
    notes: list[str] = []
    rc = read_recompute(row.get("recompute", ""))
    if rc == "partial" and re.search(r"\d", row.get("recompute", "")):
        # Megatron's block method recomputes the layers a run sets; gpuscale prices partial
        # recomputation as the least that fits the memory (priced as a fraction of layers)
        notes.append(
            f"recompute {row['recompute'].strip()!r}: priced as the least partial "
            "recomputation that fits, not the layer count the row gives"
        )
    if not rc and convention == "megatron_sc21_hfu":
        rc = "full"
        notes.append("full recompute: the SC'21 FLOP convention counts a full recomputation")
    tf_meas = num(row, "measured_tflops_per_gpu", where)
    tok_meas = num(row, "measured_tokens_per_s_per_gpu", where)
    if not rc and tf_meas and tok_meas:
        # the row's own two figures: TFLOP/s above the model-FLOPs rate by a third means the
        # source counted a recomputed forward pass (HFU), i.e. the run recomputed fully
        ratio = (
            tf_meas * 1e12 / (tok_meas * model_flops_per_token(w.model, w.seq_len, causal=False))
        )
        if HFU_RATIO_FULL_RECOMPUTE < ratio <= HFU_RATIO_MAX:
            rc = "full"
            notes.append(f"full recompute: reported TFLOP/s are {ratio:.2f}x the model-FLOPs rate")
        elif ratio > HFU_RATIO_MAX:
            notes.append(
                f"the reported TFLOP/s are {ratio:.2f}x the model-FLOPs rate of its tokens/s, "
                "more than any recomputation adds: recompute not inferred from them"
            )
    said = row.get("notes", "")
    if not rc and mentions(said.lower(), SELECTIVE_IN_NOTES):
        rc = "selective"
        notes.append("selective recompute (the attention core) as stated in the notes")
    if not rc and re.search(
        r"activation checkpointing on|full (activation )?recompute", said, re.IGNORECASE
    ):
        rc = "full"
        notes.append("full recompute as stated in the notes")
    return rc, notes


def _recomputed_modules(row: dict[str, str], w: Workload, rc: str) -> tuple[Workload, str]:
    """The workload with what a selective recompute runs again, and why ("" when the
    default attention core): the modules the row's cell names (Megatron-Core's), else
    torchtitan's per-operator default where the row names torchtitan and the model's
    operators are modelled."""
    modules = read_recompute_modules(row.get("recompute", ""))
    if rc == "selective" and modules is None and "torchtitan" in stack_text(row):
        # torchtitan's selective checkpointing is per operator by default
        # (selective_ac_option = "op"), not Megatron's attention-core recompute
        modules = ("ops",) if op_sac_modelled(w.model) else None
    if rc != "selective" or modules is None or modules == w.recompute_modules:
        return w, ""
    return replace(w, recompute_modules=modules), (
        "selective recompute per operator, torchtitan's default (every other matmul's output kept)"
        if modules == ("ops",)
        else f"selective recompute of {', '.join(modules)} (Megatron-Core modules)"
    )


def _sharding(row: dict[str, str], w: Workload, fixed: dict[str, Any]) -> list[str]:
    """Optimizer sharding as the row's cell names it, over all its data-parallel ranks
    unless the cell names a hybrid group; else, on NeMo / Megatron-Bridge performance
    recipes, Megatron's distributed optimizer with bf16 gradient reduction (ZeRO-1's
    memory and traffic); else left to the search. Returns the reasons."""
    sharding = read_sharding(row.get("dist_optimizer_or_zero", ""))
    if sharding is not None:
        fixed["sharding"] = sharding
        if not w.shard_group:
            # a sharding the row names over all its data-parallel ranks: FSDP is FULL_SHARD
            # unless the cell says hybrid (read_shard_group), so no hybrid twin is searched
            fixed["shard_group"] = 0
    elif nemo_recipes(row["source"]):
        # the performance recipes run Megatron's distributed optimizer with gradients reduced
        # in bf16 (ddp.grad_reduce_in_fp32 = False): ZeRO-1's memory and traffic
        fixed["sharding"] = SHARDING.index("zero1")
        return ["sharding: Megatron's distributed optimizer, bf16 gradient reduction"]
    return []


def _tp_overlap(row: dict[str, str], w: Workload, fixed: dict[str, Any]) -> list[str]:
    """TP communication overlapped with the GEMMs on NeMo / Megatron-Bridge performance
    recipes with a stated TP > 1 within a scale-up domain and sequence parallelism not off;
    elsewhere, where not yet set and TP is not 1, as the row's stack says
    (:func:`.training_stack.tp_overlap`). Returns the reasons."""
    notes: list[str] = []
    recipes = nemo_recipes(row["source"])
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
    return notes


def _left_to_search(w: Workload, fixed: dict[str, Any]) -> list[str]:
    """The reason naming the knobs the plan search chooses: TP, PP, DP, micro-batch,
    recompute and sharding when not stated, and those it sets only where they can matter:
    context parallelism (more than one CP degree for the sequence), experts over ranks (an
    MoE model), interleaving (under a pipeline), sequence parallelism (under TP)."""
    free = [k for k in ("tp", "pp", "dp", "mbs", "recompute", "sharding") if k not in fixed]
    free += [
        name
        for key, name, matters in (
            ("cp", "cp", len(cp_degrees(w.seq_len)) > 1),
            ("ep", "ep", w.model.is_moe),
            ("vpp", "vpp", fixed.get("pp") != 1),
            ("sp", "sequence parallelism", fixed.get("tp") != 1),
            ("tp_overlap", "TP communication overlap", fixed.get("tp") != 1),
        )
        if key not in fixed and matters
    ]
    if free:
        return [f"not stated, chosen by gpuscale's plan search: {', '.join(free)}"]
    return []
