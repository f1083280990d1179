"""Transformer arithmetic: parameter counts and FLOPs, dense and MoE, GQA and MLA.

Formulas (per layer, h = hidden, q = heads x head_dim, k = kv_heads x head_dim,
f = MLP inner size, gated MLP = 3 matrices else 2):
- attention weights: h*q (Q) + 2*h*k (K, V) + q*h (output);
  MLA (DeepSeek-V2/V3): h*r_q + r_q*a*(d_nope + d_rope) + h*(r_kv + d_rope)
  + r_kv*a*(d_nope + d_v) + a*d_v*h;
- MLP weights: (3 if gated else 2)*h*f; MoE: experts x that + shared experts + router h*E;
- norms: 2*h per layer, h final; embeddings V*h (+ V*h output unless tied) (+ s*h learned
  positions).
GPT-3 175B gives 174.6 B (Brown et al. 2020) and Llama 3 70B 70.6 B (Meta) with these.
FLOPs: 2 per multiply-accumulate; a training step is 3x the forward (forward + 2x backward).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscale.catalog import Model


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


def _mlp(h: int, f: int, gated: bool) -> int:
    return (3 if gated else 2) * h * f


def attn_dims(m: Model) -> tuple[int, int]:
    """(q, k): query and key/value projection widths."""
    return m.heads * m.head_dim, m.kv_heads * m.head_dim


def layer_shapes(m: Model) -> LayerShapes:
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
    else:
        q, k = attn_dims(m)
        attn = h * q + 2 * h * k + q * h
        norms = 2 * h
    if m.is_moe:
        expert = _mlp(h, m.ffn_hidden, m.gated_mlp)
        shared = m.shared_experts * expert
        router = h * m.num_experts
    else:
        expert = shared = router = 0
    return LayerShapes(
        attn, _mlp(h, m.dense_ffn_hidden, m.gated_mlp), expert, shared, router, norms
    )


def embedding_params(m: Model) -> int:
    emb = m.vocab * m.hidden * (1 if m.tied_embeddings else 2)
    if m.position == "learned":
        emb += m.max_seq * m.hidden
    return emb + m.hidden  # final norm


def _params(m: Model, experts_per_moe_layer: int) -> int:
    s = layer_shapes(m)
    dense_layers = m.layers - m.moe_layers
    moe = s.attn + s.norms + experts_per_moe_layer * s.expert + s.shared + s.router
    dense = s.attn + s.norms + s.mlp_dense
    return dense_layers * dense + m.moe_layers * moe + embedding_params(m)


def param_count(m: Model) -> int:
    """Total parameters (all experts)."""
    return _params(m, m.num_experts)


def active_param_count(m: Model) -> int:
    """Parameters touched per token (top-k routed experts)."""
    return _params(m, m.top_k)


def attn_core_dims(m: Model) -> tuple[int, int]:
    """(qk, v) total widths of the attention core: scores use qk, the weighted sum v."""
    if m.mla is not None:
        x = m.mla
        return m.heads * (x.qk_nope_head_dim + x.qk_rope_head_dim), m.heads * x.v_head_dim
    q, _ = attn_dims(m)
    return q, q


def forward_flops_per_token(m: Model, seq_len: int, causal: bool = True) -> float:
    """Model forward FLOPs per token: GEMMs (active experts), attention core, logits."""
    s = layer_shapes(m)
    dense_layers = m.layers - m.moe_layers
    gemm = (
        m.layers * s.attn
        + dense_layers * s.mlp_dense
        + m.moe_layers * (m.top_k * s.expert + s.shared + s.router)
    )
    qk, v = attn_core_dims(m)
    core = 2.0 * seq_len * (qk + v) * m.layers * (0.5 if causal else 1.0)
    return 2.0 * gemm + core + 2.0 * m.vocab * m.hidden


def model_flops_per_token(m: Model, seq_len: int, causal: bool = True) -> float:
    """Training model FLOPs per token (3x forward, no recomputation) — gpuscale's MFU basis."""
    return 3.0 * forward_flops_per_token(m, seq_len, causal)


# --- published FLOP-counting conventions (shared/validation/README.md) -------------------


def megatron_sc21_flops(m: Model, batch: int, seq_len: int) -> float:
    """Narayanan et al. SC'21 eq. (3): 96 B s l h^2 (1 + s/6h + V/16lh), counts recompute."""
    n_l, h, s, v = m.layers, m.hidden, seq_len, m.vocab
    return 96.0 * batch * s * n_l * h * h * (1 + s / (6 * h) + v / (16 * n_l * h))


def megatron_model_flops(m: Model, batch: int, seq_len: int, causal: bool) -> float:
    """Megatron-LM ``num_floating_point_operations`` (2024), causal variant halves s/h.

    12 B s l h^2 [(1 + g/a + s/h) q/h + (f/h) k mult + V/(2 l h)], per layer type for MoE,
    with shared experts added to the routed ones.
    """
    h, s = m.hidden, seq_len
    q, _ = attn_dims(m)
    g_over_a = m.kv_heads / m.heads
    mult = 1.5 if m.gated_mlp else 1.0
    attn_term = (1.0 + g_over_a + (0.5 if causal else 1.0) * s / h) * q / h
    dense_layers = m.layers - m.moe_layers
    per_layer = 0.0
    per_layer += dense_layers * (attn_term + (m.dense_ffn_hidden / h) * mult)
    experts = m.top_k + m.shared_experts
    per_layer += m.moe_layers * (attn_term + (m.ffn_hidden / h) * experts * mult)
    total = 12.0 * batch * s * h * h * (per_layer + m.vocab / (2.0 * h))
    return total
