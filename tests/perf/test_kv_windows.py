"""Serving models with windowed attention layers: GPT-OSS's sliding window of 128 tokens in
half its layers, Llama 4's chunks of 8,192 in three of four. Their KV cache, decode reads
and prompt attention are bounded by the window, as vLLM's hybrid KV cache manager and
TensorRT-LLM's per-window pools keep them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.calibrate import Calibration
from gpuscale.catalog import get_gpu, get_model
from gpuscale.errors import InputError
from gpuscale.perf.inference import StepModel, build_step_model
from gpuscale.perf.kv import kv_bytes_per_token, kv_window, precision_plan, window_share
from gpuscale.sim.serving import (
    EngineLimits,
    FixedStep,
    concurrency,
    offline,
    seq_blocks,
    simulate,
)


def _oss(window: bool = True, tokens: int = 9216) -> StepModel:
    m = get_model("gpt-oss-120b")
    if not window:
        m = m.model_copy(update={"window": 0, "window_layers": 0})
    gpu = get_gpu("h100-sxm")
    return build_step_model(m, gpu, precision_plan(gpu, "fp8"), 2, 1, Calibration(), None, tokens)


def test_window_share_and_tokens_of_catalog_models() -> None:
    assert window_share(get_model("gpt-oss-120b")) == 0.5  # 18 of 36 layers slide
    assert kv_window(get_model("gpt-oss-120b")) == 128
    assert window_share(get_model("llama4-scout")) == 0.75  # 36 of 48 layers chunked
    assert kv_window(get_model("llama4-scout")) == 8192
    assert window_share(get_model("llama3-70b")) == 0.0
    assert kv_window(get_model("llama3-70b")) == 0


def test_seq_blocks_hand_counted() -> None:
    # 9,216 tokens in blocks of 32: 288 blocks; a window of 128 covers 4 + 1 blocks;
    # half the bytes in windowed layers: 0.5 x 288 + 0.5 x 5 = 146.5 -> 147 blocks
    assert seq_blocks(9216, 32, 0.5, 128) == 147
    assert seq_blocks(9216, 32, 0.0, 128) == 288
    assert seq_blocks(9216, 32, 0.5, 0) == 288
    assert seq_blocks(100, 32, 0.5, 128) == 4  # inside the window: every block kept
    assert seq_blocks(9216, 32, 1.0, 128) == 5  # every layer windowed: fixed size


@given(
    tokens=st.integers(1, 200_000),
    block=st.sampled_from([16, 32, 64]),
    share=st.floats(0.0, 1.0),
    window=st.integers(0, 16_384),
)
def test_seq_blocks_bounds(tokens: int, block: int, share: float, window: int) -> None:
    full = math.ceil(tokens / block)
    got = seq_blocks(tokens, block, share, window)
    assert got <= full
    assert got >= math.floor((1.0 - share) * full)
    assert seq_blocks(tokens + block, block, share, window) >= got  # never shrinks


def test_gpt_oss_sequence_kv_is_its_blocks_and_twice_the_sequences_fit() -> None:
    sm = _oss()
    mem = sm.memory
    # fp8 KV at TP2: 36 layers x 2 x 4 heads x 64 x 1 B = 18 KiB a token
    assert mem.kv_bytes_per_token == 18 * 1024
    assert mem.blocks_per_seq == 147
    assert mem.kv_bytes_per_seq == 147 * 32 * 18 * 1024
    assert mem.kv_limited_seqs == mem.kv_blocks // 147
    full = _oss(window=False).memory
    assert full.blocks_per_seq == 288
    assert mem.kv_limited_seqs / full.kv_limited_seqs == pytest.approx(288 / 147, rel=0.01)


def test_decode_kv_read_is_capped_at_the_window() -> None:
    sm = _oss()
    batch, ctx = 64, 4000.0
    got = sm.breakdown(0.0, 0.0, 0, batch, batch * ctx).kv_read_s
    per_tok = kv_bytes_per_token(sm.model, 1.0, 2)
    want = per_tok * batch * (0.5 * ctx + 0.5 * 128) / sm.hbm_Bps
    assert got == pytest.approx(want, rel=1e-12)
    # within the window every layer reads the whole context
    short = sm.breakdown(0.0, 0.0, 0, batch, batch * 100.0).kv_read_s
    assert short == pytest.approx(per_tok * batch * 100.0 / sm.hbm_Bps, rel=1e-12)


def test_prompt_attention_is_capped_at_the_window() -> None:
    sm, full = _oss(), _oss(window=False)
    n = 8192
    pairs = n * (n + 1) / 2.0
    got = sm.breakdown(float(n), pairs, 1, 0, 0.0).attention_s
    want = full.breakdown(float(n), pairs, 1, 0, 0.0).attention_s
    assert got == pytest.approx(want * (0.5 + 0.5 * n * 128 / pairs), rel=1e-12)


@pytest.mark.parametrize("ctx", [50.0, 127.0, 128.0, 3000.0])
def test_decode_line_passes_through_the_step_it_starts_on(ctx: float) -> None:
    sm = _oss()
    batch = 16
    a, b = sm.decode_coeffs(batch, batch * ctx)
    assert a + b * batch * ctx == pytest.approx(sm.decode_time_s(batch, ctx), rel=1e-12)
    vec = sm.decode_time_s_vec(np.array([batch]), np.array([ctx]))
    assert float(vec[0]) == pytest.approx(sm.decode_time_s(batch, ctx), rel=1e-12)


def test_simulator_admits_a_request_only_the_window_lets_fit() -> None:
    # 200 tokens = 13 blocks of 16; half the bytes windowed to 16 tokens keep 2 blocks:
    # ceil(6.5 + 1) = 8 blocks, within a pool of 10
    windowed = EngineLimits(
        4, 1000, kv_blocks=10, block_tokens=16, window_share=0.5, window_tokens=16
    )
    res = simulate(FixedStep(0.01), windowed, offline(2, 150, 50))
    assert res.tokens_generated == 100
    with pytest.raises(InputError, match="10 blocks of 16 tokens"):
        simulate(FixedStep(0.01), EngineLimits(4, 1000, 10, 16), offline(2, 150, 50))


def test_windowed_serving_holds_more_sequences_at_once() -> None:
    # 200 in flight: the KV of 9,216-token sequences holds 130 of them without the
    # window, 254 with it
    with_w, without = _oss(), _oss(window=False)
    assert without.memory.max_seqs < 200 <= with_w.memory.max_seqs
    wl = concurrency(400, 200, 8192, 1024)
    fast = simulate(with_w, with_w.limits(), wl)
    slow = simulate(without, without.limits(), wl)
    assert slow.mean_batch <= without.memory.max_seqs
    assert fast.mean_batch > 1.3 * slow.mean_batch
    assert fast.output_tokens_per_s > 1.3 * slow.output_tokens_per_s
