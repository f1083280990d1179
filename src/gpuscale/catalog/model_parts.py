"""Pydantic schemas of a model's parts beside its transformer shape: multi-head latent
attention, the windowed layers' own attention shape, linear-recurrent mixers (Mamba-2,
Gated DeltaNet), DeepSeek Sparse Attention's indexer and DeepSeek-V4's compressed
attention, and the block letters of a hybrid layer pattern.
:class:`gpuscale.catalog.schema.Model` holds them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class MLA(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3) low-rank projection sizes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


class WindowAttention(BaseModel):
    """The attention shape of a model's windowed (sliding or chunked) layers where it is not
    its full-attention layers' (Step 3.5's ``attention_other_setting``: 96 query heads in
    its sliding layers, 64 in its full ones, each kind over 8 KV heads of 128; Gemma 4's
    sliding layers: 16 KV heads of 256 to its full layers' 4 of 512). A size left at 0 is
    the model's own; ``k_eq_v`` is the windowed layers' own (not the model's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    heads: int = Field(default=0, ge=0, le=1_000_000)
    kv_heads: int = Field(default=0, ge=0, le=1_000_000)
    head_dim: int = Field(default=0, ge=0, le=1_000_000)
    k_eq_v: bool = False
    """K and V from one projection in the windowed layers (see ``Model.k_eq_v``)."""


class Mamba(BaseModel):
    """Sizes of a linear-recurrent mixer: Mamba-2 (Dao & Gu 2024, arXiv 2405.21060;
    Megatron-Core ``MambaMixer``) or Gated DeltaNet (Yang et al., "Gated Delta Networks:
    Improving Mamba2 with Delta Rule", arXiv 2412.06464; Qwen3-Next's linear attention).

    Both project the input to a gate z, values x, keys B and queries C and per-head decay
    and step scalars, run a short causal conv over x, B and C, a chunked scan whose state
    per head is N x P, a gated norm and an output projection. A Gated DeltaNet maps onto
    these sizes as: ``heads`` its value heads, ``head_dim`` the value head dimension,
    ``state`` the key head dimension, ``groups`` its key heads (queries and keys, like
    GQA's key/value heads); its in_proj adds a write strength (beta) per value head, its
    conv has no bias, and its scan applies the delta rule (:attr:`rule`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    heads: int = Field(gt=0, le=1_000_000)
    head_dim: int = Field(gt=0, le=1_000_000)
    state: int = Field(gt=0, le=1_000_000)
    """SSM state size N per head (a Gated DeltaNet's key head dimension)."""
    groups: int = Field(default=1, gt=0, le=1_000_000)
    """B/C projection groups (like GQA's key/value heads; a Gated DeltaNet's key heads)."""
    conv_kernel: int = Field(default=4, gt=0, le=1_000_000)
    chunk: int = Field(default=128, gt=0, le=1_000_000)
    """Chunk length of the scan's block decomposition (SSD 128 in Nemotron; the
    flash-linear-attention gated delta rule kernels 64)."""
    rule: Literal["ssd", "gated_delta"] = "ssd"
    """The scan: ``ssd``, Mamba-2's state-space duality; ``gated_delta``, the gated delta
    rule (each token's write corrects the state's current value for its key)."""

    @property
    def inner(self) -> int:
        """Inner width d_inner = heads x head_dim."""
        return self.heads * self.head_dim

    @property
    def conv_channels(self) -> int:
        """Channels of the causal conv: x, B and C (d_inner + 2 G N)."""
        return self.inner + 2 * self.groups * self.state

    @property
    def in_proj_width(self) -> int:
        """Outputs of in_proj: z, x, B, C and dt (2 d_inner + 2 G N + heads), and a Gated
        DeltaNet's beta (one more per head)."""
        scalars = 2 if self.rule == "gated_delta" else 1
        return self.inner + self.conv_channels + scalars * self.heads


class SparseAttention(BaseModel):
    """DeepSeek Sparse Attention (DSA: "DeepSeek-V3.2-Exp: Boosting Long-Context
    Efficiency with DeepSeek Sparse Attention", DeepSeek-AI 2025; GLM-5): a lightning
    indexer scores every earlier token for each query (``heads`` x ``head_dim``
    multiply-adds per key in FP8, ReLU, a weighted sum over its heads) and the attention
    core attends only to the ``topk`` tokens it ranks highest. The KV cache keeps every
    token (and the indexer's keys): unlike a sliding window, any of them may be chosen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    topk: int = Field(gt=0, le=100_000_000)
    """Keys each query attends to (DeepSeek-V3.2, GLM-5: 2,048)."""
    heads: int = Field(gt=0, le=1_000_000)
    head_dim: int = Field(gt=0, le=1_000_000)
    layers: int | None = Field(default=None, ge=0)
    """Attention layers that attend to the top-k only (MiniMax M3: 57 of 60, the first three
    attend to every key); default all of them."""
    indexers: int | None = Field(default=None, ge=0)
    """Of those, the layers that run an indexer of their own (GLM-5.2: 21 of 78, the others
    reuse a neighbouring layer's selection); default all of them."""
    head_weights: bool = True
    """The indexer sums its heads' scores weighted by a per-token projection (DeepSeek-V3.2,
    GLM-5); False: it takes their maximum, with no such projection (MiniMax M3)."""


class CompressedAttention(BaseModel):
    """DeepSeek-V4's hybrid attention (transformers ``DeepseekV4Attention``; Megatron-Core's
    ``dsv4_hybrid`` variant): every query head attends over one shared key/value head of
    the model's ``head_dim`` (K = V, multi-query), its queries come through a low-rank
    latent (``q_lora_rank``) and its output through a grouped low-rank projection
    (``o_groups`` groups of ``o_lora_rank``). A query sees the last ``window`` tokens in
    every layer and, in a compressed layer, entries that each sum ``ratio`` tokens'
    projected keys under a learned softmax gate: compressed sparse attention (CSA, the
    ratio ``csa_ratio``) attends to the ``Model.sparse.topk`` entries its lightning indexer
    ranks highest, heavily compressed attention (HCA, any other ratio) to all of them."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    q_lora_rank: int = Field(gt=0, le=10_000_000)
    o_groups: int = Field(gt=0, le=1_000_000)
    o_lora_rank: int = Field(gt=0, le=10_000_000)
    window: int = Field(gt=0, le=100_000_000)
    """Sliding window in every layer, the query included (DeepSeek-V4: 128)."""
    ratios: list[int]
    """Compression ratio of each layer, then of each multi-token-prediction depth (Megatron's
    ``csa_compress_ratios``; DeepSeek-V4-Flash: 0, 0, then 4 and 128 alternating); 0 = the
    window only. Without the MTP depths' entries, a depth's is 0 (Megatron-Core pads them
    so when it derives the ratios from a layer pattern)."""
    csa_ratio: int = Field(default=4, gt=0)
    """The ratio whose layers pick their entries with the indexer (CSA)."""


HYBRID_BLOCKS = {"M": "Mamba-2 or Gated DeltaNet mixer", "*": "attention", "-": "MLP", "E": "MoE"}
"""Block letters of a hybrid layer pattern (Megatron-Core's ``hybrid_override_pattern``)."""
