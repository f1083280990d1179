"""Selective recomputation by module: which parts of a layer's forward run again.

Korthikanti et al. 2022 (sec. 5) recompute the attention core: the cheap-to-redo, costly-
to-keep part of a layer. Megatron-Core generalises it, ``--recompute-granularity selective
--recompute-modules ...``, to any of the modules in :data:`RECOMPUTE_MODULES`; each one
recomputed runs its forward once more in the backward pass. The default is the attention
core alone, Korthikanti's selective recomputation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
from numpy.typing import NDArray

from gpuscale.catalog import Model
from gpuscale.errors import InputError
from gpuscale.perf.attn_kinds import kind_mean
from gpuscale.perf.transformer import (
    attn_core_flops_per_token,
    forward_flops_per_token,
    indexer_core_flops_per_token,
    indexer_layers,
    kv_width_per_rank,
    layer_shapes,
    mean_attn_dims,
    mtp_layer_equivalents,
    scan_flops_per_token,
)

FloatArrayT = NDArray[np.float64]

RECOMPUTE_MODULES: tuple[str, ...] = (
    "core_attn",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "moe_act",
    "shared_experts",
    "mamba",
    "ops",
)
"""Megatron-Core's ``--recompute-modules`` names: the attention core, the norms that are
modules of their own (an MoE layer's pre-norm, MLA's input norm; Transformer Engine fuses
the others into the next GEMM), MLA's up-projections, a dense layer's MLP, a whole MoE layer
(router, dispatch, experts, shared experts, combine), the experts' activation function, the
shared experts, and a Mamba-2 mixer. ``ops`` is not a module but PyTorch's per-operator
selective checkpointing as torchtitan applies it to each layer (``selective_ac_option =
"op"``): it keeps the attention kernel's output and every other matmul's output, in forward
order, and recomputes the rest (norms, rotary embedding, activation function, the other
matmuls); see :func:`op_sac_gemms`. It is a policy of its own, never combined. It
describes torchtitan's classic policy (``_get_custom_policy`` with its op save list, 2024-25
releases) on bias-free Llama-style layers: a biased linear dispatches to ``aten.addmm``,
which that list does not save."""

ALIASES = {
    "core_attention": "core_attn",
    "attention": "core_attn",
    "attn": "core_attn",
    "norm": "layernorm",
    "rmsnorm": "layernorm",
    "up_proj": "mla_up_proj",
    "act": "moe_act",
    "shared_expert": "shared_experts",
    "op": "ops",
    "op_sac": "ops",
    "per_op": "ops",
}
"""Spellings that tables and notes use for the same modules."""

DEFAULT_MODULES: tuple[str, ...] = ("core_attn",)

# a whole MoE layer already includes its activation function and shared experts
_INSIDE = {"moe_act": "moe", "shared_experts": "moe"}


def parse_modules(names: Iterable[str], field: str = "recompute-modules") -> tuple[str, ...]:
    """Canonical module names, in :data:`RECOMPUTE_MODULES` order, or an error naming the
    first unknown one."""
    out = set()
    for raw in names:
        name = raw.strip().lower().replace("-", "_")
        if not name:
            continue
        name = ALIASES.get(name, name)
        if name not in RECOMPUTE_MODULES:
            raise InputError(field, raw, f"module names among {', '.join(RECOMPUTE_MODULES)}")
        out.add(name)
    if not out:
        raise InputError(field, ",".join(names), "at least one module")
    if "ops" in out and len(out) > 1:
        raise InputError(
            field, ",".join(names), "ops (per-operator checkpointing) alone: it covers the layer"
        )
    return tuple(m for m in RECOMPUTE_MODULES if m in out)


def _module_order(name: str) -> tuple[int, str]:
    """A module's place in RECOMPUTE_MODULES (a name outside it after them, by name)."""
    if name in RECOMPUTE_MODULES:
        return RECOMPUTE_MODULES.index(name), ""
    return len(RECOMPUTE_MODULES), name


def selective_forward_s(
    modules: Iterable[str], parts: Mapping[str, FloatArrayT | float]
) -> FloatArrayT:
    """Forward seconds recomputed per layer: the sum of ``parts`` (each module's forward
    time, averaged over the model's layers) for the modules chosen, a module contained in
    another chosen one counted once. Summed in RECOMPUTE_MODULES' order, so that the floats
    do not depend on a set's iteration order (which varies with PYTHONHASHSEED)."""
    chosen = set(modules)
    total: FloatArrayT = np.zeros(1)
    for name in sorted(chosen, key=_module_order):
        if _INSIDE.get(name) in chosen:
            continue
        total = total + np.asarray(parts[name], dtype=np.float64)
    return total


def op_sac_modelled(m: Model) -> bool:
    """Whether the per-op policy is modelled for ``m``: attention and dense MLP layers only
    (no MoE, MLA or Mamba layers, whose matmul order it does not follow)."""
    return not (m.is_moe or m.mla is not None or m.mamba is not None)


Gemm = tuple[str, FloatArrayT, FloatArrayT]
"""A matmul as (name, output width N, reduction K) on one tensor-parallel rank."""


def op_sac_gemms(m: Model, tp: FloatArrayT) -> tuple[list[Gemm], list[Gemm]]:
    """(kept, rerun) matmuls of a layer under torchtitan's per-op policy, per TP rank.

    The Llama modules torchtitan checkpoints, in forward order: the Q, K and V projections
    (wq, wk, wv), the output projection (wo), then the MLP's w1, w3 (gated) and w2. The
    policy counts the matmuls of each layer's forward and keeps the odd ones (the 1st,
    3rd, ...), recomputing the even ones (``_get_custom_policy``: ``mm_count % 2 == 0`` ->
    PREFER_RECOMPUTE): for Llama it keeps wq, wv, w1 and w2 and reruns wk, wo and w3. On a
    rank, the column-parallel ones (wq, wk, wv, w1, w3) split their outputs over TP (K and V
    a whole head at least), the row-parallel ones (wo, w2) their reduction, writing
    full-width partial sums before their reduction.
    """
    h, f = float(m.hidden), float(m.dense_ffn_hidden)
    # widths averaged over the attention layers' kinds (Step 3.5's windowed layers' own)
    q, _ = mean_attn_dims(m)
    kv = kind_mean(m, lambda v: kv_width_per_rank(v, tp))
    full = h + np.zeros_like(tp)
    mlp: list[Gemm] = [("w1", f / tp, full)]
    if m.gated_mlp:
        mlp.append(("w3", f / tp, full))
    mlp.append(("w2", full, f / tp))
    mms: list[Gemm] = [
        ("wq", q / tp, full),
        ("wk", kv, full),
        ("wv", kv, full),
        ("wo", full, q / tp),
        *mlp,
    ]
    return mms[0::2], mms[1::2]


def up_proj_shapes(m: Model) -> list[tuple[float, float, bool]]:
    """The matmuls ``mla_up_proj`` reruns, each (output width, reduction, split over TP):
    MLA's query up-projection (from the hidden state without a query latent: Megatron-Core's
    qkv_up_proj_and_rope_apply runs it in the same checkpoint) and its K/V up-projection;
    DeepSeek-V4's query up-projection and its shared K = V head's projection from the
    hidden state. None for other attention."""
    if m.mla is not None:
        x = m.mla
        return [
            (m.heads * (x.qk_nope_head_dim + x.qk_rope_head_dim), x.q_lora_rank or m.hidden, True),
            (m.heads * (x.qk_nope_head_dim + x.v_head_dim), x.kv_lora_rank, True),
        ]
    if m.compressed is not None:
        q, _ = mean_attn_dims(m)
        return [(q, m.compressed.q_lora_rank, True), (m.head_dim, m.hidden, False)]
    return []


def recompute_flops_per_token(
    m: Model, seq_len: int, mode: str, full_frac: float, modules: Iterable[str]
) -> float:
    """Forward FLOPs a token that recomputation runs again: ``full_frac`` of the decoder
    layers' and MTP depths' forward under full or partial recomputation (their output heads
    stay stored), as the step model prices it; under selective recomputation, the
    recomputed modules' matmuls (the attention core and a DSA indexer's scoring, MLA's
    up-projections, DeepSeek-V4's query up-projection and K = V projection, a dense MLP, a
    whole MoE layer's router, active experts and shared experts, or the shared experts
    alone, a Mamba-2 mixer's projections and scan, torchtitan's per-op policy's rerun
    matmuls), in the MTP depths too, each priced as an average layer as the step model
    does; norms and activations add none worth counting. Model FLOPs leave these out;
    hardware FLOPs (Megatron's "TFLOP/s per GPU" with recomputation, Narayanan et al. 2021)
    count them."""
    if mode in ("full", "partial"):
        heads = (1 + m.mtp_layers) * 2.0 * m.vocab * m.hidden  # output layer, MTP heads
        return full_frac * (forward_flops_per_token(m, seq_len) - heads)
    if mode != "selective":
        return 0.0
    mods = set(modules)
    s = layer_shapes(m)
    flops = 0.0
    if "core_attn" in mods:
        flops += attn_core_flops_per_token(m, seq_len)
        flops += indexer_layers(m) * indexer_core_flops_per_token(m, seq_len)
    if "mla_up_proj" in mods:
        flops += 2.0 * m.attn_layers * sum(n * k for n, k, _split in up_proj_shapes(m))
    if "mlp" in mods:
        flops += 2.0 * m.mlp_layers * s.mlp_dense
    if "moe" in mods:
        routed = m.top_k * s.expert + s.shared + s.router + s.latent_proj
        flops += 2.0 * m.moe_layers * routed
    elif "shared_experts" in mods:
        flops += 2.0 * m.moe_layers * s.shared
    if "mamba" in mods:
        flops += m.mamba_layers * (2.0 * s.mamba + scan_flops_per_token(m))
    if "ops" in mods:
        _, redo = op_sac_gemms(m, np.ones(1))
        flops += m.layers * sum(2.0 * float(n[0]) * float(k[0]) for _name, n, k in redo)
    return flops * (1.0 + mtp_layer_equivalents(m, seq_len) / m.layers)
