"""StepFun's Step 3.5 config.json (model_type ``step3p5``; Step 3.7's ``text_config`` too)
as transformers' Step3p7TextConfig and vLLM's Step3p5 model read its keys: the config
class's defaults, the MTP layers' kinds listed after the main layers', the MoE layers of
``moe_layers_enum``; and the blocks of an MTP depth (used by
:func:`gpuscale.catalog.hf.load_hf_config`; the sliding layers' own shape is read in
:mod:`gpuscale.catalog.hf_window`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuscale.catalog.hf_values import Ints, where
from gpuscale.errors import InputError

STEP3P5_DEFAULTS: dict[str, int] = {
    "intermediate_size": 11264,
    "moe_intermediate_size": 1280,
    "moe_num_experts": 288,
    "moe_top_k": 8,
    "share_expert_dim": 1280,
    "num_attention_groups": 8,
    "head_dim": 128,
}
"""transformers' Step3p7TextConfig defaults (its ``num_key_value_heads``,
``n_routed_experts``, ``num_experts_per_tok``) for the keys a Step 3.5 file may leave
out (a key given as null stays null); its MoE layers default to layers 3 on."""


def step3p5_config(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    """A Step 3.5 config (its :data:`STEP3P5_DEFAULTS` filled in, by
    :func:`~gpuscale.catalog.hf_defaults.with_class_defaults`) as Step3p7TextConfig reads
    it: ``layer_types`` of num_hidden_layers + num_nextn_predict_layers entries split into
    the main layers' and ``mtp_layer_types``, and ``moe_layers_enum`` ("3,4,...,44"; layers
    3 on without it) as ``mlp_layer_types`` and, for the MTP layers after them,
    ``mtp_mlp_layer_types``. Only GQA attention (``att_impl_type``), the one vLLM's
    Step3p5 model builds."""
    impl = cfg.get("att_impl_type", "GQA")
    if impl != "GQA":
        raise InputError(f"{where(path)}:att_impl_type", impl, "GQA (the only one Step 3.5 runs)")
    ints = Ints(cfg, path)
    layers, mtp = ints("num_hidden_layers"), ints("num_nextn_predict_layers")
    kinds = cfg.get("layer_types")
    if mtp and isinstance(kinds, list) and len(kinds) == layers + mtp:
        mtp_kinds = cfg.get("mtp_layer_types", kinds[layers:])
        cfg = {**cfg, "layer_types": kinds[:layers], "mtp_layer_types": mtp_kinds}
    if cfg.get("mlp_layer_types") is not None or not layers:
        return cfg
    moe = _moe_layers(cfg.get("moe_layers_enum"), path, layers + mtp)
    if moe is None:
        moe = set(range(3, layers))
    mlp = ["sparse" if i in moe else "dense" for i in range(layers + mtp)]
    return {**cfg, "mlp_layer_types": mlp[:layers], "mtp_mlp_layer_types": mlp[layers:]}


def _moe_layers(listed: object, path: Path, total: int) -> set[int] | None:
    """The layer indices of ``moe_layers_enum``, a comma-separated string or a list, each
    below ``total`` (the main layers, then the MTP layers); None where it is absent."""
    if listed is None:
        return None
    items = listed.split(",") if isinstance(listed, str) else listed
    out: set[int] = set()
    for item in items if isinstance(items, list) else [items]:
        text = str(item).strip()
        if not text and isinstance(listed, str):
            continue
        if isinstance(item, bool) or not text.isdigit() or int(text) >= total:
            raise InputError(
                f"{where(path)}:moe_layers_enum",
                str(listed)[:60],
                f"the MoE layers' indices, 0 to {total - 1}, as a list or a string (3,4,5)",
            )
        out.add(int(text))
    return out


def mtp_blocks(cfg: dict[str, Any], path: Path, model_type: str, mtp: int) -> str:
    """An MTP depth's blocks where they are not attention and the model's MoE: K-EXAONE's
    MTP layer has a dense MLP of intermediate_size (vLLM's ExaoneMoeMTP, the checkpoint's
    mtp.layers.0.mlp); Step 3.5's are dense unless ``moe_layers_enum`` lists them (layers
    45 to 47 are not: Megatron-Bridge's Step35Bridge builds them dense)."""
    if not mtp:
        return ""
    if model_type == "exaone_moe":
        return "*-"
    kinds = cfg.get("mtp_mlp_layer_types")
    if model_type != "step3p5" or not isinstance(kinds, list) or not kinds:
        return ""
    if len(set(kinds)) != 1:
        raise InputError(
            f"{where(path)}:moe_layers_enum",
            str(cfg.get("moe_layers_enum"))[:60],
            "every MTP layer dense or every one MoE (gpuscale prices the depths alike)",
        )
    return "*-" if kinds[0] == "dense" else ""
