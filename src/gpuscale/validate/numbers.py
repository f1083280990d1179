"""Numbers in a published table's cells: the forms their authors write them in.

A figure may carry thousands separators, an approximate mark, a remark in brackets, its
column's unit or a K/M suffix; a parallel degree a label or word around it; a GPU count
nodes times GPUs (:func:`num`). A malformed cell is an :class:`~gpuscale.errors.InputError`
naming file, line and column; a well-formed one that cannot be true skips its row
(:class:`~gpuscale.validate.report.SkipRow`, :func:`positive`, :func:`count`).
"""

from __future__ import annotations

import math
import re

from gpuscale.errors import InputError
from gpuscale.perf.plan import MAX_GPUS
from gpuscale.validate.report import SkipRow

_SEPARATOR = r"[,\u202f\u00a0 _]"
"""Thousands separators: comma, (narrow) no-break space, space, underscore."""
_THOUSANDS = re.compile(rf"\d{{1,3}}({_SEPARATOR}\d{{3}})+(\.\d+)?")


_RATES = ("measured_tokens_per_s_per_gpu", "measured_tflops_per_gpu")

APPROX = re.compile(r"^(~|\u2248|approx(imately|\.)?|about|circa|ca\.|around)\s*", re.IGNORECASE)
"""An approximate mark before a figure: "~5762", "≈ 5762", "approx. 1050", "about 1050"."""
REMARK = re.compile(r"(?<=[\w.%/])\s*\((?P<said>[^()]*)\)\s*$")
"""A remark in brackets after a figure or its unit: "8192 (packed)", "1 (GA 8)", "671 (37
active)", "9100 ms (median)"; a unit in the brackets ("9100 (ms)") is the figure's."""
BRACKETED_UNIT = re.compile(
    r"%|[kmbtx]|ms|m?s(ec(ond)?s?)?|gpus?|tok(en)?s?(/s)?|tflop/?s|tflops|seq(uence)?s?", re.I
)
UNITS = {
    # column (or column suffix) -> (unit pattern after the number, factor)
    "_step_time_s": (
        (r"(ms|msec|milliseconds?)(\s*/\s*(it(er(ation)?)?|step))?", 1e-3),
        (r"(s|secs?|seconds?)(\s*/\s*(it(er(ation)?)?|step))?", 1.0),
        (r"(min|minutes?)(\s*/\s*(it(er(ation)?)?|step))?", 60.0),
    ),
    "measured_tflops_per_gpu": ((r"tflop/?s?|tflops|tf/?s|tf", 1.0),),
    "measured_tokens_per_s_per_gpu": (
        (r"(tok(en)?s?|tkn)\s*/\s*s(ec)?(\s*/\s*gpu)?|tok(en)?s?\s*per\s*s(ec(ond)?)?|tgs", 1.0),
    ),
    "seq_len": ((r"tok(en)?s?", 1.0),),
    "num_gpus": ((r"gpus?", 1.0),),
    "global_batch_seqs": ((r"seq(uence)?s?|samples?", 1.0),),
}
"""Units a figure may carry in its cell, per column: a step time in milliseconds or
seconds, TFLOP/s, tokens/s, a length in tokens, a count of GPUs or sequences."""
DEGREE_LABELS = {
    "tp": r"tp|tmp|tensor([\s-]+(model[\s-]+)?parallel(ism)?)?",
    "pp": r"pp|pipeline([\s-]+(model[\s-]+)?parallel(ism)?)?",
    "dp": r"dp|data([\s-]+parallel(ism)?)?",
    "cp": r"cp|context([\s-]+parallel(ism)?)?",
    "ep": r"ep|expert([\s-]+parallel(ism)?)?",
    "vpp": r"vpp|vp|virtual([\s-]+pipeline)?([\s-]+stages?)?|interleav\w*",
    "micro_batch": r"mbs|micro[\s-]*batch([\s-]+size)?",
}
"""The labels a degree cell may carry before its number, per column ("CP=2", "EP64",
"interleaved, 5"): its own degree's, no other's."""
DEGREES = tuple(DEGREE_LABELS)
"""Columns of a parallel degree: "none" or "off" there is a degree of 1, "4x" is 4."""


def _units(col: str, text: str) -> tuple[str, float]:
    """``text`` without a unit ``col`` reads (:data:`UNITS`), and the unit's factor."""
    if col == "num_gpus":
        # nodes times GPUs each: "8x8", "8 nodes x 8 GPUs", "16 x 8 GPUs per node"
        nodes = re.fullmatch(
            r"(\d+)\s*(nodes?)?\s*[x\u00d7*]\s*(\d+)\s*(gpus?)?(\s*(per|/|a|each)\s*node)?",
            text,
            re.I,
        )
        if nodes:
            return str(int(nodes.group(1)) * int(nodes.group(3))), 1.0
    for key, units in UNITS.items():
        if col == key or (key.startswith("_") and col.endswith(key)):
            for pattern, factor in units:
                bare = re.fullmatch(rf"(.*?\d\.?\s*(?-i:[kKM])?)\s*(?:{pattern})\.?", text, re.I)
                if bare:
                    return bare.group(1).strip(), factor
    if col in DEGREES:
        if text.lower() in ("none", "off", "no", "disabled"):
            return "1", 1.0
        # its own label before the degree ("CP=2", "EP64", "interleaved, 5"), a word after
        # it ("4x", "64-way", "4 stages")
        label = rf"^({DEGREE_LABELS[col]})\s*[=:,]?\s*(?=\d)"
        text = re.sub(label, "", text, flags=re.I)
        return re.sub(r"(?<=\d)\s*-?\s*([x\u00d7]|way|stages?|ranks?)$", "", text, flags=re.I), 1.0
    return text, 1.0


def _forms(col: str) -> str:
    """The forms :func:`num` reads in column ``col``, as its error lists them."""
    if col == "seq_len":
        examples = "8192, 8,192, 8K, 8192 tokens"
    elif col == "num_gpus":
        examples = "1024, 1,024, 1K, 1024 GPUs"
    elif col == "params_b":
        examples = "70, 70B, 1.8T"
    elif col == "measured_tokens_per_s_per_gpu":
        examples = "6412, 6,412, 6.4k, 6412 tok/s"
    elif col == "measured_tflops_per_gpu":
        examples = "412, 412.5, 412 TFLOP/s"
    elif col.endswith("mfu"):
        examples = "0.43, 43%"
    elif col.endswith("_step_time_s"):
        examples = "12.5, 1,024.5, 9100 ms, 9.1 s"
    elif col.endswith(("_s", "_gib")):
        examples = "12.5, 1,024.5"
    elif col in DEGREES:
        examples = "8, 8x, none"
    else:
        examples = "8192, 8,192"
    return f"a number ({examples}) or an empty cell"


DEGREE_COLUMNS = ("tp", "pp", "dp", "cp", "ep", "vpp")
"""The parallel degrees' columns, whose cells a remark naming another one makes doubtful."""


def num(row: dict[str, str], col: str, where: str) -> float | None:
    """A numeric cell; empty -> None; malformed or not finite (nan, inf, any case or sign)
    -> InputError naming the cell.

    Accepts the forms published tables print: thousands separators ("8,192"), an
    approximate mark ("~5762", "approx. 5762"), a remark in brackets after the figure
    ("8192 (packed)"), a percent sign (43 % -> 0.43), the column's unit (:data:`UNITS`:
    "9100 ms", "15.8 s", "520 TFLOP/s", "1050 tok/s", "8192 tokens", "64 GPUs"), for a
    sequence length, a GPU count or a global batch a K suffix in binary thousands ("8K" ->
    8192, as context lengths and cluster sizes are quoted), for a vocabulary a decimal one
    ("32K" -> 32,000), for a parameter count in billions a B or T suffix ("70B", "1.8T"),
    for a measured figure a decimal k or M suffix ("1.6k"), for a parallel degree a label
    or word around it ("CP=2", "64-way", "4x") or "none" (1), and for a GPU count nodes
    times GPUs ("8x8")."""
    text = APPROX.sub("", row.get(col, "").strip()).strip()
    if text == "":
        return None
    remark = REMARK.search(text)
    said = remark.group("said").strip().lower() if remark else ""
    if col in DEGREE_COLUMNS and said in DEGREE_COLUMNS and said != col:
        # "8 (PP)" in the tp column: which degree the 8 is, the row does not settle
        raise SkipRow(f"{col}={row[col]!r}: its remark names {said}, another parallel degree")
    # a unit in brackets is read as the unit, any other remark is set aside, but not a
    # factor ("8 (x 8 nodes)" is no figure of 8)
    if remark and not re.match(r"\s*[x\u00d7*]\s*\d", remark.group("said")):
        unit = remark.group("said").strip()
        text = text[: remark.start()] + (unit if BRACKETED_UNIT.fullmatch(unit) else "")
    text, scale = _units(col, text.strip())
    if text.endswith("%"):
        text, scale = text[:-1].strip(), 0.01
    elif col in ("seq_len", "num_gpus", "global_batch_seqs") and text[-1:] in ("k", "K"):
        # binary thousands, as context lengths, cluster sizes and batches are quoted ("16K
        # GPUs", a batch of "1K" sequences)
        text, scale = text[:-1].strip(), 1024.0
    elif col == "vocab" and text[-1:] in ("k", "K"):
        # a vocabulary in round thousands ("32K" for LLaMA's 32,000 tokens)
        text, scale = text[:-1].strip(), 1000.0
    elif col == "params_b" and text[-1:] in ("b", "B", "t", "T"):
        # the column counts billions: "70B" restates its unit, "1.8T" is 1,800
        text, scale = text[:-1].strip(), 1000.0 if text[-1] in "tT" else 1.0
    elif col in _RATES and text[-1:] in ("k", "K", "M"):
        # a rate in decimal thousands or millions ("1.6k" tokens/s)
        text, scale = text[:-1].strip(), scale * (1e6 if text[-1] == "M" else 1e3)
    if _THOUSANDS.fullmatch(text):
        text = re.sub(_SEPARATOR, "", text)
    try:
        v = float(text) * scale
    except ValueError:
        raise InputError(f"{where}:{col}", row.get(col, ""), _forms(col)) from None
    if not math.isfinite(v):
        # nan and inf alike: neither is a measurement (an empty cell is "not stated")
        raise InputError(
            f"{where}:{col}", row.get(col, "").strip(), "a finite number or an empty cell"
        )
    return v


def positive(row: dict[str, str], col: str, where: str) -> float | None:
    """A measured figure: None when empty; a malformed cell is an :class:`InputError`
    naming file, line and column; a number that is not above zero skips the row
    (:class:`SkipRow` naming the column), so that the rest of the file is still scored."""
    v = num(row, col, where)
    if v is not None and v <= 0:
        raise SkipRow(f"{col}={row[col]!r}: a measured value must be a positive number")
    return v


def count(row: dict[str, str], col: str, where: str) -> int | None:
    """A GPU or node count, a size or a parallel degree: None when empty; a malformed cell
    (a percentage is no count) is an :class:`InputError`; a number that is not a whole
    number from 1 to ``MAX_GPUS`` skips the row."""
    if row.get(col, "").strip().endswith("%"):
        raise InputError(f"{where}:{col}", row[col], "a whole number (8192, 8,192), not a share")
    v = num(row, col, where)
    if v is None:
        return None
    if not 1 <= v <= MAX_GPUS or not v.is_integer():
        raise SkipRow(f"{col}={row[col]!r}: must be a whole number from 1 to {MAX_GPUS:,}")
    return int(v)


def json_number(v: object) -> float | None:
    """``v`` as a float when it is a finite JSON number (not a boolean), else None."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def json_positive(x: dict[str, object], key: str, where: str) -> float:
    """A measured figure of a JSON object: a finite number above zero, else an
    :class:`InputError` naming ``where:key``."""
    v = json_number(x.get(key))
    if v is None or not v > 0:
        raise InputError(f"{where}:{key}", x.get(key), "a finite number above zero")
    return v
