"""Reading a config.json's MLP: whether it is gated, the dense and the experts' widths, the
shared experts beside them and how many experts a token is routed to, each as the
model_type's transformers code reads the keys (used by
:func:`gpuscale.catalog.hf.load_hf_config`; which layers are MoE is read in
:mod:`gpuscale.catalog.hf_layout`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuscale.catalog.hf_values import Ints, first_of, where
from gpuscale.errors import InputError

_GATED_ACTS = {"silu", "swiglu", "gelu_pytorch_tanh_gated", "geglu"}
"""Activations read as a gated MLP when the model_type is not in :data:`_GATED_MLP`."""
_GATED_MLP: dict[str, bool] = {
    # gate, up and down projections: LlamaMLP, MistralMLP, Qwen2MLP, Qwen3MLP, DeepseekV2MLP,
    # DeepseekV3MLP, GemmaMLP/Gemma2MLP/Gemma3MLP (GeGLU: gelu_pytorch_tanh(gate) x up),
    # Llama4TextMLP, Qwen3NextMLP, the MLPs of GLM-4/4.5, OLMo 2/3, SmolLM3, Seed-OSS, Hunyuan,
    # EXAONE 4, dots.llm1, Ministral and Granite; Phi3MLP and Glm4MLP fuse gate and up
    # (gate_up_proj); the experts of Mixtral, Qwen2-MoE, Qwen3-MoE, GPT-OSS, Llama 4, MiniMax-M2,
    # Granite, EXAONE-MoE (K-EXAONE) and Step 3.5 (Step3p7MLP, Step3p7Experts) hold gate and
    # up as well; Kimi K2 is DeepSeek-V3's architecture
    **dict.fromkeys(
        (
            "llama", "llama4_text", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3",
            "qwen3_moe", "gemma", "gemma2", "gemma3", "gemma3_text", "deepseek_v2",
            "deepseek_v3", "phi3", "gpt_oss", "ernie4_5", "ernie4_5_moe", "qwen3_next",
            "qwen3_5_text", "qwen3_5_moe_text", "kimi_k2", "deepseek_v32", "glm4", "glm4_moe",
            "minimax_m2", "olmo2", "olmo3", "olmoe", "smollm3", "seed_oss", "hunyuan_v1_dense",
            "hunyuan_v1_moe", "qwen3_vl_text", "qwen3_vl_moe_text", "exaone4", "dots1",
            "ministral", "granite", "granitemoe", "granitemoehybrid", "ernie4_5", "glm_moe_dsa",
            "minimax_m3_vl", "deepseek_v4", "exaone_moe", "step3p5", "gemma4", "gemma4_text",
        ),
        True,
    ),
    # one up and one down projection: GPT2MLP (c_fc, c_proj), GPTNeoXMLP and BloomMLP and
    # FalconMLP (dense_h_to_4h, dense_4h_to_h), OPT's decoder layer (fc1, fc2), MptMLP
    # (up_proj, down_proj), GPTJMLP (fc_in, fc_out), GPTBigCodeMLP (c_fc, c_proj),
    # NemotronHMLP (up_proj, relu2, down_proj), ApertusMLP (up_proj, xIELU, down_proj)
    **dict.fromkeys(
        (
            "gpt2", "gpt_neox", "opt", "bloom", "falcon", "mpt", "gptj", "gpt_bigcode",
            "nemotron_h", "apertus",
        ),
        False,
    ),
}  # fmt: skip
"""Whether a model_type's MLP is gated: in Hugging Face transformers this is fixed by the
architecture (the MLP class in ``models/<type>/modeling_<type>.py``), not by the activation
name (Gemma's GeGLU is ``gelu`` or ``gelu_pytorch_tanh``)."""

_TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_k", "moe_topk", "moe_top_k")
"""The keys config files give the experts a token is routed to under (Mixtral, GPT-OSS,
ERNIE 4.5, Hunyuan, Step 3.5)."""


def gated_mlp(cfg: dict[str, Any], path: Path, model_type: str) -> bool:
    """Whether the MLP is gated: by the model_type (:data:`_GATED_MLP`), else by the
    activation's name, which the file must then give (a gated MLP holds half as many weights
    again)."""
    gated = _GATED_MLP.get(model_type)
    if gated is not None:
        return gated
    act_keys = ("hidden_act", "hidden_activation", "activation_function", "mlp_hidden_act")
    act = first_of(cfg, *act_keys)
    if act is None:
        raise InputError(
            f"{where(path)}:hidden_act",
            None,
            f"required for a model_type gpuscale does not know ({model_type or '(none)'}): "
            "the MLP's activation, silu for a gated (SwiGLU) MLP, gelu for an ungated one",
        )
    return str(act).lower() in _GATED_ACTS


def mlp_widths(ints: Ints, model_type: str, hidden: int, gated: bool) -> tuple[int, int, int]:
    """(routed experts, the dense MLP's width, an expert's width). GPT-2's ``n_inner`` left
    out is 4 x hidden; a gated MLP's width has no such rule (LlamaConfig defaults to 11008
    at any hidden size), so its config must state it. Llama 4's ``intermediate_size`` is the
    experts' width, ``intermediate_size_mlp`` the dense one; Granite 4.0-H's dense MLP is its
    shared MLP (GraniteMoeHybridDecoderLayer: ``shared_intermediate_size``, default 1024),
    ``intermediate_size`` the experts'."""
    granite = model_type == "granitemoehybrid"
    # Granite 4.0-H without experts (num_local_experts 0) runs its shared MLP alone
    experts = max(
        ints(
            "num_local_experts",
            "n_routed_experts",
            "num_experts",
            "moe_num_experts",
            default=1,
            minimum=0 if granite else 1,
        ),
        1,
    )
    ffn_dense = ints(
        "intermediate_size_mlp",
        "dense_intermediate_size",  # MiniMax M3's dense layers (its experts: intermediate_size)
        "intermediate_size",
        "ffn_dim",
        "n_inner",
        "moe_intermediate_size",
        default=0 if gated else 4 * hidden,
        minimum=1,
        per_layer=True,
    )
    if granite:
        ffn_dense = ints("shared_intermediate_size", default=1024, minimum=1)
    if ffn_dense == 0:
        raise InputError(
            f"{where(ints.path)}:intermediate_size",
            None,
            "required for a gated (SwiGLU-style) MLP: a positive integer, the MLP's width",
        )
    ffn_moe = ints(
        "moe_intermediate_size", "intermediate_size", default=ffn_dense, minimum=1, per_layer=True
    )
    return experts, ffn_dense, ffn_moe


def shared_experts(
    ints: Ints, model_type: str, experts: int, ffn_dense: int, ffn_moe: int
) -> tuple[int, int]:
    """(shared experts in routed-expert units, their width; 0: the schema's default, shared
    x the routed width). Every Llama 4 MoE layer adds one shared expert of the experts'
    width; ExaoneMoeSparseMoEBlock one shared MLP of ``num_shared_experts`` x the experts'
    width; HunYuanMoEV1Moe a shared MLP of the dense width beside the experts in every
    layer. Shared experts given with a width of their own are counted in routed-expert units
    (Nemotron 3: one shared expert of 2 x the routed width = 2 units)."""
    shared = ints("n_shared_experts", "moe_num_shared_experts", "num_shared_expert", per_layer=True)
    if model_type == "llama4_text" and experts > 1:
        shared = 1
    if model_type == "exaone_moe":
        shared = ints("num_shared_experts")
    # Nemotron 3 / Megatron spelling, Qwen2-MoE's (Qwen1.5-MoE: one shared expert of 5632),
    # Granite 4.0-H's shared MLP beside its experts
    shared_ffn = ints(
        "moe_shared_expert_intermediate_size",
        "shared_expert_intermediate_size",
        "shared_intermediate_size",  # Granite 4.0-H, MiniMax M3
        "share_expert_dim",  # Step 3.5: one shared expert of this width
    )
    if model_type == "hunyuan_v1_moe":
        shared_ffn = ffn_dense
    if not (experts > 1 and shared_ffn):
        return shared, 0
    shared_ffn = max(shared, 1) * shared_ffn
    return max(round(shared_ffn / ffn_moe), 1), shared_ffn


def routed_top_k(cfg: dict[str, Any], path: Path, ints: Ints, model_type: str, experts: int) -> int:
    """How many experts each token is routed to: required for a mixture of experts (one of
    :data:`_TOP_K_KEYS`), 1 without one. A Granite 4.0-H without experts keeps the family's
    ``num_experts_per_tok``, which then routes nothing."""
    if experts > 1 and first_of(cfg, *_TOP_K_KEYS) is None:
        raise InputError(
            f"{where(path)}:num_experts_per_tok",
            None,
            f"required for a mixture of {experts} experts: how many experts each token is "
            "routed to (a positive integer)",
        )
    top_k = ints(*_TOP_K_KEYS, default=1, minimum=1, per_layer=True)
    return 1 if model_type == "granitemoehybrid" and experts == 1 else top_k
