"""Flag plumbing the `gpuscale train` commands share: the workload flags they resolve,
where a value was given, and the plan knobs (degrees, micro-batch, recompute, sharding)
the user fixed."""

from __future__ import annotations

from typing import Any

from gpuscale.cli.train_workload import DEFAULTS, FAILURE_KEYS, REQUIRED, STORAGE_KEYS, Resolved
from gpuscale.errors import InputError
from gpuscale.perf.plan import RECOMPUTE, SHARDING
from gpuscale.perf.validity import check_degrees


def workload_flags(given: dict[str, Any]) -> dict[str, Any]:
    """A command's workload flags (None where not given), from its ``locals()``; the
    storage flags of the commands that take them."""
    keys = (*REQUIRED, *DEFAULTS, *(k for k in (*STORAGE_KEYS, *FAILURE_KEYS) if k in given))
    return {k: given[k] for k in keys}


def chosen_sharding(zero: str | None, dist_opt: bool) -> str | None:
    """The optimizer sharding --zero or --dist-opt names (fsdp is zero3), None for neither."""
    if zero is not None and dist_opt:
        raise InputError("zero", zero, "give either --zero or --dist-opt, not both")
    if dist_opt or zero is None:
        return "dist-opt" if dist_opt else None
    said = zero.strip().lower()  # ZeRO3 as zero3
    if said not in (*SHARDING, "fsdp"):
        raise InputError("zero", zero, f"one of {', '.join(SHARDING)} or fsdp (ZeRO-3)")
    return "zero3" if said == "fsdp" else said


def given_at(r: Resolved, key: str) -> str:
    """Where ``key``'s value was given, in words: its flag or the workload file's key."""
    where = r.where(key)
    return where if ":" in where else f"--{where}"


def fixed_knobs(
    r: Resolved,
    tp: int | None,
    pp: int | None,
    vpp: int | None,
    cp: int | None,
    ep: int | None,
    mbs: int | None,
    recompute: str | None,
    sharding: str | None,
    sp: bool | None,
) -> dict[str, Any]:
    """The plan knobs the user fixed on workload ``r``; its recompute modules, when given,
    only a selective recompute uses."""
    w, modules = r.workload, r.modules_text
    fx: dict[str, Any] = {"tp": tp, "pp": pp, "vpp": vpp, "cp": cp, "ep": ep, "mbs": mbs, "sp": sp}
    check_degrees(w, fx)  # before any product or array of them
    if recompute is not None:
        said = recompute.strip().lower()  # Full as full, as --precision BF16 is bf16
        if said not in RECOMPUTE:
            raise InputError("recompute", recompute, f"one of {', '.join(RECOMPUTE)}")
        recompute = said
        fx["recompute"] = RECOMPUTE.index(recompute)
        if modules is not None and recompute != "selective":
            raise InputError(
                r.where("recompute_modules"),
                modules,
                f"--recompute selective (--recompute {recompute} recomputes no module selectively)",
            )
    if sharding is not None:  # chosen_sharding's: one of SHARDING
        fx["sharding"] = SHARDING.index(sharding)
    return {k: v for k, v in fx.items() if v is not None}
