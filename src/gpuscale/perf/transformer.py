"""Transformer arithmetic: parameter counts and FLOPs, dense and MoE, GQA and MLA.

Formulas (per layer, h = hidden, q = heads x head_dim, k = kv_heads x head_dim,
f = MLP inner size, gated MLP = 3 matrices else 2):
- attention weights: h*q (Q) + 2*h*k (K, V) + q*h (output); h*k for K and V where one
  projection gives both (Gemma 4's full layers, ``k_eq_v``);
  MLA (DeepSeek-V2/V3): h*r_q + r_q*a*(d_nope + d_rope) + h*(r_kv + d_rope)
  + r_kv*a*(d_nope + d_v) + a*d_v*h;
- MLP weights: (3 if gated else 2)*h*f; MoE: experts x that + shared experts + router h*E;
- norms: 2*h per layer, h final; embeddings V*h (+ V*h output unless tied) (+ s*h learned
  positions).
- gated attention (Qwen3-Next): h*q more, the gate's half of the Q projection; a head-wise
  gate (Step 3.5) h*heads; windowed layers with a shape of their own (Step 3.5's 96 query
  heads to its full layers' 64) count theirs (perf/attn_kinds.py);
- Mamba-2 mixer (hybrid models), d = heads x head_dim, G groups, N state, K conv kernel:
  in_proj h*(2d + 2GN + heads) (z, x, B, C, dt), depthwise conv (d + 2GN)*(K + 1),
  A, D, dt bias 3*heads, gated norm d, out_proj d*h; Gated DeltaNet (d = value heads x
  value head dim, G key heads of N): in_proj h*(2d + 2GN + 2 heads) (z, v, k, q, decay,
  beta), conv (d + 2GN)*K without bias, A and dt bias 2*heads, gated norm of one head's
  width P, out_proj d*h (Megatron-LM's ``_compute_gdn_attention_params``);
- LatentMoE: routed experts on the latent width l, plus 2*h*l down/up projections;
- DeepSeek-V4 (transformers' DeepseekV4ForCausalLM), a heads over one shared K = V head of
  d: h*r_q + r_q*a*d + h*d + a*d*r_o + g*r_o*h (g output groups of rank r_o); a compressed
  layer of ratio r adds kv and gate projections 2*h*w, a position bias r*w and a norm d
  (w = 2d for CSA, d for HCA), a CSA layer its indexer r_q*a_I*d_I + 4*h*d_I + 2*r*d_I
  + d_I + h*a_I; hyper-connections over n streams 2*(2 + n)*n*n*h a layer (and a final
  collapse n*n*h); DeepSeek-V4-Flash gives 284,332,230,231 (transformers' count);
- hybrid blocks carry one norm each (h), attention + MLP layers two.
GPT-3 175B gives 174.6 B (Brown et al. 2020) and Llama 3 70B 70.6 B (Meta) with these.
FLOPs: 2 per multiply-accumulate; a training step is 3x the forward (forward + 2x backward).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from gpuscale.catalog import Model
from gpuscale.perf.attn_keys import chunk_keys as chunk_keys
from gpuscale.perf.attn_keys import indexed_keys as indexed_keys
from gpuscale.perf.attn_keys import mean_keys as mean_keys
from gpuscale.perf.attn_keys import ratio_keys as ratio_keys
from gpuscale.perf.attn_kinds import attn_kinds, kind_mean, mtp_view

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class LayerShapes:
    """Per-layer weight counts of a model (before any parallel split)."""

    attn: int
    """Attention projection weights (Q, K, V, output; or MLA's low-rank projections)."""
    mlp_dense: int
    """MLP weights of a dense layer."""
    expert: int
    """Weights of one routed expert (0 for dense models)."""
    shared: int
    """Shared-expert weights of a MoE layer."""
    router: int
    norms: int
    """Norm weights per layer (per block in a hybrid model)."""
    mamba: int = 0
    """Mamba-2 mixer weights (hybrid models)."""
    latent_proj: int = 0
    """LatentMoE down- and up-projections of a MoE block."""
    indexer: int = 0
    """Weights of one DeepSeek Sparse Attention indexer (its query, key and head-weight
    projections and key norm; DeepSeek-V4's also its own key compressor), in the layers
    that run one."""
    hc: int = 0
    """Hyper-connection projections of a layer (mHC: two, each from the flattened streams
    to the collapse, expand and mixing weights)."""


def _mlp(h: int, f: int, gated: bool) -> int:
    return (3 if gated else 2) * h * f


def attn_dims(m: Model) -> tuple[int, int]:
    """(q, k): query and key/value projection widths."""
    return m.heads * m.head_dim, m.kv_heads * m.head_dim


def mean_attn_dims(m: Model) -> tuple[float, float]:
    """:func:`attn_dims` averaged over the attention layers' kinds (Step 3.5's and Gemma 4's
    windowed layers with their own heads)."""
    return kind_mean(m, lambda v: float(attn_dims(v)[0])), kind_mean(
        m, lambda v: float(attn_dims(v)[1])
    )


def kv_projections(m: Model) -> int:
    """K and V projections of a GQA layer: 2, or 1 where K = V (Gemma 4's full layers)."""
    return 1 if m.k_eq_v else 2


def kv_width_per_rank(m: Model, tp: FloatArray) -> FloatArray:
    """The K (and the V) width one tensor-parallel rank holds: the KV heads split over TP,
    and under more ranks than KV heads one whole head each (GQA)."""
    _, kv = attn_dims(m)
    out: FloatArray = np.maximum(kv / tp, float(m.head_dim))
    return out


def kv_pair_width(m: Model, tp: FloatArray) -> FloatArray:
    """K and V widths together that a TP rank hands its attention kernel: MLA's whole
    up-projected heads (:func:`mla_kv_width` over TP), else twice
    :func:`kv_width_per_rank`."""
    if m.mla is not None:
        out: FloatArray = mla_kv_width(m) / tp
        return out
    return 2.0 * kv_width_per_rank(m, tp)


def mla_kv_width(m: Model) -> int:
    """An MLA model's per-token K and V widths together, as its attention gets them:
    whole heads up-projected from the latent, K of (nope + rope), V of v_head_dim (0 for
    other attention)."""
    x = m.mla
    if x is None:
        return 0
    return m.heads * (x.qk_nope_head_dim + x.qk_rope_head_dim + x.v_head_dim)


def layer_shapes(m: Model) -> LayerShapes:
    """Per-layer weight counts of a model, before any parallel split: attention (standard GQA,
    MLA or compressed DeepSeek-V4 projections), the dense MLP, one routed expert, the shared
    experts, the router, norms, the Mamba mixer, hyper-connections and the sparse-attention
    indexer, counted as the Hugging Face modules named in the code."""
    h = m.hidden
    if m.mla is not None:
        a, x = m.heads, m.mla
        q_in = h * x.q_lora_rank + x.q_lora_rank * a * (x.qk_nope_head_dim + x.qk_rope_head_dim)
        if x.q_lora_rank == 0:
            q_in = h * a * (x.qk_nope_head_dim + x.qk_rope_head_dim)
        attn = (
            q_in
            + h * (x.kv_lora_rank + x.qk_rope_head_dim)
            + x.kv_lora_rank * a * (x.qk_nope_head_dim + x.v_head_dim)
            + a * x.v_head_dim * h
        )
        norms = 2 * h + x.kv_lora_rank + x.q_lora_rank
    elif m.compressed is not None:
        # DeepseekV4Attention: q_a, q_b, the shared K = V projection, the grouped o_a (each
        # of g groups maps a*d/g to r_o) and o_b; q-latent and KV norms, one sink per head
        c, a, d = m.compressed, m.heads, m.head_dim
        attn = h * c.q_lora_rank + c.q_lora_rank * a * d + h * d
        attn += a * d * c.o_lora_rank + c.o_groups * c.o_lora_rank * h
        norms = 2 * h + c.q_lora_rank + d + a
    else:
        q, k = attn_dims(m)
        attn = h * q + kv_projections(m) * h * k + q * h + (h * q if m.attn_gate else 0)
        attn += h * m.heads if m.head_gate else 0
        norms = 2 * h
    if m.is_moe:
        expert = _mlp(m.moe_width, m.ffn_hidden, m.gated_mlp)
        shared = _mlp(h, m.shared_ffn_hidden, m.gated_mlp)
        router = h * m.num_experts
    else:
        expert = shared = router = 0
    mamba = 0
    if m.mamba is not None:
        mx = m.mamba
        if mx.rule == "gated_delta":
            mamba = h * mx.in_proj_width + mx.conv_channels * mx.conv_kernel + 2 * mx.heads
            mamba += mx.head_dim + mx.inner * h
        else:
            mamba = h * mx.in_proj_width + mx.conv_channels * (mx.conv_kernel + 1)
            mamba += 3 * mx.heads + mx.inner + mx.inner * h
    if m.hybrid:
        norms = h
    n = m.residual_streams
    hc = 0
    if n > 1:
        # DeepseekV4HyperConnection, two a layer: fn maps the n streams (n h) to n collapse,
        # n expand and n x n mixing weights; its bias and three scales are norm-like
        hc = 2 * (2 + n) * n * n * h
        norms += 2 * ((2 + n) * n + 3)
    indexer = 0
    if m.sparse is not None and m.compressed is not None:
        # DeepseekV4Indexer: its own compressor of keys (kv and gate projections to 2 x its
        # head dim, position bias over the ratio's tokens, key norm), queries from the query
        # latent, per-head weights
        ix, cmp = m.sparse, m.compressed
        indexer = cmp.q_lora_rank * ix.heads * ix.head_dim + 4 * h * ix.head_dim
        indexer += 2 * cmp.csa_ratio * ix.head_dim + ix.head_dim + h * ix.heads
    elif m.sparse is not None:
        # DeepseekV32Indexer: wq_b from the query's low-rank latent (the hidden state
        # without one), wk, a LayerNorm (weight and bias) on the key, weights_proj
        d, heads = m.sparse.head_dim, m.sparse.heads
        q_in = m.mla.q_lora_rank if m.mla is not None and m.mla.q_lora_rank else h
        # (MiniMax M3: queries from the hidden state, q and k norms, no head weights)
        indexer = q_in * heads * d + h * d + 2 * d + (h * heads if m.sparse.head_weights else 0)
    return LayerShapes(
        attn,
        _mlp(h, m.dense_ffn_hidden, m.gated_mlp),
        expert,
        shared,
        router,
        norms,
        mamba,
        2 * h * m.moe_latent,
        indexer,
        hc,
    )


def embedding_params(m: Model) -> int:
    """Parameters outside the layers: the embedding and an untied LM head (vocab x hidden each),
    learned position embeddings (max_seq x hidden), the hyper-connection head of a
    multi-stream model, and the final norm (hidden)."""
    emb = m.vocab * m.hidden * (1 if m.tied_embeddings else 2)
    if m.position == "learned":
        emb += m.max_seq * m.hidden
    n = m.residual_streams
    if n > 1:  # DeepseekV4HyperHead: the streams' final collapse (projection, bias, scale)
        emb += n * n * m.hidden + n + 1
    return emb + m.hidden  # final norm


def layer_ratios(m: Model) -> tuple[list[int], list[int]]:
    """DeepSeek-V4's compression ratio of each layer and of each MTP depth (a depth
    without its own entry attends to its window only, ratio 0, as Megatron-Core pads the
    MTP depths when it derives the ratios from a layer pattern); empty lists for other
    models."""
    if m.compressed is None:
        return [], []
    r = m.compressed.ratios
    mtp = r[m.layers :] if len(r) > m.layers else [0] * m.mtp_layers
    return r[: m.layers], mtp


def entries_per_token(m: Model) -> float:
    """DeepSeek-V4's compressed entries one context token adds, summed over its layers
    (1 / ratio in each compressed layer; 0 for other models)."""
    return sum(1.0 / r for r in layer_ratios(m)[0] if r)


def compressor_weights(m: Model, ratio: int) -> int:
    """Weights of one DeepSeek-V4 layer's compressor of ``ratio`` (0: none): kv and gate
    projections to the head width (two series, 2 x, where CSA's windows overlap), the
    position bias over the ratio's tokens and the entries' norm."""
    if m.compressed is None or ratio == 0:
        return 0
    d = m.head_dim
    width = 2 * d if ratio == m.compressed.csa_ratio else d
    return 2 * m.hidden * width + ratio * width + d


def compressor_width(m: Model) -> float:
    """Outputs of a DeepSeek-V4 layer's compressor projections per token (kv and gate),
    averaged over the layers: their weights / hidden (0 for other models)."""
    main = layer_ratios(m)[0]
    if not main:
        return 0.0
    return sum(compressor_weights(m, r) for r in main) / len(main) / m.hidden


def _compressed_weights(m: Model, ratios: list[int]) -> int:
    """Compressor and indexer weights of layers with these ratios (DeepSeek-V4)."""
    if m.compressed is None:
        return 0
    indexer = layer_shapes(m).indexer
    csa = m.compressed.csa_ratio
    return sum(compressor_weights(m, r) + (indexer if r == csa else 0) for r in ratios)


def _block_weights(s: LayerShapes, experts: int) -> dict[str, int]:
    """Weights of each block kind (pattern letter), a MoE block with ``experts`` of its
    routed experts (all of them for the parameter count, top-k for the FLOPs)."""
    moe = experts * s.expert + s.shared + s.router + s.latent_proj
    return {"*": s.attn, "-": s.mlp_dense, "E": moe, "M": s.mamba}


def mixer_extra_weights(m: Model) -> int:
    """Weights of all layers beside their blocks' projections: DSA indexers, DeepSeek-V4's
    compressors and CSA indexers, hyper-connections (0 for other models)."""
    s = layer_shapes(m)
    if m.compressed is not None:
        extra = _compressed_weights(m, layer_ratios(m)[0])
    else:
        extra = indexer_layers(m) * s.indexer
    return extra + m.layers * s.hc


def attn_weights(m: Model) -> int:
    """Projection weights of all attention layers, each kind with its own shape."""
    return sum(n * layer_shapes(v).attn for n, v in attn_kinds(m))


def _body_weights(m: Model, experts: int) -> int:
    """Block weights of all layers (no norms, no embeddings)."""
    s = layer_shapes(m)
    w = _block_weights(s, experts)
    return (
        attn_weights(m)
        + m.mlp_layers * w["-"]
        + m.moe_layers * w["E"]
        + m.mamba_layers * w["M"]
        + mixer_extra_weights(m)
    )


def sparse_layers(m: Model) -> int:
    """Attention layers that attend to a DeepSeek Sparse Attention top-k (0 without DSA;
    a model built without the schema's defaults: all of them)."""
    if m.sparse is None:
        return 0
    return m.attn_layers if m.sparse.layers is None else m.sparse.layers


def indexer_layers(m: Model) -> int:
    """Layers that run a DeepSeek Sparse Attention indexer (0 without DSA)."""
    if m.sparse is None:
        return 0
    return sparse_layers(m) if m.sparse.indexers is None else m.sparse.indexers


def indexer_core_flops_per_token(m: Model, seq_len: float, causal: bool = True) -> float:
    """Forward FLOPs per token of one DSA indexer's scoring, beyond its projections: each
    of its heads' dot product with every earlier key, and the weighted sum over heads
    (heads x (head_dim + 1) multiply-adds a key; heads x head_dim where it takes their
    maximum), over all s/2 keys (s without a causal mask; DeepSeek-V4's compressed entries,
    s / (2 x ratio)): the indexer reads the whole context to choose the top-k."""
    return indexer_pair_flops(m) * indexed_keys(m, seq_len, causal)


def indexer_pair_flops(m: Model) -> float:
    """FLOPs of one DSA indexer for one (query, key) pair: heads x (head_dim + 1)
    multiply-adds, heads x head_dim where it takes the maximum over its heads (0 without
    DSA)."""
    if m.sparse is None:
        return 0.0
    d = m.sparse.head_dim + (1 if m.sparse.head_weights else 0)
    return 2.0 * m.sparse.heads * d


def _params(m: Model, experts_per_moe_layer: int) -> int:
    norms = m.layers * layer_shapes(m).norms
    return norms + _body_weights(m, experts_per_moe_layer) + embedding_params(m)


def param_count(m: Model) -> int:
    """Total parameters (all experts), without multi-token-prediction layers (as published)."""
    return _params(m, m.num_experts)


def mtp_param_count(m: Model, experts: int | None = None) -> int:
    """Weights of the MTP layers: per set, the 2h -> h projection, its three norms (two
    inputs, one output) and the depth's blocks with their norms (two for an attention +
    MLP layer), its attention a windowed layer's where the depths slide."""
    s = layer_shapes(mtp_view(m))
    per_block_norms = s.norms if m.hybrid else s.norms // 2
    w = _block_weights(s, m.num_experts if experts is None else experts)
    blocks = sum(w[b] + per_block_norms for b in m.mtp_blocks) + _mtp_attn_extra(m)
    h = m.hidden
    return int(m.mtp_weight_sets or 0) * (2 * h * h + 3 * h + blocks)


def _mtp_attn_extra(m: Model) -> int:
    """Weights an MTP depth's attention adds beyond its projections (averaged over the
    depths): a DSA model's indexer, DeepSeek-V4's compressor of the depth's ratio (and
    indexer if CSA) and hyper-connections."""
    s = layer_shapes(m)
    if m.compressed is None:
        return m.mtp_blocks.count("*") * s.indexer
    mtp = layer_ratios(m)[1]
    return _compressed_weights(m, mtp) // max(len(mtp), 1) + s.hc


def mtp_layer_equivalents(m: Model, seq_len: int) -> float:
    """The MTP depths' work (without their output heads) in units of an average layer's
    forward FLOPs: the step model runs them as that many more layers on the last stage."""
    if not m.mtp_layers:
        return 0.0
    head = 2.0 * m.vocab * m.hidden
    mtp = mtp_forward_flops_per_token(m, seq_len)
    body = forward_flops_per_token(m, seq_len) - mtp - head
    return (mtp - m.mtp_layers * head) / (body / m.layers)


def mtp_forward_flops_per_token(m: Model, seq_len: int, causal: bool = True) -> float:
    """Forward FLOPs per token of the MTP depths: projection, blocks, output head."""
    if not m.mtp_layers:
        return 0.0
    view = mtp_view(m)
    qk, v = attn_core_dims(view)
    s = layer_shapes(view)
    w = _block_weights(s, m.top_k)
    blocks = sum(w[b] for b in m.mtp_blocks) + _mtp_attn_extra(m)
    # an MTP depth's attention sees the whole sequence (or a DSA model's top-k; a
    # DeepSeek-V4 depth what its ratio gives, with an indexer if CSA; a sliding one its window)
    full = seq_len * (0.5 if causal else 1.0)
    keys = keys_per_query(m, seq_len, causal) if m.sparse is not None else full
    if m.mtp_window:
        keys = keys_per_query(view, seq_len, causal)
    indexer = indexer_core_flops_per_token(m, seq_len, causal)
    if m.compressed is not None:
        mtp = layer_ratios(m)[1]
        keys = sum(ratio_keys(m, r, seq_len, causal) for r in mtp) / max(len(mtp), 1)
        indexer *= mtp.count(m.compressed.csa_ratio) / max(len(mtp), 1)
    core = m.mtp_blocks.count("*") * (2.0 * keys * (qk + v) + indexer)
    core += m.mtp_blocks.count("M") * scan_flops_per_token(m)
    h = m.hidden
    return m.mtp_layers * (2.0 * (2 * h * h + blocks) + core + 2.0 * m.vocab * h)


def active_param_count(m: Model) -> int:
    """Parameters touched per token (top-k routed experts), the embedding tables counted in
    full, as Mixtral's 12.9 B counts them (GPT-OSS's card leaves them out)."""
    return _params(m, m.top_k)


def keys_per_query(m: Model, seq_len: float, causal: bool = True) -> float:
    """Keys per query averaged over the attention layers (sliding-window ones see at most
    ``window``, chunked ones their own chunk): what the attention core's FLOPs scale with
    (s/2 for causal full attention)."""
    full = seq_len / 2.0 if causal else float(seq_len)
    if m.compressed is not None:
        main = layer_ratios(m)[0]
        return sum(ratio_keys(m, r, seq_len, causal) for r in main) / len(main)
    if m.sparse is not None:
        # DeepSeek Sparse Attention: a query attends to its top-k earlier tokens, all of them
        # while it has no more than k (in the layers with it; the others to every key)
        k, n = float(m.sparse.topk), sparse_layers(m)
        top = mean_keys(seq_len, k) if causal else min(k, float(seq_len))
        return top if n == m.attn_layers else ((m.attn_layers - n) * full + n * top) / m.attn_layers
    win = int(m.window_layers or 0)
    if not win:
        return full
    if m.window_kind == "chunked":
        windowed = chunk_keys(seq_len, m.window, causal)
    elif causal:
        windowed = mean_keys(seq_len, m.window)
    else:
        windowed = min(float(m.window), seq_len)
    return ((m.attn_layers - win) * full + win * windowed) / m.attn_layers


def attn_core_dims(m: Model) -> tuple[int, int]:
    """(qk, v) total widths of the attention core: scores use qk, the weighted sum v."""
    if m.mla is not None:
        x = m.mla
        return m.heads * (x.qk_nope_head_dim + x.qk_rope_head_dim), m.heads * x.v_head_dim
    q, _ = attn_dims(m)
    return q, q


def forward_flops_per_token(m: Model, seq_len: int, causal: bool = True) -> float:
    """Model forward FLOPs per token: GEMMs (active experts), attention core, logits, and
    the multi-token-prediction depths the model trains with."""
    gemm = _body_weights(m, m.top_k)
    core = attn_core_flops_per_token(m, seq_len, causal)
    core += indexer_layers(m) * indexer_core_flops_per_token(m, seq_len, causal)
    body = 2.0 * gemm + core + m.mamba_layers * scan_flops_per_token(m) + 2.0 * m.vocab * m.hidden
    return body + mtp_forward_flops_per_token(m, seq_len, causal)


def attn_core_flops_per_token(m: Model, seq_len: float, causal: bool = True) -> float:
    """Forward FLOPs per token of all attention layers' cores (scores and weighted sums),
    each kind with its heads and keys."""
    return sum(
        2.0 * keys_per_query(v, seq_len, causal) * sum(attn_core_dims(v)) * n
        for n, v in attn_kinds(m)
    )


def scan_flops_per_token(m: Model) -> float:
    """Forward FLOPs per token of one chunked scan of a hybrid model's mixer.

    Mamba-2 SSD (Dao & Gu 2024 sec. 6), chunk length Q, per token: C B^T within the chunk,
    G Q N / 2 multiply-adds (causal half); the masked scores times X, H Q P / 2; chunk
    states B^T X and their read-out C h, 2 H N P. P = head dimension, H heads, G groups,
    N state.

    Gated delta rule (the chunked WY form of Yang et al. 2024, as flash-linear-attention's
    ``chunk_gated_delta_rule`` runs it, on queries and keys expanded to the value heads):
    per value head and token, K K^T and Q K^T within
    the chunk and W = T K, Q N / 2 each (lower triangles); U = T V and the scores times the
    corrected values, Q P / 2 each; the triangular inverse T, Q^2 / 6; W S, Q S and the
    state update K^T V, N P each.
    """
    if m.mamba is None:
        return 0.0
    x = m.mamba
    q = float(x.chunk)
    if x.rule == "gated_delta":
        n, p = float(x.state), float(x.head_dim)
        return 2.0 * x.heads * (1.5 * q * n + q * p + q * q / 6.0 + 3.0 * n * p)
    macs = x.groups * q * x.state / 2 + x.heads * (q * x.head_dim / 2 + 2 * x.state * x.head_dim)
    return 2.0 * macs


def model_flops_per_token(m: Model, seq_len: int, causal: bool = True) -> float:
    """Training model FLOPs per token (3x forward, no recomputation) — gpuscale's MFU basis."""
    return 3.0 * forward_flops_per_token(m, seq_len, causal)
