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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from gpuscale.catalog import Model
from gpuscale.errors import InputError
from gpuscale.paths import require_file
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
    """The signed error of a prediction in percent: 100 x (predicted / measured - 1), positive
    when the prediction is high."""
    return 100.0 * (predicted / measured - 1.0)  # no overflow for a measured 1e308


def _header(first: list[str]) -> list[str]:
    """Column names as the schema spells them, also when written "Id, Source, ...", without
    the empty name a trailing comma after the last one leaves."""
    header = [name.strip().lower() for name in first]
    while header and header[-1] == "":
        header.pop()
    return header


def merged_report(
    paths: Sequence[Path], one_file: Callable[[Path], ValidationReport]
) -> ValidationReport:
    """One report over several CSV files (``--runs`` repeated): each file read and scored as
    alone, their rows in order. A row id in two files is an :class:`InputError`, as a
    repeated id within one file is, so that every row of the report stays distinct."""
    reports = [one_file(path) for path in paths]
    first = dict.fromkeys(r.id for r in reports[0].rows)
    owner = {rid: paths[0] for rid in first}
    for path, report in zip(paths[1:], reports[1:], strict=True):
        for rid in dict.fromkeys(r.id for r in report.rows):
            if rid in owner:
                raise InputError(
                    f"{path.name}:id",
                    rid,
                    f"already a row of {owner[rid].name}: ids must differ across --runs files",
                )
            owner[rid] = path
    columns = dict.fromkeys(c for report in reports for c in report.unread_columns)
    return replace(
        reports[0],
        rows=[row for report in reports for row in report.rows],
        unread_columns=tuple(columns),
    )


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


class SkipRow(Exception):  # noqa: N818 - a row outcome, raised to skip it with a reason
    """A row gpuscale cannot score or model: the message is the reason it is skipped."""

    @classmethod
    def not_in_catalog(cls, what: str, value: str, exc: InputError) -> SkipRow:
        """A cell naming no catalog entry, with the catalog's own suggestion (``exc``: the
        lookup's error: the closest names, or the first known ones)."""
        said = exc.valid.removeprefix("unknown; ")
        return cls(f"{what} {value!r} not in the catalog ({said})")


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
