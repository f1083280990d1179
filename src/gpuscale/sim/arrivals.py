"""Request streams for the serving simulator: arrival times and prompt/output lengths.

Open-loop Poisson arrivals at a rate, an offline batch all queued at t = 0, or a closed
loop of a fixed number of users (each completion sends the next request), each checked
against the limits one simulation runs (request count, rate) before any array is built.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from gpuscale.errors import InputError

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

MAX_REQUESTS = 1_000_000
"""Most requests one simulation runs, and the largest closed-loop concurrency. Time and
memory grow with the count (a million requests: a few seconds, a few hundred MB); a stable
p99 needs a few thousand, and serving benchmarks send hundreds to thousands."""
MAX_QPS = 1e7
"""Largest request rate, req/s (ten million): far above any one LLM service's traffic.
`infer size` also refuses a rate whose deployment would pass ``perf.plan.MAX_GPUS``."""


@dataclass(frozen=True)
class Workload:
    """Requests: arrival times (s, sorted; ``inf`` = released by a completion) and lengths."""

    arrival_s: FloatArray
    input_len: IntArray
    output_len: IntArray
    closed_loop: bool = False
    """Fixed concurrency: each completion releases the next request at that instant."""

    @property
    def n(self) -> int:
        return int(self.arrival_s.shape[0])


def _lengths(n: int, length: int | IntArray, field: str) -> IntArray:
    arr = np.broadcast_to(np.asarray(length, dtype=np.int64), (n,)).copy()
    if arr.size and int(arr.min()) < 1:
        raise InputError(field, int(arr.min()), "a positive number of tokens")
    return arr


def check_requests(field: str, n: int) -> None:
    """A request count or concurrency from 1 to :data:`MAX_REQUESTS` (checked before any
    array of ``n`` requests is allocated)."""
    if not 1 <= n <= MAX_REQUESTS:
        raise InputError(field, n, f"a positive integer up to {MAX_REQUESTS:,}")


def check_qps(qps: float) -> None:
    """A request rate above 0 and at most :data:`MAX_QPS` req/s."""
    if not 0 < qps <= MAX_QPS:
        raise InputError("qps", qps, f"a positive request rate up to {MAX_QPS:,.0f} req/s")


def poisson(
    n: int, qps: float, input_len: int | IntArray, output_len: int | IntArray, seed: int = 0
) -> Workload:
    """``n`` requests arriving as a Poisson process of rate ``qps``."""
    check_requests("requests", n)
    check_qps(qps)
    rng = np.random.default_rng(seed)
    arr = np.cumsum(rng.exponential(1.0 / qps, n))
    return Workload(arr, _lengths(n, input_len, "input-len"), _lengths(n, output_len, "output-len"))


def offline(n: int, input_len: int | IntArray, output_len: int | IntArray) -> Workload:
    """``n`` requests all queued at t = 0 (max-throughput benchmark)."""
    check_requests("offline", n)
    return Workload(
        np.zeros(n), _lengths(n, input_len, "input-len"), _lengths(n, output_len, "output-len")
    )


def concurrency(
    n: int, users: int, input_len: int | IntArray, output_len: int | IntArray
) -> Workload:
    """Closed loop: ``users`` requests in flight; each completion sends the next one."""
    check_requests("concurrency", users)
    check_requests("requests", n)
    arr = np.full(n, np.inf)
    arr[: min(users, n)] = 0.0
    return Workload(
        arr,
        _lengths(n, input_len, "input-len"),
        _lengths(n, output_len, "output-len"),
        closed_loop=True,
    )
