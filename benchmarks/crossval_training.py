"""How the training model does on published runs it was not fitted on.

    python benchmarks/crossval_training.py --runs ../shared/validation/training_runs.csv

Leave-one-source-out cross-validation: for each source (sources with fewer than
``--min-rows`` rows are pooled into one fold), the calibration constants are refitted by
``gpuscale.calibrate.fit_training`` on every other source's rows, and that source's rows
are predicted with the refitted constants. Each refit starts from the constants' prior
values in :class:`Calibration`, not from the shipped fit, which has seen every row (the
host's two constants, fitted on short steps in no fold, stay as shipped). The
held-out MAPE is what a new source of measurements can expect; compare it with the
in-sample MAPE of ``gpuscale validate training``. Each refit takes tens of minutes on one
core; ``--jobs`` runs folds in parallel.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gpuscale.calibrate.calibration import Calibration, default_calibration
from gpuscale.calibrate.fit_training import FILE_CONSTANTS, HOST_CONSTANTS, fit
from gpuscale.validate.training import source_group, validate_training


def _folds(rows: list[dict[str, str]], min_rows: int) -> dict[str, list[int]]:
    by_source: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_source[source_group(row["source"])].append(i)
    folds: dict[str, list[int]] = {}
    pooled: list[int] = []
    for source, idx in by_source.items():
        if len(idx) >= min_rows:
            folds[source] = idx
        else:
            pooled += idx
    if pooled:
        folds["smaller sources, pooled"] = pooled
    return folds


def _write(path: Path, header: list[str], rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows(rows)


def _fold(
    name: str,
    header: list[str],
    train: list[dict[str, str]],
    test: list[dict[str, str]],
    rounds: int,
) -> tuple[str, int, float, float, list[tuple[str, float]]]:
    with tempfile.TemporaryDirectory() as tmp:
        train_csv, test_csv = Path(tmp, "train.csv"), Path(tmp, "test.csv")
        _write(train_csv, header, train)
        _write(test_csv, header, test)
        # from the class's prior values, not the shipped fit (which has seen this fold); the
        # host's constants as shipped, fitted on short steps that are in no fold
        shipped = default_calibration()
        start = Calibration().replace(**{n: getattr(shipped, n) for n in HOST_CONSTANTS})
        cal, _ = fit(train_csv, rounds=rounds, start=start, constants=FILE_CONSTANTS)
        report = validate_training(test_csv, cal)
    stats = report.stats()
    mape, worst = stats["mape_pct"], stats["max_abs_error_pct"]
    errors = sorted(
        ((r.id, r.error_pct) for r in report.scored if r.error_pct is not None),
        key=lambda e: -abs(e[1]),
    )
    return name, len(report.scored), mape or float("nan"), worst or float("nan"), errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--runs", type=Path, required=True)
    ap.add_argument("--min-rows", type=int, default=10, help="smaller sources are pooled")
    ap.add_argument("--jobs", type=int, default=1, help="folds refitted in parallel")
    ap.add_argument("--rounds", type=int, default=2, help="fit rounds (plans re-chosen between)")
    ap.add_argument("--show", type=int, default=0, help="print each fold's N worst rows")
    args = ap.parse_args()
    with args.runs.open(newline="") as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames or [])
        rows = list(reader)
    folds = _folds(rows, args.min_rows)
    console = Console()
    console.print(f"{len(folds)} folds; each refits the calibration on the other sources")
    results = []
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        futures = []
        for name, idx in folds.items():
            held = set(idx)
            train = [r for i, r in enumerate(rows) if i not in held]
            test = [rows[i] for i in idx]
            futures.append(pool.submit(_fold, name, header, train, test, args.rounds))
        for fut in as_completed(futures):
            res = fut.result()
            results.append(res)
            console.print(f"  held out {res[0]}: {res[1]} rows, MAPE {res[2]:.1f} %")
            for rid, err in res[4][: args.show]:
                console.print(f"      {rid}: {err:+.1f} %")
    table = Table(title="Held-out error by source (calibration fitted without that source)")
    for col in ("held-out source", "rows scored", "MAPE %", "worst abs. error %"):
        table.add_column(col, justify="left" if col.startswith("held") else "right")
    n_all = sum(r[1] for r in results)
    for name, n, mape, worst, _ in sorted(results, key=lambda r: -r[1]):
        table.add_row(name, str(n), f"{mape:.1f}", f"{worst:.1f}")
    pooled = sum(r[1] * r[2] for r in results) / max(n_all, 1)
    table.add_row("all, each row held out", str(n_all), f"{pooled:.1f}", "")
    console.print(table)


if __name__ == "__main__":
    main()
