"""Training workloads and parallelism plans, as arrays so many plans evaluate at once.

A :class:`Plans` holds one NumPy array per parallelism knob; index ``i`` across the
arrays is one candidate plan. Degrees follow Megatron-LM's rank order (TP innermost, then
CP, DP, PP outermost); EP is carved out of the TP x DP x CP ranks with expert tensor
parallelism 1, as the Megatron-Core MoE recipes run it (each GPU holds E / EP whole experts).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
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

PP_P2P = ("overlapped", "blocking")
"""How pipeline stages send and receive activations and gradients: ``overlapped``, as
Megatron's schedules do (batched non-blocking sends and receives, ``pp_overlap`` of them
hidden behind compute); ``blocking``, as DeepSpeed's pipeline engine does (its
``runtime/pipe/p2p.py`` sends and receives synchronously, ``async_op`` must be False): each
transfer stalls the stage, nothing hides it."""

CP_COMM = ("p2p", "a2a", "all_gather")
"""How context parallelism exchanges an attention layer's tensors (Megatron's
``--cp-comm-type``, Transformer Engine's ``cp_comm_type``): ``p2p``, a ring passing K/V
chunks around the CP group, each step's transfer hidden behind the previous step's
attention and each step's partial output merged into a running one (the default);
``a2a``, Ulysses' all-to-alls turning Q, K and V from sequence- to head-sharded before one
attention kernel over the whole sequence and its output back, every head count divisible by
cp (four all-to-alls forward, five backward: O, dO, dQ, dK, dV), none hidden; ``all_gather``,
Llama 3's: K and V all-gathered before attention, exposed, no merges, gathered again in the
backward and dK, dV reduce-scattered (Transformer Engine's ``AttnFuncWithCPAndKVAllGather``:
"KV all-gather between CP ranks is exposed"). Megatron-LM's help spells the last
``allgather``, which gpuscale reads too."""

GRAD_ACCUMULATION = ("fused", "separate")
"""How gradients accumulate over a step's micro-batches: ``fused``, in the weight-gradient
GEMMs themselves (Megatron-Core's gradient-accumulation fusion writes fp32 main gradients;
PyTorch DDP and FSDP add into the gradients in place); ``separate``, in a pass of its own
after each micro-batch's backward, as DeepSpeed's BF16 optimizer does (its pipeline engine
calls ``update_hp_grads`` after every backward): each 16-bit gradient is cast to fp32 and
added into an fp32 accumulator (:data:`gpuscale.perf.data_parallel.ACCUM_BYTES_PER_GRAD`).
DeepSpeed runs that optimizer at ZeRO stage 0 and 1 only, so DDP and ZeRO-1 plans pay it;
ZeRO-2/3 plans, whose DeepSpeed optimizers are others, do not."""
ELEMENTWISE = ("fused", "eager")
"""How the memory-bound ops run: ``fused`` kernels (Transformer Engine / Apex RMSNorm,
SwiGLU and RoPE, or torch.compile's generated ones), or ``eager`` PyTorch, where each op of
a norm, rotary embedding or gated activation is its own kernel that reads and writes the
whole tensor, often upcast to fp32 (see ``EAGER_*`` in
:mod:`gpuscale.perf.step_memory_bound`), and the loss keeps three fp32 copies of the logits
(:data:`gpuscale.perf.memory.LOSS_BYTES`)."""
PP_SPLITS = ("even", "account", "balanced")
"""How a pipeline's layers are placed on its stages: ``even``, L / (pp vpp) layers per chunk
(:func:`gpuscale.perf.stages.even_chunks` where they do not divide) with the output layer
beside the last stage's (Megatron-LM's default); ``account``, the embedding and the loss in
a layer's place each; ``balanced``,
placed so that the slowest stage has the least work, the output layer counted at its FLOPs
(nanotron; Megatron-Core's uneven layouts). See :mod:`gpuscale.perf.stages`."""


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
    loss: str | None = None
    """How the loss runs, one of :data:`ELEMENTWISE`: a fused cross-entropy kernel or
    PyTorch's op-by-op ``cross_entropy`` (:data:`gpuscale.perf.memory.LOSS_BYTES`). None:
    as ``elementwise`` (a run that compiles its blocks but not its loss, as torchtitan's of
    2024, is fused elementwise with an eager loss)."""
    ep_dispatch: str = "hierarchical"
    """One of :data:`~gpuscale.perf.comm.moe.EP_DISPATCH` (matters only to MoE plans)."""
    fp8_param_gather: bool = False
    """Parameter all-gathers carry FP8 weights (1 byte): Megatron's --fp8-param-gather (or
    --fp4-param-gather), whose FP8 weights are the model's own, with no 16-bit copy beside
    the optimizer's fp32 master; torchao's enable_fsdp_float8_all_gather, which casts
    FSDP's sharded parameters to FP8 for each all-gather. Only with fp8/fp4 precision and a
    sharded optimizer (distributed optimizer, ZeRO, FSDP)."""
    cuda_graphs: bool = False
    """The whole training step is captured in CUDA graphs and replayed (Megatron-Core's
    ``full_iteration`` scope): the host's fitted fixed costs are not charged, the work once
    a step (``step_overhead_s``: the framework's loop, logging, the data loader) and once a
    micro-batch, and an MoE layer's router, permutation and per-expert launches with the
    host waiting on the token counts (``moe_layer_overhead_s``, ``moe_expert_overhead_s``),
    which Megatron-Core's capture requires gone (sync-free, capacity-bounded dispatch). A
    layer's small kernels still run for their minimum time: ``layer_overhead_s`` stays.
    Per-layer graphs (Megatron-Core's default scope, Transformer Engine's
    ``make_graphed_callables``) leave every fixed cost: the published runs that name CUDA
    graphs without the scope are measured with them. Megatron-Bridge's 26.06-26.08 MXFP8
    recipes for Qwen3 and DeepSeek-V3 on GB200, GB300 and B300 capture whole steps: priced
    so, their 15 published runs come within -16 to +3 % (``tests/perf/test_cuda_graphs.py``),
    against 20-45 % slow with the host's costs."""
    recompute_modules: tuple[str, ...] = DEFAULT_MODULES
    """What selective recomputation runs again (:data:`gpuscale.perf.recompute.RECOMPUTE_MODULES`;
    default: the attention core, Korthikanti et al.'s selective recomputation)."""
    memory_headroom: float = 0.0
    """Fraction of each GPU's memory a plan must leave free (fragmentation beyond the
    activation overhead the memory model adds, a profiler, a margin): plans fit in
    (1 - headroom) x the memory the driver reports."""
    grad_accumulation: str = "fused"
    """One of :data:`GRAD_ACCUMULATION`."""
    pp_p2p: str = "overlapped"
    """One of :data:`PP_P2P`."""
    cp_comm: str = "p2p"
    """One of :data:`CP_COMM` (matters only to plans with cp > 1)."""
    pp_split: str = "even"
    """One of :data:`PP_SPLITS`: the placement ``train estimate`` prices, and the one
    ``train search`` tries beside the even split (each plan carries its own, ``Plans.split``)."""
    shard_group: int = 0
    """Hybrid sharding (HSDP): the data-parallel ranks (of DP x CP) that a sharded
    optimizer, ZeRO or FSDP spreads its states over, replicated across the DP x CP /
    shard_group groups, whose gradient shards are all-reduced across the replicas (PyTorch
    FSDP's HYBRID_SHARD, torchtitan's dp_shard, Megatron's
    --num-distributed-optimizer-instances = DP x CP / shard_group). 0: all of them. A plan
    with fewer data-parallel ranks shards over all it has."""

    @property
    def loss_kind(self) -> str:
        """The loss's kernels: ``loss``, or as ``elementwise`` when it is not given."""
        return self.loss or self.elementwise

    @property
    def memory_capacity(self) -> float:
        """Bytes a plan may use on each GPU: the driver's total less the headroom."""
        return self.gpu.memory_bytes * (1.0 - self.memory_headroom)

    def _choice(self, name: str, flag: str, choices: tuple[str, ...]) -> None:
        """Field ``name`` read as one of ``choices`` in any case (Eager as eager), else an
        error naming ``flag`` and the value as given."""
        v = getattr(self, name)
        said = v.strip().lower() if isinstance(v, str) else v
        if said not in choices:
            raise InputError(flag, v, f"one of {', '.join(choices)}")
        object.__setattr__(self, name, said)

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
        self._choice("attention", "attention", ATTENTION)
        if self.loss is not None:
            self._choice("loss", "loss", ELEMENTWISE)
        self._choice("elementwise", "elementwise", ELEMENTWISE)
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
            "mla_up_proj": (
                "MLA or DeepSeek-V4 attention",
                m.mla is not None or m.compressed is not None,
            ),
            "mlp": ("dense MLP layers", m.mlp_layers > 0),
            "moe": ("MoE layers", m.is_moe),
            "moe_act": ("MoE layers", m.is_moe),
            "shared_experts": ("shared experts", m.is_moe and m.shared_experts > 0),
            # Megatron-Core's "mamba" module is the MambaLayer's; a Gated DeltaNet sits in
            # a TransformerLayer, which that flag does not reach
            "mamba": ("Mamba layers", m.mamba is not None and not m.gated_deltanet),
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
        self._choice("ep_dispatch", "ep-dispatch", EP_DISPATCH)
        if self.fp8_param_gather and self.precision not in ("fp8", "fp4"):
            raise InputError(
                "fp8-param-gather", True, f"fp8 or fp4 precision (not {self.precision})"
            )
        self._choice("grad_accumulation", "grad-accumulation", GRAD_ACCUMULATION)
        self._choice("pp_p2p", "pp-p2p", PP_P2P)
        if isinstance(self.cp_comm, str) and self.cp_comm.strip().lower() == "allgather":
            object.__setattr__(self, "cp_comm", "all_gather")  # Megatron-LM's help spelling
        self._choice("cp_comm", "cp-comm", CP_COMM)
        self._choice("pp_split", "pp-split", PP_SPLITS)
        self._choice("zero3_gathers", "zero3-gathers", ZERO3_GATHERS)
        g = self.shard_group
        if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g <= MAX_GPUS:
            raise InputError(
                "shard-group",
                g,
                f"a number of data-parallel ranks from 1 to {MAX_GPUS:,}, or 0 to shard over "
                "all of them",
            )

    @property
    def cp_exchange(self) -> str:
        """The context-parallel exchange priced: ``cp_comm``, except that DeepSeek Sparse
        Attention runs only Megatron's all-gather ("DSAttention context parallelism
        currently supports cp_comm_type=allgather only"), so the ring is its all-gather."""
        if self.model.sparse is not None and self.cp_comm == "p2p":
            return "all_gather"
        return self.cp_comm

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
    split: IntArray
    """Index into :data:`PP_SPLITS`: how the pipeline's layers sit on its stages."""

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
                else (0 if f.name in ("recompute", "sharding", "shard_group", "split") else 1)
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
        """Layers on the fullest pipeline stage under the even split
        (:func:`gpuscale.perf.stages.even_chunks`): ``vpp`` chunks of ceil(L / (pp vpp))
        layers where they divide (Megatron's layers-per-virtual-stage); otherwise the
        first ``full`` chunks in the model's order hold c = ceil(L / (pp vpp)) layers and
        the rest c - 1, chunk k on stage k mod pp, so the fullest stage holds
        (c - 1) vpp + ceil(full / pp): the memory's first stage, and the pipeline's pace
        unless the last one's layers and output layer take longer."""
        n = self.pp * self.vpp
        c = np.ceil(layers / n)
        full = layers - n * (c - 1)
        out: FloatArrayT = ((c - 1) * self.vpp + np.ceil(full / self.pp)).astype(np.float64)
        return out

    def last_stage_layers(self, layers: int) -> FloatArrayT:
        """Layers on the last pipeline stage under the even split
        (:func:`gpuscale.perf.stages.even_chunks`), beside the output layer: the rest,
        L - (pp - 1) ceil(L / pp), without interleaving; with it, (c - 1) vpp + floor(full /
        pp), the last stage holding fewer of the ``full`` chunks of c layers. All of a
        stage's (:meth:`stage_layers`) where they divide."""
        n = self.pp * self.vpp
        c = np.ceil(layers / n)
        rest = layers - (n - 1) * c
        full = layers - n * (c - 1)
        chunks = (c - 1) * self.vpp + np.floor(full / self.pp)
        out: FloatArrayT = np.where((self.vpp == 1) & (rest >= 1), rest, chunks).astype(np.float64)
        return out

    def sharded_over(self, group: int) -> Plans:
        """These plans with their states sharded over ``group`` data-parallel ranks (hybrid
        sharding, ``hsdpN`` in a label) where that splits them: more DP x CP ranks than the
        group, and sharded states; 0 (all of them) elsewhere."""
        split = (self.dp * self.cp > group) & (self.sharding != SHARDING.index("none"))
        return replace(self, shard_group=np.where(split, group, 0).astype(np.int64))

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
            "pp_split": PP_SPLITS[int(self.split[i])],
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
        if r["pp"] > 1 and r["pp_split"] != "even":
            parts.append(r["pp_split"])
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


def memory_sharding(p: Plans) -> IntArray:
    """The sharding each plan's memory is counted as: the distributed optimizer's for
    :func:`pipelined_fsdp` plans and for FSDP (ZeRO-3) under a pipeline, the plan's own
    otherwise.

    Under a pipeline, PyTorch's schedules turn FSDP's gradient sync off for the
    micro-batches before the last (``backward_maybe_with_nosync``; since late 2024 for
    all, reduce-scattering once after them), so each stage's gradients accumulate whole in
    fp32 (the reduce dtype), and torchtitan keeps the gathered weights after the forward
    (``reshard_after_forward`` is off when PP is on): 2 + 4 bytes a parameter held whole
    (1 + 4 with FP8 gathers; no persistent FP8 copy), the optimizer's 12 sharded.
    torchtitan's Llama 3.1 405B runs on 512 H100 (TP8 PP8 FSDP8) peak at 73-85 GiB
    reserved, where per-layer sharding would hold 36 GiB
    (``benchmarks/heldout/memory_published.csv``, ``gpuscale validate memory``). Their
    time stays priced per micro-batch (:func:`pipelined_fsdp`).
    """
    out: IntArray = np.where(pipelined_zero3(p), SHARDING.index("dist-opt"), cost_sharding(p))
    return out


def pipelined_zero3(p: Plans) -> BoolArray:
    """Plans whose FSDP (ZeRO-3) runs under a pipeline: its weights are held as gathered,
    whole (:func:`memory_sharding`)."""
    out: BoolArray = (p.sharding == SHARDING.index("zero3")) & (p.pp > 1)
    return out


def cost_sharding(p: Plans) -> IntArray:
    """The sharding each plan's DP traffic is costed as: the distributed optimizer's for
    :func:`pipelined_fsdp` plans, the plan's own otherwise (its memory:
    :func:`memory_sharding`)."""
    out: IntArray = np.where(pipelined_fsdp(p), SHARDING.index("dist-opt"), p.sharding)
    return out


def shard_group_of(w: Workload, p: Plans) -> IntArray:
    """Each plan's hybrid shard group: its own, else the workload's (0: all ranks)."""
    out: IntArray = np.where(p.shard_group > 0, p.shard_group, w.shard_group)
    return out


def separate_accumulation(w: Workload, p: Plans) -> BoolArray:
    """Plans whose gradients accumulate in a pass of their own: the workload's
    ``separate`` accumulation (DeepSpeed's BF16 optimizer) under DDP or ZeRO-1 sharding,
    the stages DeepSpeed runs it at; its ZeRO-2/3 optimizers are others."""
    if w.grad_accumulation != "separate":
        return np.zeros(len(p), dtype=bool)
    out: BoolArray = p.sharding <= SHARDING.index("zero1")
    return out
