"""How the shipped training calibration does on published runs it never saw.

    python benchmarks/heldout_training.py

Validates every CSV under ``benchmarks/heldout/`` (same schema as the shared validation
file; see its README for where each row comes from) with the shipped calibration, which was
fitted on ``training_runs.csv`` only, and prints one line per file: rows scored and skipped,
MAPE, median and worst error, rows worse than 25 %, and the mean signed error (a bias the
fit cannot see). For per-row detail run ``gpuscale validate training --runs FILE``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gpuscale.calibrate.calibration import default_calibration
from gpuscale.validate.training import validate_training

HERE = Path(__file__).with_name("heldout")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("files", nargs="*", type=Path, help="CSV files (default: heldout/*.csv)")
    args = ap.parse_args()
    files = args.files or sorted(HERE.glob("training_*.csv"))
    cal = default_calibration()
    t = Table(title="Held-out published runs: error of tokens/s per GPU, %")
    for col in ("file", "scored", "skipped", "MAPE", "median", "worst", "> 25", "bias"):
        t.add_column(col, justify="left" if col == "file" else "right", no_wrap=True)
    for f in files:
        rep = validate_training(f, cal)
        errs = [r.error_pct for r in rep.scored if r.error_pct is not None]
        st = rep.stats()  # the same MAPE, median and worst that `validate training` prints
        if not errs:
            t.add_row(f.stem, "0", str(len(rep.skipped)), "-", "-", "-", "-", "-")
            continue
        t.add_row(
            f.stem.removeprefix("training_"),
            str(len(errs)),
            str(len(rep.skipped)),
            f"{st['mape_pct']:.1f}",
            f"{st['median_abs_error_pct']:.1f}",
            f"{st['max_abs_error_pct']:.1f}",
            str(sum(abs(e) > 25 for e in errs)),
            f"{sum(errs) / len(errs):+.1f}",
        )
    Console().print(t)


if __name__ == "__main__":
    main()
