"""Published FLOP-counting conventions (shared/validation/README.md), the figures papers and
frameworks report TFLOP/s and MFU against: Narayanan et al. SC'21 eq. (3), and Megatron-LM's
``num_floating_point_operations`` as Megatron-Bridge's calculator extends it (MLA, DeepSeek
Sparse Attention, DeepSeek-V4's compressed attention, hybrid Mamba and Gated DeltaNet
blocks, MTP depths), each attention layer with its own heads where the windowed layers
have a shape of their own (Step 3.5)."""

from __future__ import annotations

from gpuscale.catalog import Model
from gpuscale.perf.attn_kinds import attn_kinds, mtp_view
from gpuscale.perf.transformer import (
    attn_dims,
    indexer_core_flops_per_token,
    indexer_layers,
    keys_per_query,
    layer_ratios,
    layer_shapes,
)


def megatron_sc21_flops(m: Model, batch: int, seq_len: int) -> float:
    """Narayanan et al. SC'21 eq. (3): 96 B s l h^2 (1 + s/6h + V/16lh), counts recompute."""
    n_l, h, s, v = m.layers, m.hidden, seq_len, m.vocab
    return 96.0 * batch * s * n_l * h * h * (1 + s / (6 * h) + v / (16 * n_l * h))


def megatron_model_flops(m: Model, batch: int, seq_len: int, causal: bool) -> float:
    """Megatron-LM ``num_floating_point_operations`` (2024), causal variant halves s/h.

    12 B s l h^2 [(1 + g/a + s/h) q/h + (f/h) k mult + V/(2 l h)], per layer type for MoE,
    with shared experts added to the routed ones; windowed layers with a shape of their own
    (Step 3.5) with their q and g/a, averaged over the attention layers, a windowed MTP
    depth with the windowed layers' term.
    """
    h, s = m.hidden, seq_len
    mult = 1.5 if m.gated_mlp else 1.0
    attn_term = _gqa_term(m, s, causal)
    if m.window_attn is not None:
        attn_term = sum(n * _gqa_term(v, s, causal) for n, v in attn_kinds(m)) / m.attn_layers
    if m.mla is not None:
        attn_term = _megatron_mla_term(m, s, causal)
    if m.compressed is not None:
        attn_term = _megatron_v4_term(m, s)
    elif m.sparse is not None:
        # the DSA indexers' projections and scoring, spread over the attention layers
        idx = layer_shapes(m).indexer + indexer_core_flops_per_token(m, s, causal) / 2.0
        attn_term += indexer_layers(m) / m.attn_layers * idx / (2.0 * h * h)
    if m.hybrid:
        return _megatron_hybrid_flops(m, batch, seq_len, attn_term, mult)
    # MTP depths count as more layers of the last layer's kind, each with its own logits
    mtp_moe = m.mtp_layers if m.is_moe else 0
    dense_layers = m.layers - m.moe_layers + m.mtp_layers - mtp_moe
    per_layer = 0.0
    per_layer += dense_layers * (attn_term + (m.dense_ffn_hidden / h) * mult)
    experts = (m.ffn_hidden * m.top_k + m.shared_ffn_hidden) / m.ffn_hidden  # in expert widths
    per_layer += (m.moe_layers + mtp_moe) * (attn_term + (m.ffn_hidden / h) * experts * mult)
    if m.mtp_layers and (m.window_attn is not None or m.mtp_window):
        # the MTP depths' attention as its own kind (Step 3.5's slides), not the average
        per_layer += m.mtp_layers * (_gqa_term(mtp_view(m), s, causal) - attn_term)
    logits = (1 + m.mtp_layers) * m.vocab / (2.0 * h)
    # each MTP depth's 2h -> h projection and three norms
    mtp = m.mtp_layers * (2.0 * h * h + 3.0 * h) / (2.0 * h * h)
    total = 12.0 * batch * s * h * h * (per_layer + logits + mtp)
    return total


def _gqa_term(m: Model, s: int, causal: bool) -> float:
    """Megatron-LM's attention term of one GQA layer of ``m``'s shape, in units of 4 h^2 per
    token: (1 + g/a + keys/h) q/h, with a gate's GEMM (h x q, or h x heads head-wise)."""
    h = m.hidden
    q, _ = attn_dims(m)
    # the s/h core term, per Megatron-Bridge's calculator, sees only the window in
    # sliding-window layers (GPT-OSS: reproduces its 26.06 figures)
    term = (1.0 + m.kv_heads / m.heads + keys_per_query(m, s, causal) / h) * q / h
    if m.attn_gate:  # the gate's h x q GEMM (Megatron-LM adds it to the QKV projection)
        term += q / (2.0 * h)
    if m.head_gate:  # a head-wise gate's h x heads GEMM
        term += m.heads / (2.0 * h)
    return term


def _megatron_mla_term(m: Model, s: int, causal: bool) -> float:
    """Megatron-LM's multi-latent-attention term per layer, in units of 4 h^2 per token:
    the low-rank Q and KV projections with their norms, the decoupled RoPE key, the output
    projection and the core attention over s (halved when causal)."""
    x, h, a = m.mla, float(m.hidden), float(m.heads)
    assert x is not None
    qk = x.qk_nope_head_dim + x.qk_rope_head_dim
    q_term = x.q_lora_rank * (h + a * qk + 1) if x.q_lora_rank else h * a * qk
    # the core over s keys (halved when causal), a DSA model's over its top-k
    keys = keys_per_query(m, s, causal) if m.sparse is not None else s * (0.5 if causal else 1.0)
    per_token = (
        q_term
        + x.kv_lora_rank * (h + a * (x.qk_nope_head_dim + x.v_head_dim) + 1)
        + h * x.qk_rope_head_dim
        + a * x.v_head_dim * h
        + keys * a * qk
        + keys * a * x.v_head_dim
    )
    return per_token / (2.0 * h * h)


def _megatron_v4_term(m: Model, s: int) -> float:
    """Megatron-Bridge's ``dsv4_hybrid`` attention term (DeepSeek-V4), per layer in units of
    4 h^2 per token, averaged over the layers and MTP depths (``csa_compress_ratios``): the
    projections (query latent and its norm, the K = V head and its norm, the grouped output
    projection), the core over the window (whole, no ramp) plus the compressed entries
    (HCA: half of s // ratio; CSA: the top-k, k' = min(k, s // ratio) averaging
    k' (1 - ratio k' / 2 s)), the compressors' kv and gate projections and the CSA
    indexer's (its compressor, queries, head weights and scoring of s // ratio entries);
    not the hyper-connections. Causal only, as the calculator."""
    c, h, a, d = m.compressed, m.hidden, m.heads, m.head_dim
    assert c is not None
    proj = c.q_lora_rank * (h + a * d + 1) + h * d + d
    proj += a * d * c.o_lora_rank + c.o_groups * c.o_lora_rank * h
    main, mtp = layer_ratios(m)
    ratios = main + mtp
    total = 0.0
    for r in ratios:
        keys = float(c.window)
        if r == c.csa_ratio and m.sparse is not None:
            x = m.sparse
            k = min(x.topk, s // r)
            keys += k * (1.0 - k * r / (2.0 * s))
            total += h * 2 * d * 2 + h * 2 * x.head_dim * 2 + c.q_lora_rank * x.heads * x.head_dim
            total += h * x.heads + x.heads * x.head_dim * (s // r)
        elif r:
            keys += (s // r) / 2.0
            total += h * d * 2
        total += a * keys * d * 2 + proj
    return total / len(ratios) / (2.0 * h * h)


def _megatron_hybrid_flops(m: Model, batch: int, s: int, attn_term: float, mult: float) -> float:
    """Megatron-LM's ``hybrid_flops``: 3 x the forward of each block type.

    attention 4 B s h^2 attn_term; MLP 4 B s h f mult; MoE 4 B s (l f k + h f_shared) mult
    + 4 B s h l (latent projections, l = h without LatentMoE); Mamba (``mamba_layer_flops``)
    2 B s h (2 d + 2 G N + H) + 7 B s d N + 2 B s d h with d taken as 2 h, as Megatron does
    whatever the mixer's real inner width; logits 2 B s h V. Megatron-Bridge adds each MTP
    depth's blocks to the counts and one more logits per depth.
    """
    h, bs = float(m.hidden), float(batch * s)

    def count(letter: str) -> int:
        return m.pattern.count(letter) + m.mtp_layers * m.mtp_blocks.count(letter)

    fwd = count("*") * 4.0 * bs * h * h * attn_term
    fwd += count("-") * 4.0 * bs * h * m.dense_ffn_hidden * mult
    if m.is_moe:
        lat = float(m.moe_latent)
        routed = (lat or h) * m.ffn_hidden * m.top_k + h * m.shared_ffn_hidden
        fwd += count("E") * (4.0 * bs * routed * mult + (4.0 * bs * h * lat if lat else 0.0))
    if m.mamba is not None and m.mamba.rule == "gated_delta":
        # Megatron-LM's gated_delta_net term: in_proj, conv, 4 H P^2 for the scan, out_proj
        x = m.mamba
        qk, v = float(x.groups * x.state), float(x.inner)
        gdn = h * (2 * qk + 2 * v + 2 * x.heads) + x.conv_kernel * (2 * qk + v)
        gdn += 4.0 * x.heads * x.head_dim**2 + h * v
        fwd += count("M") * 2.0 * bs * gdn
    elif m.mamba is not None:
        x, d_in = m.mamba, 2.0 * h
        mamba = 2.0 * bs * h * (2 * d_in + 2 * x.groups * x.state + x.heads)
        mamba += 7.0 * bs * d_in * x.state + 2.0 * bs * d_in * h
        fwd += count("M") * mamba
    fwd += (1 + m.mtp_layers) * 2.0 * bs * h * m.vocab
    return 3.0 * fwd
