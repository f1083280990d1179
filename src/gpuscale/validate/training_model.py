"""Which model a published training row names: the catalog's, or one built from its shape.

A row names a catalog model (any spelling the catalog knows, a run variant in brackets, a
local config.json), whose shape cells override the catalog's, or a model the catalog lacks,
built from its shape cells and what its name and notes say of the architecture (experts,
ALiBi or rotary positions, an untied output layer, a gated MLP). The rules are listed in
``validate/README.md``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuscale.catalog import Model, get_model, models
from gpuscale.errors import InputError
from gpuscale.perf.transformer import active_param_count, param_count
from gpuscale.validate.numbers import num
from gpuscale.validate.report import SIZE_TOLERANCE, SkipRow, check_size
from gpuscale.validate.training_stack import mentions

UnsupportedRowError = SkipRow
"""A row gpuscale cannot model yet; the message is the reason."""


GPT_VOCAB = 51200  # GPT-2 BPE (50,257) padded as Megatron does, when a row omits vocab


MTP_VARIANT = re.compile(r"(?:w/|with)(o|out| no)?\s*MTP", re.IGNORECASE)
"""A bracketed "w/ MTP" / "w/o MTP" after a model name: trained with or without its
multi-token-prediction layers (Megatron-Bridge's DeepSeek-V3 rows)."""


def _names_file(name: str) -> bool:
    try:
        return name.endswith(".json") or Path(name).is_file()
    except (OSError, ValueError):  # a name too long to be a path, or with a NUL
        return False


SIZE = r"\d+(?:\.\d+)?\s*[bmt](?:[\s-]*a\d+(?:\.\d+)?\s*b)?"
"""A model size as a name writes it: "70B", "8x7B" (after the "8x"), "671B-A37B"."""
DESCRIPTOR = re.compile(r"\s+(moe|dense|base|model|pre-?train(?:ed|ing)?|llm)\s*$", re.IGNORECASE)
"""A word after a model's name that names no other model ("Mixtral 8x22B MoE")."""
TRAILING_SIZE = re.compile(rf"\s+({SIZE})\s*$", re.IGNORECASE)


def _size_b(text: str) -> float:
    """Billions of parameters a size word states (its total, before any "A37B")."""
    found = re.match(r"(\d+(?:\.\d+)?)\s*([bmt])", text.lower())
    assert found is not None
    return float(found.group(1)) * {"b": 1.0, "m": 1e-3, "t": 1e3}[found.group(2)]


def _spelled_model(name: str) -> Model | None:
    """The catalog model of a name whose size stands in brackets ("Llama 3 (70B)", "Qwen3
    (235B-A22B)"), after a descriptor ("Mixtral 8x22B MoE"), or twice over ("DeepSeek-V3
    671B-A37B": the name without the size, where the model is of that size)."""
    tries = []
    size = re.fullmatch(rf"(.*?)\s*\(\s*((?:\d+x)?{SIZE})\s*\)\s*", name, re.IGNORECASE)
    if size:
        tries.append(f"{size.group(1)} {size.group(2)}")
    described = DESCRIPTOR.sub("", name)
    if described != name:
        tries.append(described)
    for attempt in tries:
        try:
            return get_model(attempt)
        except InputError:
            continue
    stated = TRAILING_SIZE.search(described)
    if stated is None:
        return None
    try:
        model = get_model(described[: stated.start()])
    except InputError:
        return None
    sizes = [(_size_b(stated.group(1)), param_count(model))]
    active = re.search(r"a(\d+(?:\.\d+)?)\s*b", stated.group(1).lower())
    if active:  # "671B-A37B": the active parameters must be the model's too
        sizes.append((float(active.group(1)), active_param_count(model)))
    fits = all(abs(n / 1e9 - said) <= SIZE_TOLERANCE * said for said, n in sizes)
    return model if fits else None


def _name_words(text: str) -> list[str]:
    """A model name's words, letters and numbers apart ("GPT-3 175B": gpt, 3, 175b)."""
    return re.findall(r"[a-z]+|\d+(?:\.\d+)?[a-z]*", text.lower())


def _model_by_words(name: str) -> Model | None:
    """The one catalog model one of whose names (key, name, aliases) holds every word of
    ``name`` and whose parameter count is the size the name states ("DeepSeek 67B":
    deepseek-llm-67b; "GPT 530B": megatron-530b); None where the name states no size, or
    where none or several fit ("GPT 175B": gpt3-175b and megatron-175b)."""
    words = _name_words(name)
    sizes = [w for w in words if re.fullmatch(r"\d+(?:\.\d+)?[bmt]", w)]
    if len(sizes) != 1:
        return None
    said = _size_b(sizes[0])
    fits = [
        m
        for m in models().values()
        if any(set(words) <= set(_name_words(n)) for n in (m.key, m.name, *m.aliases))
        and abs(param_count(m) / 1e9 - said) <= SIZE_TOLERANCE * said
    ]
    return fits[0] if len(fits) == 1 else None


def _catalog_model(name: str, notes: list[str], where: str) -> Model | None:
    """The catalog model a row names, also when a run variant is added in brackets
    ("DeepSeekV3 (tokendrop)", "Qwen3_30B_a3B (dropless)"): the variant changes how tokens
    are routed, not the model's shape, and is kept in the row's reason. A config.json the
    row names that cannot be read is an error, not a model missing from the catalog."""
    try:
        return get_model(name, f"{where}:model")
    except InputError as exc:
        if _names_file(name):  # the row's reason, not the whole file's error
            raise UnsupportedRowError(str(exc).removeprefix(f"{where}:")) from None
    spelled = _spelled_model(name)
    if spelled is not None:
        return spelled
    worded = _model_by_words(name)
    if worded is not None:
        notes.append(
            f"model {name!r} read as {worded.key}, the one catalog model whose names hold "
            "every word of it and whose size it states"
        )
        return worded
    bare = re.sub(r"\s*\([^)]*\)\s*$", "", name)
    if bare == name or not bare:
        return None
    try:
        model = get_model(bare)
    except InputError:
        return None
    variant = name[len(bare) :].strip(" ()")
    mtp = MTP_VARIANT.fullmatch(variant)
    if mtp:
        depths = 0 if mtp.group(1) else max(model.mtp_layers, 1)
        sets = min(model.mtp_weight_sets or depths, depths) if depths else 0
        notes.append(f"model {bare!r} {variant}: {depths} multi-token-prediction depth(s)")
        return model.model_copy(update={"mtp_layers": depths, "mtp_weight_sets": sets})
    notes.append(f"model {bare!r} in its {variant!r} variant: same shape, variant not modelled")
    return model


def _closest(name: str) -> str:
    """The catalog's closest model names to ``name``, as ``; did you mean ...``, or ""."""
    try:
        get_model(name)
    except InputError as exc:
        hint = re.search(r"did you mean [^;]*", exc.valid)
        return f"; {hint.group(0)}" if hint else ""
    return ""


_E_K = r"(?-i:\bE)\s*[=:]\s*(\d+)\s*[,;]?\s*(?-i:\bk)\s*[=:]\s*(\d+)"
"""The "E=64, k=8" shorthand (upper-case E, lower-case k, side by side)."""
EXPERTS = (
    re.compile(r"(\d+)\s+(?:routed\s+)?experts", re.IGNORECASE),
    re.compile(r"\b(?:num_experts|n_routed_experts|n_experts)\s*[=:]\s*(\d+)", re.IGNORECASE),
    re.compile(_E_K),
)
TOP_K = (
    # "top" not inside a word, but after an underscore: moe_router_topk=2
    re.compile(r"(?<![A-Za-z])top[\s_-]?(?:k\s*[=:]?\s*)?(\d+)", re.IGNORECASE),
    re.compile(r"\b(?:num_experts_per_tok|n_activated_experts)\s*[=:]\s*(\d+)", re.IGNORECASE),
    re.compile(r"(\d+)\s+active\s+experts", re.IGNORECASE),
    re.compile(_E_K),
)
"""A model's experts as a row's model name or notes state them, each list in order of
precedence: "16 experts, top-4", "num_experts=64, top_k=8", "64 experts, 8 active
experts", "E=64, k=8"."""

ALIBI = r"\balibi\b"
"""A row naming ALiBi attention biases (no position embedding table)."""
ROTARY = r"\brope\b|rotary"
"""A row naming rotary position embeddings (RoPE) for a model built from its shape."""
UNTIED = r"\buntied\b|\buntie[-_ ]embeddings|separate (output (layer|embedding)|(lm |output )?head)"
"""A row naming an output layer of its own (untied from the input embedding): "untied",
Megatron's ``--untie-embeddings-and-output-weights``, "separate output layer"."""
UNTIED_SAID = re.compile(
    r"(embeddings?|output layer|head) (are |is )?not tied|tie_word_embeddings\W*false"
)
"""The same said as a tie switched off ("embeddings are not tied", Hugging Face's
``tie_word_embeddings: false``)."""
GATED = r"\b(swiglu|geglu|reglu)\b|\bgated[ _](mlp|linear[ _]unit)"
"""A row naming a gated MLP (three matrices) for a model built from its shape: SwiGLU,
GeGLU, ReGLU, NeMo's ``gated_linear_unit``."""


def _architecture(said: str, body: dict[str, Any], notes: list[str]) -> None:
    """What a row's model name and notes say of an unlisted model's architecture beyond its
    shape: ALiBi or rotary positions, an untied output layer, a gated MLP, each left
    GPT-style (learned positions, tied embeddings, plain MLP) where the row does not name
    it or names it as not used ("no RoPE"; a negation more than a few words before the
    name is not seen). A gated MLP named without an FFN width gets 8/3 x hidden, the width
    that keeps a plain MLP's parameters (LLaMA's choice)."""
    # "no RoPE scaling" says nothing against RoPE itself
    text = re.sub(r"\b(no|without)\s+(rope|rotary)[ _-]scaling", "rope scaling", said.lower())
    if mentions(text, ALIBI):
        body["position"] = "alibi"
        notes.append("ALiBi attention biases (no position table), as the row says")
    elif mentions(text, ROTARY):
        body["position"] = "rope"
        notes.append("rotary position embeddings, as the row says")
    if mentions(text, UNTIED) or UNTIED_SAID.search(text):
        body["tied_embeddings"] = False
        notes.append("output layer untied from the input embedding, as the row says")
    gated = re.search(GATED, said, re.IGNORECASE)  # as the row spells it
    if gated is not None and mentions(text, GATED):
        body["gated_mlp"] = True
        name = gated.group(0).replace("_", " ")
        if "ffn_hidden" not in body:
            body["ffn_hidden"] = round(8 * body["hidden"] / 3)
            notes.append(f"gated MLP ({name}) as the row says, FFN width 8/3 x hidden")
        else:
            notes.append(f"gated MLP ({name}), as the row says")


def _why(exc: ValidationError) -> str:
    """The first reason pydantic gives for refusing a model, without its prefix."""
    return str(exc.errors()[0]["msg"]).removeprefix("Value error, ")


def _first_int(patterns: tuple[re.Pattern[str], ...], text: str, last: bool) -> int | None:
    """The number the first pattern that matches ``text`` gives: its first group, or its
    last with ``last`` (the k of "E=64, k=8")."""
    for pat in patterns:
        hit = pat.search(text)
        if hit is not None:
            return int(hit.group(pat.groups if last else 1))
    return None


GPT_FFN_SLACK = 0.05
"""How far an FFN width may sit from 4 x hidden and still be read as a plain MLP."""


def _as_stated(body: dict[str, Any], params_b: float | None, notes: list[str]) -> Model:
    """A model built from a row's shape, checked against the parameters the row states.

    A shape with an FFN width does not say whether the MLP is gated (SwiGLU: three
    matrices) or not (two); unless the row names it, the variant whose parameter count is
    nearer the stated one is taken. A shape that misses the stated size by more than
    SIZE_TOLERANCE either way (experts or widths the row leaves out) is not a model of
    that run.
    """
    model = Model.model_validate({**body, "key": body["name"]})
    named = bool(body.get("gated_mlp"))  # the row names a gated MLP
    gated = Model.model_validate({**body, "key": body["name"], "gated_mlp": True})
    if params_b is None:
        ratio = body.get("ffn_hidden", 4 * body["hidden"]) / body["hidden"]
        if not named and abs(ratio / 4.0 - 1.0) > GPT_FFN_SLACK:
            # a plain MLP is 4 x hidden; SwiGLU models keep its parameters at 8/3 x or so
            notes.append(
                f"gated MLP (SwiGLU) assumed: an FFN of {ratio:.2f} x hidden is not a plain "
                "MLP's 4 x (no params_b to tell)"
            )
            return gated
        return model
    stated = params_b * 1e9
    if (
        "ffn_hidden" in body
        and not named
        and abs(param_count(gated) - stated) < abs(param_count(model) - stated)
    ):
        model = gated
        notes.append("gated MLP (SwiGLU): its parameter count is nearer the row's")
    got = param_count(model)
    if abs(got / stated - 1.0) > SIZE_TOLERANCE:
        raise UnsupportedRowError(
            f"the row's shape gives {got / 1e9:.1f} B parameters, not the {params_b:g} B it "
            "states (experts or widths it does not state)"
        )
    return model


def _stated_size(row: dict[str, str], where: str) -> float | None:
    """The row's ``params_b`` (billions), None when empty; not above zero skips the row."""
    params_b = num(row, "params_b", where)
    if params_b is not None and params_b <= 0:
        raise UnsupportedRowError(
            f"params_b={row['params_b'].strip()!r}: a model's size must be a positive number "
            "of billions of parameters"
        )
    return params_b


SHAPE_CELLS = ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab")
"""The cells that give a model's shape, each named as the catalog's field it sets."""


def _shape_cells(row: dict[str, str], where: str) -> dict[str, float | None]:
    """The row's shape cells (None where empty), each read before any is checked; one that
    is not a whole number of at least 1 skips the row."""
    shape = {k: num(row, k, where) for k in SHAPE_CELLS}
    for k, v in shape.items():
        if v is not None and (v < 1 or not v.is_integer()):
            raise UnsupportedRowError(
                f"{k}={row[k]!r}: a model's shape is whole numbers of at least 1"
            )
    return shape


def _unlisted_body(
    row: dict[str, str], shape: dict[str, float | None], where: str, notes: list[str]
) -> dict[str, Any]:
    """The fields of a model the catalog lacks, from the row's shape: layers and hidden
    are required; heads default to a head size of 128, the vocabulary to GPT-2's padded
    one, KV heads to one per query head, and the architecture to GPT's (learned positions
    as many as the run's sequence, at least 2,048, and tied embeddings)."""
    if shape["layers"] is None or shape["hidden"] is None:
        raise UnsupportedRowError(
            f"model {row['model']!r} is not in the catalog and the row gives no shape"
            f"{_closest(row['model'])}"
        )
    h = int(shape["hidden"])
    heads = int(shape["heads"]) if shape["heads"] else max(h // 128, 1)
    if not shape["heads"]:
        notes.append("heads not stated: head size 128 assumed")
    if not shape["vocab"]:
        notes.append(f"vocab not stated: {GPT_VOCAB} assumed")
    notes.append(
        f"model {row['model']!r} not in the catalog: built from the row's shape, GPT-style "
        "(learned positions, tied embeddings) where the row does not say"
    )
    body: dict[str, Any] = {
        "name": row["model"],
        "source": "validation row",
        "layers": int(shape["layers"]),
        "hidden": h,
        "heads": heads,
        "vocab": int(shape["vocab"] or GPT_VOCAB),
        "position": "learned",
        "tied_embeddings": True,
        # learned positions: as many as the run's sequence (a table's parameter count
        # includes them, as llm-foundry's does)
        "max_seq": max(2048, int(num(row, "seq_len", where) or 0)),
    }
    if shape["ffn_hidden"]:
        body["ffn_hidden"] = int(shape["ffn_hidden"])
    if shape["kv_heads"]:
        body["kv_heads"] = int(shape["kv_heads"])
    else:
        notes.append("KV heads not stated: one per query head (multi-head attention)")
    return body


def _unlisted_model(
    row: dict[str, str], shape: dict[str, float | None], where: str, notes: list[str]
) -> Model:
    """A model the catalog lacks, built from the row's shape and what its name and notes
    say of the architecture and experts (both needed, more than one expert), checked
    against its stated size; a shape the catalog's rules refuse skips the row."""
    body = _unlisted_body(row, shape, where, notes)
    said = f"{row['model']} {row.get('notes', '')}"
    _architecture(said, body, notes)
    experts, top_k = _first_int(EXPERTS, said, False), _first_int(TOP_K, said, True)
    if experts and top_k and experts > 1:
        body["num_experts"], body["top_k"] = experts, top_k
        notes.append(f"{body['num_experts']} experts, top-{body['top_k']}, as the row says")
    try:
        return _as_stated(body, _stated_size(row, where), notes)
    except ValidationError as exc:
        why = _why(exc)
        raise UnsupportedRowError(f"the row's shape is not a model: {why}") from None


def _catalog_overrides(
    base: Model, shape: dict[str, float | None], notes: list[str]
) -> dict[str, Any]:
    """The fields a row's shape cells change in a catalog model. KV heads are kept for a
    latent-attention (MLA) model. An FFN width is every layer's for a dense model; for an
    MoE model it is the dense layers' unless it equals the catalog's expert width (Hugging
    Face's ``intermediate_size`` of Llama 4, DeepSeek's ``moe_intermediate_size``) where
    that differs from the dense layers'."""
    upd: dict[str, Any] = {}
    for k in ("layers", "hidden", "heads", "vocab"):
        v = shape[k]
        if v:
            upd[k] = int(v)
    kv = shape["kv_heads"]
    if kv and base.mla is None:
        upd["kv_heads"] = int(kv)
    if shape["ffn_hidden"]:
        width = int(shape["ffn_hidden"])
        if base.is_moe and width == base.ffn_hidden != base.dense_ffn_hidden:
            # the experts' width (Hugging Face's intermediate_size of Llama 4 or DeepSeek's
            # moe_intermediate_size): the catalog's already, its dense layers keep theirs
            notes.append(f"ffn_hidden={width}: {base.key}'s expert width, as the catalog's")
        elif base.is_moe:
            upd["dense_ffn_hidden"] = width
        else:  # a dense model's every layer has that MLP
            upd["ffn_hidden"] = upd["dense_ffn_hidden"] = width
    return upd


def _overridden(base: Model, upd: dict[str, Any], notes: list[str]) -> Model:
    """A catalog model with a row's shape fields. A new hidden size or head count keeps an
    explicit head size only where the catalog's differs from hidden / heads (or the model
    uses MLA); otherwise it follows from the new shape. A shape the model cannot take skips
    the row; the fields that differ from the catalog's are noted."""
    data = base.model_dump()
    if "hidden" in upd or "heads" in upd:
        data["head_dim"] = (
            0 if base.mla is None and base.head_dim * base.heads == base.hidden else base.head_dim
        )
    data.update(upd)
    try:
        model = Model.model_validate(data)
    except ValidationError as exc:
        why = _why(exc)
        raise UnsupportedRowError(
            f"the row's shape ({', '.join(f'{k}={v}' for k, v in upd.items())}) does not "
            f"fit {base.key}: {why}"
        ) from None
    shown = {k: v for k, v in upd.items() if k != "dense_ffn_hidden" or base.is_moe}
    changed = [f"{k}={v}" for k, v in shown.items() if getattr(base, k) != v]
    if changed:
        notes.append(f"{base.key} with the row's {', '.join(changed)} (catalog's otherwise)")
    return model


def model_for(row: dict[str, str], where: str) -> tuple[Model, list[str]]:
    """The model a row names and the notes on how it was read: the catalog's (an MTP model
    trains its multi-token-prediction layers unless the row says otherwise) with the row's
    shape cells over its own and checked against the row's stated size, or one the catalog
    lacks built from the row's shape."""
    notes: list[str] = []
    shape = _shape_cells(row, where)
    base = _catalog_model(row["model"], notes, where)
    if base is not None and base.mtp_layers and not any("MTP" in n for n in notes):
        notes.append(
            f"MTP not stated: {base.mtp_layers} multi-token-prediction depth(s), as "
            f"{base.name} trains"
        )
    if base is None:
        return _unlisted_model(row, shape, where, notes), notes
    upd = _catalog_overrides(base, shape, notes)
    model = _overridden(base, upd, notes) if upd else base
    params_b = _stated_size(row, where)
    if params_b is not None:
        # an MoE model's size may be its total or its active parameters ("37" for
        # DeepSeek-V3's 671 B), as tables give either
        label = f"{row['model']!r} ({model.key})"
        check_size(model, params_b, f"{params_b:g}", label, active=model.is_moe)
    return model, notes
