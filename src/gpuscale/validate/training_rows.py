"""How a published training row is read: the stack it names and what its cells say.

Each function turns one aspect of a row of ``shared/validation/training_runs.csv``'s schema
into gpuscale's terms and says why (the reason is printed with the row): the scale-out
network, the ZeRO-3 gathers its software stack implies (the kernels and the
MoE dispatch are read in :mod:`.training_stack`), the cells' spellings (sharding,
recompute), what the notes state (sequence, batch), the TP/PP split of an unsplit
model-parallel size and the pipeline schedule's defaults. The model a row names is read in
:mod:`.training_model`. The rules are listed in ``validate/README.md``.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from gpuscale.catalog import Model, System
from gpuscale.perf.plan import SHARDING, Workload
from gpuscale.validate.training_cells import read_sharding
from gpuscale.validate.training_model import UnsupportedRowError
from gpuscale.validate.training_stack import stack_text

if TYPE_CHECKING:  # PreparedRow is built from these rules
    from gpuscale.validate.training_prepare import PreparedRow


def nics_per_node(
    row: dict[str, str], nic_gbps: float, gpus_per_node: int = 1
) -> tuple[int, float] | None:
    """(NICs per node, Gb/s each) when the row states its scale-out network: 'N x ... M
    Gbps' links per node, or per GPU ('1x 400Gb/s NDR per GPU', times the node's
    ``gpus_per_node``), or a simulator config's per-node 'inter_node_bandwidth=X' (Gb/s)
    in the notes. The node's total is what the row states; it is counted in NICs of the
    reference system's speed ``nic_gbps`` where it is a whole number of them, else in the
    row's own links at the speed that gives that total ('2x 100Gb/s' on a node of 400 Gb/s
    NICs: two 100 Gb/s NICs, not one 400). A per-GPU speed without a count ('400 Gb/s per
    GPU') leaves the reference node as it is."""
    text = row.get("inter_node", "")
    per_node = None
    links = 0.0
    # "8x400Gbps", "8 x 400 Gb/s", "4× 100G", "8x 0.4 Tbps", "8x50 GB/s" (bytes: x 8)
    m = re.search(r"(\d+)\s*[x\u00d7]\s*[^,;]*?(\d+(?:\.\d+)?)\s*([GgTt])([bB]?)(?:ps|/s|\b)", text)
    if m:
        unit = (1000.0 if m.group(3) in "Tt" else 1.0) * (8.0 if m.group(4) == "B" else 1.0)
        links = float(m.group(1))
        per_node = links * float(m.group(2)) * unit
        # links per GPU are fewer than the node's GPUs; "8x 400G ... per GPU" on an 8-GPU
        # node counts the node's, one to each GPU
        if links < gpus_per_node and PER_GPU.search(text[m.end() :]):
            per_node *= gpus_per_node
            links *= gpus_per_node
    else:
        m = re.search(r"inter_node_bandwidth\s*=\s*(\d+(?:\.\d+)?)", row.get("notes", ""))
        if m:
            per_node = float(m.group(1))
    if per_node is None or per_node <= 0 or nic_gbps <= 0:
        return None
    whole = round(per_node / nic_gbps)
    if whole >= 1 and abs(whole * nic_gbps - per_node) <= 1e-6 * per_node:
        return whole, nic_gbps
    n = int(links) if links >= 1 else max(1, whole)
    return n, per_node / n


NVL = re.compile(r"\bnvl\s*-?\s*(\d+)\b", re.IGNORECASE)
"""A rack-scale NVLink domain's size as NVIDIA names it: "GB200 NVL4", "NVL36", "NVL72"."""


def nvlink_domain(row: dict[str, str], system: System) -> tuple[System, str]:
    """The reference system with the NVLink domain the row's GPU or intra-node cell names
    ("GB200 NVL4": four GPUs on one board, no rack-wide NVLink; "NVL36"), where the system
    is a rack-scale one whose domain spans nodes, and why ("" when unchanged)."""
    # the intra-node cell, which names the link, before the GPU cell's system name
    found = NVL.search(row.get("intra_node_link", "")) or NVL.search(row.get("gpu", ""))
    rack = system.nvlink_domain_gpus > system.gpus_per_node
    if found is None or not rack:
        return system, ""
    n = int(found.group(1))
    if n == system.nvlink_domain_gpus or not system.gpus_per_node <= n < system.nvlink_domain_gpus:
        return system, ""
    return system.model_copy(update={"nvlink_domain_gpus": n}), (
        f"scale-up: NVLink domains of {n} GPUs ({found.group(0)}), not the "
        f"{system.nvlink_domain_gpus} of {system.key}, as the row states"
    )


PER_GPU = re.compile(
    r"^(?![^,;]*\b(one|1|a|single)\s+(\w+\s+)?(per|to\s+each|each)\s+gpu)"
    r"[^,;]*?(\bper\s+gpu|/\s*gpu|\beach\s+gpu)\b",
    re.IGNORECASE,
)
"""A link count stated per GPU, after it in the same clause ("2x 200Gb/s per GPU"), not
the node's links spread one per GPU ("4x 200 Gb/s (one per GPU)")."""


def zero3_gathers(row: dict[str, str]) -> tuple[str, str]:
    """How a ZeRO-3 run gathered its weights, from the stack the row names, and why.

    DeepSpeed's ZeRO-3 gathers from per-module hooks, one collective per parameter tensor
    (DeepSpeed issues #1174, #5047); FSDP and Megatron-FSDP gather a layer's flat buffer.
    """
    text = stack_text(row)
    try:
        zero3 = read_sharding(row.get("dist_optimizer_or_zero", "")) == SHARDING.index("zero3")
    except UnsupportedRowError:
        zero3 = False
    if zero3 and "deepspeed" in text:
        return "per-param", "ZeRO-3: DeepSpeed's per-parameter gathers from module hooks"
    return "coalesced", ""


def megatron_split(w: Workload, fixed: dict[str, Any]) -> tuple[int, int] | None:
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
        if mp % t == 0 and domain % t == 0 and all(a % t == 0 for a, _ in w.model.head_counts)
    )
    return tp, mp // tp


_NUM = r"(\d[\d,]*(?:\.\d+)?)(?![\d,.]*\d)"
"""A number as notes write it (1,536 or 1.5), taken whole: never a prefix of a longer one."""
_SEQ_IN_NOTES = re.compile(
    r"\b(?:sequence length|seq(?:uence)?[ _-]?len(?:gth)?|context length)(?: of)?[:= ]+"
    + _NUM
    + r"(?: ?(K)\b|\b)",
    re.IGNORECASE,
)
_BATCH_SEQS_IN_NOTES = re.compile(
    r"\b(?:global batch(?: size)?|gbs)(?: of)?\s*[:= ]+\s*"
    + _NUM
    + r"(?! ?(?:[KMB]|thousand|million|billion)\b)(?! ?tokens)",
    re.IGNORECASE,
)
_BATCH_TOKENS_IN_NOTES = re.compile(
    r"(?:batch(?: size)?|gbs)(?: of)?\s*[:=]?\s*"
    + _NUM
    + r" ?(?:([KMB]|thousand|million|billion)\b(?: tokens)?|(tokens)\b)",
    re.IGNORECASE,
)


BINARY_SCALE = {
    "k": 2**10,
    "thousand": 2**10,
    "m": 2**20,
    "million": 2**20,
    "b": 2**30,
    "billion": 2**30,
}
"""A token count's suffix in binary units, as the papers that quote batches use them."""


def _global_batch_tokens(text: str) -> re.Match[str] | None:
    """The first batch in tokens the notes give that is the global one, not a micro-,
    mini-, local or per-GPU batch ("micro batch = 16384 tokens")."""
    for hit in _BATCH_TOKENS_IN_NOTES.finditer(text):
        before = text[max(0, hit.start() - 12) : hit.start()].lower()
        if not re.search(r"(micro|mini|local|per[\s-]*(gpu|device|rank))[\s_-]*$", before):
            return hit
    return None


def sizes_from_notes(
    text: str, seq: float | None, gbs: float | None
) -> tuple[float | None, float | None, list[str]]:
    """Sequence length and global batch (sequences) the notes state where the cells are
    blank, and the rules used.

    "sequence length 8K", "global batch 1,536", "batch 4M tokens": K and M are binary, as in
    the papers that quote them (LLaMA's "4M tokens" are 2,048 sequences of 2,048, Llama 3's
    "16M" 2,048 of 8,192); a batch in tokens is divided by the sequence length.
    """
    notes: list[str] = []
    if seq is None and (hit := _SEQ_IN_NOTES.search(text)):
        seq = round(float(hit.group(1).replace(",", "")) * (1024 if hit.group(2) else 1))
        notes.append(f"sequence length from the notes: {seq:g}")
    if gbs is None and (hit := _BATCH_SEQS_IN_NOTES.search(text)):
        gbs = float(hit.group(1).replace(",", ""))
        notes.append(f"global batch from the notes: {gbs:g} sequences")
    if gbs is None and seq is not None and (hit := _global_batch_tokens(text)):
        scale = BINARY_SCALE.get((hit.group(2) or "").lower(), 1)
        said = float(hit.group(1).replace(",", ""))
        gbs = _sequences(said, scale, seq)
        if gbs is not None:
            notes.append(f"global batch from the notes: {gbs:.0f} sequences of {seq:g} tokens")
    return seq, gbs, notes


_TOKENS_CELL = re.compile(r"\s*(\d[\d,]*(?:\.\d+)?)\s*([kmb])?\s*tok(?:en)?s?\s*", re.IGNORECASE)


def batch_cell_in_tokens(cell: str, seq: float | None) -> tuple[float, str] | None:
    """The sequences a ``global_batch_seqs`` cell gives in tokens ("4M tokens", "4,194,304
    tokens") and the rule said, or None when the cell is no such figure or the sequence
    is not stated (read as the notes' batches are: :func:`_sequences`)."""
    found = _TOKENS_CELL.fullmatch(cell)
    if found is None or not seq:
        return None
    scale = BINARY_SCALE.get((found.group(2) or "").lower(), 1)
    n = _sequences(float(found.group(1).replace(",", "")), scale, seq)
    if n is None:
        return None
    return n, f"global batch {cell.strip()!r}: {n:.0f} sequences of {seq:g} tokens"


def _sequences(said: float, scale: int, seq: float) -> float | None:
    """Sequences of ``seq`` tokens in a batch the notes give in tokens (``said`` times a K,
    M or B suffix's binary ``scale``), or None when it is less than one. A suffixed figure
    that is a whole number of sequences in binary units is that ("4M" tokens of 2,048 are
    2,048 sequences); else it is a rounded decimal figure ("4.2M tokens" of 8,192: 4.2 x
    10^6 / 8,192 = 513), and the batch is the count within 3 % of it that the most
    factors of two divide (512, as 4,194,304 tokens round to 4.2M; GPT-3's "3.2M" tokens of
    2,048 are 1,536 sequences)."""
    binary = said * scale / seq
    if binary < 1:
        return None
    if scale == 1 or abs(binary - round(binary)) <= 1e-9 * binary:
        return float(round(binary))
    decimal = said * scale / 1.024 ** round(math.log(scale, 1024)) / seq
    near = range(max(1, math.ceil(0.97 * decimal)), math.floor(1.03 * decimal) + 1)
    if not near:
        return float(round(decimal))
    return float(max(near, key=lambda n: ((n & -n), -abs(n - decimal))))


_ABSENT_DIM = {
    "pp": re.compile(
        r"\b(?:no|without)\s+pipeline(?:[\s-]+model)?[\s-]+parallel(?:ism)?\b(?!\s+bubble)",
        re.IGNORECASE,
    ),
    "tp": re.compile(
        r"\b(?:no|without)\s+tensor(?:[\s-]+model)?[\s-]+parallel(?:ism)?\b", re.IGNORECASE
    ),
    "cp": re.compile(r"\b(?:no|without)\s+context[\s-]+parallel(?:ism)?\b", re.IGNORECASE),
}
"""Notes that say a run used no pipeline, tensor or context parallelism ("FSDP + Megatron
tensor parallelism, no pipeline parallelism"): that degree is 1."""


def absent_degrees(text: str, fixed: dict[str, Any]) -> list[str]:
    """Set to 1 the blank degrees the notes say the run did without; returns the rules used."""
    notes: list[str] = []
    for key, pattern in _ABSENT_DIM.items():
        if key not in fixed and pattern.search(text):
            fixed[key] = 1
            notes.append(f"{key.upper()} 1: the notes say the run used none")
    return notes


def pipeline_schedule(row: dict[str, str], fixed: dict[str, Any], gbs: int) -> list[str]:
    """Virtual stages and micro-batch of a stated pipeline layout; returns the rules used.

    Interleaving is opt-in: a layout without VPP runs 1F1B unless the row names an
    interleaved schedule. torchtitan's defaults fill what its rows leave out: two stages per
    rank for a looped schedule (``generate_split_points``) and one micro-batch per stage
    (``build_pipeline_schedule``); elsewhere the search chooses.
    """
    notes: list[str] = []
    if fixed.get("pp", 1) <= 1:
        return notes
    titan = "torchtitan" in stack_text(row)
    if "vpp" not in fixed:
        said = f"{row['id']} {row.get('vpp', '')} {stack_text(row)}".lower()
        named = re.search(r"interleav|virtual[ -]pipeline|looped", said)
        if not named:
            fixed["vpp"] = 1
            notes.append(
                f"vpp {row['vpp']!r}: 1F1B, no interleaving"
                if "1f1b" in row.get("vpp", "").lower()
                else "pipeline schedule not named: 1F1B, no interleaving"
            )
        elif titan:
            fixed["vpp"] = 2
            notes.append("interleaved schedule, stages not stated: torchtitan's 2 per rank")
        else:
            notes.append("interleaved schedule named, virtual stages not: VPP searched")
    if "mbs" in fixed and "dp" in fixed and gbs == fixed["dp"] * fixed["mbs"]:
        if titan:
            # torchtitan's tables give the local batch where others give the micro-batch
            local = fixed.pop("mbs")
            stages = fixed["pp"] * fixed.get("vpp", 1)
            if "vpp" in fixed and local % stages == 0:
                fixed["mbs"] = local // stages
                notes.append(
                    f"stated micro-batch is the local batch: {stages} micro-batches of "
                    f"{fixed['mbs']}, torchtitan's one per pipeline stage"
                )
            else:
                notes.append(
                    "stated micro-batch equals torchtitan's local batch with pp > 1: read "
                    "as the local batch, micro-batch searched"
                )
        else:
            # as stated (a batch-size ramp-up starts so): the pipeline fills and drains
            # around a single micro-batch every step
            notes.append("one micro-batch per pipeline a step, as stated")
    return notes


def _run_key(pr: PreparedRow) -> str:
    w = pr.workload
    return f"{w.model.key} {w.gpu.key} {w.num_gpus} {w.seq_len} {w.global_batch} {w.precision}"


def config_key(pr: PreparedRow, plan: str, predicted: float) -> str:
    """A prepared row's inputs as the model read them (model, GPU, run shape, plan, compared
    figure and the prediction they give), for finding rows it cannot tell apart
    (``ValidationReport.twins``)."""
    return f"{_run_key(pr)} {plan} {pr.compared} {predicted:.9g}"


def job_key(pr: PreparedRow, row: dict[str, str]) -> str:
    """A prepared row's job, its plan left out: the row's source as it cites it (one
    document, or one release's section of it: one software stack; spacing and case
    aside), its precision as stated (MXFP8 and FP8 with current scaling are both FP8 to
    the model), its scale-up and scale-out network cells, the model, GPU and count,
    sequence, batch, compared figure and FLOP convention. Rows of one job that differ in
    plan are the pairs the plan-ranking check (:mod:`.ranking`) compares."""
    cells = [
        " ".join(row.get(c, "").lower().split())
        for c in ("source", "precision", "intra_node_link", "inter_node")
    ]
    return " | ".join([*cells, f"{_run_key(pr)} {pr.compared} {pr.convention}"])


def model_kind(m: Model) -> str:
    """The kind of model a row trains, as the validation reports accuracy by it: a hybrid
    with Mamba (or Gated DeltaNet) layers, a mixture of experts, or dense."""
    if m.mamba is not None and m.mamba_layers:
        return "hybrid Gated DeltaNet" if m.mamba.rule == "gated_delta" else "hybrid Mamba"
    return "MoE" if m.is_moe else "dense"
