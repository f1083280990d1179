"""Failures, checkpoints and goodput: how much of a training run's wall time trains.

Interruptions are taken as a Poisson process whose rate grows in proportion to the GPUs a
job holds (an assumption: host and network failures scale with nodes and links): a job on
G GPUs is interrupted once per job MTBF M = GPU MTBF / G, where the GPU MTBF is a
cluster's GPU-time between unplanned interruptions of any cause (GPUs, HBM, hosts,
network, software), counted per GPU. Llama 3 405B's pre-training saw 419 unexpected
interruptions in 54 days on 16,384 H100, besides 47 planned ones (Dubey et al. 2024, "The
Llama 3 Herd of Models", sec. 3.3.4): a GPU MTBF of 16,384 x 54 / 419 = 2,112 days, a job
MTBF of 3.1 hours.

The run saves every tau of work, for a stall C (the whole write when synchronous; the
copy to host memory, plus any wait for the previous write, when asynchronous). Each
interruption costs the restart R (detecting it, relaunching, reloading the checkpoint) and
the work since the last durable checkpoint. With exponential failures (failures may strike
during a restart too) the wall time per tau of work is Daly's complete model (Daly 2006,
"A higher order estimate of the optimum checkpoint interval for restart dumps", eq. 11):

    T(tau) = M exp(R' / M) (exp((tau + C) / M) - 1),   goodput = tau / T(tau)

An asynchronous save is durable only once its background write W ends: a failure in that
window, probability W / (tau + C), loses one more interval, W of work on average, so
R' = R + W. T - (tau + C) is the time failures take. Of it, the restarts take
M expm1((tau + C) / M) expm1(R / M) (Daly's sum over failed and completed restarts), lost
work the rest; failures strike at 1 / M over all of T, so the average interruption loses
less than (tau + C) / 2 of work (the mean time to a failure within an interval) and less
than a whole restart (some interruptions cut a restart short). The best interval is found
by evaluating T over step counts (C changes with tau when asynchronous); for a fixed C it
is near Daly's sqrt(2 C M) - C.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuscale.errors import InputError

MAX_TIME_S = 1e12
"""Longest MTBF or restart taken (about 30,000 years)."""


@dataclass(frozen=True)
class FailurePolicy:
    """How often the cluster interrupts a job, per GPU, and how long a restart takes
    (besides reloading the checkpoint)."""

    gpu_mtbf_s: float
    """GPU-time between interruptions: the job MTBF times the GPUs it holds."""
    restart_s: float
    """Detecting the failure, replacing or excluding the node and relaunching the job."""

    def check(self, checkpoints: bool) -> None:
        if not 0 < self.gpu_mtbf_s <= MAX_TIME_S:
            raise InputError(
                "gpu-mtbf", self.gpu_mtbf_s, f"a positive time up to {MAX_TIME_S:g} s, e.g. 2112d"
            )
        if not 0 <= self.restart_s <= MAX_TIME_S:
            raise InputError(
                "restart-time", self.restart_s, f"a time of 0 to {MAX_TIME_S:g} s, e.g. 10min"
            )
        if not checkpoints:
            raise InputError(
                "checkpoint-every",
                "(missing)",
                "how often the run saves (--checkpoint-every with --storage-write-bw, or the "
                "workload's keys), to price failures: a restart goes back to the last checkpoint",
            )


def wall_per_interval_s(tau: float, c: float, r: float, mtbf: float) -> float:
    """Daly's expected wall time to complete ``tau`` of work saved at a stall ``c``, with
    restarts of ``r`` and failures every ``mtbf`` on average (inf when out of range)."""
    with np.errstate(over="ignore"):
        return float(mtbf * np.exp(r / mtbf) * np.expm1((tau + c) / mtbf))


def goodput(tau: float, c: float, r: float, mtbf: float) -> float:
    """Share of wall time that trains (Daly's complete model)."""
    t = wall_per_interval_s(tau, c, r, mtbf)
    return tau / t if math.isfinite(t) and t > 0 else 0.0


def daly_interval_s(c: float, mtbf: float) -> float:
    """Daly's higher-order optimum for a fixed stall (eq. 37): sqrt(2 C M) [1 + (1/3)
    sqrt(C / 2M) + C / 18M] - C for C < 2M, else M."""
    if c >= 2.0 * mtbf:
        return mtbf
    x = math.sqrt(c / (2.0 * mtbf))
    return math.sqrt(2.0 * c * mtbf) * (1.0 + x / 3.0 + x * x / 9.0) - c


@dataclass(frozen=True)
class Reliability:
    """A plan's exposure to failures at its checkpoint interval."""

    gpus: int
    job_mtbf_s: float
    interval_s: float
    """Work between two saves: steps between saves x (step + exposed data reading)."""
    checkpoint_s: float
    restart_s: float
    """Relaunch plus reloading the checkpoint."""
    durable_after_s: float
    """How long after a save its checkpoint becomes durable (the background write)."""
    goodput: float
    """Share of wall time in steps."""
    checkpoint_share: float
    data_loading_share: float
    """Reading data beyond what a step hides."""
    lost_work_share: float
    restart_share: float
    lost_per_failure_s: float
    """Work an average interruption loses (inf when nothing trains)."""
    restart_per_failure_s: float
    """Restart time an average interruption costs: less than a whole restart, since some
    interruptions strike a restart and cut it short (inf when nothing trains)."""
    optimal_every_steps: int
    optimal_goodput: float

    @property
    def failure_share(self) -> float:
        """Share of wall time lost to failures (lost work and restarts)."""
        return self.lost_work_share + self.restart_share

    def failures_in(self, wall_s: float) -> float:
        """Expected interruptions over ``wall_s`` seconds of the run."""
        return wall_s / self.job_mtbf_s


SaveCost = Callable[[int], tuple[float, float]]
"""Steps between saves -> (stall per save, time until the save is durable after it)."""


def reliability(
    policy: FailurePolicy,
    gpus: int,
    step_s: float,
    every_steps: int,
    save: SaveCost,
    reload_s: float | None,
    exposed_s: float = 0.0,
) -> Reliability:
    """Goodput of a run on ``gpus`` GPUs with ``step_s`` steps, each followed by
    ``exposed_s`` of data reading it does not hide, that saves every ``every_steps`` steps at
    the cost ``save`` gives for an interval."""
    mtbf = policy.gpu_mtbf_s / gpus
    restart = policy.restart_s + (reload_s or 0.0)
    busy = step_s + exposed_s  # a step's work between saves, as failures see it
    in_steps = step_s / busy if busy > 0 else 1.0

    def wall(n: int) -> tuple[float, float, float]:
        c, lag = save(n)
        return wall_per_interval_s(n * busy, c, restart + lag, mtbf), c, lag

    t, c, lag = wall(every_steps)
    tau = every_steps * busy
    lost_each = restart_each = math.inf
    if math.isfinite(t) and t > 0:
        g = tau / t
        ckpt = c / t
        lost_all = max(t - tau - c, 0.0) / t
        # Daly's T - (tau + C) splits exactly into the restarts, M expm1(L/M) expm1(R/M)
        # with L = tau + C (failed restarts included), and the work lost, the rest (the
        # lag's extra loss included); failures strike at 1/M over all of T
        restarts = mtbf * math.expm1((tau + c) / mtbf) * math.expm1(restart / mtbf)
        rs = min(restarts / t, lost_all)
        failures = t / mtbf
        lost_each = (lost_all - rs) * t / failures
        restart_each = rs * t / failures
    else:  # failures come before an interval completes: nothing trains
        # the restarts' share tends to 1 - exp(-R/M) as the interval grows without bound
        g, ckpt, lost_all, rs = 0.0, 0.0, 1.0, -math.expm1(-restart / mtbf)
    lost = lost_all - rs
    best, best_g = _best_steps(lambda n: n * step_s / wall(n)[0], c, mtbf, busy, every_steps)
    return Reliability(
        gpus=gpus,
        job_mtbf_s=mtbf,
        interval_s=tau,
        checkpoint_s=c,
        restart_s=restart,
        durable_after_s=lag,
        goodput=g * in_steps,
        checkpoint_share=ckpt,
        data_loading_share=g * (1.0 - in_steps),
        lost_work_share=lost,
        restart_share=rs,
        lost_per_failure_s=lost_each,
        restart_per_failure_s=restart_each,
        optimal_every_steps=best,
        optimal_goodput=best_g,
    )


def _best_steps(
    good: Callable[[int], float], c: float, mtbf: float, step_s: float, every: int
) -> tuple[int, float]:
    """The step count between saves with the highest goodput: Daly's optimum for the
    current stall and its neighbours, a geometric sweep up to ten job MTBFs (the stall
    may change with the interval), and the run's own count; ties keep the fewest steps."""
    top = max(min(10.0 * mtbf / step_s, 1e12), 1.0)
    daly = max(daly_interval_s(c, mtbf) / step_s, 1.0)
    grid = {every, *(max(int(v), 1) for v in np.geomspace(1.0, top, 200))}
    grid |= {max(math.floor(daly), 1), max(math.ceil(daly), 1)}
    score = {n: _finite(good(n)) for n in grid}
    best = min(score, key=lambda n: (-score[n], n))
    # the sweep's points are about 6 % apart: settle on the whole count near the best
    for n in range(max(int(best / 1.07), 1), int(best * 1.07) + 2):
        if n not in score:
            score[n] = _finite(good(n))
    best = min(score, key=lambda n: (-score[n], n))
    return best, score[best]


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 0.0
