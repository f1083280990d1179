"""Calibrating the models to a file of runs: one interface over the fits.

``gpuscale calibrate training|collectives|inference|kernels|memory --runs FILE --out
CAL.json`` fits the constants a kind of run informs (training steps: GEMM, attention and HBM
efficiency, overlaps, fixed costs; collectives: link efficiencies and latencies; serving:
the inference efficiencies and overheads; a GPU's microbenchmarks: the kernel constants;
measured peak memory: the allocator's share and the workspace) on the file as a whole and
scores the file before and after, as ``gpuscale validate`` scores it. The fit starts from
the shipped constants overlaid by ``CAL.json``'s when it exists and then by
``--calibration``'s when given; ``CAL.json`` is written with those constants and the fitted
ones over them, so ``--calibration CAL.json`` prices every command as the fit scored the
file (a calibration file is read over the shipped constants: the constants it does not hold
keep the shipped values).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscale.calibrate import fit_collectives, fit_inference, fit_rows, fit_training
from gpuscale.calibrate.calibration import Calibration, default_calibration, file_keys
from gpuscale.errors import InputError, unknown
from gpuscale.paths import require_file, writable_target, write_atomic
from gpuscale.validate.report import ValidationReport

KINDS = ("training", "collectives", "inference", "kernels", "memory")
"""The kinds of runs gpuscale calibrates on, each with its own files and constants: the
validation CSVs' schemas (shared/validation/README.md) for the first three, the JSON of
``benchmarks/gpu_checks.py`` (one or more files of one GPU) for kernels, and measured
peak memory (``validate/memory.py``'s columns) for memory."""

BOUND_EDGE = 1e-2
"""A fitted constant within this share of its range from a bound is reported as at it (of
the log range for the inference constants, which their fit moves in log space): the
bounded least-squares fits stop just inside a bound they are pushed against."""

OnEval = Callable[[int, float], None]
"""Hears each evaluation of a fit: how many so far, and its loss (a progress display)."""


def bounds_of(kind: str) -> dict[str, tuple[float, float]]:
    """The constants a kind of run fits, with their physical bounds."""
    table = {
        "training": fit_training.BOUNDS,
        "collectives": fit_collectives.BOUNDS,
        "inference": fit_inference.BOUNDS,
        "kernels": fit_rows.KERNEL_BOUNDS,
        "memory": fit_rows.MEMORY_BOUNDS,
    }
    return dict(table[kind])


def pick_constants(kind: str, said: Sequence[str] | None) -> list[str]:
    """The constants to fit: those ``said`` (each checked against the kind's), else all."""
    known = bounds_of(kind)
    if not said:
        return list(known)
    for name in said:
        if name in known:
            continue
        other = [k for k in KINDS if k != kind and name in bounds_of(k)]
        if other:
            raise InputError(
                "--constants", name, f"a {other[0]} constant; {kind} fits {', '.join(known)}"
            )
        raise unknown("--constants", name, known, shown=len(known))  # every one: a short list
    return [n for n in known if n in said]


@dataclass(frozen=True)
class Fitted:
    """A calibration fitted on a file of runs, and what it changed."""

    kind: str
    runs: tuple[Path, ...]
    rows: int
    """Runs of the file scored."""
    start: Calibration
    base: dict[str, float]
    """The constants the start holds over the shipped ones (from the output file and
    ``--calibration``): written with the fitted ones."""
    cal: Calibration
    asked: tuple[str, ...]
    """The constants the fit could move."""
    informed: tuple[str, ...]
    """Of those, the ones some run's prediction depends on: the ones fitted."""
    before: dict[str, float]
    after: dict[str, float]
    """The file's scores (per cent) under the starting and the fitted constants."""
    evaluations: int

    def at_bound(self, name: str) -> str | None:
        """``"lower"`` or ``"upper"`` when the fit moved the constant to within
        :data:`BOUND_EDGE` of that bound of its physical range, in the space the fit searched
        (log for the inference constants), and not when it started there and stayed."""
        lo, hi = bounds_of(self.kind)[name]
        v, v0 = float(getattr(self.cal, name)), float(getattr(self.start, name))
        if v == v0:
            return None
        if self.kind == "inference":  # a coordinate search in log space
            x = math.log(v / lo) / math.log(hi / lo)
        else:
            x = (v - lo) / (hi - lo)
        return "lower" if x <= BOUND_EDGE else "upper" if x >= 1.0 - BOUND_EDGE else None

    def underdetermined(self) -> bool:
        """No more runs than constants fitted: the runs can be matched without the constants
        meaning what they say."""
        return self.rows <= len(self.informed)

    def values(self) -> dict[str, float]:
        """The fitted constants as written: six significant digits."""
        return {n: float(f"{float(getattr(self.cal, n)):.6g}") for n in self.informed}

    def written(self) -> dict[str, float]:
        """What the output file holds: the start's constants, the fitted ones over them."""
        return {**self.base, **self.values()}

    def to_json(self, out: Path | None) -> dict[str, Any]:
        bounds = bounds_of(self.kind)
        return {
            "kind": self.kind,
            "runs": [str(p) for p in self.runs],
            "rows_scored": self.rows,
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
            "written": self.written() if out is not None else None,
        }


class _Counter:
    """Counts the fit's evaluations and passes each loss on to a progress display."""

    def __init__(self, on_eval: OnEval | None) -> None:
        self.n = 0
        self._on_eval = on_eval

    def __call__(self, loss: float) -> None:
        self.n += 1
        if self._on_eval is not None:
            self._on_eval(self.n, loss)


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


def _by_metric(report: ValidationReport) -> dict[str, float]:
    """MAPE per compared figure (``busbw_GBps_mape``, ``ttft_mape``, ...)."""
    out = {}
    for metric, rows in report.by_metric().items():
        mape = report.stats(rows)["mape_pct"]
        if rows and mape is not None:
            out[f"{metric}_mape"] = float(mape)
    return out


def _overall(report: ValidationReport) -> dict[str, float]:
    """A training file's MAPE, median and worst |error| over all its rows."""
    st = report.stats()
    keys = {"mape": "mape_pct", "median_abs_error": "median_abs_error_pct"}
    keys["worst_abs_error"] = "max_abs_error_pct"
    return {k: float(st[v] or 0.0) for k, v in keys.items()}


@dataclass(frozen=True)
class _Kind:
    """What the generic fit needs of one kind of run, bound to its file and start."""

    report: Callable[[Calibration], ValidationReport]
    """The file's rows under a calibration, as ``gpuscale validate`` gives them."""
    informed: Callable[[list[str]], list[str]]
    """Of the constants given, those some prediction depends on."""
    fit: Callable[[list[str], _Counter], Calibration]
    score: Callable[[ValidationReport], dict[str, float]] = _by_metric
    """A report's scores, per cent."""


def _training(paths: tuple[Path, ...], start: Calibration) -> _Kind:
    (runs,) = paths
    from gpuscale.validate.training import validate_training

    return _Kind(
        report=lambda c: validate_training(runs, c),
        informed=lambda names: fit_training.informed_constants(runs, start, names)[0],
        fit=lambda names, count: fit_training.fit(
            runs, start=start, constants=names, on_eval=count
        )[0],
        score=_overall,
    )


def _collectives(paths: tuple[Path, ...], start: Calibration) -> _Kind:
    (runs,) = paths
    from gpuscale.validate.collectives import validate_collectives

    def loss(c: Calibration) -> float:
        return fit_collectives.loss(runs, c)

    return _Kind(
        report=lambda c: validate_collectives(runs, c),
        informed=lambda names: _informed_by_loss(names, start, loss, "collectives"),
        fit=lambda names, count: fit_collectives.fit(runs, start, constants=names, on_eval=count),
    )


def _inference(paths: tuple[Path, ...], start: Calibration) -> _Kind:
    (runs,) = paths
    from gpuscale.validate.inference import validate_inference

    # the fit simulates long offline runs with fewer requests (fit_inference's speed cap);
    # the scores are validate's, on every request
    cases = fit_inference.load_cases(runs)

    def objective(c: Calibration) -> float:
        return fit_inference.objective(fit_inference.scores(cases, c))

    return _Kind(
        report=lambda c: validate_inference(runs, c),
        informed=lambda names: _informed_by_loss(names, start, objective, "inference"),
        fit=lambda names, count: fit_inference.fit(
            cases, start, verbose=False, constants=names, on_eval=count
        ),
    )


def _row_fit(
    kind: str, report: Callable[[Calibration], ValidationReport], start: Calibration
) -> _Kind:
    """A kind fitted on its scored rows themselves (``fit_rows``): kernels, memory."""

    def loss(c: Calibration) -> float:
        return fit_rows.loss(report(c).scored)

    return _Kind(
        report=report,
        informed=lambda names: _informed_by_loss(names, start, loss, kind),
        fit=lambda names, count: fit_rows.fit_rows(
            lambda c: report(c).scored, start, names, bounds_of(kind), count
        ),
    )


def _kernels(
    paths: tuple[Path, ...], start: Calibration, gpu: str | None, sdpa_backend: str | None
) -> _Kind:
    from gpuscale.validate.kernels import kernel_report, load_measurements, measured_gpu

    files = load_measurements(list(paths))  # read once, priced under every trial
    part = measured_gpu(files, gpu)
    return _row_fit("kernels", lambda c: kernel_report(files, part, c, sdpa_backend), start)


def _memory(paths: tuple[Path, ...], start: Calibration) -> _Kind:
    (runs,) = paths
    from gpuscale.validate.memory import validate_memory

    return _row_fit("memory", lambda c: validate_memory(runs, c), start)


def start_keys(out: Path | None, calibration: Path | None) -> dict[str, float]:
    """The constants a fit starts from over the shipped ones: the output file's, when it
    exists (the fit is merged into it), then ``--calibration``'s over them. Either file
    must be a calibration (names, finite values, physical ranges), else an error naming its
    option before any fitting."""
    keys: dict[str, float] = {}
    if out is not None:
        target = writable_target(out, "--out")
        if target.exists():
            keys.update(file_keys(target, "--out"))
    if calibration is not None:
        keys.update(file_keys(calibration, "--calibration"))
    return keys


def write_out(fitted: Fitted, out: Path) -> None:
    """Write the start's constants and the fitted ones over them to ``out``, whole or not
    at all (an existing file's other constants were part of the start)."""
    text = json.dumps(fitted.written(), indent=2, sort_keys=True) + "\n"
    write_atomic(out, text, "--out")


def check_runs(kind: str, runs: Sequence[Path], constants: Sequence[str] | None) -> list[str]:
    """The constants to fit, after the checks a fit can make before it starts: the kind,
    the runs files (one CSV, or kernels' gpu_checks.py JSON files), the constants' names."""
    if kind not in KINDS:
        raise InputError("kind", kind, f"one of {', '.join(KINDS)}")
    if kind != "kernels" and len(runs) != 1:
        raise InputError("--runs", ", ".join(map(str, runs)), f"one file of {kind} runs")
    what = {
        "kernels": "a JSON file written by benchmarks/gpu_checks.py",
        "collectives": "a CSV of collective benchmarks or gpuscale bench collectives' JSON",
    }.get(kind, "a CSV file of runs (shared/validation/README.md's columns)")
    for path in runs:
        require_file(path, "--runs", what)
    return pick_constants(kind, constants)


def fit_runs(
    kind: str,
    runs: Path | Sequence[Path],
    base: dict[str, float] | None = None,
    constants: Sequence[str] | None = None,
    on_eval: OnEval | None = None,
    shown: str | None = None,
    gpu: str | None = None,
    sdpa_backend: str | None = None,
) -> Fitted:
    """Fit ``kind``'s constants (``constants`` of them when given) on the file(s) ``runs``
    as a whole, starting from the shipped constants with ``base`` over them; ``shown`` is
    the constants as the user wrote them, for errors; ``gpu`` the catalog GPU kernels were
    measured on (default: the device their files name) and ``sdpa_backend`` the backend
    SDPA's default ran where their files do not record it."""
    paths = (runs,) if isinstance(runs, Path) else tuple(runs)
    names = check_runs(kind, paths, constants)
    base = dict(base or {})
    start = Calibration.from_dict({**default_calibration().to_dict(), **base})
    if kind == "kernels":
        k = _kernels(paths, start, gpu, sdpa_backend)
    else:
        k = {
            "training": _training,
            "collectives": _collectives,
            "inference": _inference,
            "memory": _memory,
        }[kind](paths, start)
    label = ", ".join(p.name for p in paths)
    extra = "".join(
        f" {flag} {v}" for flag, v in (("--gpu", gpu), ("--sdpa-backend", sdpa_backend)) if v
    )
    before = k.report(start)
    rows = len({r.id for r in before.scored})
    if rows == 0:
        raise InputError(
            "--runs",
            ", ".join(map(str, paths)),
            f"no run in it can be scored (each row's reason: gpuscale validate {kind} "
            f"--runs {' --runs '.join(map(str, paths))}{extra})",
        )
    priced = [r.predicted for r in before.scored]
    if not all(v is not None and 0.0 < v < math.inf for v in priced):
        # a start at an extreme of a constant's range (1e300 a speed-up, 1e-300 an
        # efficiency): every fit would move nothing, not for want of runs
        moved = ", ".join(f"{n}={v:g}" for n, v in sorted(base.items())) or "the shipped ones"
        raise InputError(
            "--calibration/--out", moved,
            "constants that price the runs at a finite, non-zero time: these price some at "
            "zero or infinity",
        )  # fmt: skip
    informed = k.informed(names)
    if not informed and constants:
        every = k.informed(list(bounds_of(kind)))
        those = f"they inform {', '.join(every)}" if every else "they inform none"
        raise InputError(
            "--constants", shown if shown is not None else ",".join(constants),
            f"no prediction of {label}'s runs depends on them; {those}",
        )  # fmt: skip
    if not informed:
        raise InputError(
            "--runs", label, f"no prediction of its runs depends on any {kind} constant"
        )
    count = _Counter(on_eval)
    cal = k.fit(informed, count)
    return Fitted(
        kind, paths, rows, start, base, cal, tuple(names), tuple(informed),
        k.score(before), k.score(k.report(cal)), count.n,
    )  # fmt: skip
