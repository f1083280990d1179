"""The training fit only moves constants the rows inform."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.calibrate.fit_training import (
    BOUNDS,
    HOST_CONSTANTS,
    SHORT_STEP_RUNS,
    _informed,
    _rows,
)
from gpuscale.validate.training import choose_plan

CAL = default_calibration()


def _runs(tmp_path: Path, rows: list[dict[str, str]]) -> Path:
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def _row(**cells: str) -> dict[str, str]:
    row = {
        "id": "r",
        "source": "some paper",
        "model": "llama3-8b",
        "gpu": "H100-SXM5-80GB",
        "num_gpus": "64",
        "seq_len": "8192",
        "global_batch_seqs": "128",
        "precision": "bf16",
        "measured_tokens_per_s_per_gpu": "8000",
        "target": "tokens_per_s_per_gpu",
        "flop_convention": "",
    }
    return {**row, **cells}


def test_constants_of_absent_features_are_not_informed(tmp_path: Path) -> None:
    # one dense bf16 run with FSDP-style sharding: no DeepSpeed ZeRO-3 gathers, no FP8,
    # no MoE, no pipeline
    path = _runs(
        tmp_path,
        [
            _row(
                tp="1",
                pp="1",
                dp="64",
                micro_batch="2",
                dist_optimizer_or_zero="fsdp",
                recompute="full",
            )
        ],
    )
    pairs = [(pr, choose_plan(pr, CAL)[0]) for pr in _rows(path)]
    for name in (
        "zero3_param_gather_Bps",
        "fp8_gemm_speedup",
        "moe_expert_overhead_s",
        "pp_overlap",
    ):
        assert not _informed(name, CAL, pairs), name
    for name in ("gemm_eff_max", "zero3_overlap", "step_overhead_s"):
        assert _informed(name, CAL, pairs), name


def test_the_scan_leaves_a_shallow_valley_for_the_deeper_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuscale.calibrate import fit_training

    # residuals with two valleys in the first constant: a shallow one near 0.84 (where the
    # search starts) and a deeper one near 0.3; the second constant is already at its best
    def residuals(x: np.ndarray, *_: object) -> np.ndarray:
        shallow = 0.05 + (x[0] - 0.84) ** 2
        deep = (x[0] - 0.3) ** 2
        return np.array([min(shallow, deep), x[1] - 0.5])

    monkeypatch.setattr(fit_training, "_residuals", residuals)
    lo, hi = np.zeros(2), np.ones(2)
    x = fit_training._scan(np.array([0.84, 0.5]), CAL, [], ["a", "b"], lo, hi, 0.03)
    assert x[0] == 0.25  # the scan point in the deep valley
    assert x[1] == 0.5


def test_the_host_constants_are_scanned_cost_a_step_first() -> None:
    # the fit scans in BOUNDS' order: the launch time is a floor, flat wherever it does not
    # bind, so the cost a step must have moved before its scan points are tried
    order = list(BOUNDS)
    assert HOST_CONSTANTS == ("step_overhead_s", "host_layer_s")
    assert order.index("step_overhead_s") < order.index("host_layer_s")


def test_the_short_steps_inform_the_launch_time_a_large_run_does_not(tmp_path: Path) -> None:
    """vTrain's single-node runs move with the host's launch time; a 175B run does not."""
    short = [(pr, choose_plan(pr, CAL)[0]) for pr in _rows(SHORT_STEP_RUNS)]
    assert len(short) == 1424  # of 1,440: 16 skipped, each with its reason
    assert _informed("host_layer_s", CAL, short)
    big = _row(
        model="gpt3-175b", gpu="A100-SXM4-80GB", num_gpus="1024", seq_len="2048",
        global_batch_seqs="1536", tp="8", pp="16", dp="8", micro_batch="1", recompute="full",
        measured_tokens_per_s_per_gpu="130",
    )  # fmt: skip
    pairs = [(pr, choose_plan(pr, CAL)[0]) for pr in _rows(_runs(tmp_path, [big]))]
    assert len(pairs) == 1
    assert not _informed("host_layer_s", CAL, pairs)
