"""Discrete-event simulation of one continuous-batching LLM engine (vLLM / TensorRT-LLM).

The engine runs iterations back to back. Each iteration gives one token to every decoding
sequence and spends the rest of the token budget (``max_num_tokens``) on prompt chunks of
admitted requests (chunked prefill, Sarathi-Serve / vLLM V1 style); without chunking a
prompt-carrying iteration runs whole prompts only. Requests are admitted first come first
served while the batch has a slot (``max_batch``) and the paged KV pool has the blocks for
their whole prompt + output (no eviction: TensorRT-LLM's ``GUARANTEED_NO_EVICT``).

Events: request arrivals (a sorted array, or released by completions in closed-loop
``concurrency`` mode) and sequence completions (a heap keyed by the iteration at which each
sequence emits its last token). Between two events the batch does not change, so a run of
``k`` pure-decode iterations is advanced in closed form: iteration ``j`` takes
``a(B) + b x (C + j B)`` seconds (``C`` context tokens of the ``B`` running sequences), so
``k`` of them take ``k a + b (k C + B k (k - 1) / 2)``; ``k`` is the smaller of the
iterations to the next completion and to the next admissible arrival (a quadratic root).
A model with sliding-window or chunked layers has two such lines, before and after the
mean context passes the window (those layers then read a fixed amount); each run uses the
one it starts on.

Deterministic: arrivals (:mod:`.arrivals`) come from a seeded NumPy generator; the loop
itself has no randomness.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gpuscale.errors import InputError
from gpuscale.sim.arrivals import FloatArray, Workload
from gpuscale.sim.kv_blocks import seq_blocks, window_kept
from gpuscale.sim.results import ServingResult, _stat, _weighted_stat


class StepTimer(Protocol):
    """What the simulator needs of a performance model (see
    :class:`gpuscale.perf.inference_step.StepModel`)."""

    def step_time_s(
        self,
        prefill_tokens: float,
        prefill_pairs: float,
        prefill_seqs: int,
        decode_seqs: int,
        ctx_tokens: float,
    ) -> float: ...

    def decode_coeffs(self, batch: int, ctx_tokens: float) -> tuple[float, float]: ...


@dataclass(frozen=True)
class FixedStep:
    """A step model whose every iteration takes ``step_s`` (queueing-theory checks)."""

    step_s: float

    def step_time_s(
        self,
        prefill_tokens: float,
        prefill_pairs: float,
        prefill_seqs: int,
        decode_seqs: int,
        ctx_tokens: float,
    ) -> float:
        return self.step_s

    def decode_coeffs(self, batch: int, ctx_tokens: float) -> tuple[float, float]:
        return self.step_s, 0.0


@dataclass(frozen=True)
class EngineLimits:
    max_batch: int
    max_num_tokens: int
    kv_blocks: int
    block_tokens: int
    chunked_prefill: bool = True
    window_share: float = 0.0
    """Share of the KV bytes in layers with a bounded window (sliding or chunked)."""
    window_tokens: int = 0
    """That window: tokens those layers keep per sequence once the prompt is in (0: no such
    layers). Take the limits of a step model from it (``StepModel.limits()``): the decode
    runs change line where the context passes this window."""

    def blocks_for(self, tokens: int, prompt: int) -> int:
        """Blocks a request of ``tokens`` in all reserves, its windowed layers holding
        :func:`window_kept` tokens."""
        kept = window_kept(self.window_tokens, prompt, self.max_num_tokens)
        return seq_blocks(tokens, self.block_tokens, self.window_share, kept)

    def __post_init__(self) -> None:
        for f, v in (
            ("max_batch", self.max_batch),
            ("max_num_tokens", self.max_num_tokens),
            ("kv_blocks", self.kv_blocks),
            ("block_tokens", self.block_tokens),
        ):
            if v < 1:
                raise InputError(f, v, "a positive integer")


@dataclass
class _Trace:
    arrival_s: FloatArray
    first_s: FloatArray
    done_s: FloatArray
    itl_v: array  # type: ignore[type-arg]
    itl_w: array  # type: ignore[type-arg]
    iterations: int
    batch_time: float
    tokens_prefilled: int
    tokens_generated: int


def simulate(
    step: StepTimer,
    limits: EngineLimits,
    wl: Workload,
    request_overhead_s: float = 0.0,
    warmup: int = 0,
) -> ServingResult:
    """Run the engine over the workload until every request has finished.

    ``request_overhead_s``: time between a client sending a request and the engine queueing
    it (HTTP, tokenisation, routing); it counts in TTFT and end-to-end latency. ``warmup``:
    the first requests (by arrival), left out of the latency statistics: they meet an empty
    engine, faster than the steady state a service runs in (the rates count every one).
    """
    tr = _run(step, limits, wl, request_overhead_s)
    arrival = tr.arrival_s - request_overhead_s
    out = wl.output_len.astype(np.float64)
    counted = np.ones(wl.n, dtype=bool)  # the requests the latencies are taken over
    if 0 < warmup < wl.n:
        counted[np.argsort(arrival, kind="stable")[:warmup]] = False
    ttft = (tr.first_s - arrival)[counted]
    e2e = (tr.done_s - arrival)[counted]
    multi = counted & (out > 1)
    tpot = (tr.done_s[multi] - tr.first_s[multi]) / (out[multi] - 1.0)
    start = float(arrival.min()) if wl.n else 0.0
    end = float(tr.done_s.max()) if wl.n else 0.0
    dur = max(end - start, 1e-12)
    return ServingResult(
        requests=wl.n,
        duration_s=dur,
        ttft_s=_stat(ttft),
        tpot_s=_stat(tpot),
        itl_s=_weighted_stat(
            np.frombuffer(tr.itl_v, dtype=np.float64), np.frombuffer(tr.itl_w, dtype=np.float64)
        ),
        e2e_s=_stat(e2e),
        output_tokens_per_s=float(out.sum()) / dur,
        input_tokens_per_s=float(wl.input_len.sum()) / dur,
        requests_per_s=wl.n / dur,
        mean_batch=tr.batch_time / dur,
        iterations=tr.iterations,
        prompt_tokens_processed=tr.tokens_prefilled,
        tokens_generated=tr.tokens_generated,
    )


def _k_until(a: float, b: float, c: float, batch: int, horizon: float) -> int:
    """Smallest k >= 1 with k a + b (k c + batch k (k-1)/2) >= horizon."""
    if horizon <= a + b * c:
        return 1
    qa = 0.5 * b * batch
    qb = a + b * c - qa
    if qa <= 0.0:
        return max(1, math.ceil(horizon / qb))
    k = (-qb + math.sqrt(qb * qb + 4.0 * qa * horizon)) / (2.0 * qa)
    return max(1, math.ceil(k - 1e-9))


def _blocks_needed(lim: EngineLimits, ins: list[int], outs: list[int]) -> list[int]:
    """KV blocks each request reserves at admission (its whole prompt + output); a request
    that needs more than the replica's pool could never run: an :class:`InputError`."""
    need = [lim.blocks_for(i + o, i) for i, o in zip(ins, outs, strict=True)]
    if need and max(need) > lim.kv_blocks:
        j = int(np.argmax(need))
        raise InputError(
            "input-len + output-len",
            ins[j] + outs[j],
            f"a length whose KV cache fits a replica's {lim.kv_blocks} blocks of "
            f"{lim.block_tokens} tokens (this request needs {need[j]})",
        )
    return need


def _run(step: StepTimer, lim: EngineLimits, wl: Workload, ovh: float) -> _Trace:
    """The engine's iterations over the workload (the module docstring gives the rules):
    each request's arrival (closed loop: its release), first-token and last-token times,
    the inter-token latencies with the tokens each stands for, and the totals.

    The simulator's hot loop: every iteration's work stays inline, in local variables
    (a call per iteration costs a measurable share of its time)."""
    n = wl.n
    arr = (wl.arrival_s + ovh).tolist()
    ins = wl.input_len.tolist()
    outs = wl.output_len.tolist()
    need = _blocks_needed(lim, ins, outs)
    closed = wl.closed_loop
    released = sum(1 for x in arr if x != math.inf) if closed else n
    first = [0.0] * n
    done = [0.0] * n
    itl_v: array = array("d")  # type: ignore[type-arg]
    itl_w: array = array("d")  # type: ignore[type-arg]
    step_fn: Callable[[float, float, int, int, float], float] = step.step_time_s
    coeffs: dict[tuple[int, bool], tuple[float, float]] = {}
    past = lim.window_tokens  # a sequence's context past which its windows are full
    max_batch, budget_max, chunked = lim.max_batch, lim.max_num_tokens, lim.chunked_prefill
    free = lim.kv_blocks
    t = 0.0
    i_arr = 0  # requests [0, i_arr) have arrived
    head = 0  # requests [0, head) have been admitted
    heap: list[tuple[int, int]] = []  # (iteration of the last token, request)
    nd = 0  # decoding sequences
    ctx = 0.0  # their context tokens
    pre: deque[list[int]] = deque()  # admitted, prompt unfinished: [request, tokens done]
    it = 0  # iterations run
    dit = 0  # iterations that gave every decoding sequence a token
    finished = 0
    batch_time = 0.0
    n_pre_tok = 0
    n_gen = 0
    inf = math.inf
    while finished < n:
        while i_arr < n and arr[i_arr] <= t:
            i_arr += 1
        while head < i_arr and nd + len(pre) < max_batch and need[head] <= free:
            free -= need[head]
            pre.append([head, 0])
            head += 1
        if pre:
            # an iteration that carries prompt tokens (and one token per decoding sequence)
            budget = budget_max - nd if chunked else budget_max
            p_tok = 0
            pairs = 0.0
            n_pre = 0
            completed: list[int] = []
            for entry in pre:
                r, done_tok = entry
                rem = ins[r] - done_tok
                if chunked:
                    if budget <= 0:
                        break
                    c = rem if rem < budget else budget
                else:
                    # whole prompts while their tokens fit (budget is what is left)
                    if p_tok > 0 and rem > budget:
                        break
                    c = rem
                pairs += c * done_tok + c * (c + 1) * 0.5
                p_tok += c
                budget -= c
                n_pre += 1
                entry[1] = done_tok + c
                if entry[1] >= ins[r]:
                    completed.append(r)
            dt = step_fn(
                float(p_tok), pairs, n_pre, 0 if not chunked else nd, ctx if chunked else 0.0
            )
            t += dt
            it += 1
            n_pre_tok += p_tok
            n_gen += len(completed)
            if chunked:
                dit += 1
                n_gen += nd
            if chunked and nd:
                itl_v.append(dt)
                itl_w.append(float(nd))
                ctx += nd
            batch_time += dt * (nd + n_pre)
            for _ in completed:  # prompts finish in admission order: a prefix of ``pre``
                pre.popleft()
            for r in completed:
                first[r] = t
                if outs[r] == 1:
                    done[r] = t
                    free += need[r]
                    finished += 1
                    if closed and released < n:
                        arr[released] = t + ovh
                        released += 1
                else:
                    heapq.heappush(heap, (dit + outs[r] - 1, r))
                    nd += 1
                    ctx += ins[r] + 1
        else:
            if nd == 0:
                if i_arr < n and arr[i_arr] != inf:
                    t = max(t, arr[i_arr])
                    continue
                raise RuntimeError("serving simulation stalled")  # pragma: no cover
            # pure decode: advance k iterations in closed form
            key = (nd, ctx >= nd * past)
            ab = coeffs.get(key)
            if ab is None:
                ab = step.decode_coeffs(nd, ctx)
                coeffs[key] = ab
            a, b = ab
            k = heap[0][0] - dit
            if not key[1] and past:  # the line changes where the context passes the window
                k = min(k, max(1, -(-(nd * past - int(ctx)) // nd)))
            if head < n and nd < max_batch and need[head] <= free and arr[head] != inf:
                horizon = arr[head] - t
                k = 1 if horizon <= 0.0 else min(k, _k_until(a, b, ctx, nd, horizon))
            dt = k * a + b * (k * ctx + nd * k * (k - 1) * 0.5)
            t += dt
            it += k
            dit += k
            n_gen += k * nd
            itl_v.append(dt / k)
            itl_w.append(float(k * nd))
            batch_time += dt * nd
            ctx += k * nd
        while heap and heap[0][0] <= dit:
            _, r = heapq.heappop(heap)
            done[r] = t
            free += need[r]
            nd -= 1
            ctx -= ins[r] + outs[r]
            finished += 1
            if closed and released < n:
                arr[released] = t + ovh
                released += 1
        if nd == 0:
            ctx = 0.0
    return _Trace(
        np.asarray(arr, dtype=np.float64),
        np.asarray(first),
        np.asarray(done),
        itl_v,
        itl_w,
        it,
        batch_time,
        n_pre_tok,
        n_gen,
    )
