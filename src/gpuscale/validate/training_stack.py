"""What a published training row's software stack implies: the attention kernel, fused or
eager elementwise kernels, and the MoE token dispatch.

The stack is read from where a row names it, its source and notes; each function returns
gpuscale's setting and the reason printed with the row (empty when the default applies).
The rules are listed in ``validate/README.md``.
"""

from __future__ import annotations

import re


def stack_text(row: dict[str, str]) -> str:
    """Where a row names its software stack, lower-cased: the source, the notes, the
    sharding cell ("DeepSpeed ZeRO-3") and the model cell ("GPT 3.6B (Megatron-DeepSpeed)")."""
    cells = ("source", "notes", "dist_optimizer_or_zero", "model")
    return " ".join(row.get(c, "") for c in cells).lower()


NEGATOR = r"(no|not|without|w/o|non)"
"""A word before a feature's name that says it was not used ("without ZeRO")."""
OFF = r"(off|false|no|none|disabled?|0(?![.\d]))"
"""A value that switches the named feature off ("FSDP: off", "dist_opt=0")."""
_NOT_BEFORE = re.compile(
    rf"\b({NEGATOR}|disabled?|whether)([\s_-]+(using|use|used|with|of|the))*[\s_-]*$"
)
"""A negation just before a name, perhaps through a verb ("not using", "without the"), or
a question that claims nothing ("whether torch.compile was on is not stated")."""
_NOT_AFTER = re.compile(
    rf"\s*[(:=]?\s*({OFF}\b|(is |was |were )?(not used|unused)\b"
    rf"|(and|,) [\w.-]+ (are |were )?(not used|unused|{OFF})\b)"
)
"""A switch just after a name: "compile=False", "FlashAttention disabled", "AsyncTP not
used", also through a short list ("torch.compile and float8 not used")."""


def _negated_before(text: str, start: int) -> bool:
    """Whether a negation stands just before ``text[start:]`` (:data:`_NOT_BEFORE`)."""
    return _NOT_BEFORE.search(text[max(0, start - 24) : start]) is not None


def mentions(text: str, pattern: str) -> bool:
    """Whether ``text`` names ``pattern`` as used: "no flash attention", "without
    torch.compile", "compile=False" or "FlashAttention disabled" name it as not used."""
    for m in re.finditer(pattern, text):
        # the rest of the name ("flash attention" after "flash") before the switch
        after = re.sub(r"^[\w.-]*(\s+attention)?", "", text[m.end() : m.end() + 40])
        if not (_negated_before(text, m.start()) or _NOT_AFTER.match(after)):
            return True
    return False


# Stacks whose flash attention is the flash-attn package's FlashAttention-2 (or a Triton
# port of it), which does not use Hopper's asynchronous tensor-core instructions (Shah et
# al. 2024, FlashAttention-3 Sec. 1): MosaicML llm-foundry/Composer (attn_impl flash or
# triton), GPT-NeoX, Hugging Face, Nanotron, or a row naming FA2 / flash_attn.
FLASH2_STACKS = (
    # Hugging Face as the training stack, not a link to its hub or a config taken from it
    r"llm-foundry|mosaicml|composer|gpt-neox|hugging ?face(?!\.co| config| hub)|nanotron"
    r"|flash-?attention-?2|\bfa2\b|flash[_-]attn"
)


def attention_kernel(row: dict[str, str], arch: str) -> tuple[str, str]:
    """The attention kernel a run used, from its stack as the row names it, and why.

    torchtitan calls PyTorch's SDPA, whose flash backend is FlashAttention-2. Megatron-LM
    and Megatron-DeepSpeed on Volta/Ampere ran the unfused path (batched GEMMs + fused
    softmax kernel) unless flash attention is named: that is the path Korthikanti et al.'s
    5as/h activation term describes. Stacks built on the flash-attn package (FLASH2_STACKS)
    run FlashAttention-2; a row naming no stack gets the GPU's fastest fused kernel, and so
    does a row naming FlashAttention-3 or cuDNN as its attention kernel, whatever its stack:
    SDPA's cuDNN backend is PyTorch's default on Hopper in recent releases (on an H200 with
    PyTorch 2.11 it ran at 1.6-1.75 x the flash backend's rate: ``benchmarks/measured/``).
    """
    text = stack_text(row)
    if mentions(text, FUSED_ATTENTION):
        return "fused", "attention: FlashAttention-3 / cuDNN fused kernels, as the row names"
    if "torchtitan" in text or "sdpa" in text:
        return "flash2", "attention: PyTorch SDPA (FlashAttention-2 kernels)"
    if (
        arch in ("volta", "ampere")
        and re.search(r"megatron|deepspeed", text)
        and not mentions(text, r"flash")
    ):
        return "unfused", "attention: Megatron's unfused softmax path (no flash attention named)"
    if mentions(text, FLASH2_STACKS):
        return "flash2", "attention: FlashAttention-2-class kernels (flash-attn or Triton)"
    return "fused", ""


FUSED_ATTENTION = (
    r"flash-?attention-?3|\bfa3\b|cudnn[ _-]*(sdpa|attention|fused|backend|fmha|flash)"
    r"|(sdpa|attention)[^.;]{0,40}\bcudnn\b(?![ _-]*(layer ?norm|frontend|version|\d))"
)
"""FlashAttention-3, or cuDNN named as the attention kernel ("SDPA's cuDNN backend",
"attention via cuDNN"): a cuDNN version or its layer norm says nothing of attention."""


def elementwise_kernels(row: dict[str, str]) -> tuple[str, str]:
    """Whether a run's norms, RoPE and activations ran fused or op by op, and why.

    torchtitan is plain PyTorch: without torch.compile its RMSNorm, rotary embedding and
    SwiGLU run eagerly, one kernel per op. Megatron-based stacks use fused kernels.
    """
    text = stack_text(row)
    if mentions(text, r"(torch\.)?compile"):
        return "fused", ""
    if mentions(text, EAGER_OPS):
        return "eager", "elementwise: eager PyTorch ops, as the row names"
    if "torchtitan" in text:
        return "eager", "elementwise: eager PyTorch ops (torchtitan without torch.compile)"
    return "fused", ""


EAGER_OPS = r"eager[ -](pytorch|elementwise|ops?\b)|pytorch eager (ops?|kernels)\b"
"""Elementwise work named as run op by op ("eager PyTorch ops"); a bare "eager" may mean
no CUDA graphs ("eager execution"), which says nothing of the kernels."""
EAGER_LOSS = r"eager[ -](cross[ -]?entropy|loss)|(cross[ -]?entropy|loss) (runs |ran )?eager"


def loss_kernel(row: dict[str, str]) -> tuple[str | None, str]:
    """How the cross-entropy ran where the row says so apart from the other elementwise
    work (a compiled model whose loss stays PyTorch's op by op); None: as the elementwise
    kernels."""
    if mentions(stack_text(row), EAGER_LOSS):
        return "eager", "loss: PyTorch's op-by-op cross-entropy, as the row names"
    return None, ""


HIERARCHICAL_DISPATCH = (
    r"deep-?ep|hybrid-?ep|flex (token )?dispatcher|dispatcher[ _-]*type[ =:]*['\"]?flex"
)
"""Dispatchers that send a token once per remote domain: DeepEP, HybridEP (Megatron-Core's
``flex`` dispatcher)."""
ALL_TO_ALL_DISPATCH = (
    r"(token )?dispatcher[ _-]*(type)?[ =:]*['\"]?(alltoall|all-to-all|allgather)\b"
    r"|(alltoall|all[-_ ]to[-_ ]all|a2a) (token )?dispatch"
    r"|nccl all-to-all|deepspeed-moe|torchtitan"
)
"""Stacks and notes whose MoE layers move every top-k copy of a token by a plain collective:
Megatron-Core's ``alltoall`` (or ``allgather``) token dispatcher, named; an NCCL all-to-all;
DeepSpeed-MoE; torchtitan (``all_to_all_single``). A row naming DeepEP or HybridEP, or no
dispatcher, is taken to send a token once per remote domain, as the Megatron-Bridge MoE
recipes do."""


def ep_dispatch(row: dict[str, str]) -> tuple[str, str]:
    """How a row's MoE layers move tokens between expert-parallel ranks, and why."""
    text = stack_text(row)
    if not re.search(HIERARCHICAL_DISPATCH, text) and re.search(ALL_TO_ALL_DISPATCH, text):
        return "all_to_all", "MoE dispatch: one NCCL all-to-all of every top-k copy"
    return "hierarchical", ""


BF16_OPTIMIZER = r"bf16_optimizer|(bf16|bfloat16)[ -]optimizer(?! state)"
"""How a row names DeepSpeed's BF16 optimizer (``BF16_Optimizer``), which accumulates
gradients in fp32 in a pass of its own; with DeepSpeed named too, as "BF16 optimizer"
alone is also said of other stacks' optimizers (and "BF16 optimizer states" of their
states)."""
DEEPSPEED_TRAINER = (
    r"megatron[-_ /]deepspeed|deepspeed[-_ /]megatron"
    r"|deepspeed (and|&|\+|with) megatron|megatron ?(and|&|\+|with) ?deepspeed"
    r"|deepspeed'?s? pipeline( engine)?"
)
"""How a row names DeepSpeed's engine as what trained it (Megatron-DeepSpeed, "DeepSpeed
and Megatron", its pipeline engine), not DeepSpeed as the name of a sharding scheme
("DeepSpeed ZeRO-1" in a table of another framework)."""
IN_PLACE_BF16 = (
    r"grad(ient)?s? (are |were )?accumulat\w* in bf16"
    r"|accumulat\w* (the )?grad(ient)?s? in bf16|grad(ient)? accumulation in bf16"
)
"""How a bf16 row says its gradients accumulated in bf16 itself ("gradients accumulated in
bf16 in place"), with no fp32 accumulators. (A row contrasting its optimizer with "fp16,
which accumulates in fp16" says nothing about its own.)"""


def grad_accumulation(row: dict[str, str], precision: str) -> tuple[str, str]:
    """How a row's gradients accumulate over micro-batches, and why.

    DeepSpeed's BF16 optimizer accumulates gradients in fp32 in a pass after each
    micro-batch's backward. A row gets that pass when it names the optimizer, or when it
    was trained by DeepSpeed's engine (Megatron-DeepSpeed, "DeepSpeed and Megatron", its
    pipeline engine) in bf16 stated in its precision cell; not when it says its gradients
    accumulated in bf16. The optimizer was written in February 2022 (BigScience's tr11
    notes: "BF16 optimizer that was just written"): earlier bf16 runs of the engine added
    into their 16-bit gradients in place, and a row that does not state its precision
    (bf16 is then assumed) says nothing of which it ran. In fp16 DeepSpeed's optimizers
    add into the 16-bit gradients in place."""
    text = stack_text(row)
    stated_bf16 = bool(row.get("precision", "").strip()) and precision == "bf16"
    said = re.search(BF16_OPTIMIZER, text) is not None
    used = said and mentions(text, BF16_OPTIMIZER)
    named = precision != "fp16" and "deepspeed" in text and used
    denied = said and not used  # "no BF16_Optimizer"
    engine = stated_bf16 and not denied and mentions(text, DEEPSPEED_TRAINER)
    # the row's own gradients said to stay bf16 outweigh a mention of the optimizer (a
    # note on runs before it was written may quote the later one that introduced it)
    if (named or engine) and not mentions(text, IN_PLACE_BF16):
        return "separate", (
            "gradient accumulation: DeepSpeed's BF16 optimizer, an fp32 pass over the "
            "gradients after each micro-batch"
        )
    return "fused", ""


FULL_STEP_GRAPHS = (
    r"full[_ -]iteration (cuda[_ -]?)?graphs?|cuda[_ -]?graphs? of (the )?(whole|full|entire) "
    r"(training )?(step|iteration)|cuda[_-]graph[_-](scope|impl)\W*full_iteration"
    r"|fullcudagraphwrapper|--cuda-graphs\b|\bfull_cuda_graph\b"
)
"""How a row names a whole training step captured in CUDA graphs (Megatron-Core's
``cuda_graph_scope`` or Megatron-Bridge's ``cuda_graph_impl`` ``full_iteration``, the
MLPerf NeMo configurations' ``FULL_CUDA_GRAPH=1``; ``=0`` turns it off). "CUDA
graphs" alone is not enough: Megatron-Core's default scope is per layer, and so are the
Megatron-Bridge recipes' before their 26.06 MoE ones."""


def cuda_graphs(row: dict[str, str]) -> tuple[bool, str]:
    """Whether a row's whole training step replays as CUDA graphs, and why."""
    if mentions(stack_text(row), FULL_STEP_GRAPHS):
        return True, "the whole step replays as CUDA graphs: no fixed costs of the host's"
    return False, ""


SEQUENCE_PARALLEL_USED = re.compile(
    r"\b(model|tensor|tp)([ -]parallel(ism)?)?\s*(\+|and|with)\s*sequence[ -]parallel",
    re.IGNORECASE,
)
"""How a row's text says its run used sequence parallelism where its seq_parallel cell is
empty: tensor ("model") parallelism named with sequence parallelism, Korthikanti et al.'s
pairing (LLaMA's paper: "model and sequence parallelism"). A launch script's
``--sequence-parallel`` is not enough (a row may quote another version of the script), nor
a clause that lists what the source does not state."""

UNSTATED = re.compile(r"\b(not stated|unstated|not said|not given)\b", re.IGNORECASE)


def sequence_parallel_named(row: dict[str, str]) -> bool:
    """Whether the row's notes or source say its run used sequence parallelism: the pairing
    named, not negated, and not in a clause (from the previous '.', ';' or '(') that says
    what is not stated ("parallelism not stated (the paper mentions model and sequence
    parallelism)" counts: the parenthesis says what the paper does state)."""
    text = stack_text(row)
    for m in SEQUENCE_PARALLEL_USED.finditer(text):
        clause = re.split(r"[.;(]", text[: m.start()])[-1]
        if not (_negated_before(text, m.start()) or UNSTATED.search(clause)):
            return True
    return False


COST_BALANCED_STAGES = r"nanotron"
"""Stacks that place a pipeline's layers on its stages by their compute cost, the output
layer counted: nanotron (``get_block_compute_costs``: a decoder layer's weights, V h for
the LM head; blocks go to a stage until its share of the total is passed). Priced as the
min-max split (``balanced``), which its measured pipelines match (1B model on 4 stages of
one node: 92-95 % of data-parallel throughput, where the threshold rule's 6-layer first
stage would cap them near 80 %)."""


EMBEDDING_SLOTS = r"type:transformer\|embed|tr11-176b-ml"
"""How a row names DeepSpeed's pipeline partition that gives each embedding (the input one
and the tied output layer) a layer's slot: Megatron-DeepSpeed's ``--pp-partition-method
'type:transformer|embedding'``, which BigScience's tr11 (BLOOM) runs set (its README,
``train/tr11-176B-ml/README.md``, names it)."""


def pipeline_split(row: dict[str, str], pp: int, chunks: int, layers: int) -> tuple[str, str]:
    """How a row's pipeline of ``pp`` stages (``chunks`` virtual chunks) placed its
    ``layers`` layers on them, and why ("even", Megatron's default, and no reason without a
    pipeline or a stack that places them otherwise).

    nanotron places its blocks by compute cost (``balanced``: COST_BALANCED_STAGES).
    DeepSpeed's 'type:transformer|embedding' partition gives the embedding and the output
    layer a layer's slot each, (L + 2) / pp slots a stage: Megatron's account split, where
    they divide. Other rows whose layers do not divide into their PP x VPP chunks ran an
    uneven placement of Megatron's (Llama 3.1 405B's 126 layers on 64 chunks, Qwen3-235B's
    94 on 32: 128 and 96 divide once the embedding and the loss take a layer's place each),
    which the rows do not name; they keep ``even``, the last stage holding fewer layers
    beside the output layer (docs/training.md gives what ``account`` would do to them)."""
    text = stack_text(row)
    if pp > 1 and mentions(text, COST_BALANCED_STAGES):
        return "balanced", (
            "pipeline: nanotron balances its stages by compute cost, the output layer "
            "counted (balanced split)"
        )
    if pp > 1 and (layers + 2) % chunks == 0 and re.search(EMBEDDING_SLOTS, text):
        return "account", (
            "pipeline: DeepSpeed's 'type:transformer|embedding' partition, the embedding and "
            f"the output layer in a layer's slot each, {(layers + 2) // chunks} a stage "
            "(account split)"
        )
    return "even", ""


DEEPSPEED_PIPELINE = (
    r"deepspeed'?s? pipe(line)?[ -]?(engine|module|parallel(ism)?)|pipelineengine|pipelinemodule"
)
"""How a row names DeepSpeed's pipeline engine (PipelineModule / PipelineEngine), whose
sends and receives block the stages."""

TP_OVERLAP_NAMED = (
    r"tp[_ -]?comm[_ -]?overlap|tp[_ -]overlap|userbuffers?|async[ -]?tp"
    r"|\b(tp|tensor[ -]parallel)(/sp)? (communication|collectives?) (is |are )?"
    r"(fused into and )?overlapped"
    r"|\boverlap(ping|ped|s)? (the )?(tp|tensor[ -]parallel)(/sp)? (communication|collectives?)"
)
"""How a row names TP communication overlapped with the GEMMs (Megatron's
--tp-comm-overlap, Transformer Engine's userbuffers, torchtitan's AsyncTP, "TP/SP
communication fused into and overlapped with the FFN GEMMs")."""
TP_OVERLAP_OFF = re.compile(r"tp[_ -]?comm[_ -]?overlap\s*[:=]\s*(false|0|off|no)\b")
"""A row that switches Megatron's TP overlap off (``tp_comm_overlap=False``)."""
TP_OVERLAP_STACKS = re.compile(r"megatron|mcore|\bnemo\b|nemotron|megascale")
"""Stacks of the Megatron family, which overlap TP communication where configured to: a
row naming one leaves the overlap to the plan search."""


def pp_transfers(row: dict[str, str]) -> tuple[str, str]:
    """How a row's pipeline stages send and receive (``Workload.pp_p2p``), and why.
    DeepSpeed's pipeline engine does it synchronously (its ``runtime/pipe/p2p.py`` refuses
    ``async_op``), where the row names that engine; Megatron-DeepSpeed alone may run
    Megatron's own schedules (vTrain's Megatron-DeepSpeed runs fit overlapped transfers)."""
    if mentions(stack_text(row), DEEPSPEED_PIPELINE):
        return (
            "blocking",
            "pipeline sends and receives block the stages (DeepSpeed's pipeline engine)",
        )
    return "overlapped", ""


CP_A2A = r"cp[_ -]?comm[_ -]?type\W{0,4}a2a(?!\+)|\bulysses\b"
"""How a row names context parallelism by all-to-alls (Megatron's ``--cp-comm-type a2a``,
DeepSpeed-Ulysses); ``a2a+p2p``, the hierarchical one, is not it."""
CP_ALL_GATHER = (
    r"cp[_ -]?comm[_ -]?type\W{0,4}all_?gather|all-?gather[- ]based context parallel"
    r"|(kv|k/v|key[- ]value) all-?gather"
)
"""How a row names context parallelism by a K/V all-gather (``--cp-comm-type all_gather``,
Llama 3's "all-gather based context parallelism")."""


def cp_exchange(row: dict[str, str]) -> tuple[str, str]:
    """How a row's context parallelism exchanges attention's tensors (``Workload.cp_comm``),
    and why: the all-to-alls or the all-gather where the row names them, else the ring
    (Megatron's and Transformer Engine's default, torchtitan's only one)."""
    text = stack_text(row)
    if mentions(text, CP_A2A):
        return "a2a", "context parallelism by all-to-alls (Ulysses), as the row names"
    if mentions(text, CP_ALL_GATHER):
        return "all_gather", "context parallelism by a K/V all-gather, as the row names"
    return "p2p", ""


def tp_overlap(row: dict[str, str]) -> tuple[bool | None, str]:
    """Whether a row's TP collectives overlap the GEMMs, and why; None leaves it to the plan
    search. Overlap is a feature of a stack (Megatron's and Transformer Engine's
    userbuffers, MegaScale's fused kernels, torch's AsyncTP), not of the plan: on where the
    row names it, the search's choice on the Megatron family's stacks, off on the others
    (DeepSpeed, nanotron, Hugging Face, ...)."""
    text = stack_text(row)
    if TP_OVERLAP_OFF.search(text):
        return False, "TP communication not overlapped with GEMMs, as the row says"
    if mentions(text, TP_OVERLAP_NAMED):
        return True, "TP communication overlapped with GEMMs, as the row names"
    if not TP_OVERLAP_STACKS.search(text) or re.search(DEEPSPEED_TRAINER, text):
        return False, "TP communication not overlapped with GEMMs (no overlap named)"
    return None, ""
