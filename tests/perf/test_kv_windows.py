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
from gpuscale.perf.inference import build_step_model
from gpuscale.perf.inference_step import StepModel
from gpuscale.perf.kv import kv_bytes_per_token, kv_window, precision_plan, window_share
from gpuscale.sim.arrivals import concurrency, offline
from gpuscale.sim.kv_blocks import seq_blocks
from gpuscale.sim.serving import EngineLimits, FixedStep, simulate


def _oss(window: bool = True, tokens: int = 9216, prompt: int | None = None) -> StepModel:
    """GPT-OSS 120B on 2 H100 at FP8 with TensorRT-LLM's defaults."""
    m = get_model("gpt-oss-120b")
    if not window:
        m = m.model_copy(update={"window": 0, "window_layers": 0})
    gpu = get_gpu("h100-sxm")
    plan = precision_plan(gpu, "fp8")
    return build_step_model(m, gpu, plan, 2, 1, Calibration(), None, tokens, prompt)


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


def test_gpt_oss_sequence_reserves_its_window_and_a_prompt_chunk() -> None:
    sm = _oss()
    mem = sm.memory
    # fp8 KV at TP2: 36 layers x 2 x 4 heads x 64 x 1 B = 18 KiB a token
    assert mem.kv_bytes_per_token == 18 * 1024
    # 9,216 tokens: 288 blocks of 32 in the full layers; the sliding ones hold the window
    # and a prefill chunk of up to 8,192 tokens (TensorRT-LLM's budget): 8,320 tokens,
    # 260 + 1 blocks; 0.5 x 288 + 0.5 x 261 = 274.5 -> 275
    assert mem.blocks_per_seq == 275
    assert mem.kv_bytes_per_seq == 275 * 32 * 18 * 1024
    assert mem.kv_limited_seqs == mem.kv_blocks // 275
    assert _oss(window=False).memory.blocks_per_seq == 288
    # a short prompt and a long answer: the window saves nearly half
    long = _oss(tokens=512 + 16384, prompt=512).memory
    assert long.blocks_per_seq == math.ceil(0.5 * 528 + 0.5 * (math.ceil(640 / 32) + 1))
    assert _oss(tokens=512 + 16384).memory.blocks_per_seq == 395  # prompt not given: 8,192


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
    # 200 tokens = 13 blocks of 16; half the bytes windowed to 16 tokens, with a prompt
    # chunk of 16 (the step budget), keep 32 tokens, 3 blocks: ceil(6.5 + 1.5) = 8 of 10
    windowed = EngineLimits(
        4, 16, kv_blocks=10, block_tokens=16, window_share=0.5, window_tokens=16
    )
    assert windowed.blocks_for(200, 20) == 8
    res = simulate(FixedStep(0.01), windowed, offline(2, 20, 180))
    assert res.tokens_generated == 360
    with pytest.raises(InputError, match="10 blocks of 16 tokens"):
        simulate(FixedStep(0.01), EngineLimits(4, 16, 10, 16), offline(2, 20, 180))


def test_windowed_serving_holds_more_sequences_at_once() -> None:
    # 512-token prompts, 16,384-token answers: 70 sequences fit without the window, 136
    # with it
    with_w = _oss(tokens=512 + 16384, prompt=512)
    without = _oss(window=False, tokens=512 + 16384, prompt=512)
    assert (without.memory.max_seqs, with_w.memory.max_seqs) == (70, 136)
    wl = concurrency(200, 100, 512, 16384)
    fast = simulate(with_w, with_w.limits(), wl)
    slow = simulate(without, without.limits(), wl)
    assert slow.mean_batch <= without.memory.max_seqs
    assert fast.mean_batch > 1.3 * slow.mean_batch
    assert fast.output_tokens_per_s > 1.3 * slow.output_tokens_per_s


def test_decode_runs_switch_line_where_the_context_passes_the_window() -> None:
    # Llama 4 Scout, chunks of 8,192 in 36 of 48 layers; 2,048-token prompts decoded to
    # 16,384 tokens all at once: past 8,192 context the chunked layers stop reading more
    m, gpu = get_model("llama4-scout"), get_gpu("h200")
    cal = Calibration()
    plan = precision_plan(gpu, "fp8")
    sm = build_step_model(m, gpu, plan, 4, 1, cal, None, 2048 + 16384)
    nowin = m.model_copy(update={"window": 0, "window_layers": 0})
    full = build_step_model(nowin, gpu, plan, 4, 1, cal, None, 2048 + 16384)
    wl = offline(4, 2048, 16384)
    a = simulate(sm, sm.limits(), wl).tpot_s.mean
    b = simulate(full, full.limits(), wl).tpot_s.mean
    # the mean decode step over the run, from the step model: contexts 2,049 .. 18,431
    ctx = np.arange(2048, 2048 + 16383, dtype=np.float64)
    for got, model in ((a, sm), (b, full)):
        want = float(np.mean(model.decode_time_s_vec(np.full_like(ctx, 4), ctx)))
        assert got == pytest.approx(want, rel=0.002)
    assert a < b


def test_pipeline_stage_with_the_most_full_layers_sets_the_share() -> None:
    m = get_model("gpt-oss-120b")  # 36 layers, 18 sliding
    assert window_share(m, 1) == 0.5
    assert window_share(m, 4) == pytest.approx(4 / 9)  # 9 a stage: 5 full, 4 sliding
    assert window_share(m, 36) == 0.0  # one layer a stage: some stage holds a full one
