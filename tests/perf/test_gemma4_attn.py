"""Gemma 4's attention and MoE block as gpuscale prices them: K = V layers
(``Model.k_eq_v``: one K/V projection, K and V still cached apart) and the dense MLP beside
the experts of every layer (read as a shared MLP), in the weights, FLOPs, the step's QKV
GEMM, the KV cache, TP validity and the Megatron-LM notes; a model without K = V unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.catalog.schema import Model
from gpuscale.cli.train_report import model_line
from gpuscale.export.megatron import megatron_args
from gpuscale.perf.comm import Fabric
from gpuscale.perf.kv import kv_bytes_per_token, window_share
from gpuscale.perf.plan import Plans, Workload
from gpuscale.perf.step_gemms import Gemms, layer_gemms
from gpuscale.perf.training import estimate
from gpuscale.perf.transformer import forward_flops_per_token, param_count
from gpuscale.perf.validity import validity

CAL = default_calibration()
G31 = get_model("gemma4-31b")
G26 = get_model("gemma4-26b-a4b")


def _workload(m: Model, gpus: int = 8) -> Workload:
    g = get_gpu("h100")
    s = system_for_gpu(g)
    return Workload(m, g, s, Fabric.from_system(s, gpus), gpus, 4096, 64, "bf16")


def test_k_eq_v_drops_the_v_projection_of_the_full_layers() -> None:
    apart = G31.model_copy(update={"k_eq_v": False})
    # 10 full layers' v_proj, 5,376 x 4 x 512
    assert param_count(apart) - param_count(G31) == 10 * 5376 * 2048 == 110_100_480
    # and 2 FLOPs a weight per token
    gap = forward_flops_per_token(apart, 4096) - forward_flops_per_token(G31, 4096)
    assert gap == pytest.approx(2 * 110_100_480)
    # K = V in the sliding layers too (their own flag) drops theirs, 50 x 5,376 x 16 x 256
    assert G31.window_attn is not None
    shared = G31.window_attn.model_copy(update={"k_eq_v": True})
    both = G31.model_copy(update={"window_attn": shared})
    assert param_count(G31) - param_count(both) == 50 * 5376 * 4096


def test_kv_cache_keeps_k_and_v_apart() -> None:
    # K and V are normed apart (k_norm and RoPE, v_norm) and cached apart (transformers'
    # cache update, vLLM's Attention): per token, bf16, 10 full layers 2 x 4 x 512 and 50
    # sliding ones 2 x 16 x 256 elements
    assert kv_bytes_per_token(G31, 2.0) == 2 * (10 * 4096 + 50 * 8192) == 901_120
    assert kv_bytes_per_token(G31.model_copy(update={"k_eq_v": False}), 2.0) == 901_120
    # TP8: one replicated KV head of 512 in a full layer, 2 of 256 in a sliding one
    assert kv_bytes_per_token(G31, 2.0, tp=8) == 2 * (10 * 1024 + 50 * 1024) == 122_880
    assert window_share(G31) == pytest.approx(50 * 8192 / 450_560)
    # 26B-A4B: 5 full layers of 2 x 2 x 512, 25 sliding of 2 x 8 x 256
    assert kv_bytes_per_token(G26, 2.0) == 2 * (5 * 2048 + 25 * 4096) == 225_280


def test_flops_count_the_dense_mlp_beside_the_experts() -> None:
    alone = G26.model_copy(update={"shared_experts": 0, "shared_ffn_hidden": 0})
    gap = forward_flops_per_token(G26, 4096) - forward_flops_per_token(alone, 4096)
    # every token runs each layer's GeGLU MLP of 2,112: 30 x 3 x 2,816 x 2,112 weights
    assert gap == pytest.approx(2 * 30 * 3 * 2816 * 2112)
    assert param_count(G26) - param_count(alone) == 30 * 3 * 2816 * 2112


def test_the_qkv_gemm_writes_one_k_where_k_eq_v() -> None:
    p = Plans.of(tp=[1, 2, 4], pp=1, dp=1, mbs=2)
    tp = p.tp.astype(np.float64)
    tokens = p.mbs.astype(np.float64) * 4096.0
    gemms = Gemms(tokens, 700e12, 132, CAL)
    one, two = (
        layer_gemms(_workload(m), p, gemms, tp, 700e12)
        for m in (G31, G31.model_copy(update={"k_eq_v": False}))
    )
    assert np.all(one.attn < two.attn)
    assert np.array_equal(one.kv_rank, two.kv_rank)


def test_tp_splits_both_kinds_heads() -> None:
    w = _workload(G31, gpus=64)
    p = Plans.of(tp=[2, 4, 8, 16, 32, 64], pp=1, dp=[32, 16, 8, 4, 2, 1], mbs=1)
    ok, _ = validity(w, p)
    # 32 heads in both kinds; 4 and 16 KV heads replicated or split
    assert ok.tolist() == [True, True, True, True, True, False]
    ok, _ = validity(_workload(G31, gpus=48), Plans.of(tp=3, pp=1, dp=16, mbs=1))
    assert not ok[0]
    w = _workload(G26, gpus=32)
    ok, _ = validity(w, Plans.of(tp=[8, 16, 32], pp=1, dp=[4, 2, 1], mbs=1, sp=True))
    assert ok.tolist() == [True, True, False]


def test_megatron_notes_the_shared_k_and_v_and_the_model_line() -> None:
    w = _workload(G31, gpus=8)
    e = estimate(w, Plans.of(tp=8, pp=1, dp=1, mbs=1), CAL)
    assert "K and V come from one projection" in " ".join(megatron_args(e, 0).notes)
    assert model_line(G31).endswith(
        "50 layers with a 1024-token window, 16 KV heads of 256 (the others 4 of 512); "
        "K = V (one projection) in the full-attention layers"
    )


def test_a_model_without_k_eq_v_is_unchanged() -> None:
    m = get_model("gemma3-27b")
    assert not m.k_eq_v
    assert param_count(m) == 27_008_663_808
    assert forward_flops_per_token(m, 4096) == 55_114_891_264.0
    assert kv_bytes_per_token(m, 2.0) == 507_904
    with pytest.raises(ValueError, match=r"k_eq_v is a GQA layer's K/V projection"):
        Model.model_validate(
            {
                "name": "m", "source": "t", "layers": 2, "hidden": 64, "heads": 4,
                "ffn_hidden": 128, "vocab": 100, "k_eq_v": True,
                "mla": {"q_lora_rank": 0, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
                        "qk_rope_head_dim": 8, "v_head_dim": 16},
            }
        )  # fmt: skip
