"""A context-parallel ring's merges of partial attention results (perf/kernels.py), by hand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.perf import kernels
from gpuscale.perf.comm import Fabric
from gpuscale.perf.kernels import RING_MERGE_BYTES, _ring_merge_s, attention_core_s
from gpuscale.perf.plan import Workload

BW = 1e12  # bytes/s: the figures below are bytes / 1e12


def _merge(model: str, seq: int, cp: float, tp: float = 1.0) -> tuple[float, float]:
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    w = Workload(get_model(model), g, s, Fabric.from_system(s, 64), 64, seq, 64, "bf16")
    one = np.array([1.0])
    fwd, bwd = _ring_merge_s(w, w.model, one, one * seq / cp, one * tp, BW)
    return float(fwd[0]), float(bwd[0])


def test_no_context_parallelism_merges_nothing() -> None:
    assert _merge("llama3-8b", 8192, 1.0) == (0.0, 0.0)


def test_mla_merges_whole_key_and_value_heads() -> None:
    # DeepSeek-V3 at CP2, 4,096 local tokens: 1.75 steps' worth; the output 128 heads x 128
    # (V) wide; backward dQ 128 x 192, dK 128 x (128 + 64), dV 128 x 128
    fwd, bwd = _merge("deepseek-v3", 8192, 2.0)
    per = RING_MERGE_BYTES * 1.75 * 4096 / BW
    assert fwd == pytest.approx(per * 128 * 128)
    assert bwd == pytest.approx(per * (128 * 192 + 128 * 192 + 128 * 128))


def test_sliding_window_layers_merge_nothing() -> None:
    # GPT-OSS 120B: 18 of its 36 attention layers windowed; the other half merge, 64 heads
    # of 64, K and V 8 heads of 64; CP4 at 8K: 2,048 local tokens, 1 + 3/4 x 3 steps
    fwd, bwd = _merge("gpt-oss-120b", 8192, 4.0)
    per = 0.5 * RING_MERGE_BYTES * 3.25 * 2048 / BW
    assert fwd == pytest.approx(per * 4096)
    assert bwd == pytest.approx(per * (4096 + 2 * 512))


def test_unfused_attention_has_no_ring_to_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    # Megatron's unfused path prices one softmax over the whole sequence: the core's time at
    # CP2 is its kernels' alone, where the fused kernel's adds the merges
    cal = default_calibration()
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    w = Workload(get_model("llama3-8b"), g, s, Fabric.from_system(s, 64), 64, 8192, 64, "bf16")
    one = np.array([1.0])
    args = (one, one * 4096, one, 1e15, BW, cal)
    merge = _ring_merge_s(w, w.model, one, one * 4096, one, BW)
    for attention, extra in (("fused", merge), ("unfused", (0.0, 0.0))):
        v = replace(w, attention=attention)
        core = attention_core_s(v, *args)
        with monkeypatch.context() as mp:  # the kernels alone: no bytes a merge
            mp.setattr(kernels, "RING_MERGE_BYTES", 0.0)
            alone = attention_core_s(v, *args)
        for k in (0, 1):
            assert float(core[k][0] - alone[k][0]) == pytest.approx(float(np.sum(extra[k])))
