"""Training workloads and parallelism plans, as arrays so many plans evaluate at once.

A :class:`Plans` holds one NumPy array per parallelism knob; index ``i`` across the
arrays is one candidate plan. Degrees follow Megatron-LM's rank order (TP innermost, then
CP, DP, PP outermost); EP is carved out of the TP x DP x CP ranks with expert tensor
parallelism 1, as the Megatron-Core MoE recipes run it (each GPU holds E / EP whole experts).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gpuscale.catalog import GPU, Model, System, check_precision
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric
from gpuscale.perf.comm.moe import EP_DISPATCH
from gpuscale.perf.recompute import DEFAULT_MODULES, op_sac_modelled, parse_modules

IntArray = NDArray[np.int64]
FloatArrayT = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

RECOMPUTE = ("none", "selective", "full", "partial")
"""Activation recomputation: none, selective (core attention, Korthikanti et al.), full
(every layer), partial (full recomputation of just enough layers to fit in memory, as
Megatron's ``--recompute-method block --recompute-num-layers N``)."""
SHARDING = ("none", "dist-opt", "zero1", "zero2", "zero3")
"""Optimizer/gradient/parameter sharding over data parallel: Megatron DDP, Megatron's
distributed optimizer, DeepSpeed ZeRO stages 1-3 (ZeRO-3 = FSDP full sharding)."""
TRAIN_PRECISIONS = ("bf16", "fp16", "fp8", "fp4")
"""Training precisions: 16-bit mixed precision (bf16, fp16); ``fp8`` is FP8 GEMMs with bf16
elsewhere (Transformer Engine's delayed, current or MX block scaling); ``fp4`` is NVFP4 GEMMs
(Transformer Engine's NVFP4 recipe on Blackwell: E2M1 values, E4M3 scales per 16 elements),
bf16 elsewhere."""
ATTENTION = ("fused", "flash2", "unfused")
"""Attention kernels: ``fused`` is the fastest fused kernel for the GPU (cuDNN fused
attention as Transformer Engine runs it, FlashAttention-3 on Hopper and Blackwell,
FlashAttention-2 on Ampere); ``flash2`` is FlashAttention-2 (PyTorch SDPA's flash backend),
which does not use Hopper's asynchronous tensor-core instructions; ``unfused`` is Megatron's
original path: QK^T and PV as batched GEMMs over the whole s x s score matrix, with scaled
masked softmax and dropout as separate memory-bound kernels (and the scores kept for backward)."""
ZERO3_GATHERS = ("coalesced", "per-param")
"""How ZeRO-3/FSDP gathers parameters: ``coalesced`` is one collective per layer over a flat
buffer (PyTorch FSDP, Megatron-FSDP, DeepSpeed with bucketed prefetch); ``per-param`` is one
collective per parameter tensor, driven from Python module hooks, as DeepSpeed's ZeRO-3 does
(DeepSpeed issues #1174, #5047): its gathers run at an implementation-bound rate per GPU
(``zero3_param_gather_Bps``) however fast the links are, and activation recomputation
gathers the weights a third time."""

ELEMENTWISE = ("fused", "eager")
"""How the memory-bound ops run: ``fused`` kernels (Transformer Engine / Apex RMSNorm,
SwiGLU and RoPE, or torch.compile's generated ones), or ``eager`` PyTorch, where each op of
a norm, rotary embedding or gated activation is its own kernel that reads and writes the
whole tensor, often upcast to fp32 (see ``EAGER_*`` in :mod:`gpuscale.perf.step`)."""


MAX_GPUS = 2**24
"""Largest GPU count gpuscale models (16.8 M)."""
MAX_SEQ = 2**30
"""Longest sequence in tokens."""
MAX_BATCH = 2**32
"""Largest global batch in sequences."""


@dataclass(frozen=True)
class Workload:
    """One training job on one kind of cluster."""

    model: Model
    gpu: GPU
    system: System
    fabric: Fabric
    num_gpus: int
    seq_len: int
    global_batch: int
    """Sequences per iteration."""
    precision: str = "bf16"
    attention: str = "fused"
    """One of :data:`ATTENTION`."""
    zero3_gathers: str = "coalesced"
    """One of :data:`ZERO3_GATHERS` (matters only to ZeRO-3 plans)."""
    elementwise: str = "fused"
    """One of :data:`ELEMENTWISE`."""
    ep_dispatch: str = "hierarchical"
    """One of :data:`~gpuscale.perf.comm.moe.EP_DISPATCH` (matters only to MoE plans)."""
    fp8_param_gather: bool = False
    """Parameter all-gathers carry FP8 weights (1 byte): Megatron's --fp8-param-gather (or
    --fp4-param-gather), whose FP8 weights are the model's own, with no 16-bit copy beside
    the optimizer's fp32 master; torchao's enable_fsdp_float8_all_gather, which casts
    FSDP's sharded parameters to FP8 for each all-gather. Only with fp8/fp4 precision and a
    sharded optimizer (distributed optimizer, ZeRO, FSDP)."""
    recompute_modules: tuple[str, ...] = DEFAULT_MODULES
    """What selective recomputation runs again (:data:`gpuscale.perf.recompute.RECOMPUTE_MODULES`;
    default: the attention core, Korthikanti et al.'s selective recomputation)."""
    memory_headroom: float = 0.0
    """Fraction of each GPU's memory a plan must leave free (fragmentation beyond the
    activation overhead the memory model adds, a profiler, a margin): plans fit in
    (1 - headroom) x the memory the driver reports."""
    shard_group: int = 0
    """Hybrid sharding (HSDP): the data-parallel ranks (of DP x CP) that a sharded
    optimizer, ZeRO or FSDP spreads its states over, replicated across the DP x CP /
    shard_group groups, whose gradient shards are all-reduced across the replicas (PyTorch
    FSDP's HYBRID_SHARD, torchtitan's dp_shard, Megatron's
    --num-distributed-optimizer-instances = DP x CP / shard_group). 0: all of them. A plan
    with fewer data-parallel ranks shards over all it has."""

    @property
    def memory_capacity(self) -> float:
        """Bytes a plan may use on each GPU: the driver's total less the headroom."""
        return self.gpu.memory_bytes * (1.0 - self.memory_headroom)

    def __post_init__(self) -> None:
        # named as the command-line flags are (--gpus, --seq-len, --global-batch); the caps
        # are far beyond any cluster or run and keep every count a 64-bit integer
        for name, flag, cap in (
            ("num_gpus", "gpus", MAX_GPUS),
            ("seq_len", "seq-len", MAX_SEQ),
            ("global_batch", "global-batch", MAX_BATCH),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= cap:
                raise InputError(flag, v, f"a positive integer up to {cap:,}")
        check_precision(self.gpu, self.precision, among=TRAIN_PRECISIONS)
        if self.attention not in ATTENTION:
            raise InputError("attention", self.attention, f"one of {', '.join(ATTENTION)}")
        if self.elementwise not in ELEMENTWISE:
            raise InputError("elementwise", self.elementwise, f"one of {', '.join(ELEMENTWISE)}")
        if parse_modules(self.recompute_modules) != tuple(self.recompute_modules):
            raise InputError(
                "recompute-modules",
                ",".join(self.recompute_modules),
                "canonical module names, once each, in RECOMPUTE_MODULES order (parse_modules)",
            )
        if "ops" in self.recompute_modules and not op_sac_modelled(self.model):
            raise InputError(
                "recompute-modules",
                "ops",
                f"a model of attention and dense MLP layers ({self.model.name} has MoE, MLA "
                "or Mamba layers, whose per-op checkpointing is not modelled)",
            )
        m = self.model
        layers_of = {
            "mla_up_proj": ("MLA attention", m.mla is not None),
            "mlp": ("dense MLP layers", m.mlp_layers > 0),
            "moe": ("MoE layers", m.is_moe),
            "moe_act": ("MoE layers", m.is_moe),
            "shared_experts": ("shared experts", m.is_moe and m.shared_experts > 0),
            "mamba": ("Mamba layers", m.mamba is not None),
        }
        for name in self.recompute_modules:
            what, present = layers_of.get(name, ("", True))
            if not present:
                raise InputError(
                    "recompute-modules", name, f"a module the model has ({m.name} has no {what})"
                )
        h = self.memory_headroom
        if isinstance(h, bool) or not isinstance(h, int | float) or not 0.0 <= h <= 0.5:
            raise InputError("memory-headroom", h, "a fraction from 0 to 0.5 (0.1 = 10 %)")
        if self.ep_dispatch not in EP_DISPATCH:
            raise InputError("ep-dispatch", self.ep_dispatch, f"one of {', '.join(EP_DISPATCH)}")
        if self.fp8_param_gather and self.precision not in ("fp8", "fp4"):
            raise InputError(
                "fp8-param-gather", True, f"fp8 or fp4 precision (not {self.precision})"
            )
        if self.zero3_gathers not in ZERO3_GATHERS:
            raise InputError(
                "zero3-gathers", self.zero3_gathers, f"one of {', '.join(ZERO3_GATHERS)}"
            )
        g = self.shard_group
        if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g <= MAX_GPUS:
            raise InputError(
                "shard-group",
                g,
                f"a number of data-parallel ranks from 1 to {MAX_GPUS:,}, or 0 to shard over "
                "all of them",
            )

    @property
    def gathered_weight_bytes(self) -> float:
        """Bytes a weight moves in a parameter all-gather: 2, or 1 with FP8 gathers."""
        return 1.0 if self.fp8_param_gather else 2.0

    @property
    def flash_attention(self) -> bool:
        """Whether the attention kernel is fused (never materialises the score matrix)."""
        return self.attention != "unfused"

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len


@dataclass(frozen=True)
class Plans:
    """Candidate plans, one array element per plan."""

    tp: IntArray
    pp: IntArray
    dp: IntArray
    cp: IntArray
    ep: IntArray
    vpp: IntArray
    mbs: IntArray
    sp: BoolArray
    recompute: IntArray
    """Index into :data:`RECOMPUTE`."""
    sharding: IntArray
    """Index into :data:`SHARDING`."""
    tp_overlap: BoolArray
    """Overlap tensor-parallel communication with GEMMs (Megatron --tp-comm-overlap)."""
    shard_group: IntArray
    """Hybrid sharding: the data-parallel ranks the plan's sharded states spread over
    (:attr:`Workload.shard_group`); 0 takes the workload's."""

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    @classmethod
    def of(cls, **cols: Any) -> Plans:
        n = max(np.size(v) for v in cols.values())
        out: dict[str, Any] = {}
        for f in fields(cls):
            v = cols.get(f.name)
            default: Any = (
                False
                if f.name in ("sp", "tp_overlap")
                else (0 if f.name in ("recompute", "sharding", "shard_group") else 1)
            )
            arr = np.asarray(default if v is None else v)
            dtype = np.bool_ if f.name in ("sp", "tp_overlap") else np.int64
            out[f.name] = np.broadcast_to(arr.astype(dtype), (n,)).copy()
        return cls(**out)

    def take(self, idx: IntArray | BoolArray) -> Plans:
        return Plans(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    def gpus_used(self) -> IntArray:
        return self.tp * self.pp * self.dp * self.cp

    def stage_layers(self, layers: int) -> FloatArrayT:
        """Layers on the fullest pipeline stage: ``vpp`` chunks of ceil(L / (pp vpp)) layers
        (chunks sized alike, as Megatron's layers-per-virtual-stage makes them; with uneven
        stages the fullest one sets the pipeline's pace and its memory)."""
        chunks = self.pp * self.vpp
        return (np.ceil(layers / chunks) * self.vpp).astype(np.float64)

    def microbatches(self, w: Workload) -> IntArray:
        out: IntArray = w.global_batch // np.maximum(self.dp * self.mbs, 1)
        return out

    def row(self, i: int) -> dict[str, Any]:
        return {
            "tp": int(self.tp[i]),
            "pp": int(self.pp[i]),
            "dp": int(self.dp[i]),
            "cp": int(self.cp[i]),
            "ep": int(self.ep[i]),
            "vpp": int(self.vpp[i]),
            "mbs": int(self.mbs[i]),
            "sequence_parallel": bool(self.sp[i]),
            "recompute": RECOMPUTE[int(self.recompute[i])],
            "sharding": SHARDING[int(self.sharding[i])],
            "tp_comm_overlap": bool(self.tp_overlap[i]),
            "shard_group": int(self.shard_group[i]),
        }

    def label(self, i: int) -> str:
        r = self.row(i)
        parts = [f"TP{r['tp']}", f"PP{r['pp']}", f"DP{r['dp']}"]
        if r["cp"] > 1:
            parts.append(f"CP{r['cp']}")
        if r["ep"] > 1:
            parts.append(f"EP{r['ep']}")
        if r["vpp"] > 1:
            parts.append(f"VPP{r['vpp']}")
        parts.append(f"mbs{r['mbs']}")
        if r["sequence_parallel"]:
            parts.append("SP")
        parts.append(f"rc:{r['recompute']}")
        # no optimizer sharding is plain data parallelism (a lone "none" would read as the
        # recompute mode's)
        parts.append("ddp" if r["sharding"] == "none" else r["sharding"])
        if r["shard_group"]:
            parts.append(f"hsdp{r['shard_group']}")
        if r["tp_comm_overlap"]:
            parts.append("tp-ovl")
        return " ".join(parts)


def pipelined_fsdp(p: Plans) -> BoolArray:
    """Plans whose ZeRO-2 sharding runs under a pipeline.

    ZeRO-2 under a pipeline is FSDP that keeps its weights gathered after the forward
    (reshard_after_forward=False) while PyTorch's pipeline schedules turn its gradient sync
    off until the last micro-batch: the gradients accumulate whole in fp32 (FSDP's
    reduce_dtype) and are reduce-scattered once a step, as Llama 3 405B trained (Dubey et
    al. 2024, sec. 3.3). That costs what Megatron's distributed optimizer costs: 2 + 4
    bytes a parameter held whole, the optimizer sharded, one gather and one reduce-scatter a
    step. DeepSpeed refuses ZeRO-2 with pipeline parallelism. FSDP with full sharding
    (ZeRO-3) under a pipeline stays priced per micro-batch, layer by layer: torchtitan's
    Llama 3.1 405B runs on 512 H100 (its paper's 1F1B and interleaved tables) are measured
    at that cost, not at one gather a step.
    """
    out: BoolArray = (p.sharding == SHARDING.index("zero2")) & (p.pp > 1)
    return out


def cost_sharding(p: Plans) -> IntArray:
    """The sharding each plan is costed as (memory and DP traffic): the distributed
    optimizer for :func:`pipelined_fsdp` plans, the plan's own otherwise."""
    out: IntArray = np.where(pipelined_fsdp(p), SHARDING.index("dist-opt"), p.sharding)
    return out


def _shown(values: IntArray) -> str:
    """The distinct nonzero values of ``values``, for a rule's message."""
    return ", ".join(str(int(v)) for v in np.unique(values) if v) or "0"


def shard_group_of(w: Workload, p: Plans) -> IntArray:
    """Each plan's hybrid shard group: its own, else the workload's (0: all ranks)."""
    out: IntArray = np.where(p.shard_group > 0, p.shard_group, w.shard_group)
    return out


def validity(w: Workload, p: Plans) -> tuple[BoolArray, list[tuple[BoolArray, str]]]:
    """Which plans are structurally valid, and the named rules each violates."""
    m = w.model
    used = p.gpus_used()
    d = p.dp * p.cp
    sg = shard_group_of(w, p)
    replicas = np.maximum(d // np.maximum(sg, 1), 1)
    mamba_ok: BoolArray = np.ones(len(p), dtype=bool)
    if m.mamba is not None:  # TP splits a Mamba-2 mixer's heads and B/C groups
        mamba_ok = (m.mamba.heads % p.tp == 0) & (m.mamba.groups % p.tp == 0)
        # and context parallelism re-splits each TP rank's heads (Megatron-Core's
        # MambaContextParallel: heads divisible by tp x cp)
        mamba_ok &= m.mamba.heads % (p.tp * p.cp) == 0
    rules: list[tuple[BoolArray, str]] = [
        (used <= w.num_gpus, "tp*pp*dp*cp exceeds the GPU count"),
        (
            w.global_batch % np.maximum(p.dp * p.mbs, 1) == 0,
            "global batch not divisible by dp x micro-batch",
        ),
        (m.heads % p.tp == 0, f"heads ({m.heads}) not divisible by tp"),
        (
            (m.kv_heads % p.tp == 0) | (p.tp % m.kv_heads == 0) | (m.mla is not None),
            f"kv heads ({m.kv_heads}) and tp do not divide one another",
        ),
        (m.ffn_hidden % p.tp == 0, f"ffn hidden ({m.ffn_hidden}) not divisible by tp"),
        # causal context parallelism balances its load by splitting the sequence into 2 x cp
        # chunks, each rank taking one from either end (Megatron-Core, Transformer Engine)
        (
            (p.cp == 1) | (w.seq_len % (2 * p.cp) == 0),
            f"sequence ({w.seq_len}) not divisible by 2 x cp (load-balanced causal chunks)",
        ),
        # the embedding and the loss may each take a pipeline chunk of their own (Megatron's
        # account_for_embedding/loss_in_pipeline_split: 126 layers + 2 on PP16 x VPP8)
        (
            p.pp * p.vpp <= m.layers + np.where(p.pp > 1, 2, 0),
            f"pp x vpp exceeds the {m.layers} layers (+ embedding and loss chunks): at most "
            f"{m.layers + 2}",
        ),
        (
            (p.vpp == 1) | ((p.pp > 1) & (p.microbatches(w) % p.pp == 0)),
            "interleaving (vpp > 1) needs pp > 1 and micro-batches divisible by pp",
        ),
        ((p.ep == 1) | m.is_moe, "ep > 1 on a dense model"),
        (
            (p.ep == 1) | ((m.num_experts % p.ep == 0) & ((p.tp * p.dp * p.cp) % p.ep == 0)),
            "ep must divide the experts and tp x dp x cp",
        ),
        (~p.sp | (p.tp > 1), "sequence parallel needs tp > 1"),
        # sequence parallelism splits each context-parallel rank's tokens over TP (Megatron:
        # "seq_length must be divisible by tensor_model_parallel_size" with SP)
        (
            ~p.sp | ((w.seq_len % p.cp == 0) & ((w.seq_len // np.maximum(p.cp, 1)) % p.tp == 0)),
            f"sequence ({w.seq_len}) per context-parallel rank not divisible by tp "
            "(sequence parallelism splits it)",
        ),
        # Megatron-Core's MoE layers take the sequence-parallel shard (its arguments assert
        # "When using MoE and tensor parallelism, sequence parallelism must be used")
        (
            ~(p.tp > 1) | p.sp | (not m.is_moe),
            "an MoE model with tp > 1 needs sequence parallelism",
        ),
        # Megatron overlaps the TP collectives with GEMMs only under sequence parallelism
        # (tp_comm_overlap asserts sequence_parallel)
        (
            ~p.tp_overlap | p.sp,
            "tp communication overlap needs tp > 1 with sequence parallelism",
        ),
        # Megatron: "--fp8-param-gather only supported with distributed optimizer, torch
        # fsdp2, megatron fsdp"; without sharding nothing is gathered
        (
            (p.sharding != SHARDING.index("none")) | (not w.fp8_param_gather),
            "FP8 parameter gathers need a sharded optimizer (dist-opt, ZeRO or FSDP)",
        ),
        (mamba_ok, "Mamba-2 heads and groups not divisible by tp (heads by tp x cp)"),
        # hybrid sharding splits the data-parallel ranks into equal shard groups, and shards
        # something: a DDP plan has no states to spread
        (
            (sg == 0) | (d <= sg) | (d % np.maximum(sg, 1) == 0),
            f"dp x cp is not a multiple of the shard group ({_shown(sg)})",
        ),
        # Megatron: "expert DP size must be divisible by the number of optimizer instances"
        (
            (sg == 0) | (d <= sg) | (not m.is_moe) | ((d * p.tp // p.ep) % replicas == 0),
            "expert data-parallel ranks (dp x cp x tp / ep) not a multiple of the shard "
            "group's replicas",
        ),
        (
            (sg == 0) | (p.sharding != SHARDING.index("none")),
            "hybrid sharding (a shard group) needs a sharded optimizer (dist-opt, ZeRO, FSDP)",
        ),
        (p.tp <= max(w.fabric.domain_gpus, 1) * 2**10, "tp too large"),
    ]
    ok = np.ones(len(p), dtype=bool)
    for mask, _ in rules:
        ok &= mask
    return ok, rules


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, smallest first."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


DEGREES = ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs")
"""Plan sizes a user can fix: parallel degrees, interleaving, micro-batch."""


def check_degrees(w: Workload, degrees: Mapping[str, object]) -> None:
    """Each given plan size is a whole number from 1 to its bound: the GPU count for a
    parallel degree, the layers for interleaving, the global batch for the micro-batch."""
    for key in DEGREES:
        v = degrees.get(key)
        if v is None:
            continue
        top, what = {
            "mbs": (w.global_batch, "the global batch"),
            "vpp": (w.model.layers, "the layers"),
        }.get(key, (w.num_gpus, "the GPU count"))
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top:
            raise InputError(key, v, f"a whole number from 1 to {top:,} ({what})")


def check_plan(w: Workload, p: Plans) -> None:
    """Raise an :class:`InputError` for the first rule a single plan breaks."""
    m = w.model
    tp, pp, cp, dp = int(p.tp[0]), int(p.pp[0]), int(p.cp[0]), int(p.dp[0])
    check_degrees(w, {k: int(getattr(p, k)[0]) for k in DEGREES})
    if w.num_gpus % (tp * pp * cp) != 0:
        raise InputError(
            "tp*pp*cp",
            tp * pp * cp,
            f"must divide the {w.num_gpus} GPUs (tp={tp}, pp={pp}, cp={cp})",
        )
    if m.heads % tp:
        raise InputError("tp", tp, f"must divide the {m.heads} attention heads of {m.key}")
    if cp > 1 and w.seq_len % (2 * cp):
        # causal context parallelism splits the sequence into 2 x cp load-balanced chunks
        room = w.num_gpus // (tp * pp)  # the GPUs each tensor x pipeline group may span
        fits = [c for c in divisors(room) if c == 1 or w.seq_len % (2 * c) == 0]
        raise InputError(
            "cp",
            cp,
            f"a degree whose 2 x cp load-balanced chunks divide the sequence length "
            f"{w.seq_len}: one of {', '.join(map(str, fits))} (with tp={tp}, pp={pp} on "
            f"{w.num_gpus} GPUs)",
        )
    mb = int(p.mbs[0])
    per_rank = w.global_batch // dp
    if mb > 1 and w.global_batch % dp == 0 and per_rank % mb:
        raise InputError(
            "mbs",
            mb,
            f"a divisor of the {per_rank} sequences each of the {dp} data-parallel ranks takes "
            f"a step: one of {', '.join(map(str, divisors(per_rank)))}",
        )
    if w.global_batch % (dp * mb):
        raise InputError(
            "global-batch",
            w.global_batch,
            f"must be divisible by dp x micro-batch = {dp} x {mb} = {dp * mb}",
        )
    ep, vpp = int(p.ep[0]), int(p.vpp[0])
    if ep > 1 and not m.is_moe:
        raise InputError("ep", ep, f"1 for a dense model ({m.key} has no experts)")
    if ep > 1:
        group = tp * dp * cp
        fits = [e for e in range(1, group + 1) if m.num_experts % e == 0 and group % e == 0]
        if ep not in fits:
            raise InputError(
                "ep",
                ep,
                f"must divide the {m.num_experts} experts of {m.key} and tp x dp x cp = "
                f"{group}: one of {', '.join(map(str, fits))}",
            )
    if vpp > 1 and pp == 1:
        raise InputError("vpp", vpp, "1 unless pipeline parallel (pp > 1) is used")
    _check_shard_group(w, p)
    ok, rules = validity(w, p)
    if not ok[0]:
        for mask, why in rules:
            if not mask[0]:
                raise InputError("plan", p.label(0), why)


def _check_shard_group(w: Workload, p: Plans) -> None:
    """The shard-group rules of :func:`validity` for one plan, naming the shard group."""
    sg, d = int(shard_group_of(w, p)[0]), int(p.dp[0] * p.cp[0])
    if sg == 0:
        return
    if int(p.sharding[0]) == SHARDING.index("none"):
        raise InputError(
            "shard-group",
            sg,
            "0 (no hybrid sharding) unless the optimizer is sharded "
            "(--dist-opt or --zero): a plan without sharding has no states to spread",
        )
    if d <= sg:  # one group of all ranks: full sharding
        return
    if d % sg:
        raise InputError(
            "shard-group",
            sg,
            f"a divisor of the plan's dp x cp = {d} data-parallel ranks "
            f"({', '.join(map(str, divisors(d)[:-1]))}), {d} or more for full sharding, or 0",
        )
    expert_dp, replicas = d * int(p.tp[0]) // int(p.ep[0]), d // sg
    if w.model.is_moe and expert_dp % replicas:
        raise InputError(
            "shard-group",
            sg,
            f"a size whose replicas ({d} / {sg} = {replicas}) divide the "
            f"{expert_dp} expert data-parallel ranks (dp x cp x tp / ep)",
        )
