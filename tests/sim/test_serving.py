"""Serving simulation: queueing-theory limits, conservation, determinism, closed-form decode."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.calibrate import Calibration
from gpuscale.catalog import get_gpu, get_model
from gpuscale.errors import InputError
from gpuscale.perf.inference import build_step_model
from gpuscale.perf.kv import precision_plan
from gpuscale.sim.arrivals import MAX_QPS, MAX_REQUESTS, Workload, concurrency, offline, poisson
from gpuscale.sim.serving import EngineLimits, FixedStep, _k_until, simulate

ONE = EngineLimits(max_batch=1, max_num_tokens=10**6, kv_blocks=10**6, block_tokens=16)


def test_md1_mean_wait() -> None:
    """Max batch 1, one fixed-length step per request: M/D/1, W = rho / (2 mu (1 - rho))."""
    s, lam = 1.0, 0.6
    res = simulate(FixedStep(s), ONE, poisson(60000, lam, 8, 1, seed=3))
    rho, mu = lam * s, 1.0 / s
    wait = res.ttft_s.mean - s  # TTFT = queueing + the one service step
    assert wait == pytest.approx(rho / (2 * mu * (1 - rho)), rel=0.05)


def test_mm1_mean_wait() -> None:
    """Geometric output lengths with short steps approximate exponential service (M/M/1):
    W = rho / (mu - lambda); Pollaczek-Khinchine gives the exact geometric value."""
    s, mean_len, lam = 0.01, 100, 0.5
    rng = np.random.default_rng(7)
    n = 40000
    out = rng.geometric(1.0 / mean_len, n)
    arr = np.cumsum(rng.exponential(1.0 / lam, n))
    wl = Workload(arr, np.full(n, 8, dtype=np.int64), out.astype(np.int64))
    res = simulate(FixedStep(s), ONE, wl)
    mu = 1.0 / (mean_len * s)
    rho = lam / mu
    wait = res.ttft_s.mean - s
    assert wait == pytest.approx(rho / (mu - lam), rel=0.08)
    p = 1.0 / mean_len
    pk = lam * s * s * (2 - p) / p**2 / (2 * (1 - rho))
    assert wait == pytest.approx(pk, rel=0.08)


@pytest.mark.parametrize(("budget", "first_iteration"), [(3000, 3), (2999, 2), (1000, 1)])
def test_whole_prompts_fill_the_token_budget(budget: int, first_iteration: int) -> None:
    """Without chunked prefill an iteration takes whole prompts while their tokens fit in
    max_num_tokens: three 1,000-token prompts share one 1 s iteration under a 3,000-token
    budget; the ones left wait for the next."""
    lim = EngineLimits(8, budget, kv_blocks=10**6, block_tokens=16, chunked_prefill=False)
    res = simulate(FixedStep(1.0), lim, offline(3, 1000, 1))
    waits = [1.0] * first_iteration + [2.0] * (3 - first_iteration)
    if first_iteration == 1:
        waits = [1.0, 2.0, 3.0]
    assert res.ttft_s.mean == pytest.approx(sum(waits) / 3)


def test_closed_form_k_matches_step_by_step() -> None:
    a, b, ctx, batch = 0.01, 1e-6, 5000.0, 32
    for horizon in (0.005, 0.05, 0.5, 3.0):
        k = _k_until(a, b, ctx, batch, horizon)
        total, j = 0.0, 0
        while total < horizon:
            total += a + b * (ctx + j * batch)
            j += 1
        assert k == max(j, 1)


def _step_model() -> object:
    m, gpu = get_model("llama3-8b"), get_gpu("h100-sxm")
    return build_step_model(
        m, gpu, precision_plan(gpu, "fp8"), 1, 1, Calibration(), tokens_per_seq=1024
    )


def test_pure_decode_run_equals_sum_of_steps() -> None:
    """Offline batch of equal requests: after the prefill step, decode time is the sum of
    the per-step times at growing context (advanced in closed form in one jump)."""
    sm = _step_model()
    n, isl, osl = 16, 100, 50
    lim = EngineLimits(64, 8192, 10**6, 16)
    res = simulate(sm, lim, offline(n, isl, osl))  # type: ignore[arg-type]
    pre = sm.step_time_s(n * isl, n * isl * (isl + 1) / 2, n, 0, 0.0)  # type: ignore[attr-defined]
    ctx = n * (isl + 1.0)
    dec = 0.0
    for _ in range(osl - 1):
        dec += sm.decode_time_s(n, ctx / n)  # type: ignore[attr-defined]
        ctx += n
    assert res.ttft_s.mean == pytest.approx(pre, rel=1e-9)
    assert res.e2e_s.mean == pytest.approx(pre + dec, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    max_batch=st.integers(1, 8),
    budget=st.integers(1, 300),
    chunked=st.booleans(),
    closed=st.booleans(),
    seed=st.integers(0, 10**6),
)
def test_conservation(
    n: int, max_batch: int, budget: int, chunked: bool, closed: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    ins = rng.integers(1, 200, n)
    outs = rng.integers(1, 60, n)
    lim = EngineLimits(max_batch, budget, kv_blocks=64, block_tokens=16, chunked_prefill=chunked)
    if closed:
        wl = concurrency(n, max(1, max_batch // 2), ins, outs)
    else:
        wl = poisson(n, 50.0, ins, outs, seed=seed)
    res = simulate(_step_model(), lim, wl)  # type: ignore[arg-type]
    assert res.requests == n
    assert res.prompt_tokens_processed == int(ins.sum())
    assert res.tokens_generated == int(outs.sum())
    assert res.ttft_s.mean > 0
    assert res.e2e_s.mean >= res.ttft_s.mean
    assert res.output_tokens_per_s * res.duration_s == pytest.approx(float(outs.sum()))


def test_deterministic_with_seed() -> None:
    sm = _step_model()
    lim = EngineLimits(32, 2048, 10**5, 16)
    a = simulate(sm, lim, poisson(500, 20.0, 300, 40, seed=11))  # type: ignore[arg-type]
    b = simulate(sm, lim, poisson(500, 20.0, 300, 40, seed=11))  # type: ignore[arg-type]
    assert a == b


def test_latency_rises_with_load() -> None:
    sm = _step_model()
    lim = EngineLimits(256, 8192, 10**5, 16)
    lo = simulate(sm, lim, poisson(1000, 2.0, 500, 100, seed=1))  # type: ignore[arg-type]
    hi = simulate(sm, lim, poisson(1000, 60.0, 500, 100, seed=1))  # type: ignore[arg-type]
    assert hi.tpot_s.mean > lo.tpot_s.mean
    assert hi.mean_batch > lo.mean_batch


def test_request_larger_than_kv_cache_is_rejected() -> None:
    lim = EngineLimits(4, 100, kv_blocks=2, block_tokens=16)
    with pytest.raises(InputError, match="KV cache"):
        simulate(FixedStep(0.01), lim, offline(3, 40, 10))


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: offline(MAX_REQUESTS + 1, 8, 8), "offline"),
        (lambda: concurrency(10, MAX_REQUESTS + 1, 8, 8), "concurrency"),
        (lambda: concurrency(MAX_REQUESTS + 1, 4, 8, 8), "requests"),
        (lambda: poisson(MAX_REQUESTS + 1, 1.0, 8, 8), "requests"),
        (lambda: poisson(10, MAX_QPS * 10, 8, 8), "qps"),
    ],
)
def test_workloads_beyond_the_bounds_are_refused_before_allocating(
    make: Callable[[], Workload], field: str
) -> None:
    with pytest.raises(InputError) as exc:
        make()
    assert exc.value.field == field and "up to" in exc.value.valid


def test_bad_rates_are_rejected() -> None:
    with pytest.raises(InputError):
        poisson(10, 0.0, 10, 10)
    with pytest.raises(InputError):
        offline(10, 0, 10)


def test_warmup_requests_are_left_out_of_the_latencies() -> None:
    # M/D/1 at rho 0.6: the first request meets an empty server (TTFT = 1 step); left out
    # with the next 1,999, the mean wait is the steady state's, the rates the whole run's
    s, lam = 1.0, 0.6
    wl = poisson(20000, lam, 8, 1, seed=3)
    whole = simulate(FixedStep(s), ONE, wl)
    late = simulate(FixedStep(s), ONE, wl, warmup=2000)
    assert late.requests_per_s == whole.requests_per_s
    assert late.ttft_s.mean - s == pytest.approx(lam * s / (2 * (1 - lam * s)), rel=0.08)
    # the first 2,000 alone: the empty start lowers their mean
    first = simulate(FixedStep(s), ONE, poisson(2000, lam, 8, 1, seed=3))
    assert first.ttft_s.mean == pytest.approx(
        (whole.ttft_s.mean * 20000 - late.ttft_s.mean * 18000) / 2000, rel=1e-9
    )
