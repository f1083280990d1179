"""What one serving simulation reports (:func:`gpuscale.sim.serving.simulate`).

TTFT, TPOT, inter-token latency and end-to-end latency as mean, p50 and p99; output,
input and request throughput; the mean batch; and the prompt and output tokens the engine
processed. ``to_dict`` gives the ``serving`` object of ``gpuscale infer estimate --json``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuscale.sim.arrivals import FloatArray


@dataclass(frozen=True)
class Stat:
    mean: float
    p50: float
    p99: float

    def to_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "p50": self.p50, "p99": self.p99}


def _stat(x: FloatArray) -> Stat:
    if x.size == 0:
        return Stat(math.nan, math.nan, math.nan)
    p50, p99 = np.percentile(x, [50.0, 99.0])
    return Stat(float(x.mean()), float(p50), float(p99))


def _weighted_stat(values: FloatArray, weights: FloatArray) -> Stat:
    if values.size == 0 or float(weights.sum()) <= 0:
        return Stat(math.nan, math.nan, math.nan)
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    cw = np.cumsum(w) / w.sum()
    p50 = float(v[min(int(np.searchsorted(cw, 0.5)), v.size - 1)])
    p99 = float(v[min(int(np.searchsorted(cw, 0.99)), v.size - 1)])
    return Stat(float((v * w).sum() / w.sum()), p50, p99)


@dataclass(frozen=True)
class ServingResult:
    """Latency and throughput of one simulated run (seconds, tokens/s)."""

    requests: int
    duration_s: float
    ttft_s: Stat
    tpot_s: Stat
    """Per request: (last token time - first token time) / (output tokens - 1)."""
    itl_s: Stat
    """Per token gap, token-weighted over the run."""
    e2e_s: Stat
    output_tokens_per_s: float
    input_tokens_per_s: float
    requests_per_s: float
    mean_batch: float
    iterations: int
    prompt_tokens_processed: int
    """Prompt tokens the engine prefilled (conservation: the workload's input tokens)."""
    tokens_generated: int
    """Output tokens the engine emitted (conservation: the workload's output tokens)."""

    def to_dict(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "duration_s": self.duration_s,
            "ttft_s": self.ttft_s.to_dict(),
            "tpot_s": self.tpot_s.to_dict(),
            "itl_s": self.itl_s.to_dict(),
            "e2e_s": self.e2e_s.to_dict(),
            "output_tokens_per_s": self.output_tokens_per_s,
            "input_tokens_per_s": self.input_tokens_per_s,
            "requests_per_s": self.requests_per_s,
            "mean_batch": self.mean_batch,
            "iterations": self.iterations,
            "prompt_tokens_processed": self.prompt_tokens_processed,
            "tokens_generated": self.tokens_generated,
        }
