"""How far gpuscale's training throughput predictions land from published measurements: the
error band ``train estimate``, ``train search`` and ``train scaling`` print beside them.

    python -m gpuscale.calibrate.accuracy --write

scores the shipped calibration on the file its constants were fitted on (in-sample) and on
the held-out files (``benchmarks/heldout/training_*.csv``: published runs the fit never
saw), by kind of model (dense, MoE, hybrid Mamba, hybrid Gated DeltaNet) and GPU
architecture, and stores the figures in ``training_accuracy.json`` beside
``calibration.json``. A prediction is shown with the held-out figures of its kind on its
GPU architecture: the median |error| of throughput (tokens/s per GPU, or the TFLOP/s a
source gives), the |error| nine runs in ten stay within, and the median signed error where
it shows a lean. Where fewer than :data:`MIN_ROWS` runs share both, the kind's runs on all
architectures are shown and the line says so. Where the catalog model itself has published
runs (in either file), the line adds its own record (:class:`ModelRecord`): how its
predictions came out, on the prediction's architecture where it has enough runs there. The figures
belong to the training constants they were measured with: under others (``--calibration
FILE``) the band is reported unknown.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import defaultdict
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from gpuscale.calibrate.calibration import Calibration, default_calibration
from gpuscale.catalog import catalog_key, models
from gpuscale.catalog.schema import GPU, Model
from gpuscale.errors import InputError

ACCURACY_FILE = Path(__file__).with_name("training_accuracy.json")
REPO = Path(__file__).resolve().parents[3]
DEFAULT_FITTED = REPO.parent / "shared" / "validation" / "training_runs.csv"
DEFAULT_HELDOUT = REPO / "benchmarks" / "heldout"

MIN_ROWS = 10
"""Fewest held-out runs a group needs before its figures are shown for a prediction."""

LEAN_PCT = 5.0
"""A group's median signed error at least this large is said with the band: its
predictions lean high (or low). The median, not the mean: one job's plan sweep with errors
of several hundred % would otherwise speak for a whole architecture."""

SERVING_PREFIXES = ("inf_", "decode_")
"""Calibration constants of the serving model, which no training prediction reads."""

ARCH_NAMES = {
    "volta": "Volta",
    "ampere": "Ampere",
    "ada": "Ada",
    "hopper": "Hopper",
    "blackwell": "Blackwell",
    "cdna2": "CDNA 2",
    "cdna3": "CDNA 3",
    "cdna4": "CDNA 4",
}


def _arch(arch: str) -> str:
    return ARCH_NAMES.get(arch, arch)


def calibration_digest(cal: Calibration) -> str:
    """A short fingerprint of the training constants of ``cal`` (the serving ones left
    out): the band is shown only under the constants it was measured with."""
    training = {
        f.name: getattr(cal, f.name) for f in fields(cal) if not f.name.startswith(SERVING_PREFIXES)
    }
    text = json.dumps(training, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def error_stats(errors: list[float]) -> dict[str, float | int]:
    """Runs, MAPE, median and 90th-percentile |error|, mean and median signed error, in %
    (positive: predicted throughput above the measured)."""
    e = np.asarray(errors, dtype=np.float64)
    a = np.abs(e)
    return {
        "rows": len(errors),
        "mape_pct": round(float(a.mean()), 2),
        "median_abs_pct": round(float(np.median(a)), 2),
        "p90_abs_pct": round(float(np.percentile(a, 90)), 2),
        "bias_pct": round(float(e.mean()), 2),
        "median_signed_pct": round(float(np.median(e)), 2),
    }


@dataclass(frozen=True)
class Sample:
    """One scored run: kind of model, GPU architecture, the job it measures (runs of one
    job differ only in their plan or software release) and its signed error in %."""

    kind: str
    arch: str
    job: str
    error_pct: float
    model: str = ""
    """The catalog key of the run's model ("" for any other shape: built from the row, or
    a catalog model the row changes)."""


def score(files: list[Path], cal: Calibration) -> list[Sample]:
    """Every scored run of ``files`` with its model kind, GPU architecture, job and error."""
    from gpuscale.validate.training import validate_training

    out: list[Sample] = []
    for f in files:
        for r in validate_training(f, cal).scored:
            if r.error_pct is not None:
                d = r.detail
                out.append(
                    Sample(
                        str(d["model_kind"]),
                        str(d["gpu_arch"]),
                        str(d["job"]),
                        r.error_pct,
                        str(d.get("model", "")),
                    )
                )
    return out


def group_stats(samples: list[Sample]) -> list[dict[str, Any]]:
    """Figures per kind and architecture, per kind (``arch`` null) and over all runs (both
    null), ordered by kind then architecture, each with its distinct jobs and, for the
    pooled groups, the architectures its runs are on."""
    groups: dict[tuple[str | None, str | None], list[Sample]] = defaultdict(list)
    for s in samples:
        for key in ((s.kind, s.arch), (s.kind, None), (None, None)):
            groups[key].append(s)
    out = []
    for k, a in sorted(groups, key=lambda ka: (ka[0] or "", ka[1] or "")):
        members = groups[(k, a)]
        g: dict[str, Any] = {"kind": k, "arch": a, **error_stats([s.error_pct for s in members])}
        g["jobs"] = len({s.job for s in members})
        if a is None:
            g["archs"] = sorted({s.arch for s in members})
        out.append(g)
    return out


SPAN_ROWS = 10
"""Runs of a model from which its record gives the middle eight in ten, not the extremes."""

ARCH_RECORD_ROWS = 3
"""Fewest runs of a model on the prediction's GPU architecture before its record there is
shown in place of the model's record on every GPU (one run is an anecdote)."""


def _record_stats(errors: list[float], in_fit: int) -> dict[str, Any]:
    e = np.asarray(errors, dtype=np.float64)
    middle = len(errors) >= SPAN_ROWS
    low, high = np.percentile(e, [10, 90]) if middle else (e.min(), e.max())
    return {
        "rows": len(errors),
        "in_fit": in_fit,
        "median_signed_pct": round(float(np.median(e)), 2),
        "low_pct": round(float(low), 2),
        "high_pct": round(float(high), 2),
        "span": "middle 80 %" if middle else "all",
    }


def model_stats(fitted: list[Sample], heldout: list[Sample]) -> dict[str, dict[str, Any]]:
    """Per catalog model, every published run of it, in the fit's file or held out, on any
    GPU (``"any"``) and per GPU architecture: how many, how many of them in the fit, the
    median signed error and its spread (lowest and highest; the 10th and 90th percentiles
    from SPAN_ROWS runs). Only runs of the catalog's model as it stands count
    (``Sample.model`` is empty for a shape built from a row, or a catalog model the row
    changes)."""
    runs: dict[tuple[str, str], list[float]] = defaultdict(list)
    in_fit: dict[tuple[str, str], int] = defaultdict(int)
    catalog = models()
    for part, samples in ((True, fitted), (False, heldout)):
        for s in samples:
            if s.model in catalog:
                for key in ((s.model, "any"), (s.model, s.arch)):
                    runs[key].append(s.error_pct)
                    in_fit[key] += part
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for (model, arch), e in sorted(runs.items()):
        out[model][arch] = _record_stats(e, in_fit[(model, arch)])
    return dict(out)


def measure(fitted: list[Path], heldout: list[Path], cal: Calibration) -> dict[str, Any]:
    """The contents of ``training_accuracy.json`` for ``cal``."""
    fit, held = score(fitted, cal), score(heldout, cal)
    return {
        "calibration": calibration_digest(cal),
        "fitted_files": [f.name for f in fitted],
        "heldout_files": [f.name for f in heldout],
        "fitted": group_stats(fit),
        "heldout": group_stats(held),
        "by_model": model_stats(fit, held),
    }


def _side(pct: float) -> str:
    """A signed error in words: "7 % above", "0.4 % below" (one decimal under 1 %)."""
    size = f"{abs(pct):.1f}" if abs(pct) < 0.95 else f"{abs(pct):.0f}"
    return f"{size} % {'above' if pct >= 0 else 'below'}"


@dataclass(frozen=True)
class ModelRecord:
    """How gpuscale's predictions of one catalog model's published runs came out, on the
    prediction's GPU architecture where it has runs there (``arch``; None: on any GPU);
    signed errors of throughput, positive: predicted above the measured."""

    model: str
    arch: str | None
    rows: int
    in_fit: int
    median_signed_pct: float
    low_pct: float
    high_pct: float
    span: str = "all"
    """Which runs ``low_pct`` to ``high_pct`` spans: "all", or "middle 80 %"."""

    def line(self) -> str:
        runs = f"{self.rows} published run{'' if self.rows == 1 else 's'}"
        runs += f" on {_arch(self.arch)} GPUs" if self.arch else " on any GPU"
        where = "all in the fit" if self.in_fit == self.rows else f"{self.in_fit} in the fit"
        if self.in_fit == 0:
            where = "none in the fit"
        if self.rows == 1:
            spread = f"predicted {_side(self.median_signed_pct)} the measured"
        else:
            which = " (the middle 8 in 10)" if self.span != "all" else ""
            spread = (
                f"predictions from {_side(self.low_pct)} to {_side(self.high_pct)} the "
                f"measured{which}, median {_side(self.median_signed_pct)}"
            )
        return f"this model's own {runs} ({where}): {spread}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ErrorBand:
    """The held-out error of the published runs most like a prediction. ``arch`` is the
    prediction's GPU architecture; ``pooled`` lists the architectures of the runs when too
    few were on it (None when they all were)."""

    kind: str
    arch: str
    rows: int
    jobs: int
    median_abs_pct: float
    p90_abs_pct: float
    median_signed_pct: float
    pooled: tuple[str, ...] | None = None
    record: ModelRecord | None = None
    """The model's own published runs, where there are any."""

    def line(self) -> str:
        """In words; a positive lean means predictions put throughput above the measured."""
        if self.pooled is None:
            where = f"on {_arch(self.arch)} GPUs"
        else:
            where = (
                f"on {', '.join(_arch(a) for a in self.pooled)} GPUs: too few on "
                f"{_arch(self.arch)}, where the error may differ"
            )
        text = (
            f"throughput typically within {self.median_abs_pct:.1f} % of measured, 9 in 10 "
            f"runs within {self.p90_abs_pct:.0f} % ({self.rows} published runs of "
            f"{self.jobs} jobs, {self.kind} models {where}; none used in the fit"
        )
        if abs(self.median_signed_pct) >= LEAN_PCT:
            side = "above" if self.median_signed_pct > 0 else "below"
            lean = abs(self.median_signed_pct)
            text += f"; the median prediction {lean:.0f} % {side} the measured"
        return text + ")" + _record_clause(self.record)

    def to_dict(self) -> dict[str, Any]:
        return {
            "available": True,
            **asdict(self),
            "pooled": list(self.pooled) if self.pooled is not None else None,
            "record": self.record.to_dict() if self.record is not None else None,
            "metric": "throughput (tokens/s per GPU; step time is its inverse)",
            "based_on": "held-out published runs (python -m gpuscale.calibrate.accuracy)",
        }


@dataclass(frozen=True)
class NoBand:
    """Why a prediction has no error band."""

    reason: str
    record: ModelRecord | None = None

    def line(self) -> str:
        return f"unknown: {self.reason}" + _record_clause(self.record)

    def to_dict(self) -> dict[str, Any]:
        record = self.record.to_dict() if self.record is not None else None
        return {"available": False, "reason": self.reason, "record": record}


def _record_clause(record: ModelRecord | None) -> str:
    return f"; {record.line()}" if record is not None else ""


Band = ErrorBand | NoBand
"""What a prediction is shown: its error band, or why it has none."""

Shipped = tuple[
    str,
    MappingProxyType[tuple[str, str | None], dict[str, Any]],
    MappingProxyType[tuple[str, str], ModelRecord],
]


def _read(path: Path) -> Shipped | None:
    """The digest, the held-out groups and the models' records of an accuracy file; None
    when it is absent or not of the shape :func:`measure` writes."""
    try:
        data = json.loads(path.read_text())
        digest, groups = data["calibration"], data["heldout"]
        table = {}
        for g in groups:
            for n in ("rows", "jobs"):
                if not isinstance(g[n], int):
                    return None
            for n in ("median_abs_pct", "p90_abs_pct", "median_signed_pct"):
                float(g[n])
            table[(str(g["kind"]), g["arch"])] = dict(g)
        records = {}
        for key, per_arch in data.get("by_model", {}).items():
            for arch, r in per_arch.items():
                if not (isinstance(r["rows"], int) and isinstance(r["in_fit"], int)):
                    return None
                med, low, high = (float(r[n]) for n in ("median_signed_pct", "low_pct", "high_pct"))
                where = None if arch == "any" else str(arch)
                records[(str(key), str(arch))] = ModelRecord(
                    str(key), where, r["rows"], r["in_fit"], med, low, high, str(r["span"])
                )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(digest, str):
        return None
    return digest, MappingProxyType(table), MappingProxyType(records)


@lru_cache(maxsize=1)
def _shipped() -> Shipped | None:
    return _read(ACCURACY_FILE)


def band_for(model: Model, gpu: GPU, cal: Calibration) -> Band:
    """The band for a throughput prediction of ``model`` on ``gpu`` under ``cal``, or why
    there is none (other constants, too few runs like it, no figures shipped)."""
    from gpuscale.validate.training_rows import model_kind

    shipped = _shipped()
    if shipped is None:
        return NoBand(f"no readable figures in {ACCURACY_FILE.name}")
    digest, table, records = shipped
    if digest != calibration_digest(cal):
        return NoBand("measured for the shipped calibration, not for these constants")
    # the catalog's model itself, not a shape that shares its key
    record = None
    if key := catalog_key(model):  # on the GPU's architecture where it has enough runs
        here = records.get((key, gpu.arch))
        usable = here is not None and here.rows >= ARCH_RECORD_ROWS
        record = here if usable else records.get((key, "any"))
    kind = model_kind(model)
    own = table.get((kind, gpu.arch))
    pooled = table.get((kind, None))
    if own is not None and own["rows"] >= MIN_ROWS:
        g, archs = own, None
    elif pooled is not None and pooled["rows"] >= MIN_ROWS:
        g, archs = pooled, tuple(str(a) for a in pooled.get("archs", ()))
    else:
        runs = pooled["rows"] if pooled is not None else 0
        return NoBand(
            f"{runs} published run{'' if runs == 1 else 's'} of {kind} models outside the "
            f"fit, {MIN_ROWS} needed",
            record,
        )
    return ErrorBand(
        kind,
        gpu.arch,
        int(g["rows"]),
        int(g["jobs"]),
        float(g["median_abs_pct"]),
        float(g["p90_abs_pct"]),
        float(g["median_signed_pct"]),
        archs,
        record,
    )


def main() -> None:
    """Scores the shipped training calibration on its fitted file and the held-out files, by kind
    of model and GPU architecture, and prints the figures (``--write`` stores them)."""
    ap = argparse.ArgumentParser(
        prog="python -m gpuscale.calibrate.accuracy",
        description="Held-out error of the shipped training calibration, by kind of model "
        "and GPU architecture.",
    )
    ap.add_argument("--runs", type=Path, default=DEFAULT_FITTED, help="the fitted file")
    ap.add_argument(
        "--heldout",
        type=Path,
        default=DEFAULT_HELDOUT,
        help="folder of held-out training_*.csv files",
    )
    ap.add_argument("--write", action="store_true", help=f"store the figures in {ACCURACY_FILE}")
    args = ap.parse_args()
    if not args.runs.is_file():
        ap.error(f"--runs {args.runs}: no such file; give the validation file the fit used")
    heldout = sorted(args.heldout.glob("training_*.csv")) if args.heldout.is_dir() else []
    if not heldout:
        ap.error(f"--heldout {args.heldout}: no training_*.csv files there")
    if args.write and (args.runs != DEFAULT_FITTED or args.heldout != DEFAULT_HELDOUT):
        ap.error(
            "--write stores the figures shipped with gpuscale: run it with the default "
            "--runs (the file the constants were fitted on) and --heldout"
        )
    try:
        data = measure([args.runs], heldout, default_calibration())
    except InputError as exc:
        ap.error(str(exc))
    if args.write:
        tmp = ACCURACY_FILE.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(ACCURACY_FILE)  # whole or not at all
        _shipped.cache_clear()
        print(f"wrote {ACCURACY_FILE}")
    for part in ("fitted", "heldout"):
        print(part)
        for g in data[part]:
            name = f"{g['kind'] or 'all'}{', ' + g['arch'] if g['arch'] else ''}"
            print(
                f"  {name:32s} {g['rows']:4d} runs {g['jobs']:4d} jobs  MAPE "
                f"{g['mape_pct']:5.1f}  median {g['median_abs_pct']:5.1f}  p90 "
                f"{g['p90_abs_pct']:5.1f}  mean {g['bias_pct']:+5.1f}  median "
                f"{g['median_signed_pct']:+5.1f}"
            )


if __name__ == "__main__":
    main()
