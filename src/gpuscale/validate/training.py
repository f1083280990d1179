"""``gpuscale validate training``: predict published training runs and score the error.

Each row of ``shared/validation/training_runs.csv``'s schema maps to a :class:`Workload`
(model shape from the row, completed from the catalog), a GPU and its reference system,
and a plan: the row's stated degrees are fixed, unstated ones are chosen by gpuscale's own
plan search (and the row says so). The predicted figure follows the row's ``target`` and,
for TFLOP/s figures, its ``flop_convention``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.catalog import Model, get_gpu, get_model, system_for_gpu
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import RECOMPUTE, SHARDING, Plans, Workload
from gpuscale.perf.training import estimate
from gpuscale.perf.transformer import (
    megatron_model_flops,
    megatron_sc21_flops,
    model_flops_per_token,
)
from gpuscale.search.plans import search_plans
from gpuscale.validate.report import (
    RowResult,
    ValidationReport,
    num,
    read_rows,
    signed_error_pct,
)

REQUIRED = (
    "id",
    "source",
    "model",
    "gpu",
    "num_gpus",
    "seq_len",
    "global_batch_seqs",
    "target",
    "flop_convention",
)
TARGETS = ("tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "excluded")
CONVENTIONS = (
    "",
    "megatron_sc21_hfu",
    "megatron_model_full_attn",
    "megatron_model_causal",
    "unspecified",
)
_SHARD_SPELLINGS = (
    # (pattern, SHARDING index), first match wins; a cell is read lower-cased
    (r"fsdp|zero[\s_-]*(stage[\s_-]*)?3|stage[\s_-]*3", 4),
    (r"zero[\s_-]*(stage[\s_-]*)?2|stage[\s_-]*2", 3),
    (r"zero[\s_-]*(stage[\s_-]*)?1|stage[\s_-]*1", 2),
    (r"dist|distributed", 1),
    (r"^(none|no|ddp|off|false|0|zero[\s_-]*0)$", 0),
)


def _sharding(cell: str) -> int | None:
    """The SHARDING index a row's sharding cell names; None when empty.

    Accepts the spellings published tables use ("ZeRO-1", "ZeRO stage 3", "FSDP (full
    shard)", "distributed optimizer", "DDP"); anything else is a row gpuscale cannot read.
    """
    text = cell.strip().lower()
    if not text:
        return None
    for pattern, index in _SHARD_SPELLINGS:
        if re.search(pattern, text):
            return index
    raise UnsupportedRowError(f"optimizer sharding {cell!r} not modelled")


def _recompute(cell: str) -> str:
    """The RECOMPUTE mode a row's recompute cell names ("" when empty)."""
    text = cell.strip().lower()
    if not text:
        return ""
    for mode, pattern in (
        ("selective", r"selective|core attention"),
        ("partial", r"partial|block"),
        ("none", r"^(none|no|off|false|0|disabled)$"),
        ("full", r"full|uniform|^(yes|on|true|1|enabled)$|checkpoint"),
    ):
        if re.search(pattern, text):
            return mode
    raise UnsupportedRowError(f"recompute {cell!r} not modelled")


HFU_RATIO_FULL_RECOMPUTE = 1.2
"""Hardware-over-model FLOPs ratio above which a run is taken to recompute fully (full
recomputation adds one forward, 4/3 of the model FLOPs)."""
_GPT_VOCAB = 51200  # GPT-2 BPE (50,257) padded as Megatron does, when a row omits vocab


class UnsupportedRowError(Exception):
    """A row gpuscale cannot model yet; the message is the reason."""


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


def source_group(source: str) -> str:
    head = re.split(r" \(|,| https?://|;", source, maxsplit=1)[0]
    return head.strip()[:48]


def _model_for(row: dict[str, str], where: str) -> tuple[Model, list[str]]:
    notes: list[str] = []
    shape = {
        k: num(row, c, where)
        for k, c in (
            ("layers", "layers"),
            ("hidden", "hidden"),
            ("ffn_hidden", "ffn_hidden"),
            ("heads", "heads"),
            ("kv_heads", "kv_heads"),
            ("vocab", "vocab"),
        )
    }
    try:
        base: Model | None = get_model(row["model"])
    except InputError:
        base = None
    if base is None:
        if shape["layers"] is None or shape["hidden"] is None:
            raise UnsupportedRowError(
                f"model {row['model']!r} is not in the catalog and the row gives no shape"
            )
        h = int(shape["hidden"])
        heads = int(shape["heads"]) if shape["heads"] else max(h // 128, 1)
        if not shape["heads"]:
            notes.append("heads not stated: head size 128 assumed")
        if not shape["vocab"]:
            notes.append(f"vocab not stated: {_GPT_VOCAB} assumed")
        body: dict[str, Any] = {
            "name": row["model"],
            "source": "validation row",
            "layers": int(shape["layers"]),
            "hidden": h,
            "heads": heads,
            "vocab": int(shape["vocab"] or _GPT_VOCAB),
            "position": "learned",
            "tied_embeddings": True,
            "max_seq": 2048,
        }
        if shape["ffn_hidden"]:
            body["ffn_hidden"] = int(shape["ffn_hidden"])
        if shape["kv_heads"]:
            body["kv_heads"] = int(shape["kv_heads"])
        return Model.model_validate({**body, "key": row["model"]}), notes
    upd: dict[str, Any] = {}
    for k in ("layers", "hidden", "heads", "vocab"):
        v = shape[k]
        if v:
            upd[k] = int(v)
    kv = shape["kv_heads"]
    if kv and base.mla is None:
        upd["kv_heads"] = int(kv)
    if shape["ffn_hidden"]:
        upd["dense_ffn_hidden" if base.is_moe else "ffn_hidden"] = int(shape["ffn_hidden"])
    if upd:
        data = base.model_dump()
        if "hidden" in upd or "heads" in upd:
            data["head_dim"] = (
                0
                if base.mla is None and base.head_dim * base.heads == base.hidden
                else base.head_dim
            )
        data.update(upd)
        return Model.model_validate(data), notes
    return base, notes


def _nics_per_node(row: dict[str, str], nic_gbps: float) -> int | None:
    """NICs per node when the row states its per-node scale-out network, in NICs of the
    reference system's speed: 'N x ... M Gbps' links per node, or a simulator config's
    per-node 'inter_node_bandwidth=X' (Gb/s) in the notes. A per-GPU figure ('400 Gb/s per
    GPU') states no node total and leaves the reference node as it is."""
    text = row.get("inter_node", "")
    per_node = None
    m = re.search(r"(\d+)\s*x\s*[^,;]*?(\d+(?:\.\d+)?)\s*Gb(?:p|/)s", text, re.IGNORECASE)
    if m:
        per_node = float(m.group(1)) * float(m.group(2))
    else:
        m = re.search(r"inter_node_bandwidth\s*=\s*(\d+(?:\.\d+)?)", row.get("notes", ""))
        if m:
            per_node = float(m.group(1))
    if per_node is None or nic_gbps <= 0:
        return None
    return max(1, round(per_node / nic_gbps))


def _stack_text(row: dict[str, str]) -> str:
    """Where a row names its software stack: the source and the notes, lower-cased."""
    return f"{row.get('source', '')} {row.get('notes', '')}".lower()


def attention_kernel(row: dict[str, str], arch: str) -> tuple[str, str]:
    """The attention kernel a run used, from its stack as the row names it, and why.

    torchtitan calls PyTorch's SDPA, whose flash backend is FlashAttention-2. Megatron-LM
    and Megatron-DeepSpeed on Volta/Ampere ran the unfused path (batched GEMMs + fused
    softmax kernel) unless flash attention is named: that is the path Korthikanti et al.'s
    5as/h activation term describes. Everything else gets the GPU's fastest fused kernel.
    """
    text = _stack_text(row)
    if "torchtitan" in text or "sdpa" in text:
        return "flash2", "attention: PyTorch SDPA (FlashAttention-2 kernels)"
    if (
        arch in ("volta", "ampere")
        and re.search(r"megatron|deepspeed", text)
        and ("flash" not in text)
    ):
        return "unfused", "attention: Megatron's unfused softmax path (no flash attention named)"
    return "fused", ""


def elementwise_kernels(row: dict[str, str]) -> tuple[str, str]:
    """Whether a run's norms, RoPE and activations ran fused or op by op, and why.

    torchtitan is plain PyTorch: without torch.compile its RMSNorm, rotary embedding and
    SwiGLU run eagerly, one kernel per op. Megatron-based stacks use fused kernels.
    """
    text = _stack_text(row)
    if "torchtitan" in text and "compile" not in text:
        return "eager", "elementwise: eager PyTorch ops (torchtitan without torch.compile)"
    return "fused", ""


def zero3_gathers(row: dict[str, str]) -> tuple[str, str]:
    """How a ZeRO-3 run gathered its weights, from the stack the row names, and why.

    DeepSpeed's ZeRO-3 gathers from per-module hooks, one collective per parameter tensor
    (DeepSpeed issues #1174, #5047); FSDP and Megatron-FSDP gather a layer's flat buffer.
    """
    text = _stack_text(row)
    try:
        zero3 = _sharding(row.get("dist_optimizer_or_zero", "")) == SHARDING.index("zero3")
    except UnsupportedRowError:
        zero3 = False
    if zero3 and "deepspeed" in text:
        return "per-param", "ZeRO-3: DeepSpeed's per-parameter gathers from module hooks"
    return "coalesced", ""


def _megatron_split(w: Workload, fixed: dict[str, Any]) -> tuple[int, int] | None:
    """TP and PP for a stated model-parallel size: TP fills the node, PP the rest.

    Narayanan et al. (SC'21, takeaway 1): tensor parallelism up to the GPUs of a server's
    NVLink domain, then pipeline parallelism across servers. None when the size does not
    come out whole.
    """
    others = fixed["dp"] * fixed.get("cp", 1)
    if w.num_gpus % others:
        return None
    mp = w.num_gpus // others
    domain = max(w.fabric.domain_gpus, w.system.gpus_per_node)
    tp = max(
        t
        for t in range(1, min(mp, domain) + 1)
        if mp % t == 0 and w.model.heads % t == 0 and domain % t == 0
    )
    return tp, mp // tp


_SEQ_IN_NOTES = re.compile(
    r"\b(?:sequence length|seq(?:uence)?[ _-]?len(?:gth)?|context length)(?: of)?[:= ]+"
    r"(\d[\d,]*)(?: ?(K)\b|\b)",
    re.IGNORECASE,
)
_BATCH_SEQS_IN_NOTES = re.compile(
    r"\bglobal batch(?: size)?(?: of)?[:= ]+(\d[\d,]*)\b(?! ?[KMB]\b)(?! ?tokens)",
    re.IGNORECASE,
)
_BATCH_TOKENS = re.compile(
    r"batch(?: size)?(?: of)?:? (\d+(?:\.\d+)?) ?([KMB])(?: tokens)?\b", re.IGNORECASE
)


def _batch_tokens_in_notes(notes: str) -> float | None:
    """A global batch written in tokens in the notes ("batch 4M tokens"), or None.

    K and M are binary, as in the papers that quote them: LLaMA's "4M tokens" are 2,048
    sequences of 2,048 and Llama 3's "16M" are 2,048 of 8,192.
    """
    hit = _BATCH_TOKENS.search(notes)
    if hit is None:
        return None
    scale = {"k": 2**10, "m": 2**20, "b": 2**30}[hit.group(2).lower()]
    return round(float(hit.group(1)) * scale)


def _pipeline_schedule(row: dict[str, str], fixed: dict[str, Any], gbs: int) -> list[str]:
    """Virtual stages and micro-batch of a stated pipeline layout; returns the rules used.

    Interleaving is opt-in: a layout without VPP runs 1F1B unless the row names an
    interleaved schedule. torchtitan's defaults fill what its rows leave out: two stages per
    rank for a looped schedule (``generate_split_points``) and one micro-batch per stage
    (``build_pipeline_schedule``); elsewhere the search chooses.
    """
    notes: list[str] = []
    if fixed.get("pp", 1) <= 1:
        return notes
    titan = "torchtitan" in _stack_text(row)
    if "vpp" not in fixed:
        if "interleav" not in f"{row['id']} {_stack_text(row)}":
            fixed["vpp"] = 1
        elif titan:
            fixed["vpp"] = 2
            notes.append("interleaved schedule, stages not stated: torchtitan's 2 per rank")
        else:
            notes.append("interleaved schedule named, virtual stages not: VPP searched")
    if "mbs" in fixed and "dp" in fixed and gbs == fixed["dp"] * fixed["mbs"]:
        # one micro-batch through a pipeline would idle it (p - 1) / 1 of the time: the
        # figure is the local batch (torchtitan's usage)
        local = fixed.pop("mbs")
        stages = fixed["pp"] * fixed.get("vpp", 1)
        if titan and "vpp" in fixed and local % stages == 0:
            fixed["mbs"] = local // stages
            notes.append(
                f"stated micro-batch is the local batch: {stages} micro-batches of "
                f"{fixed['mbs']}, torchtitan's one per pipeline stage"
            )
        else:
            notes.append(
                "stated micro-batch equals the local batch with pp > 1: read as the "
                "local batch, micro-batch searched"
            )
    return notes


def prepare(row: dict[str, str], where: str) -> PreparedRow:
    target = row["target"]
    if target not in TARGETS:
        raise InputError(f"{where}:target", target, f"one of {', '.join(TARGETS)}")
    conv = row["flop_convention"]
    if conv not in CONVENTIONS:
        raise InputError(
            f"{where}:flop_convention", conv, f"one of {', '.join(c for c in CONVENTIONS if c)}"
        )
    measured_col = {
        "tokens_per_s_per_gpu": "measured_tokens_per_s_per_gpu",
        "tflops_per_gpu": "measured_tflops_per_gpu",
        "mfu": "measured_mfu",
        "excluded": "measured_tokens_per_s_per_gpu",
    }[target]
    measured = num(row, measured_col, where)
    if measured is None:
        raise UnsupportedRowError(f"no {measured_col} value")
    try:
        gpu = get_gpu(row["gpu"])
    except InputError:
        raise UnsupportedRowError(f"GPU {row['gpu']!r} not in the catalog") from None
    model, notes = _model_for(row, where)
    n_gpus = num(row, "num_gpus", where)
    seq = num(row, "seq_len", where)
    text = row.get("notes", "")
    if seq is None and (hit := _SEQ_IN_NOTES.search(text)):
        seq = float(hit.group(1).replace(",", "")) * (1024 if hit.group(2) else 1)
        notes.append(f"sequence length from the notes: {seq:g}")
    gbs = num(row, "global_batch_seqs", where)
    if gbs is None and (hit := _BATCH_SEQS_IN_NOTES.search(text)):
        gbs = float(hit.group(1).replace(",", ""))
        notes.append(f"global batch from the notes: {gbs:g} sequences")
    if gbs is None and seq is not None:
        batch_tokens = _batch_tokens_in_notes(text)
        if batch_tokens is not None and batch_tokens >= seq:
            gbs = float(round(batch_tokens / seq))
            notes.append(f"global batch from the notes: {gbs:.0f} sequences of {seq:g} tokens")
    dp_stated, mbs_stated = num(row, "dp", where), num(row, "micro_batch", where)
    if gbs is None and dp_stated is not None and mbs_stated is not None:
        gbs = dp_stated * mbs_stated
        notes.append("global batch not stated: dp x micro-batch (no gradient accumulation)")
    if n_gpus is None or seq is None or gbs is None:
        raise UnsupportedRowError("GPU count, sequence length or global batch not stated")
    prec_raw = row.get("precision", "").lower()
    if not prec_raw:
        precision = "bf16" if "bf16" in gpu.peak_tflops else "fp16"
        notes.append(f"precision not stated: {precision} assumed")
    elif "fp8" in prec_raw:
        precision = "fp8"
    elif "fp16" in prec_raw:
        precision = "fp16"
    elif "bf16" in prec_raw:
        precision = "bf16"
    else:
        raise UnsupportedRowError(f"precision {prec_raw!r} not modelled")
    if precision not in gpu.peak_tflops:
        raise UnsupportedRowError(f"{gpu.key} has no {precision} peak in the catalog")
    attention, why = attention_kernel(row, gpu.arch)
    if why:
        notes.append(why)
    gathers, why = zero3_gathers(row)
    if why:
        notes.append(why)
    elementwise, why = elementwise_kernels(row)
    if why:
        notes.append(why)
    system = system_for_gpu(gpu)
    nics = _nics_per_node(row, system.nic_gbps)
    if nics is not None and nics != system.nics_per_node:
        system = system.model_copy(update={"nics_per_node": nics})
        nic = f"{system.nic_gbps:g} Gb/s"
        notes.append(f"scale-out: {nics} x {nic} NICs per node, as the row states")
    w = Workload(
        model,
        gpu,
        system,
        Fabric.from_system(system, int(n_gpus)),
        int(n_gpus),
        int(seq),
        int(gbs),
        precision,
        attention,
        gathers,
        elementwise,
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
        v = num(row, col, where)
        if v is not None:
            fixed[key] = int(v)
    if "dp" in fixed and "tp" not in fixed and "pp" not in fixed:
        split = _megatron_split(w, fixed)
        if split is not None:
            fixed["tp"], fixed["pp"] = split
            notes.append(
                f"TP/PP split not stated: TP{split[0]} PP{split[1]}, tensor parallel up to the "
                "node and pipeline across nodes (Narayanan et al. SC'21, takeaway 1)"
            )
    notes.extend(_pipeline_schedule(row, fixed, int(gbs)))
    sp = row.get("seq_parallel", "")
    if sp:
        fixed["sp"] = sp in ("1", "true", "True", "yes")
    elif attention == "unfused":
        fixed["sp"] = False
        notes.append("sequence parallelism not stated: off, as in Megatron's unfused-attention era")
    rc = _recompute(row.get("recompute", ""))
    if not rc and conv == "megatron_sc21_hfu":
        rc = "full"
        notes.append("full recompute: the SC'21 FLOP convention counts a full recomputation")
    tf_meas = num(row, "measured_tflops_per_gpu", where)
    tok_meas = num(row, "measured_tokens_per_s_per_gpu", where)
    if not rc and tf_meas and tok_meas:
        # the row's own two figures: TFLOP/s above the model-FLOPs rate by a third means the
        # source counted a recomputed forward pass (HFU), i.e. the run recomputed fully
        ratio = tf_meas * 1e12 / (tok_meas * model_flops_per_token(model, int(seq), causal=False))
        if ratio > HFU_RATIO_FULL_RECOMPUTE:
            rc = "full"
            notes.append(f"full recompute: reported TFLOP/s are {ratio:.2f}x the model-FLOPs rate")
    if not rc and re.search(
        r"activation checkpointing on|full (activation )?recompute",
        row.get("notes", ""),
        re.IGNORECASE,
    ):
        rc = "full"
        notes.append("full recompute as stated in the notes")
    if rc:
        fixed["recompute"] = RECOMPUTE.index(rc)
    sharding = _sharding(row.get("dist_optimizer_or_zero", ""))
    if sharding is not None:
        fixed["sharding"] = sharding
    elif re.search(r"megatron-bridge|nemo", row["source"].lower()):
        # the performance recipes run Megatron's distributed optimizer with gradients reduced
        # in bf16 (ddp.grad_reduce_in_fp32 = False): ZeRO-1's memory and traffic
        fixed["sharding"] = SHARDING.index("zero1")
        notes.append("sharding: Megatron's distributed optimizer, bf16 gradient reduction")
    free = [k for k in ("tp", "pp", "dp", "mbs") if k not in fixed]
    if free:
        notes.append(f"not stated, chosen by gpuscale's plan search: {', '.join(free)}")
    return PreparedRow(
        row["id"], source_group(row["source"]), w, fixed, target, conv, measured, tuple(notes)
    )


def choose_plan(pr: PreparedRow, cal: Calibration) -> tuple[Plans, str]:
    """The row's plan: its stated degrees, the rest from the search (fastest that fits)."""
    w, fx = pr.workload, pr.fixed
    try:
        res = search_plans(w, cal, fx, require_fit=False, exact_gpus=True)
    except InputError as exc:
        raise UnsupportedRowError(f"stated plan is not valid here: {exc.valid}") from None
    i = res.best
    plans = res.estimate.plans.take(np.array([i]))
    note = "" if res.estimate.memory.fits[i] else "predicted memory exceeds capacity"
    return plans, note


def predict(pr: PreparedRow, plans: Plans, cal: Calibration) -> float:
    w = pr.workload
    e = estimate(w, plans, cal)
    step = float(e.step_s[0])
    used = float(plans.gpus_used()[0])
    if pr.target in ("tokens_per_s_per_gpu", "excluded"):
        return float(e.tokens_per_s_per_gpu[0])
    if pr.convention == "megatron_sc21_hfu":
        flops = megatron_sc21_flops(w.model, w.global_batch, w.seq_len)
    elif pr.convention in ("megatron_model_full_attn", "megatron_model_causal"):
        flops = megatron_model_flops(
            w.model, w.global_batch, w.seq_len, causal=pr.convention == "megatron_model_causal"
        )
    else:
        flops = model_flops_per_token(w.model, w.seq_len) * w.tokens_per_step
    tflops = flops / step / used / 1e12
    if pr.target == "mfu":
        return tflops * 1e12 / w.gpu.peak_flops(w.precision)
    return tflops


def validate_training(path: Path, cal: Calibration) -> ValidationReport:
    rows: list[RowResult] = []
    for lineno, row in read_rows(path, REQUIRED):
        where = f"{path.name}:line {lineno}"
        rid = row["id"] or f"line {lineno}"
        try:
            pr = prepare(row, where)
            plans, note = choose_plan(pr, cal)
            pred = predict(pr, plans, cal)
        except UnsupportedRowError as why:
            rows.append(
                RowResult(
                    rid,
                    None,
                    num(row, "measured_tokens_per_s_per_gpu", where),
                    None,
                    "skipped",
                    str(why),
                    source_group(row["source"]),
                    row["target"],
                )
            )
            continue
        reason = "; ".join([*pr.notes, note] if note else pr.notes)
        status = "scored"
        if pr.target == "excluded":
            status, reason = "reported", "target 'excluded' (not a per-step figure)"
        elif pr.convention == "unspecified" and pr.target != "tokens_per_s_per_gpu":
            status = "reported"
            reason = "FLOP convention unspecified: gpuscale's model FLOPs used, not scored"
        rows.append(
            RowResult(
                rid,
                pred,
                pr.measured,
                signed_error_pct(pred, pr.measured),
                status,
                reason,
                pr.group,
                pr.target,
                {"plan": plans.label(0)},
            )
        )
    return ValidationReport("training", rows)
