"""Partial recomputation fills memory exactly; GEMM waves quantise over the SMs.

Partial recomputation is Megatron's ``--recompute-method block --recompute-num-layers N``:
the fraction of layers recomputed is the least that fits, so the plan's memory equals the
GPU's capacity and its step time lies between no and full recomputation.
Wave quantisation: a GEMM whose output has T tiles runs ceil(T / SMs) waves; 109 tiles on
108 SMs take two waves, so the second wave runs one tile and efficiency is 109 / 216.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.perf.comm import Fabric
from gpuscale.perf.kernels import gemm_s
from gpuscale.perf.plan import Plans, Workload
from gpuscale.perf.training import estimate

CAL = default_calibration()


def _workload() -> Workload:
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    return Workload(get_model("llama3-70b"), g, s, Fabric.from_system(s, 64), 64, 8192, 128)


def test_partial_recompute_fills_memory_between_none_and_full() -> None:
    w = _workload()
    base = {"tp": 8, "pp": 1, "dp": 8, "mbs": 1, "sp": True, "sharding": 1}
    e = estimate(w, Plans.of(recompute=[0, 3, 2], **base), CAL)
    none_fits, partial_fits, full_fits = e.memory.fits
    assert not none_fits and full_fits  # the case partial recomputation is for
    frac = float(e.memory.recompute_fraction[1])
    assert 0.0 < frac < 1.0
    assert partial_fits
    assert float(e.memory.total[1]) == pytest.approx(w.gpu.memory_bytes, rel=1e-9)
    steps = e.step_s
    assert steps[0] < steps[1] < steps[2]
    # recompute time is that fraction of full recomputation's
    rc = e.step.recompute_s
    assert float(rc[1]) == pytest.approx(frac * float(rc[2]), rel=1e-9)


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200", "b200", "gb200", "gb300", "mi300x"])
@pytest.mark.parametrize("mbs", [1, 2, 4])
def test_a_partial_plan_always_fits(gpu: str, mbs: int) -> None:
    # the fraction is solved so the total equals the capacity: rounding must not reject it
    g = get_gpu(gpu)
    s = system_for_gpu(g)
    w = Workload(get_model("llama3-70b"), g, s, Fabric.from_system(s, 64), 64, 8192, 256, "fp8")
    e = estimate(w, Plans.of(recompute=[3], tp=1, pp=1, dp=64, mbs=mbs, sharding=4), CAL)
    frac = float(e.memory.recompute_fraction[0])
    total = float(e.memory.total[0])
    if 0.0 < frac < 1.0:
        assert bool(e.memory.fits[0])
        assert total == pytest.approx(g.memory_bytes, rel=1e-9)
    elif frac == 0.0:  # fits without recomputing anything: nothing is recomputed
        none = estimate(w, Plans.of(recompute=[0], tp=1, pp=1, dp=64, mbs=mbs, sharding=4), CAL)
        assert bool(e.memory.fits[0]) and total <= g.memory_bytes
        assert total == pytest.approx(float(none.memory.total[0]), rel=1e-12)
    else:  # even full recomputation is needed: the plan is full recomputation
        assert frac == 1.0
        full = estimate(w, Plans.of(recompute=[2], tp=1, pp=1, dp=64, mbs=mbs, sharding=4), CAL)
        assert total == pytest.approx(float(full.memory.total[0]), rel=1e-12)
        assert bool(e.memory.fits[0]) == bool(full.memory.fits[0])


def test_wave_quantisation_of_a_gemm() -> None:
    cal = CAL.replace(gemm_tile=128.0, gemm_eff_max=1.0, gemm_half_dim=0.0)
    peak, sms = 1e15, 108
    k = 4096.0
    # 108 tiles: one full wave at peak
    one_wave = gemm_s(128.0 * 108, 128.0, k, 1.0, peak, sms, cal)
    assert float(one_wave) == pytest.approx(2 * 128 * 108 * 128 * k / peak, rel=1e-12)
    # 109 tiles: two waves, efficiency 109 / 216
    two_waves = gemm_s(128.0 * 109, 128.0, k, 1.0, peak, sms, cal)
    flops = 2 * 128 * 109 * 128 * k
    assert float(two_waves) == pytest.approx(flops / (peak * 109 / 216), rel=1e-12)
    # grouped GEMMs share the waves: 2 experts x 54 tiles fill one wave exactly
    grouped = gemm_s(128.0 * 54, 128.0, k, 2.0, peak, sms, cal)
    assert float(grouped) == pytest.approx(float(one_wave), rel=1e-12)
    assert np.isfinite(float(grouped))
