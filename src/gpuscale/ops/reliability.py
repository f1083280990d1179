"""Failures, checkpoints and goodput: how much of a training run's wall time trains.

A run on N nodes, each interrupted on average once per node MTBF, is interrupted once per
job MTBF M = node MTBF / N. Each interruption costs the restart R (detecting it,
relaunching, reloading the last checkpoint) and the work done since that checkpoint: on
average half an interval of work plus its save, (tau + C) / 2. Saving costs C of stall
every tau of work. To first order (Young 1974; Daly 2006, "A higher order estimate of the
optimum checkpoint interval for restart dumps"):

    goodput = tau / (tau + C) x (1 - (R + (tau + C) / 2) / M)

the share of wall time that trains. With x = tau + C it is (1 - C/x)(1 - R/M - x/(2M)),
largest at x = sqrt(2 C (M - R)): the best interval is tau_opt = sqrt(2 C (M - R)) - C,
Daly's first-order optimum sqrt(2 C M) - C when restarts are short against M.

Llama 3 405B's pre-training saw 419 unexpected interruptions in 54 days on 2,048 nodes
of 8 H100 (Dubey et al. 2024, "The Llama 3 Herd of Models", sec. 3.3.4): a node MTBF of
2,048 x 54 / 419 = 264 days, a job MTBF of 3.1 hours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuscale.errors import InputError


@dataclass(frozen=True)
class FailurePolicy:
    """How often a node fails and how long a restart takes (besides reloading)."""

    node_mtbf_s: float
    restart_s: float
    """Detecting the failure, replacing or excluding the node and relaunching the job."""

    def check(self, checkpoints: bool) -> None:
        if not self.node_mtbf_s > 0 or not math.isfinite(self.node_mtbf_s):
            raise InputError("node-mtbf", self.node_mtbf_s, "a positive time, e.g. 264d")
        if not self.restart_s >= 0 or not math.isfinite(self.restart_s):
            raise InputError("restart-time", self.restart_s, "a time of 0 or more, e.g. 10min")
        if not checkpoints:
            raise InputError(
                "checkpoint-every",
                "(missing)",
                "how often the run saves (with --storage-write-bw), to price failures: "
                "a restart goes back to the last checkpoint",
            )


def goodput(interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """Share of wall time that trains, saving ``checkpoint_s`` every ``interval_s`` of work
    and losing ``restart_s`` plus half an interval at each failure (first order)."""
    cycle = interval_s + checkpoint_s
    return max(interval_s / cycle * (1.0 - (restart_s + cycle / 2.0) / mtbf_s), 0.0)


def optimal_interval_s(checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """The work between checkpoints that maximises :func:`goodput`: sqrt(2 C (M - R)) - C
    (at least a moment's work; M when failures leave no time to train)."""
    room = mtbf_s - restart_s
    if room <= 0.0:
        return mtbf_s
    return max(math.sqrt(2.0 * checkpoint_s * room) - checkpoint_s, 0.0)


@dataclass(frozen=True)
class Reliability:
    """A plan's exposure to failures at its checkpoint interval."""

    nodes: int
    job_mtbf_s: float
    interval_s: float
    """Training time between two saves (steps between saves x step time)."""
    checkpoint_s: float
    restart_s: float
    """Relaunch plus reloading the checkpoint."""
    reload_s: float | None
    """Reading the checkpoint back (None: no read rate given, not priced)."""
    goodput: float
    checkpoint_share: float
    lost_work_share: float
    restart_share: float
    optimal_every_steps: int
    optimal_goodput: float

    @property
    def failure_share(self) -> float:
        """Share of wall time lost to failures (lost work and restarts)."""
        return self.lost_work_share + self.restart_share

    def failures_in(self, wall_s: float) -> float:
        """Expected interruptions over ``wall_s`` seconds of the run."""
        return wall_s / self.job_mtbf_s


def reliability(
    policy: FailurePolicy,
    nodes: int,
    step_s: float,
    every_steps: int,
    checkpoint_s: float,
    reload_s: float | None,
) -> Reliability:
    """Goodput of a run on ``nodes`` nodes that saves every ``every_steps`` steps of
    ``step_s`` seconds for a stall of ``checkpoint_s`` each."""
    mtbf = policy.node_mtbf_s / nodes
    restart = policy.restart_s + (reload_s or 0.0)
    tau = every_steps * step_s
    cycle = tau + checkpoint_s
    g = goodput(tau, checkpoint_s, restart, mtbf)
    fail = min((restart + cycle / 2.0) / mtbf, 1.0)
    lost = fail * (cycle / 2.0) / (restart + cycle / 2.0)
    # whole steps: the better of the two step counts around the optimum
    opt = optimal_interval_s(checkpoint_s, restart, mtbf) / step_s
    best = max(
        {max(math.floor(opt), 1), max(math.ceil(opt), 1)},
        key=lambda n: goodput(n * step_s, checkpoint_s, restart, mtbf),
    )
    return Reliability(
        nodes=nodes,
        job_mtbf_s=mtbf,
        interval_s=tau,
        checkpoint_s=checkpoint_s,
        restart_s=restart,
        reload_s=reload_s,
        goodput=g,
        checkpoint_share=checkpoint_s / cycle * (1.0 - fail),
        lost_work_share=lost,
        restart_share=fail - lost,
        optimal_every_steps=best,
        optimal_goodput=goodput(best * step_s, checkpoint_s, restart, mtbf),
    )
