"""The validation contract shared by every kind (training, inference, collectives).

Each row is predicted, compared with its measured figure and scored; a row gpuscale cannot
model yet is *skipped with its reason*, never dropped. The summary carries MAPE, median and
worst absolute error, and the JSON layout in ``shared/validation/README.md``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from gpuscale.catalog import Model
from gpuscale.errors import InputError
from gpuscale.paths import require_file
from gpuscale.perf.plan import MAX_GPUS
from gpuscale.perf.transformer import active_param_count, param_count
from gpuscale.validate.ranking import PlanRanking, RankedRun, plan_ranking


@dataclass(frozen=True)
class RowResult:
    id: str
    predicted: float | None
    measured: float | None
    error_pct: float | None
    status: str  # "scored" | "skipped" | "reported" (shown, not scored)
    reason: str = ""
    group: str = ""  # e.g. the source, for the by-source table
    metric: str = ""  # what is compared (tokens_per_s_per_gpu, busbw_GBps, ...)
    detail: dict[str, object] = field(default_factory=dict)

    @classmethod
    def skip(
        cls, rid: str, reason: str, measured: float | None = None, group: str = "", metric: str = ""
    ) -> RowResult:
        """A row gpuscale does not score, with the reason (and the figure it gives)."""
        return cls(rid, None, measured, None, "skipped", reason, group, metric)


TWIN_TOLERANCE = 0.25
"""The issue's per-row bound: one prediction is within it of two measurements only when
they differ by at most :data:`TWIN_LIMIT`."""
TWIN_LIMIT = (1.0 + TWIN_TOLERANCE) / (1.0 - TWIN_TOLERANCE)
"""(1 + t) / (1 - t), 1.67 x: the widest spread of measurements one prediction fits."""


@dataclass(frozen=True)
class Twins:
    """Scored rows the model reads as one configuration (same inputs, same prediction)
    whose measurements differ by more than any single prediction can be within
    :data:`TWIN_TOLERANCE` of: a software release, a setting the rows leave out, or an
    error in one of them."""

    ids: list[str]
    measured: list[float]
    metric: str

    @property
    def ratio(self) -> float:
        return max(self.measured) / min(self.measured)


@dataclass(frozen=True)
class ValidationReport:
    kind: str
    rows: list[RowResult]
    unread_columns: tuple[str, ...] = ()
    """Header columns outside the schema: nothing in them was read (a misspelt column's
    values are then "not stated")."""

    def twins(self) -> list[Twins]:
        """Groups of scored rows with one ``detail["config"]`` (the inputs as the model read
        them) whose measurements are too far apart for one prediction to fit them all."""
        groups: dict[tuple[str, object], list[RowResult]] = {}
        for r in self.scored:
            if r.detail.get("config") and r.measured:
                groups.setdefault((r.metric, r.detail["config"]), []).append(r)
        out = []
        for (metric, _), rs in groups.items():
            t = Twins([r.id for r in rs], [float(r.measured or 0.0) for r in rs], metric)
            if len(rs) > 1 and t.ratio > TWIN_LIMIT:
                out.append(t)
        return out

    def plan_ranking(self) -> PlanRanking | None:
        """Pairs of scored rows of one job (``detail["job"]``) that differ in plan, and how
        often gpuscale orders them as measured; None where no job has two plans."""
        return plan_ranking(
            RankedRun(r.id, str(r.detail["job"]), str(r.detail["plan"]), r.predicted, r.measured)
            for r in self.scored
            if "job" in r.detail
            and "plan" in r.detail
            and r.predicted is not None
            and r.measured is not None
        )

    @property
    def scored(self) -> list[RowResult]:
        return [r for r in self.rows if r.status == "scored"]

    @property
    def skipped(self) -> list[RowResult]:
        return [r for r in self.rows if r.status == "skipped"]

    def stats(self, rows: list[RowResult] | None = None) -> dict[str, float | None]:
        """MAPE, median and worst |error| of the scored rows (or ``rows``), and the mean
        signed error (a bias: + where predictions run above the measured)."""
        signed = np.array(
            [
                r.error_pct
                for r in (self.scored if rows is None else rows)
                if r.error_pct is not None
            ]
        )
        keys = ("mape_pct", "median_abs_error_pct", "max_abs_error_pct", "mean_signed_error_pct")
        if signed.size == 0:
            return dict.fromkeys(keys)
        errs = np.abs(signed)
        return {
            "mape_pct": float(errs.mean()),
            "median_abs_error_pct": float(np.median(errs)),
            "max_abs_error_pct": float(errs.max()),
            "mean_signed_error_pct": float(signed.mean()),
        }

    def to_json(self) -> dict[str, object]:
        rows = [asdict(r) for r in self.rows]  # every field of a row, in its order
        return {
            "kind": self.kind,
            "rows": rows,
            "scored": len(self.scored),
            "skipped": len(self.skipped),
            "reported": sum(1 for r in self.rows if r.status == "reported"),
            **self.stats(),
            "by_metric": {
                m: {"n": len(rs), **self.stats(rs)} for m, rs in self.by_metric().items()
            },
            "by_group": {g: {"n": len(rs), **self.stats(rs)} for g, rs in self.by_group().items()},
            **(
                {"by_model_kind": {k: {"n": len(rs), **self.stats(rs)} for k, rs in kinds.items()}}
                if (kinds := self.by_model_kind())
                else {}
            ),
            "indistinguishable_rows": [
                {"ids": t.ids, "measured": t.measured, "metric": t.metric, "ratio": t.ratio}
                for t in self.twins()
            ],
            "unread_columns": list(self.unread_columns),
            **({"plan_ranking": pr.to_json()} if (pr := self.plan_ranking()) else {}),
        }

    def _grouped(
        self, key: Callable[[RowResult], str], keep_empty: bool = True
    ) -> dict[str, list[RowResult]]:
        """Scored rows by ``key`` (rows whose key is empty kept under "" or left out)."""
        out: dict[str, list[RowResult]] = {}
        for r in self.scored:
            if (k := key(r)) or keep_empty:
                out.setdefault(k, []).append(r)
        return out

    def by_metric(self) -> dict[str, list[RowResult]]:
        """Scored rows per compared figure (each kind's accuracy targets are per metric)."""
        return self._grouped(lambda r: r.metric)

    def by_group(self) -> dict[str, list[RowResult]]:
        """Scored rows per source."""
        return self._grouped(lambda r: r.group)

    def by_model_kind(self) -> dict[str, list[RowResult]]:
        """Scored training rows per kind of model (``detail["model_kind"]``: dense, MoE,
        hybrid Mamba), where accuracy differs most."""
        return self._grouped(lambda r: str(r.detail.get("model_kind", "")), keep_empty=False)

    def dumps(self) -> str:
        return strict_json(self.to_json())


def strict_json(obj: object) -> str:
    """JSON that strict parsers (jq, JavaScript) read: numpy scalars and arrays as plain
    values, a non-finite float (a figure that cannot be computed) as null."""
    return json.dumps(_finite(obj), indent=2, allow_nan=False)


def _finite(o: object) -> object:
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    if isinstance(o, np.ndarray):
        return _finite(o.tolist())
    if isinstance(o, np.generic):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if o is None or isinstance(o, (str, int, float, bool)):
        return o
    raise TypeError(type(o).__name__)


def signed_error_pct(predicted: float, measured: float) -> float:
    return 100.0 * (predicted / measured - 1.0)  # no overflow for a measured 1e308


def _header(first: list[str]) -> list[str]:
    """Column names as the schema spells them, also when written "Id, Source, ...", without
    the empty name a trailing comma after the last one leaves."""
    header = [name.strip().lower() for name in first]
    while header and header[-1] == "":
        header.pop()
    return header


def unread_columns(
    rows: list[tuple[int, dict[str, str]]], schema: tuple[str, ...]
) -> tuple[str, ...]:
    """The columns of :func:`read_rows`'s rows (each has every header column; there is at
    least one) that are not in ``schema``."""
    return tuple(c for c in rows[0][1] if c and c not in schema)


def read_rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    """CSV rows as dicts with the line each starts on, checking the header has the
    ``required`` columns.

    The whole file is checked before the first row is given, so that a file that is wrong
    as a table (a row with fewer or more cells than the header names, a repeated id, no
    data rows) is an :class:`InputError` naming file and line before anything is scored."""
    require_file(path, "--runs", "a CSV file")
    try:
        # utf-8-sig: a spreadsheet's byte-order mark is not part of the first column's name
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError("--runs", str(path), f"not a readable UTF-8 CSV file ({exc})") from exc
    reader = csv.reader(io.StringIO(text, newline=""))
    lines: list[tuple[int, list[str]]] = []  # (the line a record starts on, its cells)
    end = 0  # the last line of the record before (a quoted cell may span lines)
    try:
        for cells in reader:
            lines.append((end + 1, cells))
            end = reader.line_num
    except csv.Error as exc:
        raise InputError(
            "--runs", str(path), f"a well-formed CSV file (line {reader.line_num}: {exc})"
        ) from None
    header = _header(lines[0][1]) if lines else []
    twice = sorted({c for c in header if c and header.count(c) > 1})
    if twice:
        # the second would silently win over the first
        raise InputError("--runs", str(path), f"each column once; repeated: {', '.join(twice)}")
    missing = [c for c in required if c not in header]
    if missing:
        hint = (
            "; the header has one column: is the file separated by something else than commas?"
            if len(header) == 1
            else ""
        )
        raise InputError("--runs", str(path), f"missing column(s) {', '.join(missing)}{hint}")
    rows: list[tuple[int, dict[str, str]]] = []
    first_line: dict[str, int] = {}
    for lineno, cells in lines[1:]:
        if not any(cell.strip() for cell in cells):
            continue  # a blank line, or one of empty cells a spreadsheet left behind
        if len(cells) < len(header) or any(cell.strip() for cell in cells[len(header) :]):
            # a short row would read its missing cells as "not stated", a long one drop its
            # last cells: either way the cells are not under the columns they were meant for
            raise InputError(
                f"{path.name}:line {lineno}",
                cells[0].strip(),
                f"row has {len(cells)} fields where the header names {len(header)} columns"
                + ("" if len(cells) < len(header) else "; only empty fields may follow the last"),
            )
        row = {col: cell.strip() for col, cell in zip(header, cells, strict=False)}
        for col, cell in row.items():
            # a table's "not applicable" marks are empty cells: the source does not say
            if col not in ("id", "source", "notes") and cell.lower() in NOT_STATED:
                row[col] = ""
        rid = row.get("id", "")
        if not rid and "id" in required:
            raise InputError(f"{path.name}:line {lineno}:id", rid, "a row id (it names the row)")
        if rid and rid in first_line:
            raise InputError(
                f"{path.name}:line {lineno}:id", rid, f"unique; line {first_line[rid]} has it"
            )
        first_line.setdefault(rid, lineno)
        rows.append((lineno, row))
    if not rows:
        raise InputError("--runs", str(path), "no data rows under the header")
    return rows


NOT_STATED = ("-", "\u2013", "\u2014", "n/a", "na", "?")
"""Cells that published tables use for "not stated" or "not applicable": read as empty."""

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
        (r"ms|msec|milliseconds?", 1e-3),
        (r"(s|secs?|seconds?)(\s*/\s*(it(er(ation)?)?|step))?", 1.0),
        (r"min|minutes?", 60.0),
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
DEGREES = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch")
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
        # a label before the degree ("CP=2", "EP64", "interleaved, 5"), a word after it
        # ("4x", "64-way", "4 stages")
        text = re.sub(r"^[a-z][a-z ]*?\s*[=:,]?\s*(?=\d)", "", text, flags=re.I)
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


def num(row: dict[str, str], col: str, where: str) -> float | None:
    """A numeric cell; empty -> None; malformed or not finite (nan, inf, any case or sign)
    -> InputError naming the cell.

    Accepts the forms published tables print: thousands separators ("8,192"), an
    approximate mark ("~5762", "approx. 5762"), a remark in brackets after the figure
    ("8192 (packed)"), a percent sign (43 % -> 0.43), the column's unit (:data:`UNITS`:
    "9100 ms", "15.8 s", "520 TFLOP/s", "1050 tok/s", "8192 tokens", "64 GPUs"), for a
    sequence length or a GPU count a K suffix in binary thousands ("8K" -> 8192, as context
    lengths and cluster sizes are quoted), for a parameter count in billions a B or T
    suffix ("70B", "1.8T"), for a measured figure a decimal k or M suffix ("1.6k"), and for
    a parallel degree "none" (1) or a trailing x ("4x")."""
    text = APPROX.sub("", row.get(col, "").strip()).strip()
    if text == "":
        return None
    remark = REMARK.search(text)
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


class SkipRow(Exception):  # noqa: N818 - a row outcome, raised to skip it with a reason
    """A row gpuscale cannot score or model: the message is the reason it is skipped."""


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


SIZE_TOLERANCE = 0.25
"""Largest relative gap between the parameters a row states and those its model has."""


def check_size(model: Model, stated_b: float, shown: str, label: str, active: bool = False) -> None:
    """Skip a row whose stated size (``stated_b`` billion parameters, printed as ``shown``)
    is more than SIZE_TOLERANCE from ``model``'s parameters, or with ``active`` from both
    its total and its active parameters (an MoE table may give either): the row's model
    (``label``) and size do not go together."""
    sizes = {param_count(model)} | ({active_param_count(model)} if active else set())
    if all(abs(n / (stated_b * 1e9) - 1.0) > SIZE_TOLERANCE for n in sizes):
        act = f" ({active_param_count(model) / 1e9:.1f} B active)" if len(sizes) > 1 else ""
        raise SkipRow(
            f"params_b={shown} but {label} has {param_count(model) / 1e9:.1f} B "
            f"parameters{act}: the row's model and size do not go together"
        )
