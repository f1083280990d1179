"""Inference memory: weight bytes, KV-cache bytes per token, paged blocks, max sequences.

Formulas (each with its source):
- KV bytes per token = 2 (K and V) x layers x kv_heads x head_dim x bytes per element
  (microsoft/vidur vidur/scheduler/utils/memory_planner.py; cli99/llm-analysis analysis.py),
  windowed layers with a shape of their own (Step 3.5) at theirs.
  With tensor parallelism a GPU holds ceil(kv_heads / TP) heads, at least one: KV heads are
  replicated when TP exceeds them (llm-analysis ``max(kv_heads/TP, 1)``).
- MLA (DeepSeek-V2/V3) caches one latent of kv_lora_rank + qk_rope_head_dim per token and
  layer, shared by all heads, so every TP rank holds the whole latent.
- DeepSeek-V4 caches one shared K = V entry of head_dim per ``ratio`` tokens in each
  compressed layer (and the CSA indexer's FP8 key per entry), plus the last ``window``
  tokens' entries in every layer: a fixed amount a sequence, as a hybrid's recurrent state.
- Weights per GPU = parameters x bytes / (TP x PP) (NVIDIA/TensorRT-LLM
  docs/source/reference/memory.md).
- KV pool = engine memory fraction x memory - weights - activation workspace; paged KV
  allocates whole blocks of ``block_size`` tokens (vLLM default 16; waste "under 4%",
  https://blog.vllm.ai/2023/06/20/vllm.html). Layers with a sliding window or attention
  chunks keep only the window's blocks (``seq_blocks``): vLLM's hybrid KV cache manager,
  TensorRT-LLM's pool per window size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from gpuscale.catalog import GPU, Model
from gpuscale.errors import InputError
from gpuscale.perf.attn_kinds import full_view, window_view
from gpuscale.perf.transformer import (
    attn_weights,
    entries_per_token,
    indexer_layers,
    layer_ratios,
    layer_shapes,
    mixer_extra_weights,
)
from gpuscale.sim.kv_blocks import seq_blocks, window_kept

# bytes per element of a stored tensor; 4-bit formats carry their block scales:
# NVFP4 one FP8 scale per 16 values, INT4 (AWQ/GPTQ) one FP16 scale per group of 128
BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "fp4": 0.5 + 1.0 / 16.0,
    "int4": 0.5 + 2.0 / 128.0,
}

SERVING_PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp4", "int4")


@dataclass(frozen=True)
class PrecisionPlan:
    """Storage and compute formats of one deployment."""

    name: str
    weights: str
    compute: str
    """Tensor-core format of the linear-layer GEMMs (weight-only int4 computes in bf16)."""
    kv: str

    @property
    def weight_bytes(self) -> float:
        return BYTES_PER_ELEMENT[self.weights]

    @property
    def kv_bytes(self) -> float:
        return BYTES_PER_ELEMENT[self.kv]


def precision_plan(
    gpu: GPU, precision: str, kv_precision: str | None = None, field: str = "precision"
) -> PrecisionPlan:
    """Weights / compute / KV formats for ``precision`` on ``gpu``.

    fp8 and fp4 checkpoints also store the KV cache in FP8, as TensorRT-LLM FP8 engines do
    "automatically" (NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md @258c754).
    int4 is weight-only (W4A16): GEMMs run in 16-bit after dequantisation.
    """
    p = precision.lower()
    if p not in SERVING_PRECISIONS:
        raise InputError(field, precision, f"one of {', '.join(SERVING_PRECISIONS)}")
    half = "bf16" if "bf16" in gpu.peak_tflops else "fp16"
    if p in ("fp8", "fp4") and p not in gpu.peak_tflops:
        ok = [x for x in SERVING_PRECISIONS if x in gpu.peak_tflops]
        raise InputError(
            field,
            precision,
            f"{gpu.key} has no {p} tensor cores; it supports {', '.join(ok)}, int4",
        )
    if p in ("bf16", "fp16") and p not in gpu.peak_tflops:
        raise InputError(field, precision, f"{gpu.key} supports {', '.join(gpu.peak_tflops)}")
    compute = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp4": "fp4", "int4": half}[p]
    kv = kv_precision or ("fp8" if p in ("fp8", "fp4") else ("fp16" if p == "fp16" else half))
    if kv not in ("bf16", "fp16", "fp8"):
        raise InputError("kv-precision", kv, "one of bf16, fp16, fp8")
    if kv == "fp8" and "fp8" not in gpu.peak_tflops:
        kv = half
    return PrecisionPlan(name=p, weights=p, compute=compute, kv=kv)


# --- parameter counts by role (shapes from perf.transformer) -----------------------------


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by role, whole model (not per GPU)."""

    attention: float
    """Attention projections, and a hybrid model's Mamba-2 mixers (token mixers both)."""
    dense_mlp: float
    """MLP parameters of dense layers (all layers of a dense model)."""
    shared_experts: float
    routed_experts: float
    """All routed experts of all MoE layers."""
    embedding: float
    lm_head: float

    @property
    def total(self) -> float:
        return (
            self.attention
            + self.dense_mlp
            + self.shared_experts
            + self.routed_experts
            + self.embedding
            + self.lm_head
        )

    def active_per_token(self, m: Model) -> float:
        """Parameters one token multiplies through (routed: top_k of num_experts), no embedding."""
        routed = self.routed_experts * m.top_k / m.num_experts if m.is_moe else 0.0
        return self.attention + self.dense_mlp + self.shared_experts + routed + self.lm_head


def param_counts(m: Model) -> ParamCounts:
    """The model's parameters by role, whole model: attention (with the Mamba mixers and any
    extra mixer weights), dense MLPs, shared experts (with LatentMoE projections), routed
    experts with their routers (per-layer counts of :func:`layer_shapes` x the layers of
    each kind), the embedding (vocab x hidden) and an untied LM head of the same size."""
    sh = layer_shapes(m)
    emb = float(m.vocab * m.hidden)
    mixers = attn_weights(m) + sh.mamba * m.mamba_layers + mixer_extra_weights(m)
    return ParamCounts(
        attention=float(mixers),
        dense_mlp=float(sh.mlp_dense * m.mlp_layers),
        shared_experts=float((sh.shared + sh.latent_proj) * m.moe_layers),
        routed_experts=float((sh.expert * m.num_experts + sh.router) * m.moe_layers),
        embedding=emb,
        lm_head=0.0 if m.tied_embeddings else emb,
    )


# --- KV cache ----------------------------------------------------------------------------


def kv_elements_per_token_layer(m: Model, tp: int = 1) -> float:
    """KV elements one token stores in one layer on one TP rank."""
    if m.mla is not None:
        return float(m.mla.kv_lora_rank + m.mla.qk_rope_head_dim)
    heads = max(math.ceil(m.kv_heads / tp), 1)
    return float(2 * heads * m.head_dim)


def mamba_state_bytes_per_seq(
    m: Model, state_bytes: float = 2.0, tp: int = 1, pp: int = 1
) -> float:
    """Recurrent state one sequence keeps on one GPU in a hybrid model's Mamba-2 (or Gated
    DeltaNet) blocks, whatever its length: the state (heads x head_dim x state: a Gated
    DeltaNet's value heads x value x key head dimension) and the causal conv's last
    kernel - 1 inputs of x, B and C (v, k, q), in the model's 16-bit dtype (vLLM's default
    for Mamba-2)."""
    if m.mamba is None:
        return 0.0
    x = m.mamba
    conv = (x.conv_kernel - 1) * x.conv_channels
    per_layer = (x.heads * x.head_dim * x.state + conv) * state_bytes / tp
    return per_layer * math.ceil(m.mamba_layers / pp)


def kv_bytes_per_token(m: Model, kv_bytes: float = 2.0, tp: int = 1, pp: int = 1) -> float:
    """KV-cache bytes per token of context on one GPU (``tp = pp = 1``: the whole model),
    every attention layer counted: a hybrid's Mamba blocks keep a state instead
    (:func:`mamba_state_bytes_per_seq`), and layers with a window keep at most
    :func:`kv_window` tokens (:func:`window_share` of these bytes)."""
    layers = math.ceil(m.attn_layers / pp)
    if m.compressed is not None:
        # DeepSeek-V4: one K = V entry of head_dim a compressed layer keeps per ratio tokens
        # (its window's tokens are a fixed amount a sequence, window_cache_bytes_per_seq)
        per_token = entries_per_token(m) * m.head_dim
        return per_token * layers / m.attn_layers * kv_bytes + indexer_key_bytes_per_token(m, pp)
    if m.window_attn is not None:
        # Step 3.5: the stage's full and windowed layers, each kind at its own width
        full, win = _stage_layers(m, pp)
        per = full * kv_elements_per_token_layer(full_view(m), tp)
        per += win * kv_elements_per_token_layer(window_view(m), tp)
        return per * kv_bytes
    attention = kv_elements_per_token_layer(m, tp) * layers * kv_bytes
    return attention + indexer_key_bytes_per_token(m, pp)


def window_cache_bytes_per_seq(m: Model, kv_bytes: float = 2.0, pp: int = 1) -> float:
    """DeepSeek-V4's fixed state a sequence holds on each GPU of a stage, whatever its
    length (one head: whole on every TP rank; 0 for other models): every layer's last
    ``window`` tokens' K = V entries, and each compressor's window in progress, the fp32 kv
    and score rows of the tokens not yet compressed, as DeepSeek's inference code keeps
    them (2 x (c r) x (c d) x 4 bytes, c = 2 where CSA's windows overlap; a CSA layer's
    indexer keeps its own at its head dimension)."""
    if m.compressed is None:
        return 0.0
    c = m.compressed
    state = 0.0
    for r in layer_ratios(m)[0]:
        if not r:
            continue
        over = 2 if r == c.csa_ratio else 1
        widths = [m.head_dim] + ([m.sparse.head_dim] if over == 2 and m.sparse else [])
        state += sum(2.0 * (over * r) * (over * d) * 4.0 for d in widths)
    per_layer = c.window * m.head_dim * kv_bytes + state / m.layers
    return per_layer * math.ceil(m.layers / pp)


def indexer_key_bytes_per_token(m: Model, pp: int = 1) -> float:
    """A DeepSeek Sparse Attention model's indexer keys per token of context on one GPU:
    FP8 with an fp32 scale per 128 (DeepSeek's inference code), whole on every TP rank, in
    the layers that run an indexer (0 without DSA)."""
    if m.sparse is None:
        return 0.0
    d = m.sparse.head_dim
    per = 1.0 / m.compressed.csa_ratio if m.compressed is not None else 1.0  # V4: per entry
    return (d + 4.0 * math.ceil(d / 128)) * math.ceil(indexer_layers(m) / pp) * per


def _stage_layers(m: Model, pp: int) -> tuple[int, int]:
    """(full, windowed) attention layers of the pipeline stage with the most full ones."""
    stage = math.ceil(m.attn_layers / pp)
    full = min(math.ceil((m.attn_layers - (m.window_layers or 0)) / pp), stage)
    return full, stage - full


def window_share(
    m: Model, pp: int = 1, tp: int = 1, per_layer: Callable[[Model], float] | None = None
) -> float:
    """Share of one pipeline stage's attention layers (and KV bytes) with a bounded window:
    GPT-OSS's sliding layers (half), Llama 4's chunked ones (3 of 4), Mistral 7B v0.1's
    (all). Over PP stages, the stage with the most full layers: GPT-OSS on PP4 holds 5 full
    and 4 sliding layers of its 9. Where the windowed layers have a shape of their own
    (Step 3.5), the share of a per-layer amount they hold: ``per_layer`` of each kind's
    view, default the KV elements a token keeps on a TP rank."""
    if not m.window or not m.attn_layers:
        return 0.0
    full, win = _stage_layers(m, pp)
    if m.window_attn is None:
        return 1.0 - full / (full + win)
    f = per_layer or (lambda v: kv_elements_per_token_layer(v, tp))
    held = win * f(window_view(m))
    return held / (full * f(full_view(m)) + held)


def kv_window(m: Model) -> int:
    """Tokens a windowed layer keeps at most: a sliding window's last ``window`` tokens, or
    the current chunk of a chunked one (0: no windowed layers)."""
    return m.window if window_share(m) > 0.0 else 0


# --- memory plan -------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory of one replica (bytes) and the sequences it can hold."""

    gpu_memory_bytes: float
    usable_bytes: float
    """The engine's share: memory fraction x GPU memory."""
    weights_bytes: float
    workspace_bytes: float
    """Activations of one step at the token budget plus runtime reservations."""
    kv_pool_bytes: float
    kv_bytes_per_token: float
    """Every attention layer's KV of one token."""
    kv_bytes_per_seq: float
    """KV one sequence of ``tokens_per_seq`` holds, in whole blocks (windowed layers kept to
    their window)."""
    window_share: float
    window_tokens: int
    block_tokens: int
    tokens_per_seq: int
    blocks_per_seq: int
    kv_blocks: int
    max_seqs: int
    """Sequences of ``tokens_per_seq`` whose KV fits, capped by the engine's max batch."""
    kv_limited_seqs: int

    @property
    def fits(self) -> bool:
        return self.kv_pool_bytes > 0 and self.max_seqs >= 1

    def to_dict(self) -> dict[str, float]:
        return {
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "usable_bytes": self.usable_bytes,
            "weights_bytes": self.weights_bytes,
            "workspace_bytes": self.workspace_bytes,
            "kv_pool_bytes": self.kv_pool_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_bytes_per_seq": self.kv_bytes_per_seq,
            "kv_blocks": self.kv_blocks,
            "max_seqs": self.max_seqs,
            "kv_limited_seqs": self.kv_limited_seqs,
        }


def weight_bytes_per_gpu(m: Model, prec: PrecisionPlan, tp: int, pp: int) -> float:
    """Every parameter stored once per (TP x PP) group; embeddings stay 16-bit."""
    pc = param_counts(m)
    body = pc.total - pc.embedding - pc.lm_head
    emb = (pc.embedding + pc.lm_head) * 2.0
    return (body * prec.weight_bytes + emb) / (tp * pp)


def workspace_bytes(
    m: Model, tp: int, max_num_tokens: int, act_bytes: float, reserved_bytes: float
) -> float:
    """Peak activation memory of one step at ``max_num_tokens`` tokens plus fixed reservations.

    Per token the largest live tensors are the residual stream and the MLP intermediate on
    this rank (gate and up of a gated MLP), plus logits are only kept for sampled tokens.
    """
    per_token = 4 * m.hidden + (2 if m.gated_mlp else 1) * m.ffn_hidden * max(m.top_k, 1) / tp
    return max_num_tokens * per_token * act_bytes + reserved_bytes


def memory_plan(
    m: Model,
    gpu: GPU,
    prec: PrecisionPlan,
    tp: int,
    pp: int,
    tokens_per_seq: int,
    mem_fraction: float,
    max_num_tokens: int,
    max_batch: int,
    block_tokens: int,
    reserved_bytes: float,
    fraction_of_free: bool,
    prompt_tokens: int | None = None,
) -> MemoryPlan:
    """How many sequences of ``tokens_per_seq`` tokens one replica holds (``prompt_tokens``
    of them the prompt; not given: as many as one step's budget takes, the most a windowed
    layer holds beyond its window while prefilling).

    ``fraction_of_free``: TensorRT-LLM sizes its KV pool as a fraction of the memory left
    after weights and activations (``kv_cache_free_gpu_mem_fraction``); vLLM caps the whole
    process at a fraction of GPU memory (``gpu_memory_utilization``).
    """
    total = gpu.memory_bytes
    w = weight_bytes_per_gpu(m, prec, tp, pp)
    ws = workspace_bytes(m, tp, max_num_tokens, 2.0, reserved_bytes)
    if fraction_of_free:
        usable = total
        pool = mem_fraction * (total - w - ws)
    else:
        usable = mem_fraction * total
        pool = usable - w - ws
    per_tok = kv_bytes_per_token(m, prec.kv_bytes, tp, pp)
    share, win = window_share(m, pp, tp), kv_window(m)
    prompt = tokens_per_seq if prompt_tokens is None else prompt_tokens
    kept = window_kept(win, prompt, max_num_tokens)
    blocks_per_seq = seq_blocks(tokens_per_seq, block_tokens, share, kept)
    state = mamba_state_bytes_per_seq(m, 2.0, tp, pp) + window_cache_bytes_per_seq(
        m, prec.kv_bytes, pp
    )
    block_b = per_tok * block_tokens
    n_blocks = int(pool // block_b) if pool > 0 and block_b > 0 else 0
    kv_seqs = n_blocks // blocks_per_seq
    if state > 0:
        # each sequence also holds its Mamba state (DeepSeek-V4: its window's entries)
        # beside its KV blocks: fewer sequences, and only their blocks are there to hand out
        kv_seqs = int(max(pool, 0.0) // (blocks_per_seq * block_b + state))
        n_blocks = kv_seqs * blocks_per_seq
    return MemoryPlan(
        gpu_memory_bytes=total,
        usable_bytes=usable,
        weights_bytes=w,
        workspace_bytes=ws,
        kv_pool_bytes=max(pool, 0.0),
        kv_bytes_per_token=per_tok,
        kv_bytes_per_seq=blocks_per_seq * block_b,
        window_share=share,
        window_tokens=win,
        block_tokens=block_tokens,
        tokens_per_seq=tokens_per_seq,
        blocks_per_seq=blocks_per_seq,
        kv_blocks=n_blocks,
        max_seqs=min(kv_seqs, max_batch),
        kv_limited_seqs=kv_seqs,
    )
