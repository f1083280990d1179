"""The rows of `gpuscale train estimate`'s table about the run beyond one step: what its
checkpoints and data loading cost (perf/storage.py), its failures and goodput
(ops/reliability.py), and the time to train its tokens."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from gpuscale.ops.reliability import FailurePolicy
from gpuscale.perf.storage import StoragePolicy
from gpuscale.report.cells import SHOWN, time_to_train
from gpuscale.units import fmt_bytes, fmt_rate, fmt_time


def storage_rows(t: Table, s: dict[str, Any], policy: StoragePolicy) -> None:
    """The checkpoint and data-loading rows of an estimate (perf/storage.py); with failures
    priced, the goodput row gives the checkpoints' share of wall time instead."""
    st = s["storage"]
    if st["checkpoint_bytes"] and policy.write_Bps:
        every, interval = st["checkpoint_every_steps"], st["checkpoint_interval_s"]
        per = st["checkpoint_per_step_s"]
        if policy.asynchronous:
            how = (
                f"set-up and copy to host memory, then {fmt_time(st['checkpoint_write_s'])} of "
                "background writing"
            )
            if st["checkpoint_wait_s"] > 0:
                how += (
                    f"; {fmt_time(st['checkpoint_wait_s'])} of the stall waits for the "
                    "previous write"
                )
            # set-up and copy only: a stall that waits on the previous write is the storage's
            if st["checkpoint_sync_stall_s"] < st["checkpoint_stall_s"] - st["checkpoint_wait_s"]:
                how += (
                    f"; a synchronous save would stall only "
                    f"{fmt_time(st['checkpoint_sync_stall_s'])}: the storage writes faster "
                    "than an asynchronous save sets up"
                )
        else:
            rate = st["checkpoint_bytes"] / st["checkpoint_write_s"]
            how = f"written synchronously at {fmt_rate(rate, 'B/s')}"
            if rate < policy.write_Bps * (1 - 1e-9):
                how += ", the GPUs' host links' pace"
        short = (
            " (the interval asked is shorter than a step)"
            if st["checkpoint_interval_below_step"]
            else " (the best interval for the failure rate)"
            if st["checkpoint_every_best"]
            else ""
        )
        share = (
            ""
            if "reliability" in s
            else f", {100 * per / (interval / every + per):.1f}% of training time"
        )
        t.add_row(
            "checkpoint",
            f"{fmt_bytes(st['checkpoint_bytes'], binary=False)} every {every:,} step"
            f"{'' if every == 1 else 's'} ({fmt_time(interval)}){short}: training stalls "
            f"{fmt_time(st['checkpoint_stall_s'])} each ({how}){share}",
        )
    if st["data_read_s"] is not None:
        exposed = st["data_exposed_s"]
        left = (
            f"{fmt_time(exposed)} a step beyond the step's own time"
            if exposed > 0
            else f"hidden behind the {fmt_time(s['step_time_s'])} step (read ahead)"
        )
        t.add_row(
            "data loading",
            f"{fmt_bytes(st['data_bytes_per_step'], binary=False)} of token ids a step, read "
            f"in {fmt_time(st['data_read_s'])}: {left}",
        )


def reliability_rows(t: Table, s: dict[str, Any], failures: FailurePolicy) -> None:
    """The failure and goodput rows of an estimate (ops/reliability.py)."""
    r, st = s["reliability"], s["storage"]
    reload = st["checkpoint_reload_s"]
    parts = [f"relaunch {fmt_time(failures.restart_s)}"]
    parts.append(
        f"reload {fmt_time(reload)}" if reload is not None else "reload not priced (no read rate)"
    )
    lost, back = r["lost_work_per_failure_s"], r["restart_per_failure_s"]
    cost = (
        f"on average {fmt_time(lost)} of work since the last durable checkpoint and "
        f"{fmt_time(back)} of restart"
        if lost is not None and back is not None
        else (
            "the work of every interval: a restart takes longer than the time between failures"
            if r["restart_s"] > r["job_mtbf_s"]
            else "the work of every interval: failures come faster than an interval completes"
        )
    )
    t.add_row(
        "failures",
        f"one every {fmt_time(r['job_mtbf_s'])} on {r['gpus']:,} GPUs (GPU MTBF "
        f"{fmt_time(failures.gpu_mtbf_s)}); each costs {cost} (a restart takes "
        f"{fmt_time(r['restart_s'])}: {', '.join(parts)}; some failures cut one short)",
    )
    best = r["optimal_checkpoint_every_steps"]
    every = st["checkpoint_every_steps"]
    gain = r["optimal_goodput"] - r["goodput"]
    # a step as the interval counts it: with the data reading it does not hide
    step = s["step_time_s"] + st.get("data_exposed_s", 0.0)
    at = f"every {best:,} step{'' if best == 1 else 's'} ({fmt_time(best * step)})"
    if best == every or gain <= 0.0:
        hint = "no other interval does better"
    elif s.get("train_steps") and best >= s["train_steps"]:
        hint = f"the best interval is longer than the run's {s['train_steps']:,} steps"
    elif gain < SHOWN:
        hint = f"within 0.1% of the best interval, {at}"
    else:
        hint = f"saving {at} would give {100 * r['optimal_goodput']:.1f}%"
    t.add_row(
        "goodput",
        f"{100 * r['goodput']:.1f}% of wall time trains (checkpoints "
        f"{100 * r['checkpoint_share']:.1f}%, "
        + (
            f"data loading {100 * r['data_loading_share']:.1f}%, "
            if r["data_loading_share"] >= SHOWN
            else ""
        )
        + f"lost work {100 * r['lost_work_share']:.1f}%, "
        f"restarts {100 * r['restart_share']:.1f}%); {hint}",
    )


def time_to_train_row(t: Table, s: dict[str, Any], train_tokens: float) -> None:
    """The time to train ``train_tokens`` (:func:`~gpuscale.report.cells.time_to_train`)."""
    t.add_row("time to train", time_to_train(s, train_tokens))
