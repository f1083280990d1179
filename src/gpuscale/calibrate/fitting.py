"""Calibrating the models to a file of runs: one interface over the three fits.

``gpuscale calibrate training|collectives|inference --runs FILE --out CAL.json`` fits the
constants a kind of run informs (training steps: GEMM, attention and HBM efficiency, overlaps,
fixed costs; collectives: link efficiencies and latencies; serving: the inference
efficiencies and overheads) on the file as a whole, scores the file before and after, and
writes only the constants the runs moved into ``CAL.json``, over what that file already
holds: a file holding some keys is read over the shipped constants (``--calibration``), so
constants no run of the file informs keep following the shipped calibration.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscale.calibrate import fit_collectives, fit_inference, fit_training
from gpuscale.calibrate.calibration import Calibration
from gpuscale.errors import InputError, unknown
from gpuscale.paths import require_file, writable_target, write_atomic

KINDS = ("training", "collectives", "inference")
"""The kinds of runs gpuscale calibrates on, each with its own file schema
(shared/validation/README.md) and constants."""

BOUND_EDGE = 1e-3
"""A fitted constant within this share of its range from a bound is reported as at it."""

OnEval = Callable[[float], None]


def bounds_of(kind: str) -> dict[str, tuple[float, float]]:
    """The constants a kind of run fits, with their physical bounds."""
    table = {
        "training": fit_training.BOUNDS,
        "collectives": fit_collectives.BOUNDS,
        "inference": fit_inference.BOUNDS,
    }
    return dict(table[kind])


def pick_constants(kind: str, said: Sequence[str] | None) -> list[str]:
    """The constants to fit: those ``said`` (each checked against the kind's), else all."""
    known = bounds_of(kind)
    if not said:
        return list(known)
    for name in said:
        if name not in known:
            raise unknown("--constants", name, known)
    return [n for n in known if n in said]


@dataclass(frozen=True)
class Fitted:
    """A calibration fitted on a file of runs, and what it changed."""

    kind: str
    runs: Path
    rows: int
    """Runs priced (scored) in the file."""
    start: Calibration
    cal: Calibration
    asked: tuple[str, ...]
    """The constants the fit could move."""
    informed: tuple[str, ...]
    """Of those, the ones some run's prediction depends on: the ones fitted (and written)."""
    before: dict[str, float]
    after: dict[str, float]
    """The file's scores (per cent) under the starting and the fitted constants."""
    evaluations: int

    def at_bound(self, name: str) -> str | None:
        """``"lower"`` or ``"upper"`` when the fitted value sits at that physical bound."""
        lo, hi = bounds_of(self.kind)[name]
        v = float(getattr(self.cal, name))
        edge = BOUND_EDGE * (hi - lo)
        if v <= lo + edge:
            return "lower"
        if v >= hi - edge:
            return "upper"
        return None

    def underdetermined(self) -> bool:
        """Fewer runs than constants fitted: the runs can be matched without the constants
        meaning what they say."""
        return self.rows <= len(self.informed)

    def values(self) -> dict[str, float]:
        """The fitted constants as written: six significant digits."""
        return {n: float(f"{float(getattr(self.cal, n)):.6g}") for n in self.informed}

    def to_json(self, out: Path | None) -> dict[str, Any]:
        bounds = bounds_of(self.kind)
        return {
            "kind": self.kind,
            "runs": str(self.runs),
            "rows_priced": self.rows,
            "evaluations": self.evaluations,
            "score_before_pct": self.before,
            "score_after_pct": self.after,
            "underdetermined": self.underdetermined(),
            "constants": [
                {
                    "name": n,
                    "start": float(getattr(self.start, n)),
                    "fitted": float(getattr(self.cal, n)) if n in self.informed else None,
                    "lower_bound": bounds[n][0],
                    "upper_bound": bounds[n][1],
                    "informed": n in self.informed,
                    "at_bound": self.at_bound(n) if n in self.informed else None,
                }
                for n in self.asked
            ],
            "written_to": str(out) if out is not None else None,
        }


class _Counter:
    """Counts the fit's evaluations and passes each loss on to a progress display."""

    def __init__(self, on_eval: OnEval | None) -> None:
        self.n = 0
        self._on_eval = on_eval

    def __call__(self, loss: float) -> None:
        self.n += 1
        if self._on_eval is not None:
            self._on_eval(loss)


def _informed_by_loss(
    names: Sequence[str], start: Calibration, loss: Callable[[Calibration], float], kind: str
) -> list[str]:
    """The constants whose move across their bounds changes the file's loss."""
    out = []
    for n in names:
        lo, hi = bounds_of(kind)[n]
        a, b = loss(start.replace(**{n: lo})), loss(start.replace(**{n: hi}))
        if not math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12):
            out.append(n)
    return out


@dataclass(frozen=True)
class _Kind:
    """What the generic fit needs of one kind of run, bound to its file and start."""

    rows: Callable[[], int]
    """Runs of the file the model prices."""
    informed: Callable[[list[str]], list[str]]
    """Of the constants given, those some prediction depends on."""
    fit: Callable[[list[str], _Counter], Calibration]
    score: Callable[[Calibration], dict[str, float]]
    """The file's scores, per cent."""


def _training(runs: Path, start: Calibration) -> _Kind:
    from gpuscale.validate.training import validate_training

    def score(c: Calibration) -> dict[str, float]:
        st = validate_training(runs, c).stats()
        keys = {"mape": "mape_pct", "median_abs_error": "median_abs_error_pct"}
        keys["worst_abs_error"] = "max_abs_error_pct"
        return {k: float(st[v] or 0.0) for k, v in keys.items()}

    return _Kind(
        rows=lambda: fit_training.informed_constants(runs, start, [])[1],
        informed=lambda names: fit_training.informed_constants(runs, start, names)[0],
        fit=lambda names, count: fit_training.fit(
            runs, start=start, constants=names, on_eval=count
        )[0],
        score=score,
    )


def _collectives(runs: Path, start: Calibration) -> _Kind:
    from gpuscale.validate.collectives import scores, validate_collectives

    def score(c: Calibration) -> dict[str, float]:
        out = {}
        for metric, v in scores(validate_collectives(runs, c)).items():
            if v["n"] and v["mape_pct"] is not None:
                out[f"{metric}_mape"] = float(v["mape_pct"])
        return out

    def loss(c: Calibration) -> float:
        return fit_collectives.loss(runs, c)

    return _Kind(
        rows=lambda: len(validate_collectives(runs, start).scored),
        informed=lambda names: _informed_by_loss(names, start, loss, "collectives"),
        fit=lambda names, count: fit_collectives.fit(runs, start, constants=names, on_eval=count),
        score=score,
    )


def _inference(runs: Path, start: Calibration) -> _Kind:
    cases = fit_inference.load_cases(runs)

    def objective(c: Calibration) -> float:
        return fit_inference.objective(fit_inference.scores(cases, c))

    # the scores the file has figures for (a file of offline runs has no TTFT)
    has = {
        "throughput": any(c.throughput is not None for c in cases),
        "ttft": any(c.ttft_ms is not None for c in cases),
        "tpot_itl": any(c.itl_ms is not None for c in cases),
    }

    def score(c: Calibration) -> dict[str, float]:
        got = fit_inference.scores(cases, c)
        return {f"{k}_mape": v for k, v in got.items() if has.get(k, True)}

    return _Kind(
        rows=lambda: len(cases),
        informed=lambda names: _informed_by_loss(names, start, objective, "inference"),
        fit=lambda names, count: fit_inference.fit(
            cases, start, verbose=False, constants=names, on_eval=count
        ),
        score=score,
    )


def check_out(out: Path) -> None:
    """Refuse an output the fit could not write, before the fit runs: a path outside an
    existing writable folder, or an existing file that is not a calibration (the fitted
    constants are merged into it)."""
    target = writable_target(out, "--out")
    if target.exists():
        Calibration.load(target)  # its keys and values checked as --calibration's are


def write_out(fitted: Fitted, out: Path) -> None:
    """Merge the fitted constants into ``out`` (its other keys kept), whole or not at all."""
    data: dict[str, Any] = {}
    target = writable_target(out, "--out")
    if target.exists():
        loaded = json.loads(target.read_text())
        data = dict(loaded) if isinstance(loaded, dict) else {}
    data.update(fitted.values())
    write_atomic(out, json.dumps(data, indent=2, sort_keys=True) + "\n", "--out")


def check_runs(kind: str, runs: Path, constants: Sequence[str] | None) -> list[str]:
    """The constants to fit, after the checks a fit can make before it starts: the kind,
    the runs file, the constants' names."""
    if kind not in KINDS:
        raise InputError("kind", kind, f"one of {', '.join(KINDS)}")
    require_file(runs, "--runs", "a CSV file of runs (shared/validation/README.md's columns)")
    return pick_constants(kind, constants)


def fit_runs(
    kind: str,
    runs: Path,
    start: Calibration,
    constants: Sequence[str] | None = None,
    on_eval: OnEval | None = None,
) -> Fitted:
    """Fit ``kind``'s constants (``constants`` of them when given) on the file ``runs`` as a
    whole, starting from ``start``."""
    names = check_runs(kind, runs, constants)
    k = {"training": _training, "collectives": _collectives, "inference": _inference}[kind](
        runs, start
    )
    rows = k.rows()
    if rows == 0:
        raise InputError(
            "--runs",
            str(runs),
            f"no run in it can be priced (each row's reason: gpuscale validate {kind} "
            f"--runs {runs})",
        )
    informed = k.informed(names)
    if not informed and constants:
        every = k.informed(list(bounds_of(kind)))
        those = f"they inform {', '.join(every)}" if every else "they inform none"
        raise InputError(
            "--constants", ",".join(constants), f"no prediction of {runs.name}'s runs depends on "
            f"them; {those}"
        )  # fmt: skip
    if not informed:
        raise InputError(
            "--runs", str(runs), f"no prediction of its runs depends on a {kind} constant"
        )
    count = _Counter(on_eval)
    cal = k.fit(informed, count)
    return Fitted(
        kind, runs, rows, start, cal, tuple(names), tuple(informed),
        k.score(start), k.score(cal), count.n,
    )  # fmt: skip
