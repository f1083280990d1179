"""The softmax's exponentials as a bound on flash attention (``GPU.softmax_head_dim``).

A flash-attention forward computes one exponential a score on the special-function units
against 4 d FLOPs of its two GEMMs; the backward recomputes the probabilities, one
exponential against 10 d FLOPs. B200 and GB200 run 8,192 dense 16-bit tensor FLOPs a clock
and SM against 16 exponentials (balance at d = 8,192 / 64 = 128); H100 4,096 against 16
(d = 64); Blackwell Ultra doubles the exponentials (d = 64). Below the balance head
dimension the attention kernel runs at the exponentials' pace, d* / d times the tensor
cores' time.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, system_for_gpu
from gpuscale.catalog.schema import GPU, Model
from gpuscale.perf.comm import Fabric
from gpuscale.perf.kernels import FLASH_BWD_FACTOR, attention_core_s
from gpuscale.perf.plan import Workload

CAL = default_calibration()


def _model(head_dim: int) -> Model:
    """Eight heads of ``head_dim`` (a 512-wide core at d = 64), no window."""
    return Model.model_validate(
        {
            "name": f"heads of {head_dim}",
            "source": "test",
            "layers": 2,
            "hidden": 512,
            "heads": 8,
            "head_dim": head_dim,
            "ffn_hidden": 1024,
            "vocab": 1000,
        }
    )


def _core(gpu: GPU, head_dim: int) -> tuple[float, float]:
    """Forward and backward seconds of one layer's attention core, one sequence of 4,096."""
    s = system_for_gpu(gpu)
    w = Workload(_model(head_dim), gpu, s, Fabric.from_system(s, 8), 8, 4096, 8, "bf16")
    one = np.array([1.0])
    fwd, bwd = attention_core_s(w, one, np.array([4096.0]), one, gpu.peak_flops("bf16"), 1.0, CAL)
    return float(fwd[0]), float(bwd[0])


def _unbound(gpu: GPU) -> GPU:
    return gpu.model_copy(update={"softmax_head_dim": None})


def test_catalog_balance_head_dims() -> None:
    # tensor FLOPs a clock and SM / (4 x exponentials a clock and SM)
    assert get_gpu("b200").softmax_head_dim == 8192 / (4 * 16) == 128
    assert get_gpu("gb200").softmax_head_dim == 128
    assert get_gpu("b300").softmax_head_dim == get_gpu("gb300").softmax_head_dim == 64
    assert get_gpu("h100-sxm").softmax_head_dim == 4096 / (4 * 16) == 64


@pytest.mark.parametrize(
    ("head_dim", "fwd_x", "bwd_x"),
    [
        (128, 1.0, 1.0),  # at the balance: the tensor cores' pace
        (64, 2.0, 1.0),  # forward 128 / 64; backward 0.4 x 128 / 64 = 0.8, not bound
        (32, 4.0, 1.6),  # forward 128 / 32; backward 0.4 x 128 / 32
    ],
)
def test_b200_forward_waits_on_exponentials_below_head_dim_128(
    head_dim: int, fwd_x: float, bwd_x: float
) -> None:
    b200 = get_gpu("b200")
    fwd, bwd = _core(b200, head_dim)
    fwd0, bwd0 = _core(_unbound(b200), head_dim)
    assert fwd == pytest.approx(fwd_x * fwd0, rel=1e-12)
    assert bwd == pytest.approx(bwd_x * bwd0, rel=1e-12)
    assert bwd0 == pytest.approx(FLASH_BWD_FACTOR * fwd0, rel=1e-12)


def test_hopper_and_blackwell_ultra_unbound_at_head_dim_64() -> None:
    for key in ("h100-sxm", "gb300"):
        gpu = get_gpu(key)
        assert _core(gpu, 64) == pytest.approx(_core(_unbound(gpu), 64), rel=1e-12)


def test_gpt_oss_heads_cost_more_on_gb200_than_gb300_beyond_attention_rel() -> None:
    # the same tensor-core peak (2.5 PF): GB300 is 1.35 x faster at any head dimension
    # (attention_rel) and, at d = 64, GB200's forward is also twice its tensor-core time
    f200, b200 = _core(get_gpu("gb200"), 64)
    f300, b300 = _core(get_gpu("gb300"), 64)
    rel = get_gpu("gb300").attention_rel
    assert f200 / f300 == pytest.approx(2.0 * rel, rel=1e-9)
    assert b200 / b300 == pytest.approx(rel, rel=1e-9)
    assert get_gpu("gb200").peak_flops("bf16") == get_gpu("gb300").peak_flops("bf16")


def test_estimate_notes_the_softmax_bound() -> None:
    from gpuscale.perf.training_notes import softmax_notes

    def work(gpu: str, head_dim: int, attention: str = "fused") -> Workload:
        g = get_gpu(gpu)
        s = system_for_gpu(g)
        w = Workload(_model(head_dim), g, s, Fabric.from_system(s, 8), 8, 4096, 8, "bf16")
        return w if attention == "fused" else replace(w, attention=attention)

    (note,) = softmax_notes(work("gb200", 64))
    assert "heads of 64 are below the gb200's softmax balance of 128" in note
    assert "2.0 x its tensor-core time)" in note  # the backward, 0.8 x, not bound
    (note,) = softmax_notes(work("b200", 32))
    assert "4.0 x its tensor-core time, the backward 1.6 x)" in note
    assert softmax_notes(work("gb200", 128)) == []  # at the balance
    assert softmax_notes(work("gb300", 64)) == []  # Blackwell Ultra balances at 64
    assert softmax_notes(work("a100-sxm-80gb", 64)) == []  # no bound in the catalog
    assert softmax_notes(work("gb200", 64, "unfused")) == []  # not a flash kernel


def test_serving_prefill_attention_at_the_exponentials_pace() -> None:
    from gpuscale.perf.inference import build_step_model
    from gpuscale.perf.kv import precision_plan

    gb200 = get_gpu("gb200")
    m = _model(64)
    bound = build_step_model(m, gb200, precision_plan(gb200, "bf16"), 1, 1, CAL)
    free = build_step_model(m, _unbound(gb200), precision_plan(gb200, "bf16"), 1, 1, CAL)
    assert bound.attn_rate_flops == pytest.approx(free.attn_rate_flops / 2.0, rel=1e-12)
    assert free.attn_rate_flops == pytest.approx(2.5e15 * CAL.inf_attn_eff, rel=1e-12)
