"""How far gpuscale's training estimates land from published measurements: the error band
``train estimate`` and ``train search`` print beside a prediction.

    python -m gpuscale.calibrate.accuracy --write

scores the shipped calibration on the file its constants were fitted on (in-sample) and on
the held-out files (``benchmarks/heldout/training_*.csv``: published runs the fit never
saw), by kind of model (dense, MoE, hybrid Mamba, hybrid Gated DeltaNet) and GPU
architecture, and stores the figures in ``training_accuracy.json`` beside
``calibration.json``. A prediction is shown with the held-out figures of its kind and
architecture (or of its kind alone where fewer than :data:`MIN_ROWS` runs share both):
the median |error| and the |error| nine in ten runs stay within, with the mean signed
error where it shows a lean. The figures belong to the calibration they were measured
with; under another (``--calibration FILE``) no band is shown.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from gpuscale.calibrate.calibration import Calibration, default_calibration
from gpuscale.catalog.schema import GPU, Model

ACCURACY_FILE = Path(__file__).with_name("training_accuracy.json")
REPO = Path(__file__).resolve().parents[3]
DEFAULT_FITTED = REPO.parent / "shared" / "validation" / "training_runs.csv"
DEFAULT_HELDOUT = REPO / "benchmarks" / "heldout"

MIN_ROWS = 10
"""Fewest held-out runs a group needs before its figures are shown for a prediction."""

LEAN_PCT = 5.0
"""A group's median signed error at least this large is said with the band: its
predictions lean fast (or slow). The median, not the mean: one job's plan sweep with
errors of several hundred % would otherwise speak for a whole architecture."""

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


def calibration_digest(cal: Calibration) -> str:
    """A short fingerprint of every constant of ``cal``: the band is shown only under the
    calibration it was measured with."""
    text = json.dumps(asdict(cal), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def error_stats(errors: list[float]) -> dict[str, float | int]:
    """Runs, MAPE, median and 90th-percentile |error|, mean and median signed error, in %
    (positive: predicted faster than measured)."""
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


Sample = tuple[str, str, float]
"""One scored run: kind of model, GPU architecture, signed error in %."""


def score(files: list[Path], cal: Calibration) -> list[Sample]:
    """Every scored run of ``files`` with its model kind, GPU architecture and error."""
    from gpuscale.validate.training import validate_training

    out: list[Sample] = []
    for f in files:
        for r in validate_training(f, cal).scored:
            if r.error_pct is not None:
                out.append((str(r.detail["model_kind"]), str(r.detail["gpu_arch"]), r.error_pct))
    return out


def group_stats(samples: list[Sample]) -> list[dict[str, Any]]:
    """Figures per kind and architecture, per kind (``arch`` null), and over all runs
    (both null), in a stable order."""
    groups: dict[tuple[str | None, str | None], list[float]] = defaultdict(list)
    for kind, arch, err in samples:
        for key in ((kind, arch), (kind, None), (None, None)):
            groups[key].append(err)
    return [
        {"kind": k, "arch": a, **error_stats(groups[(k, a)])}
        for k, a in sorted(groups, key=lambda ka: (ka[0] or "", ka[1] or ""))
    ]


def measure(fitted: list[Path], heldout: list[Path], cal: Calibration) -> dict[str, Any]:
    """The contents of ``training_accuracy.json`` for ``cal``."""
    return {
        "calibration": calibration_digest(cal),
        "fitted_files": [f.name for f in fitted],
        "heldout_files": [f.name for f in heldout],
        "fitted": group_stats(score(fitted, cal)),
        "heldout": group_stats(score(heldout, cal)),
    }


@dataclass(frozen=True)
class ErrorBand:
    """The held-out error of the published runs most like a prediction."""

    kind: str
    arch: str | None
    rows: int
    median_abs_pct: float
    p90_abs_pct: float
    median_signed_pct: float

    def line(self) -> str:
        where = f" on {ARCH_NAMES.get(self.arch, self.arch)} GPUs" if self.arch else ""
        text = (
            f"typically within {self.median_abs_pct:.0f} %, 9 in 10 within "
            f"{self.p90_abs_pct:.0f} % ({self.rows} published runs of {self.kind} models"
            f"{where}, none used in the fit"
        )
        if abs(self.median_signed_pct) >= LEAN_PCT:
            lean = "fast" if self.median_signed_pct > 0 else "slow"
            text += f"; the median prediction was {abs(self.median_signed_pct):.0f} % {lean}"
        return text + ")"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "based_on": "held-out published runs (gpuscale.calibrate.accuracy)"}


@lru_cache(maxsize=1)
def _shipped() -> dict[str, Any] | None:
    if not ACCURACY_FILE.is_file():
        return None
    data: dict[str, Any] = json.loads(ACCURACY_FILE.read_text())
    return data


def band_for(model: Model, gpu: GPU, cal: Calibration) -> ErrorBand | None:
    """The band for a prediction of ``model`` on ``gpu`` under ``cal``; None when the
    figures were measured under other constants or too few runs are like it."""
    from gpuscale.validate.training_rows import model_kind

    data = _shipped()
    if data is None or data.get("calibration") != calibration_digest(cal):
        return None
    kind = model_kind(model)
    by_key = {(g["kind"], g["arch"]): g for g in data["heldout"]}
    for key in ((kind, gpu.arch), (kind, None)):
        g = by_key.get(key)
        if g is not None and g["rows"] >= MIN_ROWS:
            return ErrorBand(
                kind,
                key[1],
                g["rows"],
                g["median_abs_pct"],
                g["p90_abs_pct"],
                g["median_signed_pct"],
            )
    return None


def _csv_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("training_*.csv"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    heldout = _csv_files(args.heldout) if args.heldout.is_dir() else []
    if not heldout:
        ap.error(f"--heldout {args.heldout}: no training_*.csv files there")
    data = measure([args.runs], heldout, default_calibration())
    text = json.dumps(data, indent=1) + "\n"
    if args.write:
        ACCURACY_FILE.write_text(text)
        print(f"wrote {ACCURACY_FILE}")
    for part in ("fitted", "heldout"):
        print(part)
        for g in data[part]:
            name = f"{g['kind'] or 'all'}{', ' + g['arch'] if g['arch'] else ''}"
            print(
                f"  {name:32s} {g['rows']:4d} runs  MAPE {g['mape_pct']:5.1f}  median "
                f"{g['median_abs_pct']:5.1f}  p90 {g['p90_abs_pct']:5.1f}  "
                f"mean {g['bias_pct']:+5.1f}  median {g['median_signed_pct']:+5.1f}"
            )


if __name__ == "__main__":
    main()
