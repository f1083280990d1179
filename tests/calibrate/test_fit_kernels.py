"""The SSD kernel efficiency (calibrate/fit_kernels.py): fitted on its published H100
microbenchmark, shipped as fitted, and applied to Mamba-2's scan only."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpuscale.calibrate.calibration import default_calibration
from gpuscale.calibrate.fit_kernels import MIN_TOKENS, fit_ssd_eff, ssd_rates
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.perf.comm import Fabric
from gpuscale.perf.kernels import scan_s
from gpuscale.perf.plan import Workload


def test_shipped_ssd_eff_is_the_fitted_one() -> None:
    assert default_calibration().ssd_eff == pytest.approx(fit_ssd_eff(), abs=5e-5)


def test_the_runs_agree_on_one_efficiency() -> None:
    # every steady-rate run within 15 % of the median ratio: one constant describes them
    rows = [(t, meas / model) for t, meas, model in ssd_rates() if t >= MIN_TOKENS]
    assert len(rows) == 7
    eff = fit_ssd_eff()
    assert 0.6 < eff < 0.7
    assert all(abs(r / eff - 1.0) < 0.15 for _, r in rows)
    # short runs are launch-bound: below the steady rate, which is why they are left out
    short = [meas / model for t, meas, model in ssd_rates() if t < MIN_TOKENS]
    assert len(short) == 2 and all(r < 0.9 * eff for r in short)


def _workload(model: str) -> Workload:
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    return Workload(get_model(model), g, s, Fabric.from_system(s, 8), 8, 4096, 8)


@pytest.mark.parametrize(
    ("model", "scaled"), [("nemotron-h-56b", True), ("qwen3-next-80b-a3b", False)]
)
def test_ssd_eff_divides_the_mamba2_scan_only(model: str, scaled: bool) -> None:
    w = _workload(model)
    cal = default_calibration()
    tokens, tp = np.array([8192.0]), np.array([1.0])
    peak, bw = w.gpu.peak_flops("bf16"), w.gpu.hbm_bw_Bps * cal.hbm_eff
    one = scan_s(w, tokens, tp, peak, bw, replace(cal, ssd_eff=1.0))
    half = scan_s(w, tokens, tp, peak, bw, replace(cal, ssd_eff=0.5))
    assert float(half[0]) == pytest.approx(float(one[0]) * (2.0 if scaled else 1.0), rel=1e-12)
