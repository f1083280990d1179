"""The steps of `gpuscale train estimate` between its flags and its report: the flags that
only make sense together, the data-parallel degree of the plan, and the summary it prints
or writes as JSON."""

from __future__ import annotations

from typing import Any

from gpuscale.calibrate import Calibration
from gpuscale.calibrate.accuracy import Band, band_for
from gpuscale.cli.train_flags import given_at
from gpuscale.cli.train_report import best_fitting
from gpuscale.cli.train_workload import Resolved
from gpuscale.errors import InputError
from gpuscale.export.megatron import megatron_json
from gpuscale.perf.training import TrainingEstimate
from gpuscale.perf.validity import check_degrees


def check_plan_flags(
    r: Resolved, sharding: str, sp: bool | None, tp: int, sharding_defaulted: bool
) -> None:
    """Refuse sequence parallelism without tensor parallelism, and a ZeRO-3 gather mode with
    a sharding that gathers no parameters (``sharding_defaulted``: neither --zero nor
    --dist-opt was given)."""
    w = r.workload
    if sp and tp == 1:
        raise InputError("sp", "--sp", "--tp > 1 (sequence parallelism splits over TP)")
    if w.zero3_gathers != "coalesced" and sharding != "zero3":
        raise InputError(
            "zero3-gathers",
            w.zero3_gathers,
            f"with --zero zero3 or fsdp only: the plan's sharding, {sharding}"
            f"{' (the default)' if sharding_defaulted else ''}, gathers no parameters",
        )


def data_parallel_degree(r: Resolved, dp: int | None, tp: int, pp: int, cp: int) -> int:
    """The plan's data-parallel degree: ``dp`` as given, or every GPU the model-parallel
    group (tp x pp x cp) leaves; refused when it asks for more GPUs than the workload has."""
    gpus = r.workload.num_gpus
    model_parallel = tp * pp * cp
    if dp is None:
        if gpus % model_parallel:
            raise InputError(
                "tp*pp*cp",
                model_parallel,
                f"must divide the {gpus} GPUs of {given_at(r, 'gpus')} (tp={tp}, pp={pp}, "
                f"cp={cp}), or give --dp to leave some idle",
            )
        dp = gpus // model_parallel
    check_degrees(r.workload, {"dp": dp})
    if dp * model_parallel > gpus:
        raise InputError(
            "dp",
            dp,
            f"at most {gpus // model_parallel}: tp x pp x cp x dp = {model_parallel} x {dp} "
            f"GPUs, more than the {gpus} of {given_at(r, 'gpus')}",
        )
    return dp


def estimate_summary(
    r: Resolved, e: TrainingEstimate, cal: Calibration
) -> tuple[dict[str, Any], Band]:
    """The estimate's summary as `--json` writes it: the plan's figures, its Megatron-LM
    arguments, the expected error (also returned) and, when it does not fit, the fastest
    plan that does."""
    w = r.workload
    summary = e.summary(0, r.train_tokens, r.storage, r.failures)
    summary["megatron"] = megatron_json(e, 0)
    band = band_for(w.model, w.gpu, cal)
    summary["expected_error"] = band.to_dict()
    if not summary["fits"]:
        summary["best_fitting_plan"] = best_fitting(w, cal)
    return summary, band
