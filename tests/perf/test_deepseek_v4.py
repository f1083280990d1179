"""DeepSeek-V4's compressed hybrid attention and hyper-connections: its weights, keys per
query, indexer scoring, Megatron-Bridge's FLOP count, the training step's extra traffic
and memory, its Megatron-LM flags, the config.json keys that give it, and its serving cache
and step.

Reference counts: transformers 5.25 building DeepseekV4ForCausalLM from DeepSeek-V4-Flash's
config.json on the meta device (284,332,230,231 parameters, the MTP depth left out), and
Megatron-Bridge's FLOPs calculator (``dsv4_hybrid``), whose model TFLOP/s over the tokens/s
of its performance summary gives 90.8-91.0 GFLOP a token at 4,096 tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_runner import read_config

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.catalog.schema import Model
from gpuscale.errors import InputError
from gpuscale.export.megatron import megatron_args
from gpuscale.perf.comm import Fabric
from gpuscale.perf.flop_conventions import megatron_model_flops
from gpuscale.perf.inference import build_step_model
from gpuscale.perf.kv import kv_bytes_per_token, precision_plan, window_cache_bytes_per_seq
from gpuscale.perf.memory import activation_bytes_per_layer
from gpuscale.perf.plan import Plans, Workload
from gpuscale.perf.step_memory_bound import hyper_connection_bytes
from gpuscale.perf.training import estimate
from gpuscale.perf.transformer import (
    active_param_count,
    indexer_core_flops_per_token,
    keys_per_query,
    layer_ratios,
    layer_shapes,
    model_flops_per_token,
    mtp_param_count,
    param_count,
)

CAL = default_calibration()
RATIOS = [0, 0] + [4, 128] * 20 + [4, 0]
"""compress_ratios of DeepSeek-V4-Flash: 43 layers, then its MTP depth."""
FLASH: dict[str, Any] = {
    "model_type": "deepseek_v4",
    "hc_mult": 4,
    "head_dim": 512,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "index_head_dim": 128,
    "index_n_heads": 64,
    "index_topk": 512,
    "max_position_embeddings": 1048576,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_attention_heads": 64,
    "num_experts_per_tok": 6,
    "num_hidden_layers": 43,
    "num_hash_layers": 3,
    "num_key_value_heads": 1,
    "num_nextn_predict_layers": 1,
    "o_groups": 8,
    "o_lora_rank": 1024,
    "q_lora_rank": 1024,
    "qk_rope_head_dim": 64,
    "sliding_window": 128,
    "tie_word_embeddings": False,
    "vocab_size": 129280,
    "compress_ratios": RATIOS,
}
"""The keys of https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash config.json the reader
uses."""

# hand-computed weights of one layer (h 4096, 64 heads over one 512-wide K = V head)
ATTN = 4096 * 1024 + 1024 * 64 * 512 + 4096 * 512 + 64 * 512 * 1024 + 8 * 1024 * 4096
"""q_a (h -> 1024), q_b (1024 -> 64 x 512), the K = V projection (h -> 512), the grouped
o_a (8 groups, each 64 x 512 / 8 -> 1024) and o_b (8 x 1024 -> h)."""
NORMS = 2 * 4096 + 1024 + 512 + 64 + 2 * ((2 + 4) * 4 + 3)
"""The two block norms, the query latent's and the K = V head's norms, 64 attention sinks,
and the two hyper-connections' biases (24 each) and scales (3 each)."""
HC = 2 * (2 + 4) * 4 * 4 * 4096
"""Two hyper-connection projections from the 4 streams (4 x 4096) to 24 weights."""
MOE = 256 * 3 * 4096 * 2048 + 3 * 4096 * 2048 + 256 * 4096
"""256 routed SwiGLU experts of 2048, one shared, the router."""
CSA = 2 * 4096 * 1024 + 4 * 1024 + 512
"""A CSA layer's compressor: kv and gate projections to 2 x 512 (two overlapping series),
position bias over its 4 tokens, the entries' norm."""
HCA = 2 * 4096 * 512 + 128 * 512 + 512
INDEXER = 1024 * 64 * 128 + 4 * 4096 * 128 + 2 * 4 * 128 + 128 + 4096 * 64
"""A CSA layer's indexer: queries from the 1,024-wide latent to 64 heads of 128, its own
compressor of keys (kv and gate to 2 x 128, position bias, norm), the head weights."""
EMBEDDING = 2 * 129280 * 4096 + (4 * 4 * 4096 + 4 + 1) + 4096
"""Untied input and output embeddings, the streams' final collapse, the final norm."""


def test_parameters_are_transformers_count(tmp_path: Path) -> None:
    m = read_config(tmp_path, FLASH)
    s = layer_shapes(m)
    assert (s.attn, s.norms, s.hc, s.indexer) == (ATTN, NORMS, HC, INDEXER)
    assert layer_ratios(m) == (RATIOS[:43], [0])
    total = EMBEDDING + 43 * (ATTN + NORMS + HC + MOE) + 21 * (CSA + INDEXER) + 20 * HCA
    assert total == param_count(m) == 284_332_230_231
    # the catalog entry is the same model
    assert param_count(get_model("DeepSeekV4 Flash")) == 284_332_230_231
    # 13.8 B active: 6 of the 256 experts
    assert active_param_count(m) == total - 43 * 250 * 3 * 4096 * 2048
    # the MTP depth (ratio 0: no compressor, no indexer): projection, norms, a layer
    assert mtp_param_count(m) == 2 * 4096**2 + 3 * 4096 + ATTN + NORMS + HC + MOE


def test_layer_types_and_default_schedule_give_the_ratios(tmp_path: Path) -> None:
    kinds = {0: "sliding_attention", 4: "compressed_sparse_attention"}
    kinds[128] = "heavily_compressed_attention"
    typed = {k: v for k, v in FLASH.items() if k != "compress_ratios"}
    typed["layer_types"] = [kinds[r] for r in RATIOS[:43]]
    m = read_config(tmp_path, typed, "typed")
    assert m.compressed is not None and m.compressed.ratios == RATIOS[:43]
    # its MTP depth, without an entry, attends to its window only, as the full list has it
    assert layer_ratios(m) == (RATIOS[:43], [0])
    flash = get_model("deepseek-v4-flash")
    assert megatron_model_flops(m, 1, 4096, True) == megatron_model_flops(flash, 1, 4096, True)
    # without either, DeepseekV4Config's schedule: two HCA layers, then CSA and HCA
    bare = {k: v for k, v in FLASH.items() if k != "compress_ratios"}
    m = read_config(tmp_path, bare, "bare")
    assert m.compressed is not None
    assert m.compressed.ratios == [128, 128] + [128 if i % 2 == 0 else 4 for i in range(41)]
    assert m.sparse is not None and m.sparse.layers == 20  # the CSA layers run the indexer


def test_keys_per_query_and_indexer_scoring() -> None:
    m = get_model("deepseek-v4-flash")
    # at 4,096 tokens: the 128-token window averages 128 - 128^2 / 8192 = 126 keys; CSA adds
    # the top-512 of 1,024 entries (512 - 512^2 / 2048 = 384), HCA all 32 entries (16 on
    # average); 2 window-only, 21 CSA and 20 HCA layers
    expected = (2 * 126 + 21 * (126 + 384) + 20 * (126 + 16)) / 43
    assert keys_per_query(m, 4096) == pytest.approx(expected, rel=1e-12)
    # the indexer scores the 512 entries a query has passed on average: 64 x (128 + 1) MACs
    assert indexer_core_flops_per_token(m, 4096) == 2 * 64 * 129 * 512


def test_megatron_bridge_count_matches_its_published_figures() -> None:
    m = get_model("deepseek-v4-flash")
    per_token = megatron_model_flops(m, 1, 4096, causal=True) / 4096
    # the calculator's terms by hand: 44 layers (the MTP depth's ratio 0 last)
    proj = 1024 * (4096 + 64 * 512 + 1) + 4096 * 512 + 512 + 64 * 512 * 1024 + 8 * 1024 * 4096
    core = 3 * 64 * 128 * 512 * 2 + 20 * 64 * (128 + 16) * 512 * 2
    core += 21 * 64 * (128 + 512 * (1 - 512 * 4 / 8192)) * 512 * 2
    comp = 21 * 4096 * 1024 * 2 + 20 * 4096 * 512 * 2
    idx = 21 * (4096 * 256 * 2 + 1024 * 64 * 128 + 4096 * 64 + 64 * 128 * 1024)
    mlp = 44 * 4096 * (2048 * 6 * 3 + 2048 * 3)
    hand = 6 * (44 * proj + core + comp + idx + mlp)
    hand += 6 * (3 * 4096 + 2 * 4096**2) + 6 * 4096 * 129280 * 2
    assert per_token == pytest.approx(hand, rel=1e-12)
    assert per_token == pytest.approx(90.781e9, rel=1e-4)
    # Megatron-Bridge 26.08.01's table: 834 TFLOP/s at 9,184 tokens/s (GB300), 725 at 7,968
    for tflops, tokens in ((834, 9184), (725, 7968), (748, 8224), (706, 7776)):
        assert per_token == pytest.approx(tflops * 1e12 / tokens, rel=0.003)
    # gpuscale's own count adds the hyper-connections and follows the window's ramp
    assert model_flops_per_token(m, 4096) == pytest.approx(per_token, rel=0.002)


def _workload(m: Model, gpus: int = 128, gpu: str = "gb200") -> Workload:
    g = get_gpu(gpu)
    s = system_for_gpu(g)
    return Workload(m, g, s, Fabric.from_system(s, gpus), gpus, 4096, 2048, "bf16")


def test_hyper_connections_traffic_and_memory() -> None:
    m = get_model("deepseek-v4-flash")
    # each of the two a layer: (4 n + 2) h elements against a residual add's 3 h, 16-bit
    assert hyper_connection_bytes(m) == 2 * (4 * 4 + 2 - 3) * 4096 * 2
    plain = m.model_copy(update={"residual_streams": 1})
    assert hyper_connection_bytes(plain) == 0.0
    p = Plans.of(tp=1, pp=1, dp=128, ep=64, mbs=1)
    extra = activation_bytes_per_layer(_workload(m), p) - activation_bytes_per_layer(
        _workload(plain), p
    )
    # the two hyper-connections keep 3 more hidden widths of the streams each, 16-bit, for
    # each of the micro-batch's 4,096 tokens
    assert extra == pytest.approx(np.array([4096 * 2 * 2 * 3 * 4096.0]))


def test_every_weight_is_held_and_streams_are_kept_and_sent() -> None:
    from gpuscale.perf.stage_params import params_per_gpu

    m = get_model("deepseek-v4-flash")
    w = _workload(m, gpus=1)
    dense, expert, _ = params_per_gpu(w, Plans.of(tp=1, pp=1, dp=1, ep=1, mbs=1))
    # one GPU holds every weight: compressors, indexers and hyper-connections included
    assert dense[0] + expert[0] == param_count(m) + mtp_param_count(m)
    # full recomputation keeps each layer's input: the 4 residual streams, 16-bit
    full = activation_bytes_per_layer(w, Plans.of(tp=1, pp=1, dp=1, mbs=1, recompute=2))
    assert full[0] == 2 * 4096 * 4096 * 4


def test_megatron_flags() -> None:
    m = get_model("deepseek-v4-flash")
    e = estimate(_workload(m), Plans.of(tp=1, pp=1, dp=128, ep=64, mbs=1), CAL)
    line = " ".join(megatron_args(e, 0).args)
    ratios = "[" + ",".join(map(str, RATIOS)) + "]"
    assert (
        "--multi-latent-attention --q-lora-rank 1024 --v-head-dim 512 --o-groups 8 "
        "--o-lora-rank 1024 --experimental-attention-variant dsv4_hybrid "
        f"--csa-window-size 128 --csa-compress-ratios {ratios} --enable-hyper-connections "
        "--num-residual-streams 4 --dsa-indexer-n-heads 64 --dsa-indexer-head-dim 128 "
        "--dsa-indexer-topk 512"
    ) in line
    assert "dsa " not in line.replace("dsa-", "")


def test_bad_shapes_are_one_line_errors(tmp_path: Path) -> None:
    m = get_model("deepseek-v4-flash")
    with pytest.raises(ValueError, match="kv_heads=1"):
        Model.model_validate({**m.model_dump(), "key": "x", "kv_heads": 8})
    with pytest.raises(ValueError, match=r"compressed\.ratios has 40 entries"):
        assert m.compressed is not None
        short = {**m.compressed.model_dump(), "ratios": [0] * 40}
        Model.model_validate({**m.model_dump(), "compressed": short})
    with pytest.raises(ValueError, match=r"o_groups=7 must divide heads x head_dim = 32768"):
        assert m.compressed is not None
        odd = {**m.compressed.model_dump(), "o_groups": 7}
        Model.model_validate({**m.model_dump(), "compressed": odd})
    with pytest.raises(ValueError, match="give their indexer's sizes as sparse"):
        Model.model_validate({**m.model_dump(), "sparse": None})
    with pytest.raises(InputError) as exc:
        read_config(tmp_path, {**FLASH, "compress_ratios": [0, 4]}, "short")
    assert exc.value.field.endswith("config.json:compress_ratios")
    with pytest.raises(InputError) as exc:
        read_config(tmp_path, {**FLASH, "compress_rates": [4, 128]}, "rates")
    assert exc.value.field.endswith("config.json:compress_rates")


def test_serving_cache_and_step() -> None:
    m = get_model("deepseek-v4-flash")
    # FP8 entries of 512 per 4 tokens in 21 CSA layers and per 128 in 20 HCA layers, and the
    # CSA indexer's FP8 key of 128 with an fp32 scale per entry
    assert kv_bytes_per_token(m, 1.0) == (21 / 4 + 20 / 128) * 512 + 21 * 132 / 4
    # a fixed amount a sequence: the windows, 128 entries of 512 in each of the 43 layers,
    # and the compressors' fp32 kv and score rows of the window in progress: CSA 2 x 8 x
    # 1024 (its overlapping series) and its indexer's 2 x 8 x 256, HCA 2 x 128 x 512
    state = 21 * (2 * 8 * 1024 * 4 + 2 * 8 * 256 * 4) + 20 * 2 * 128 * 512 * 4
    assert window_cache_bytes_per_seq(m, 1.0) == 128 * 512 * 43 + state
    assert window_cache_bytes_per_seq(get_model("deepseek-v3"), 1.0) == 0.0
    gpu = get_gpu("b200")
    sm = build_step_model(m, gpu, precision_plan(gpu, "fp8"), 8, 1, CAL)
    # a query's pairs with the entries: 4 x 64 heads x 512 FLOPs an entry, split over TP8;
    # the CSA layers' share read at most the top-512 entries, 2,048 tokens' worth
    per_token = 21 / 4 + 20 / 128
    assert sm.attn_flops_per_pair == pytest.approx(4 * 64 * 512 * per_token / 8)
    assert (sm.sparse_tokens, sm.sparse_share) == (2048, pytest.approx((21 / 4) / per_token))
    # the indexer scores every entry in FP8, counted in 16-bit-equivalent FLOPs (B200's FP8
    # rate is twice its BF16 one)
    assert sm.index_flops_per_pair == pytest.approx(21 * 2 * 64 * 129 / 4 / 2)
    # each sequence's windows hold blocks back from the pool
    mem = sm.memory
    fixed = window_cache_bytes_per_seq(m, 1.0)
    seqs = int(mem.kv_pool_bytes // (mem.blocks_per_seq * mem.kv_bytes_per_token * 32 + fixed))
    assert mem.kv_limited_seqs == seqs


def test_the_estimate_says_how_it_attends() -> None:
    from gpuscale.cli.train_report import model_line

    line = model_line(get_model("deepseek-v4-flash"))
    assert (
        "attention to a 128-token window in every layer, in 21 the top 512 entries of 4 "
        "tokens an indexer of 64 x 128 picks (CSA) and in 20 every entry of 128 tokens (HCA); "
        "4 residual streams (hyper-connections)"
    ) in line
