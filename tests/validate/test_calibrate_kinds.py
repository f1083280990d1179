"""`gpuscale calibrate collectives` and `calibrate inference` on rows of their validation
schemas (the bad-row tests' good rows): only the constant asked for moves, and the scores
are what `gpuscale validate` gives under the fitted constants."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_collectives_bad_rows import GOOD as ALL_REDUCE
from test_collectives_bad_rows import write as write_collectives
from test_inference_bad_rows import GOOD as OFFLINE
from test_inference_bad_rows import write as write_inference

from gpuscale.calibrate import Calibration, default_calibration
from gpuscale.calibrate.fitting import Fitted, bounds_of, fit_runs
from gpuscale.validate.collectives import validate_collectives
from gpuscale.validate.inference import validate_inference


def _only_moved(fitted: Fitted, start: Calibration, name: str) -> None:
    assert fitted.informed == (name,)
    for other in bounds_of(fitted.kind):
        if other != name:
            assert getattr(fitted.cal, other) == getattr(start, other), other


def test_collectives_fit_the_link_efficiency_a_large_message_measures(tmp_path: Path) -> None:
    # one 8 GiB all-reduce inside a DGX H100, measured at 400 GB/s bus bandwidth (below the
    # 480 such boxes give): its bus bandwidth is the NVLink rate times scaleup_eff (latency
    # is nothing at that size), so the fit scales scaleup_eff by the measured / predicted
    # ratio and then predicts the row exactly
    runs = write_collectives(tmp_path / "runs.csv", [{**ALL_REDUCE, "busbw_gbps": "400"}])
    start = default_calibration()
    (row,) = validate_collectives(runs, start).scored
    assert row.predicted is not None and row.measured is not None
    fitted = fit_runs("collectives", runs, None, ["scaleup_eff"])
    _only_moved(fitted, start, "scaleup_eff")
    expect = start.scaleup_eff * row.measured / row.predicted
    assert fitted.cal.scaleup_eff == pytest.approx(expect, rel=0.01)
    assert fitted.after["busbw_GBps_mape"] < 1.0 < fitted.before["busbw_GBps_mape"]


def test_inference_fits_only_the_constant_asked_and_scores_as_validate(tmp_path: Path) -> None:
    # two offline TensorRT-LLM runs of Llama 3 8B on one H100 in FP8, 200 requests each
    rows = [OFFLINE, {**OFFLINE, "id": "b", "output_len": "1024", "input_len": "1024"}]
    runs = write_inference(tmp_path / "runs.csv", rows)
    start = default_calibration()
    fitted = fit_runs("inference", runs, None, ["inf_hbm_eff"])
    _only_moved(fitted, start, "inf_hbm_eff")
    assert fitted.cal.inf_hbm_eff != start.inf_hbm_eff
    rep = validate_inference(runs, fitted.cal)
    assert fitted.after["throughput_mape"] == pytest.approx(rep.stats()["mape_pct"])
    assert fitted.after["throughput_mape"] < fitted.before["throughput_mape"]
