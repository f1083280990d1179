"""Fit the communication constants on a collective validation file as a whole.

    python -m gpuscale.calibrate.fit_collectives [--runs FILE.csv] [--write]

Seven physically meaningful constants are fitted jointly, never per row or per source:
``scaleup_eff`` and ``scaleout_eff`` (achieved fraction of NVLink and NIC line rate),
``scaleup_latency_s``, ``scaleout_latency_s`` and ``scaleout_latency_efa_s`` (one hop,
NCCL's ring/LL entry; the rest of NCCL's latency table keeps its ratios) and
``scaleout_call_latency_s`` (once per collective that touches the network) and
``hier_overlap`` (pipelining of the two phases of a hierarchical all-reduce). The loss is
busbw MAPE on large-message rows plus time MAPE on small-message rows, minimised by a
bounded coordinate search (deterministic, no SciPy). ``--write`` read-modify-writes
``calibration.json``: only these keys change, the other models' keys are kept.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path

import numpy as np

from gpuscale.calibrate import Calibration, default_calibration
from gpuscale.validate.collectives import scores, validate_collectives

DEFAULT_RUNS = (
    Path(__file__).resolve().parents[3].parent / "shared/validation/collective_results.csv"
)

BOUNDS: dict[str, tuple[float, float]] = {
    "scaleup_eff": (0.5, 1.0),
    "scaleout_eff": (0.5, 1.0),
    "scaleup_latency_s": (0.1e-6, 3e-6),
    "scaleout_latency_s": (0.5e-6, 30e-6),
    "scaleout_latency_efa_s": (0.5e-6, 100e-6),
    "scaleout_call_latency_s": (0.0, 50e-6),
    "hier_overlap": (0.0, 1.0),
}


def loss(runs: Path, cal: Calibration) -> float:
    """The fit's objective: the sum over the collective metrics of their MAPE in percent on
    ``runs`` under ``cal``."""
    s = scores(validate_collectives(runs, cal))
    return sum(float(v["mape_pct"] or 0.0) for v in s.values())


def fit(
    runs: Path,
    start: Calibration,
    rounds: int = 6,
    points: int = 21,
    constants: Sequence[str] | None = None,
    on_eval: Callable[[float], None] | None = None,
) -> Calibration:
    """Bounded coordinate search: each round scans every constant (of ``constants`` when
    given) on a shrinking grid; ``on_eval`` hears each evaluation's loss."""
    cal = start
    best = loss(runs, cal)
    keys = {k: b for k, b in BOUNDS.items() if constants is None or k in constants}
    width = {k: hi - lo for k, (lo, hi) in keys.items()}
    for _ in range(rounds):
        for key, (lo, hi) in keys.items():
            centre = getattr(cal, key)
            grid = np.linspace(
                max(lo, centre - width[key] / 2), min(hi, centre + width[key] / 2), points
            )
            for v in grid:
                trial = cal.replace(**{key: float(v)})
                val = loss(runs, trial)
                if on_eval is not None:
                    on_eval(val)
                if val < best - 1e-9:
                    best, cal = val, trial
            width[key] /= 3.0
    return cal


def write_keys(cal: Calibration, path: Path) -> None:
    """Read-modify-write: only the fitted keys change in the shared JSON file."""
    data = json.loads(path.read_text()) if path.is_file() else {}
    for key in BOUNDS:
        data[key] = float(f"{getattr(cal, key):.4g}")
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> None:
    """Fits the communication constants on a collective validation file and prints them with the
    scores (``--write`` stores them in calibration.json)."""
    ap = argparse.ArgumentParser(prog="python -m gpuscale.calibrate.fit_collectives")
    ap.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    ap.add_argument("--write", action="store_true", help="update calibration.json")
    args = ap.parse_args(argv)
    start = default_calibration()
    print(f"start: loss {loss(args.runs, start):.2f}")
    cal = fit(args.runs, start)
    s = scores(validate_collectives(args.runs, cal))
    for key in BOUNDS:
        print(f"  {key:24s} {getattr(start, key):.4g} -> {getattr(cal, key):.4g}")
    for metric, v in s.items():
        print(f"  {metric}: n={v['n']:.0f} MAPE {v['mape_pct']:.2f} %")
    if args.write:
        target = Path(str(resources.files("gpuscale.calibrate").joinpath("calibration.json")))
        write_keys(cal, target)
        print(f"wrote {len(BOUNDS)} keys to {target}")


if __name__ == "__main__":
    main()
