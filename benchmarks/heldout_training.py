"""How a training calibration (the shipped one by default) does on published runs it never saw.

    python benchmarks/heldout_training.py

Validates every CSV under ``benchmarks/heldout/`` (same schema as the shared validation
file; see its README for where each row comes from) with the shipped calibration, which was
fitted on ``training_runs.csv`` only (or the one ``--calibration FILE`` names), and prints
one line per file: rows scored and skipped, MAPE, median and worst error, rows worse than
25 %, and the mean signed error (a bias the fit cannot see); then the same figures over all
files by kind of model (dense, MoE, hybrid Mamba-Transformer, hybrid Gated DeltaNet), for
FP4 runs (NVFP4, MXFP4) and for MoE runs whose row names whole-step CUDA graphs (no host
costs: the GPU work's error alone) and the others; and per file how often, of two runs of
one job with different plans, the plan predicted faster was measured faster (all pairs,
and those predicted under 5 % and 20 % or more apart). For per-row detail run
``gpuscale validate training --runs FILE``.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gpuscale.calibrate.calibration import Calibration, default_calibration
from gpuscale.errors import InputError
from gpuscale.search.explain import TIE_GAP
from gpuscale.validate.ranking import GAP_EDGES
from gpuscale.validate.training import validate_training
from gpuscale.validate.training_model import model_for
from gpuscale.validate.training_rows import model_kind
from gpuscale.validate.training_stack import cuda_graphs

HERE = Path(__file__).with_name("heldout")


def _columns(title: str, first: str) -> Table:
    t = Table(title=title)
    for col in (first, "scored", "skipped", "MAPE", "median", "worst", "> 25", "bias"):
        t.add_column(col, justify="left" if col == first else "right", no_wrap=True)
    return t


def _kinds(row: dict[str, str]) -> list[str]:
    """The groups a CSV row belongs to in the by-kind table."""
    try:
        model, _ = model_for(row, "row")
    except Exception:  # a model the catalog lacks: the row is skipped anyway
        return ["model not in catalog"]
    kinds = [model_kind(model)]
    if "fp4" in row.get("precision", "").lower():
        kinds.append("FP4 precision (NVFP4, MXFP4)")
    if model.is_moe:
        # where the host's fixed costs go: a step replayed whole as CUDA graphs has none,
        # so its error is the GPU work's alone
        graphs, _ = cuda_graphs(row)
        how = "whole step as CUDA graphs" if graphs else "host-issued step"
        kinds.append(f"with MoE layers: {how}")
    return kinds


def _add(t: Table, name: str, errs: list[float], skipped: int, mape: float, med: float) -> None:
    if not errs:
        t.add_row(name, "0", str(skipped), "-", "-", "-", "-", "-")
        return
    t.add_row(
        name,
        str(len(errs)),
        str(skipped),
        f"{mape:.1f}",
        f"{med:.1f}",
        f"{max(abs(e) for e in errs):.1f}",
        str(sum(abs(e) > 25 for e in errs)),
        f"{sum(errs) / len(errs):+.1f}",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path, help="CSV files (default: heldout/*.csv)")
    ap.add_argument(
        "--calibration",
        type=Path,
        metavar="FILE",
        help="calibration JSON to score (default: the shipped one)",
    )
    args = ap.parse_args()
    files = args.files or sorted(HERE.glob("training_*.csv"))
    try:
        cal = Calibration.load(args.calibration) if args.calibration else default_calibration()
    except InputError as exc:
        ap.error(str(exc))
    t = _columns("Held-out published runs: error of tokens/s per GPU, %", "file")
    ranking = Table(title="Plan ranking: runs of one job with two plans (validate training)")
    close, wide = f"gap < {TIE_GAP * 100:.0f} %", f"gap >= {GAP_EDGES[-1] * 100:.0f} %"
    for col in ("file", "pairs", "ordered", f"pairs, {close}", "ordered", f"pairs, {wide}"):
        ranking.add_column(col, justify="left" if col == "file" else "right", no_wrap=True)
    ranking.add_column("ordered", justify="right", no_wrap=True)
    by_kind: dict[str, list[float]] = defaultdict(list)
    skipped_kind: dict[str, int] = defaultdict(int)
    for f in files:
        rep = validate_training(f, cal)
        errs = [r.error_pct for r in rep.scored if r.error_pct is not None]
        st = rep.stats()  # the same MAPE, median and worst that `validate training` prints
        _add(
            t,
            f.stem.removeprefix("training_"),
            errs,
            len(rep.skipped),
            st["mape_pct"] if errs else 0.0,
            st["median_abs_error_pct"] if errs else 0.0,
        )
        if (rk := rep.plan_ranking()) is not None:
            # the bins under the search's tie gap, and the widest bin
            under = [b for b in rk.bins if b.high is not None and b.high <= TIE_GAP]
            cells = [str(rk.pairs), f"{rk.share * 100:.0f} %"]
            for bins in (under, rk.bins[-1:]):
                n = sum(b.pairs for b in bins)
                ok = sum(b.ordered for b in bins)
                cells += [str(n), f"{ok / n * 100:.0f} %" if n else "-"]
            ranking.add_row(f.stem.removeprefix("training_"), *cells)
        with f.open(newline="") as fh:
            rows = {r["id"]: r for r in csv.DictReader(fh)}
        for r in rep.scored:
            if r.error_pct is not None:
                for k in _kinds(rows[r.id]):
                    by_kind[k].append(r.error_pct)
        for r in rep.skipped:
            for k in _kinds(rows[r.id]):
                skipped_kind[k] += 1
    Console().print(t)
    t = _columns("The same rows by kind of model, all files", "kind")
    for k in sorted(set(by_kind) | set(skipped_kind)):
        errs = by_kind.get(k, [])
        absv = sorted(abs(e) for e in errs)
        mape = sum(absv) / len(absv) if absv else 0.0
        med = (absv[(len(absv) - 1) // 2] + absv[len(absv) // 2]) / 2 if absv else 0.0
        _add(t, k, errs, skipped_kind.get(k, 0), mape, med)
    Console().print(t)
    Console().print(ranking)


if __name__ == "__main__":
    main()
