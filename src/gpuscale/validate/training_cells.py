"""How a training row's cells are spelled: the GPU, the precision, the recompute mode,
the optimizer sharding and yes/no switches, each read into gpuscale's terms or refused
with the reason (a :class:`~gpuscale.validate.report.SkipRow`). The rules are listed in
``validate/README.md``.
"""

from __future__ import annotations

import re

from gpuscale.catalog import GPU, get_gpu
from gpuscale.errors import InputError
from gpuscale.perf.plan import SHARDING
from gpuscale.perf.recompute import parse_modules
from gpuscale.validate.report import SkipRow
from gpuscale.validate.training_stack import NEGATOR, OFF

UnsupportedRowError = SkipRow

COLUMNS = (
    "id",
    "source",
    "model",
    "params_b",
    "layers",
    "hidden",
    "ffn_hidden",
    "heads",
    "kv_heads",
    "vocab",
    "seq_len",
    "global_batch_seqs",
    "micro_batch",
    "gpu",
    "num_gpus",
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vpp",
    "seq_parallel",
    "recompute",
    "dist_optimizer_or_zero",
    "precision",
    "intra_node_link",
    "inter_node",
    "measured_tflops_per_gpu",
    "measured_mfu",
    "measured_step_time_s",
    "measured_tokens_per_s_per_gpu",
    "target",
    "flop_convention",
    "notes",
)
"""The training runs schema (``shared/validation/README.md``)."""
REQUIRED = (
    "id",
    "source",
    "model",
    "gpu",
    "num_gpus",
    "seq_len",
    "global_batch_seqs",
    "target",
)
"""Columns a runs file must have; the schema's others (``flop_convention`` among them: a
file of tokens/s rows needs none) read as empty when absent."""
TARGETS = ("tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "excluded")
CONVENTIONS = (
    "",
    "megatron_sc21_hfu",
    "megatron_model_full_attn",
    "megatron_model_causal",
    "unspecified",
)
MEASURED = {
    "tokens_per_s_per_gpu": "measured_tokens_per_s_per_gpu",
    "tflops_per_gpu": "measured_tflops_per_gpu",
    "mfu": "measured_mfu",
    "excluded": "measured_tokens_per_s_per_gpu",
}
"""The column each target compares."""

TRUTHY = ("1", "true", "yes", "on", "y", "enabled", "\u2713", "\u2714", "\u2705")
FALSY = ("0", "false", "no", "off", "n", "disabled", "\u2717", "\u2718", "\u274c")
"""How a yes/no cell (seq_parallel) may be spelled, in any case; papers' and READMEs'
tables tick (✓ ✔ ✅) or cross (✗ ✘ ❌) it."""

SP_NAME = r"(sp|sequence[\s_-]*parallel(ism)?)"


def read_seq_parallel(cell: str) -> bool | None:
    """Whether a row's seq_parallel cell says sequence parallelism was on (None when
    empty): a yes/no spelling (TRUTHY, FALSY), also with a remark after it ("Yes (SP)",
    "on (with TP)"), or the name alone ("SP", "sequence parallel"), or negated ("no SP")."""
    text = cell.lower().replace("\ufe0f", "").strip()
    if not text:
        return None
    first = re.split(r"[\s(,;:]+", text, maxsplit=1)[0]
    if first in TRUTHY + FALSY:
        return first in TRUTHY
    if re.fullmatch(rf"(no|not|without|w/o)\s+{SP_NAME}", text):
        return False
    # the name alone or with a remark in brackets ("SP (Megatron)"), or switched ("SP=off")
    said = re.fullmatch(rf"{SP_NAME}\s*(\([^()]*\)|[:=]\s*(?P<v>\S+))?", text)
    if said and said.group("v") in (None, *TRUTHY):
        return True
    if said and said.group("v") in FALSY:
        return False
    raise UnsupportedRowError(
        f"seq_parallel={cell!r}: one of {', '.join(TRUTHY + FALSY)}, or 'SP' / "
        "'sequence parallel' (on), 'no SP' (off)"
    )


TARGET_SPELLINGS = (
    # (pattern over the lower-cased cell, target), as tables label the figure they give
    (
        r"(throughput\s*\(?\s*)?tok(en)?s?\s*(/|_?per_?|\s)\s*s(ec(ond)?)?\s*(/|_?per_?|\s)"
        r"\s*gpu\)?|tok(en)?s?\s*per\s*gpu\s*per\s*s(ec(ond)?)?|tgs|wps",
        "tokens_per_s_per_gpu",
    ),
    # a step time is the inverse of the tokens/s per GPU it gives (measured_step_time_s)
    (r"step[\s_-]*time(_s|\s*\(s\))?|iteration[\s_-]*time(_s|\s*\(s\))?", "tokens_per_s_per_gpu"),
    (r"(model\s*)?tflop/?s(\s*(/|_?per_?|\s)\s*gpu)?", "tflops_per_gpu"),
    (r"mfu\s*(\(\s*%\s*\)|%)?", "mfu"),
)
"""Labels of the schema's targets other tables use ("Tokens/s/GPU", "tok/s/gpu", "TGS" and
torchtitan's "WPS", tokens per second per GPU; "step time (s)"; "TFLOPS"; "MFU (%)")."""


def read_target(cell: str) -> str:
    """The schema's target a row's ``target`` cell names, in any case and in the labels of
    :data:`TARGET_SPELLINGS`; any other text is returned lower-cased for the caller to
    refuse."""
    text = cell.strip().lower()
    for pattern, target in TARGET_SPELLINGS:
        if re.fullmatch(pattern, text):
            return target
    return text


ARCH_PARTS = {
    "volta": "v100-sxm2-32gb",
    "ampere": "a100-sxm-80gb",
    "hopper": "h100-sxm",
    "blackwell": "b200",
}
"""The data-centre training part of an NVIDIA architecture, for a row that names only the
architecture ("NVIDIA Ampere GPUs"): the SXM part of the largest memory LLM runs used
(dense peaks do not depend on the memory size; A800 shares A100's)."""
MX_ARCHS = ("blackwell", "cdna4")
"""GPU architectures whose tensor cores take MX block-scaled formats (MXFP8, MXFP4)."""
LOW_PRECISION_OFF = re.compile(
    r"\b(no|without|w/o|not)\s+(mx|nv)?fp[48]\b"
    r"|\b(mx|nv)?fp[48]\s*[(:=]?\s*(off|disabled?|false|no|none|0|not used|unused)"
    r"(?=\s*($|[),;]))"
)
"""A low precision a precision cell says the run did not use: "no FP8", "FP8 off",
"bf16 (fp8 disabled)", "FP8=0", "FP8 not used"; the word that switches it off ends the
phrase ("FP8 (disabled for the first layer)" keeps FP8)."""
ARCH_ONLY = re.compile(r"(nvidia|gpus?|tensor|core|data[\s-]?cent(er|re)|class|[\s,/-])*")
"""The words besides an architecture's name that name no part ("NVIDIA Ampere GPUs")."""


def read_gpu(cell: str) -> tuple[GPU, str]:
    """The catalog GPU a row's cell names, and a note when it was read from an
    architecture's name alone ("" otherwise)."""
    try:
        return get_gpu(cell), ""
    except InputError as exc:
        miss = UnsupportedRowError.not_in_catalog("gpu", cell, exc)
        text = cell.lower()
        arch = re.search(rf"\b({'|'.join(ARCH_PARTS)})\b", text)
        # only vendor and architecture words outside brackets: "RTX 3090 (Ampere)" or
        # "Blackwell B100" name a part the catalog lacks, not the architecture's
        outside = re.sub(r"\([^()]*\)|\[[^\[\]]*\]", " ", text)
        rest = re.sub(rf"\b({'|'.join(ARCH_PARTS)})\b", " ", outside)
        if arch is None or not ARCH_ONLY.fullmatch(rest):
            raise miss from None
        # an architecture without its part: the part LLM training at scale ran on
        gpu = get_gpu(ARCH_PARTS[arch.group(1)])
        return gpu, f"GPU {cell!r} names an architecture, not a part: {gpu.key} assumed"


MX_FP8 = re.compile(r"mx[\s_-]*fp8")
"""An MX (microscaling, 32-element blocks) FP8 format: "MXFP8", "MX-FP8", "MX FP8"."""


LIGHTNING_FP16 = re.compile(r"16([\s_-]*(mixed|amp))?")
"""PyTorch Lightning's fp16 mixed precision ("16-mixed", "16")."""


def read_precision(cell: str, gpu: GPU, notes: list[str]) -> str:
    """The training precision a row's cell names (bf16, fp16, fp8, fp4); how it was read
    goes to ``notes``."""
    prec_cell = cell.lower().strip()
    # a low precision the cell says was not used ("bf16 (fp8 disabled)", "no FP8")
    prec_raw = prec_cell
    if LOW_PRECISION_OFF.search(prec_cell):
        prec_raw = LOW_PRECISION_OFF.sub(" ", prec_cell).strip(" ,;()")
        notes.append(f"precision {cell!r}: the low precision it names is off")
    if not prec_raw or re.fullmatch(
        r"(mixed|amp|mixed[\s_-]*precision|automatic mixed precision)", prec_raw
    ):
        precision = gpu.training_precision
        said = (
            "not stated"
            if not prec_cell
            else f"{cell!r} names no {'other ' if not prec_raw else ''}format"
        )
        notes.append(f"precision {said}: {precision} assumed")
    elif MX_FP8.search(prec_raw) and gpu.arch not in MX_ARCHS:
        raise UnsupportedRowError(
            f"precision {cell!r}: MX formats need tensor cores that scale "
            f"blocks ({', '.join(MX_ARCHS)}), which the {gpu.key} lacks"
        )
    elif re.search(r"e4m3|e5m2", prec_raw):
        precision = "fp8"
    elif "fp4" in prec_raw or "float4" in prec_raw:
        precision = "fp4"
    elif "fp8" in prec_raw or "float8" in prec_raw:
        precision = "fp8"
    elif "bf16" in prec_raw or "bfloat16" in prec_raw:
        precision = "bf16"
    elif re.search(r"fp16|float16|half", prec_raw) or LIGHTNING_FP16.fullmatch(prec_raw):
        precision = "fp16"
    else:
        raise UnsupportedRowError(
            f"precision {prec_raw!r} not modelled (bf16, fp16, fp8 with its scaling, mxfp8, "
            "fp4: nvfp4 or mxfp4)"
        )
    if precision in ("fp8", "fp4") and PART_IN_LOW_PRECISION.search(prec_raw):
        notes.append(
            f"precision {cell!r}: a part of the model in {precision}, priced as {precision} "
            "GEMMs throughout"
        )
    elif precision in ("fp8", "fp4") and re.search(r"bf16|bfloat16|fp16|float16", prec_raw):
        notes.append(
            f"precision {cell!r} names a 16-bit format beside {precision}: priced as "
            f"{precision} GEMMs with the rest in 16-bit, as Transformer Engine runs them"
        )
    return precision


PART_IN_LOW_PRECISION = re.compile(
    r"(fp8|fp4|float8)[^,;)]*\b(experts?|moe|mlps?|ffns?|attention|layers?)\b"
    r"(?!\s+(in|at|as)\s+(bf16|bfloat16|fp16|float16|16))"
)
"""A low precision a cell gives to a part of the model only ("BF16 (MXFP8 experts)", "FP8
(experts only)"), not a part it names in 16-bit ("fp8 (attention in bf16)")."""


_OPT_SHARD = r"(optimi[sz]er[\w\s,&+/-]{0,40}?shard|shard\w*[\s_-]*optimi[sz]er)"
"""Optimizer-state sharding in words: "optimizer state sharding", "sharded optimizer",
"optimizer, gradient and parameter sharding"."""
SHARD_SPELLINGS = (
    # (pattern, SHARDING index), first match wins; a cell is read lower-cased
    (r"no[\s_-]*shard", 0),  # FSDP's NO_SHARD is plain data parallelism
    (r"shard[\s_-]*grad[\s_-]*op", 3),  # FSDP's SHARD_GRAD_OP is ZeRO-2
    # and so is FSDP2 keeping the gathered weights from forward to backward
    (r"(no|without)[\s_-]*reshard|reshard[\s_-]*after[\s_-]*forward\s*[=:]?\s*(false|0|no|off)", 3),
    # FSDP's FULL_SHARD strategy and FSDP2's fully_shard are ZeRO-3
    (r"fsdp|full(y)?[\s_-]*shard|zero[\s_-]*(stage[\s_=:-]*)?3|stage[\s_=:-]*3", 4),
    (r"zero[\s_-]*(stage[\s_=:-]*)?2|stage[\s_=:-]*2", 3),
    (r"zero[\s_-]*(stage[\s_=:-]*)?1|stage[\s_=:-]*1", 2),
    (r"dist\w*[\s_.-]*opt", 1),
    # PyTorch's DistributedDataParallel replicates the optimizer: no sharding
    (r"\bddp\b|distributed[\s_-]*data[\s_-]*parallel", 0),
    # optimizer states sharded ("optimizer state sharding", "sharded optimizer"): with the
    # parameters too ZeRO-3, with the gradients ZeRO-2, alone ZeRO-1
    (rf"(?=.*{_OPT_SHARD})(?=.*\b(param|weight))", 4),
    (rf"(?=.*{_OPT_SHARD})(?=.*\bgrad)", 3),
    (_OPT_SHARD, 2),
    # a "distributed optimizer" column ticked yes
    (r"dist|distributed|^(yes|true|on|1|y|enabled|\u2713|\u2714|\u2705)$", 1),
    (r"\b(none|ddp|off|false|zero[\s_-]*0)\b|^(no|0|n|disabled|\u2717|\u2718|\u274c)$", 0),
)
_SCHEME = (
    r"(fsdp[\w-]*|zero[\w-]*(\s*stage[\s_-]*\d)?|(use_)?dist[\w.-]*(\s+optimi[sz]er)?"
    rf"|distributed(\s+optimi[sz]er)?|{_OPT_SHARD}\w*)"
)
NEGATED = re.compile(
    rf"\b{NEGATOR}[\s_-]*{_SCHEME}"
    rf"|{_SCHEME}\s*[:=(]?\s*{OFF}\s*\)?\s*(?=$|[,;/])"
)
"""A sharding the cell says the run did not use, before or after its name ("DDP (no
dist-opt)", "without ZeRO", "FSDP: off", "use_distributed_optimizer=False"): not the scheme
the run used."""


HYBRID = re.compile(r"hybrid[\s_-]*shard(ing|ed)?|\bhsdp\b")
"""Hybrid sharding: FSDP's HYBRID_SHARD, "HSDP"."""
HYBRID_OFF = re.compile(
    rf"\b{NEGATOR}[\s_-]+(hybrid[\s_-]*shard(ing|ed)?|hsdp)\b"
    rf"|(hybrid[\s_-]*shard(ing|ed)?|\bhsdp)\s*[:=(]?\s*{OFF}\b"
)
"""Hybrid sharding the cell says was not used ("FSDP (no HSDP)", "hybrid_shard: off")."""


def _hybrid(text: str) -> bool:
    """Whether a lower-cased sharding cell names hybrid sharding, not switched off."""
    return HYBRID.search(HYBRID_OFF.sub(" ", text)) is not None


SHARD_SIZE = re.compile(
    r"(dp_)?shard(ing)?[\s_-]*(group|degree|size)?\s*[=:]?\s*(?P<a>\d+)"
    r"|(?P<b>\d+)[\s-]*(way|gpus?|ranks?)[\s_-]*(shard\w*|per[\s_-]*shard)"
    r"|hsdp\s*[(:=]?\s*(?P<c>\d+)(?![\s-]*(x|replica))"
)
"""How a cell sizes the shard group: "shard 8", "dp_shard=8", "8-way shard", "HSDP 8"."""


def read_shard_group(row: dict[str, str], gpus_per_node: int) -> tuple[int, str]:
    """The hybrid shard group a row's sharding cell names (0 and "" without hybrid
    sharding), and how it was read: the size the cell states, else one node's
    data-parallel ranks (its GPUs over the row's TP), as FSDP's HYBRID_SHARD shards within a
    node and replicates across nodes (PyTorch FSDP ShardingStrategy documentation)."""
    cell = row.get("dist_optimizer_or_zero", "")
    text = cell.strip().lower()
    if not _hybrid(text):
        return 0, ""
    size = SHARD_SIZE.search(text)
    n = int(next(g for g in size.group("a", "b", "c") if g)) if size else 0
    if n >= 1:
        return n, f"hybrid sharding over groups of {n} data-parallel ranks, as the row states"
    tp = row.get("tp", "").strip()
    n = max(gpus_per_node // int(tp), 1) if tp.isdigit() and int(tp) > 0 else gpus_per_node
    return n, (
        f"hybrid sharding ({cell!r}) over one node's {n} data-parallel ranks, replicated "
        "across nodes, as FSDP's HYBRID_SHARD does; the row states no shard group"
    )


def read_sharding(cell: str) -> int | None:
    """The SHARDING index a row's sharding cell names; None when empty.

    Accepts the spellings published tables use ("ZeRO-1", "ZeRO stage 3", "FSDP (full
    shard)", FSDP's SHARD_GRAD_OP and NO_SHARD, "distributed optimizer", "DDP"), with the
    schemes a cell says were not used set aside ("distributed optimizer (not ZeRO-3)");
    anything else is a row gpuscale cannot read.
    """
    text = cell.strip().lower()
    if not text:
        return None
    kept_on_gpu = re.search(rf"\b{NEGATOR}[\s_-]+(\w+[\s_-]+){{0,3}}offload", text) or re.search(
        rf"offload\w*(\s+\w+)?\s*[:=(]?\s*{OFF}\b", text
    )
    if "offload" in text and not kept_on_gpu:
        raise UnsupportedRowError(
            f"optimizer sharding {cell!r}: offloading to host memory is not modelled"
        )
    text = HYBRID_OFF.sub(" ", text)
    if HYBRID.search(text):
        # the stage a hybrid strategy shards by, FSDP's full sharding unless another is
        # named (FSDP's _HYBRID_SHARD_ZERO2); the group's size is read_shard_group's
        rest = SHARD_SIZE.sub(" ", HYBRID.sub(" ", text))
        named = [i for pattern, i in SHARD_SPELLINGS[1:7] if re.search(pattern, rest)]
        return named[0] if named else SHARDING.index("zero3")
    negated = [m.group(0) for m in NEGATED.finditer(text)]
    rest = NEGATED.sub(" ", text)
    if negated and not re.search(r"[a-z0-9]", rest):
        if any(re.search(r"(zero|stage)[\s_-]*(stage[\s_-]*)?[1-3]", n) for n in negated):
            # "no ZeRO-3" says which stage the run did not use, not which one it did
            raise UnsupportedRowError(
                f"optimizer sharding {cell!r}: the sharding used is not named"
            )
        return SHARDING.index("none")
    for pattern, index in SHARD_SPELLINGS:
        if re.search(pattern, rest):
            return index
    raise UnsupportedRowError(
        f"optimizer sharding {cell!r} not modelled (DDP, distributed optimizer, ZeRO-1/2/3, "
        "FSDP full or hybrid shard, or empty)"
    )


_RECOMPUTE = (
    r"(((full|selective|activation|gradient)[\s_-]+)?(recomput|checkpoint)\w*"
    r"([\s_-]+activations?)?|s?ac\b)"
)
RECOMPUTE_OFF = re.compile(
    rf"(no|not|without|w/o)[\s_-]+{_RECOMPUTE}"
    rf"|{_RECOMPUTE}\s*[:=(]?\s*{OFF}\s*\)?"
    r"|(none|off|disabled)\b.*"
)
"""A recompute cell that says there was none: "no activation checkpointing", "without
recomputation", "activation checkpointing: off", "gradient checkpointing=False",
"none (no recompute)"."""


PER_BLOCK = re.compile(
    r"\b(per|each|every|all)[\s_-]+((transformer|decoder|model|layer)[\s_-]*)?blocks?\b"
    r"|\b(transformer|decoder)[\s_-]*blocks?\b"
)
"""A checkpoint of every block ("per transformer block", "each decoder block", "per-block"):
every layer's, not Megatron's block method."""


def read_recompute(cell: str) -> str:
    """The RECOMPUTE mode a row's recompute cell names ("" when empty)."""
    # a flag as a launcher writes it ("--recompute-activations=False")
    text = cell.strip().lower().lstrip("-")
    if not text:
        return ""
    # "none (selective for MoE)": the mode in the brackets, unless it too is off
    inner = re.fullmatch(r"(none|off|disabled)\s*[(:;,]\s*(.*?)\)?", text)
    if inner and re.match(r"(selective|full|partial|block|uniform)\b", inner.group(2)):
        said = inner.group(2)
        off = re.search(rf"\b({NEGATOR}|{OFF}|not used|unused)\b|offload", said)
        return "none" if off else read_recompute(said)
    offload = re.search(r"offload", text) and not re.search(
        rf"\b{NEGATOR}[\s_-]+(\w+[\s_-]+){{0,3}}offload|offload\w*(\s+\w+)??\s*[:=(]?\s*{OFF}\b"
        r"|offload[\s_-]*free",
        text,
    )
    if offload:
        raise UnsupportedRowError(f"recompute {cell!r}: offloading to host memory is not modelled")
    if RECOMPUTE_OFF.fullmatch(text):
        return "none"
    # torchtitan's activation checkpointing (AC) switched off, also after a "n/a"
    if re.fullmatch(r"((n/a|-)\s*\(?\s*)?(no|none|off)[\s_-]*ac\)?", text):
        return "none"
    # a ticked or crossed cell, as a table's recompute column may be (emoji selector off);
    # a checkpoint "per transformer block" or "each block" is every layer's, not Megatron's
    # block method
    text = PER_BLOCK.sub(" ", text.replace("\ufe0f", ""))
    for mode, pattern in (
        # Megatron's --recompute-activations is its selective recomputation (unless the
        # cell names another mode); so is recomputing the attention core alone
        (
            "selective",
            r"selective|core attention|\bsac\b|(attention|attn)[\s_-]*only"
            r"|^(?!.*\b(full|uniform|block|partial)\b).*recompute[\s_-]*activations",
        ),
        # Megatron's uniform method recomputes every layer, in groups of N
        ("full", r"uniform"),
        # its block method recomputes N layers of a stage ("full (4 layers)"); one layer is
        # the uniform method's group of one (NeMo's default), every layer recomputed
        (
            "partial",
            r"partial|\bblock\b"
            r"|(?<!all )\b(0*[2-9]|0*[1-9]\d+)\s*layers?\b"
            r"|layers?\s+(per|a|each)\s+(pipeline\s+)?stage",
        ),
        ("none", r"^(none|no|off|false|0|disabled|n|not used|unused|\u2717|\u2718|\u274c)$"),
        (
            "full",
            r"full|uniform|^(yes|on|true|1|enabled|y|\u2713|\u2714|\u2705)$|checkpoint"
            r"|\bac\b|recomput|(every|each|all)\s+layers?\b",
        ),
    ):
        if re.search(pattern, text):
            return mode
    raise UnsupportedRowError(
        f"recompute {cell!r} not modelled (none, selective, full, partial with its layers, "
        "or empty)"
    )


def read_recompute_modules(cell: str) -> tuple[str, ...] | None:
    """The modules a selective recompute cell names, as Megatron-Core's
    ``--recompute-modules`` ("selective (layernorm, moe)"), or None when it names none; a
    list that begins with "+" adds to the default attention core ("selective (+ MoE
    act)")."""
    found = re.search(r"selective\s*\(([^)]*)\)", cell, re.IGNORECASE)
    if found is None:
        return None
    added = found.group(1).strip().startswith("+")
    parts = [n.strip() for n in re.split(r"[,;/+]", found.group(1)) if n.strip()]
    names = [re.sub(r"\s+", "_", n) for n in (["core_attn"] if added else []) + parts]
    try:
        return parse_modules(names, "recompute")
    except InputError as exc:
        raise UnsupportedRowError(f"recompute module {exc.value!r} not modelled") from None
