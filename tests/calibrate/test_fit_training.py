"""The training fit only moves constants the rows inform."""

from __future__ import annotations

import csv
from pathlib import Path

from gpuscale.calibrate import default_calibration
from gpuscale.calibrate.fit_training import _informed, _rows
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
