"""Pydantic schemas of the catalog entries (GPUs, systems, models).

YAML carries human-scale numbers with the unit in the field name (``hbm_gb``,
``nvlink_gb_per_s``); the properties expose SI values (bytes, bytes/s, FLOP/s).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuscale.catalog.model_parts import (
    HYBRID_BLOCKS,
    MLA,
    CompressedAttention,
    Mamba,
    SparseAttention,
    WindowAttention,
)
from gpuscale.units import GB, GiB, MiB

__all__ = [
    "GPU",
    "HYBRID_BLOCKS",
    "MLA",
    "PRECISIONS",
    "CompressedAttention",
    "Mamba",
    "Model",
    "SparseAttention",
    "System",
    "WindowAttention",
]

Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4"]
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    key: str = ""
    name: str
    aliases: list[str] = Field(default_factory=list)
    source: str


Arch = Literal["volta", "ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3", "cdna4"]


class GPU(_Entry):
    vendor: str
    arch: Arch
    """Micro-architecture: which kernels exist for it (e.g. Hopper's asynchronous
    warpgroup MMA that FlashAttention-3 and cuDNN's fused attention use and FA2 does not)."""
    form_factor: str
    peak_tflops: dict[Precision, float]
    hbm_gb: float
    """The vendor's memory size. NVIDIA and AMD quote HBM in binary units: "80 GB" is
    80 GiB of stacks (an A100 80GB's driver reports 81,920 MiB)."""
    device_memory_mib: float | None = Field(default=None, gt=0)
    """Total device memory the driver reports (``nvidia-smi`` memory.total), MiB: what a
    memory fit is checked against. Given where it is not ``hbm_gb`` GiB exactly (H100
    81,559 MiB, B200 183,359 MiB; ECC-reserved GDDR on L40S/L4); absent, ``hbm_gb`` GiB."""
    hbm_tb_per_s: float
    nvlink_gb_per_s: float = 0.0
    pcie_gen: int = 4
    host_link_gb_per_s: float | None = Field(default=None, gt=0)
    """One direction of the GPU's own link to host memory where it is not a PCIe x16 slot:
    NVLink-C2C on a superchip (900 GB/s both ways per Grace CPU, shared by its GPUs)."""
    tdp_w: float
    sms: int = Field(default=0, ge=0)
    """Streaming multiprocessors (compute units): the tiles of a GEMM are spread over them."""
    attention_rel: float = Field(default=1.0, gt=0)
    """Flash-attention throughput over a part of the same architecture and tensor-core peak: 1.35
    for Blackwell Ultra's doubled exponential units (~35 % faster forward than GB200, NVIDIA)."""
    softmax_head_dim: float | None = Field(default=None, gt=0)
    """Head dimension below which flash attention waits on its softmax's exponentials (see
    :func:`gpuscale.perf.kernels.softmax_factors`: H100 and Blackwell Ultra 64, B200 128)."""
    matmul_eff: float = Field(gt=0, le=1)
    """Maximum achievable BF16 matmul FLOP/s over the dense peak (MAMF / peak): what the
    best-shaped GEMM reaches with the vendor BLAS at the clock the part sustains under load
    (A100 SXM 0.87, H100 SXM 0.80, B200 0.78, GB200 0.73, MI300X 0.51). The training step
    model's GEMMs run at a fitted fraction of it (``Calibration.gemm_eff_max``)."""
    power_cap_w: float | None = None
    """Board power limit when a deployment runs the part below its rated TDP."""

    @property
    def clock_fraction(self) -> float:
        """Sustained tensor-core clock under the power cap relative to rated TDP.

        Dynamic power scales as f V^2 and voltage tracks frequency along the DVFS curve,
        so P ~ f^3 and f ~ (cap / TDP)^(1/3) (a first-order CMOS scaling argument).
        """
        if self.power_cap_w is None or self.power_cap_w >= self.tdp_w:
            return 1.0
        return float((self.power_cap_w / self.tdp_w) ** (1.0 / 3.0))

    @property
    def memory_bytes(self) -> float:
        """Device memory in bytes: the driver's total, else ``hbm_gb`` in GiB."""
        if self.device_memory_mib is not None:
            return self.device_memory_mib * MiB
        return self.hbm_gb * GiB

    @property
    def hbm_bw_Bps(self) -> float:
        return self.hbm_tb_per_s * 1e12

    @property
    def nvlink_bw_Bps(self) -> float:
        return self.nvlink_gb_per_s * GB

    @property
    def training_precision(self) -> str:
        """The 16-bit format mixed-precision training uses on this part when none is named:
        bf16 where its tensor cores have it, fp16 on Volta."""
        return "bf16" if "bf16" in self.peak_tflops else "fp16"

    @property
    def attention_kernel(self) -> str:
        """The attention kernel a run uses when none is named: FlashAttention needs Ampere
        or later, so Volta runs Megatron's unfused softmax path; later parts the fastest
        fused kernel."""
        return "unfused" if self.arch == "volta" else "fused"

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s for ``precision``; a precision the GPU lacks is an input error."""
        from gpuscale.errors import InputError

        if precision not in self.peak_tflops:
            raise InputError(
                "precision", precision, f"{self.key} supports {', '.join(self.peak_tflops)}"
            )
        return self.peak_tflops[precision] * 1e12


class System(_Entry):
    gpu: str
    gpus_per_node: int = Field(gt=0)
    nvlink_domain_gpus: int = Field(gt=0)
    scaleup_gb_per_s: float = Field(gt=0)
    nvls: bool = False
    scaleup_mesh: bool = False
    """GPUs fully connected by direct links (AMD Infinity Fabric, a 4-GH200 node's NVLink),
    not through a switch: a GPU reaches the k - 1 other members of its group over k - 1 of
    its links only."""
    nics_per_node: int = Field(ge=0)
    nic_gbps: float = Field(ge=0)
    host_cpu: Literal["intel", "amd", "arm"] = "intel"
    """The host CPUs' vendor: NCCL launches each network step through a proxy thread whose
    overhead it takes as 2 us on AMD x86 hosts and 1 us elsewhere (tuning.cc
    getNetOverhead)."""
    pcie_gen: int
    pcie_slots: int
    node_power_kw: float
    rack_power_kw: float | None = None

    @property
    def scaleup_bw_Bps(self) -> float:
        """Per-GPU scale-up bandwidth, one direction, bytes/s."""
        return self.scaleup_gb_per_s * GB

    @property
    def nic_bw_Bps_per_gpu(self) -> float:
        """Scale-out injection bandwidth per GPU, one direction, bytes/s."""
        return self.nics_per_node * self.nic_gbps * 1e9 / 8.0 / self.gpus_per_node


class Model(_Entry):
    # upper bounds far beyond any model: they keep the plan search's divisor loops short
    layers: int = Field(gt=0, le=100_000)
    hidden: int = Field(gt=0, le=10_000_000)
    heads: int = Field(gt=0, le=1_000_000)
    kv_heads: int = 0
    head_dim: int = 0
    ffn_hidden: int = Field(default=0, ge=0, le=100_000_000)
    gated_mlp: bool = False
    vocab: int = Field(gt=0, le=1_000_000_000)
    max_seq: int = Field(default=2048, gt=0)
    position: Literal["learned", "rope", "alibi", "none"] = "rope"
    tied_embeddings: bool = False
    dropout: bool = False
    """Trained with dropout (GPT-3, Megatron's GPT configs, OPT: 0.1): its 1-byte masks are
    kept for the backward pass, after attention and after the MLP (2sbh of Korthikanti et
    al.'s 10sbh) and, on the unfused attention path, one per attention score. Models
    trained without it (LLaMA and later) keep none: PyTorch's dropout at p = 0 returns its
    input."""
    num_experts: int = Field(default=1, le=1_048_576)
    """Routed experts per MoE layer (up to 2^20: parameter-efficient expert retrieval runs a
    million tiny experts, He 2024)."""
    top_k: int = 1
    shared_experts: int = 0
    shared_ffn_hidden: int = Field(default=0, ge=0, le=100_000_000)
    """Width of a MoE layer's shared experts together; default ``shared_experts`` x
    ``ffn_hidden``. Given where the shared MLP is not a whole number of routed experts
    (Granite 4.0-H Small: one of 1,024 beside 768-wide routed experts)."""
    route_groups: int = Field(default=1, ge=1)
    """Group-limited routing (DeepSeek-V2/V3 ``n_group``): the routed experts in this many
    contiguous groups, of which a token may use ``route_topk_groups``."""
    route_topk_groups: int = Field(default=0, ge=0)
    """``topk_group``: groups a token's experts are drawn from (DeepSeek-V3: 4 of 8, so a
    token reaches at most 4 nodes over EP64; report sec. 2.1.2); 0 = no limit."""
    dense_ffn_hidden: int = Field(default=0, ge=0, le=100_000_000)
    first_dense_layers: int = 0
    moe_layer_step: int = Field(default=1, ge=1)
    """Every n-th layer after the first dense ones is MoE, the others dense (Llama 4
    Maverick: 2, ``interleave_moe_layer_step``)."""
    mla: MLA | None = None
    attn_gate: bool = False
    """Gated attention (Qwen3-Next): the Q projection also yields a per-channel gate whose
    sigmoid scales the attention output before the output projection (Megatron-Core
    ``attention_output_gate``)."""
    pattern: str = ""
    """Hybrid models (Nemotron-H, Nemotron 3; Qwen3-Next, Qwen3.5): one letter per block, M a
    Mamba-2 or Gated DeltaNet mixer (:attr:`mamba`), * attention, - an MLP, E a MoE; each
    block is one of these with its norm and residual.
    Empty: every layer is attention + MLP (or MoE)."""
    mamba: Mamba | None = None
    moe_latent: int = Field(default=0, ge=0)
    """LatentMoE (Nemotron 3 Super/Ultra): routed experts work in this smaller width, with a
    down-projection from and an up-projection to the hidden size; 0 = off."""
    window: int = Field(default=0, ge=0)
    """Sliding-window attention: tokens each query sees back (GPT-OSS 128); 0 = none."""
    window_layers: int | None = Field(default=None, ge=0)
    """Attention layers that use the window (GPT-OSS: every other one); default all."""
    window_attn: WindowAttention | None = None
    """The windowed layers' own query heads, KV heads and head dimension where they are not
    the model's (Step 3.5: 96 query heads in its sliding layers, 64 in its full ones); None:
    every attention layer has the model's."""
    k_eq_v: bool = False
    """K and V from one projection in the attention layers of the model's own shape (Gemma
    4's ``attention_k_eq_v``: its full-attention layers have no ``v_proj``, V is K before
    their norms): h x k weights fewer and one K/V GEMM output; K and V are still cached and
    kept apart (each normed on its own). The windowed layers' own shape says its own
    (:attr:`WindowAttention.k_eq_v`)."""
    head_gate: bool = False
    """A sigmoid gate per head on the attention output (Step 3.5's ``g_proj``: h x heads
    weights, one gate a head and token); :attr:`attn_gate` gates each channel."""
    sparse: SparseAttention | None = None
    """DeepSeek Sparse Attention in every attention layer (DeepSeek-V3.2, GLM-5); with
    :attr:`compressed`, the indexer of its CSA layers, over compressed entries."""
    compressed: CompressedAttention | None = None
    """DeepSeek-V4's compressed hybrid attention (then ``kv_heads`` is 1 and ``head_dim``
    the shared key/value head's width)."""
    residual_streams: int = Field(default=1, ge=1, le=64)
    """Residual streams of manifold-constrained hyper-connections (mHC, DeepSeek-V4's
    ``hc_mult`` 4): each block reads a learned mix of the streams and writes back to all
    of them; 1 = the plain residual."""
    window_kind: Literal["sliding", "chunked"] = "sliding"
    """How the windowed layers see ``window`` tokens: ``sliding``, the last ``window`` ones;
    ``chunked``, those of the query's own block of ``window`` tokens (Llama 4's attention
    chunks of 8,192 in 3 of 4 layers, ``attention_chunk_size``)."""
    mtp_layers: int = Field(default=0, ge=0)
    """Multi-token prediction depths run in training (DeepSeek-V3 sec. 2.2; Megatron-Core
    ``mtp_num_layers``): each projects [embedding; hidden] (2h -> h), runs one more layer
    and the shared output head on the last pipeline stage."""
    mtp_weight_sets: int | None = Field(default=None, ge=0)
    """Distinct MTP layers' weights: fewer than the depths when one layer is applied
    repeatedly (``mtp_use_repeated_layer``); default: one set per depth."""
    mtp_pattern: str = ""
    """Blocks of one MTP depth in a hybrid model (e.g. "*E"); default: attention followed
    by the model's MoE (or MLP)."""
    mtp_window: bool = False
    """An MTP depth's attention is a windowed layer (the model's window and
    :attr:`window_attn`'s shape; Step 3.5's MTP layers slide); default: it attends to the
    whole sequence with the model's shape."""

    @model_validator(mode="after")
    def _defaults(self) -> Model:
        # frozen: fill derived defaults through object.__setattr__
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.kv_heads < 0 or self.heads % self.kv_heads:
            raise ValueError(
                f"kv_heads={self.kv_heads} must divide heads={self.heads} (grouped-query "
                "attention shares each KV head among a whole number of query heads)"
            )
        if self.head_dim == 0:
            if self.hidden % self.heads:
                raise ValueError(
                    f"hidden={self.hidden} is not a multiple of heads={self.heads}: give head_dim"
                )
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.num_experts < 1 or self.top_k < 1:
            raise ValueError(
                f"num_experts={self.num_experts} and top_k={self.top_k} must be at least 1"
            )
        if self.ffn_hidden == 0:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if self.dense_ffn_hidden == 0:
            object.__setattr__(self, "dense_ffn_hidden", self.ffn_hidden)
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k={self.top_k} exceeds num_experts={self.num_experts}")
        if self.shared_ffn_hidden == 0:
            object.__setattr__(self, "shared_ffn_hidden", self.shared_experts * self.ffn_hidden)
        elif self.shared_experts == 0:
            raise ValueError(
                f"shared_ffn_hidden={self.shared_ffn_hidden} needs shared_experts >= 1 "
                "(how many shared experts that width holds)"
            )
        if self.window_layers is None:
            object.__setattr__(self, "window_layers", self.attn_layers if self.window else 0)
        if self.window_layers and not self.window:
            raise ValueError(f"window_layers={self.window_layers} needs a window (tokens) > 0")
        if (self.window_layers or 0) > self.attn_layers:
            n = self.attn_layers
            raise ValueError(f"window_layers={self.window_layers} exceeds the {n} attention layers")
        if self.window_attn is not None or self.mtp_window:
            self._check_window_attn()
        if self.num_experts > 1 and self.num_experts % self.route_groups:
            raise ValueError(
                f"route_groups={self.route_groups} does not divide num_experts="
                f"{self.num_experts} (the experts split into equal groups)"
            )
        if self.route_topk_groups > self.route_groups:
            raise ValueError(
                f"route_topk_groups={self.route_topk_groups} exceeds route_groups="
                f"{self.route_groups} (a token draws its experts from some of the groups)"
            )
        if self.route_topk_groups and self.num_experts > 1:
            reach = self.route_topk_groups * self.num_experts // self.route_groups
            if self.top_k > reach:
                raise ValueError(
                    f"top_k={self.top_k} exceeds the {reach} experts a token can reach: "
                    f"route_topk_groups={self.route_topk_groups} of route_groups="
                    f"{self.route_groups} groups of {self.num_experts // self.route_groups}"
                )
        if self.compressed is not None:
            self._check_compressed()
        if self.sparse is not None:
            if self.window:
                raise ValueError("sparse (DeepSeek Sparse Attention) with a window is not modelled")
            x = self.sparse
            default = self.attn_layers
            if self.compressed is not None:  # DeepSeek-V4: the indexer of the CSA layers
                default = self.compressed.ratios[: self.layers].count(self.compressed.csa_ratio)
                if x.layers not in (None, default) or x.indexers not in (None, default):
                    raise ValueError(
                        f"sparse.layers and sparse.indexers must be the {default} layers "
                        f"whose compressed.ratios is csa_ratio={self.compressed.csa_ratio}"
                    )
            sparse_layers = default if x.layers is None else x.layers
            if sparse_layers > self.attn_layers:
                raise ValueError(
                    f"sparse.layers={x.layers} exceeds the {self.attn_layers} attention layers"
                )
            if (x.indexers or 0) > sparse_layers:
                raise ValueError(
                    f"sparse.indexers={x.indexers} exceeds the {sparse_layers} layers with "
                    "sparse attention"
                )
            indexers = sparse_layers if x.indexers is None else x.indexers
            full = x.model_copy(update={"layers": sparse_layers, "indexers": indexers})
            object.__setattr__(self, "sparse", full)
        if self.attn_gate and self.mla is not None:
            raise ValueError("attn_gate is a gate on the Q projection: not modelled with mla")
        if self.head_gate and (self.mla is not None or self.compressed is not None):
            raise ValueError("head_gate is a GQA layer's gate: not modelled with mla or compressed")
        if self.k_eq_v and (self.mla is not None or self.compressed is not None):
            raise ValueError("k_eq_v is a GQA layer's K/V projection: not with mla or compressed")
        if self.mtp_layers > self.layers:
            raise ValueError(
                f"mtp_layers={self.mtp_layers} exceeds the model's {self.layers} "
                f"{'blocks' if self.pattern else 'layers'} "
                "(multi-token prediction adds a few depths: DeepSeek-V3 1)"
            )
        if self.mtp_weight_sets is None:
            object.__setattr__(self, "mtp_weight_sets", self.mtp_layers)
        if (self.mtp_weight_sets or 0) > self.mtp_layers:
            raise ValueError(
                f"mtp_weight_sets={self.mtp_weight_sets} exceeds mtp_layers={self.mtp_layers}"
            )
        if set(self.mtp_pattern) - set(HYBRID_BLOCKS):
            raise ValueError(f"mtp_pattern letters must be among {''.join(HYBRID_BLOCKS)}")
        for name, blocks in (("pattern", self.pattern), ("mtp_pattern", self.mtp_pattern)):
            if "M" in blocks and self.mamba is None:
                raise ValueError(f"{name} has Mamba blocks (M) but no mamba sizes are given")
            if "E" in blocks and not self.is_moe:
                raise ValueError(f"{name} has MoE blocks (E) but num_experts is 1")
        if self.pattern:
            bad = set(self.pattern) - set(HYBRID_BLOCKS)
            if bad:
                letters = ", ".join(f"{k} ({v})" for k, v in HYBRID_BLOCKS.items())
                raise ValueError(f"pattern letters {sorted(bad)} unknown; valid: {letters}")
            if len(self.pattern) != self.layers:
                raise ValueError(f"pattern has {len(self.pattern)} blocks but layers={self.layers}")
        return self

    def _check_window_attn(self) -> None:
        """The windowed layers' own shape (its sizes left at 0 the model's; dropped where it
        is the model's) and a windowed MTP depth: GQA layers with a window, no hybrid."""
        other = self.mla is not None or self.compressed is not None or bool(self.pattern)
        if not self.window_layers or other:
            raise ValueError(
                "window_attn and mtp_window need windowed layers (window, window_layers > 0) "
                "of GQA attention: not modelled with mla, compressed attention or a pattern"
            )
        x = self.window_attn
        if x is None:
            return
        heads, kv = x.heads or self.heads, x.kv_heads or self.kv_heads
        d = x.head_dim or self.head_dim
        if heads % kv:
            raise ValueError(
                f"window_attn.kv_heads={kv} must divide window_attn.heads={heads} (grouped-query "
                "attention shares each KV head among a whole number of query heads)"
            )
        same = (heads, kv, d, x.k_eq_v) == (self.heads, self.kv_heads, self.head_dim, self.k_eq_v)
        full = WindowAttention(heads=heads, kv_heads=kv, head_dim=d, k_eq_v=x.k_eq_v)
        object.__setattr__(self, "window_attn", None if same else full)

    def _check_compressed(self) -> None:
        """DeepSeek-V4's attention: one shared K = V head, a ratio per layer (and MTP depth),
        the indexer's sizes where a layer runs CSA."""
        x = self.compressed
        assert x is not None
        if self.kv_heads != 1 or self.mla is not None or self.window or self.pattern:
            raise ValueError(
                "compressed (DeepSeek-V4) attention has kv_heads=1 (one shared K = V head), "
                "no mla, its own window (compressed.window, not window) and no hybrid pattern"
            )
        if (self.heads * self.head_dim) % x.o_groups:
            raise ValueError(
                f"compressed.o_groups={x.o_groups} must divide heads x head_dim = "
                f"{self.heads * self.head_dim} (the output projection's groups split the heads)"
            )
        n = len(x.ratios)
        if n not in (self.layers, self.layers + self.mtp_layers) or min(x.ratios) < 0:
            raise ValueError(
                f"compressed.ratios has {n} entries: give one ratio (0 or more) per layer "
                f"({self.layers}), optionally followed by one per MTP depth ({self.mtp_layers})"
            )
        if x.csa_ratio in x.ratios and self.sparse is None:
            raise ValueError(
                f"compressed.ratios has CSA layers (csa_ratio={x.csa_ratio}): give their "
                "indexer's sizes as sparse (topk, heads, head_dim)"
            )

    @property
    def head_counts(self) -> tuple[tuple[int, int], ...]:
        """(query heads, KV heads) of the attention layers: the model's, then its windowed
        layers' where they have a shape of their own (:attr:`window_attn`)."""
        x = self.window_attn
        own = ((self.heads, self.kv_heads),)
        return own if x is None else (*own, (x.heads, x.kv_heads))

    @property
    def hybrid(self) -> bool:
        """Blocks are single mixers or MLPs (a layer pattern), not attention + MLP layers."""
        return bool(self.pattern)

    @property
    def gated_deltanet(self) -> bool:
        """Its mixers are Gated DeltaNets (``mamba.rule`` gated_delta), not Mamba-2's."""
        return self.mamba is not None and self.mamba.rule == "gated_delta"

    @property
    def attn_layers(self) -> int:
        """Blocks or layers with attention."""
        return self.pattern.count("*") if self.pattern else self.layers

    @property
    def mamba_layers(self) -> int:
        return self.pattern.count("M")

    @property
    def mlp_layers(self) -> int:
        """Blocks or layers with a dense MLP."""
        return self.pattern.count("-") if self.pattern else self.layers - self.moe_layers

    @property
    def sublayers_per_layer(self) -> float:
        """Mixer/MLP sub-layers (each a norm, a residual and a TP reduction) per layer: 2 for
        attention + MLP layers, 1 for a hybrid's single blocks."""
        return 1.0 if self.pattern else 2.0

    @property
    def mtp_blocks(self) -> str:
        """The blocks of one MTP depth as pattern letters."""
        if self.mtp_pattern:
            return self.mtp_pattern
        return "*" + ("E" if self.is_moe else "-")

    @property
    def moe_width(self) -> int:
        """Width the routed experts (and the all-to-all) work in: the latent or the hidden."""
        return self.moe_latent or self.hidden

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def moe_layers(self) -> int:
        if self.pattern:
            return self.pattern.count("E")
        if not self.is_moe:
            return 0
        return (self.layers - self.first_dense_layers) // self.moe_layer_step
