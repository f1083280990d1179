"""Windowed layers with an attention shape of their own (``Model.window_attn``; Step 3.5's
96 query heads in its sliding layers to 64 in its full ones): each kind of layer priced with
its own heads, KV heads and head dimension in the weights, FLOPs, Megatron's count, the
step's GEMMs, attention core and activations, the KV cache, serving's pairs, TP validity
and the Megatron-LM flags' notes; a model without one unchanged.

The two-kind model below (hidden 256, 4 layers, vocabulary 1,000, gated MLP of 512): one
full-attention layer of 8 heads over 2 KV heads of 32 (q = 256, k = 64) and three sliding
layers (window 128) of 12 heads over 4 KV heads of 24 (q = 288, k = 96)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.catalog.schema import Model
from gpuscale.cli.train_report import model_line
from gpuscale.errors import InputError
from gpuscale.export.megatron import megatron_args
from gpuscale.perf.comm import Fabric
from gpuscale.perf.flop_conventions import megatron_model_flops
from gpuscale.perf.inference import build_step_model
from gpuscale.perf.kernels import attention_core_s
from gpuscale.perf.kv import kv_bytes_per_token, precision_plan, window_share
from gpuscale.perf.memory import activation_bytes_per_layer
from gpuscale.perf.plan import Plans, Workload
from gpuscale.perf.step_gemms import Gemms, layer_gemms
from gpuscale.perf.training import estimate
from gpuscale.perf.transformer import (
    forward_flops_per_token,
    mtp_forward_flops_per_token,
    mtp_param_count,
    param_count,
)
from gpuscale.perf.validity import check_plan, validity
from gpuscale.search.space import enumerate_plans

CAL = default_calibration()
BASE = {
    "name": "two kinds",
    "source": "test",
    "layers": 4,
    "hidden": 256,
    "heads": 8,
    "kv_heads": 2,
    "head_dim": 32,
    "ffn_hidden": 512,
    "gated_mlp": True,
    "vocab": 1000,
    "window": 128,
    "window_layers": 3,
}
TWO = Model.model_validate({**BASE, "window_attn": {"heads": 12, "kv_heads": 4, "head_dim": 24}})
FULL = Model.model_validate({**BASE, "window_layers": 0})
"""Every layer of the full layers' shape, none windowed."""
SLIDING = Model.model_validate(
    {**BASE, "heads": 12, "kv_heads": 4, "head_dim": 24, "window_layers": 4}
)
"""Every layer of the sliding layers' shape and windowed."""
ATTN_FULL = 256 * 256 + 2 * 256 * 64 + 256 * 256
"""Q (h x q), K and V (h x k each), output (q x h): 163,840."""
ATTN_SLIDING = 256 * 288 + 2 * 256 * 96 + 288 * 256
"""196,608."""
MLP = 3 * 256 * 512


def _workload(m: Model, gpus: int = 8) -> Workload:
    g = get_gpu("h100")
    s = system_for_gpu(g)
    return Workload(m, g, s, Fabric.from_system(s, gpus), gpus, 1024, 64, "bf16")


def test_weights_count_each_kind_with_its_heads() -> None:
    assert (ATTN_FULL, ATTN_SLIDING) == (163_840, 196_608)
    # 1 full + 3 sliding attention layers, 4 MLPs, 2 norms a layer and the final one, the
    # untied embedding and head
    hand = ATTN_FULL + 3 * ATTN_SLIDING + 4 * MLP + 4 * 2 * 256 + 256 + 2 * 1000 * 256
    assert param_count(TWO) == hand == 2_840_832
    # a head-wise gate: h x heads more in each layer, 8 in the full one, 12 in the others
    gated = TWO.model_copy(update={"head_gate": True})
    assert param_count(gated) - param_count(TWO) == 256 * 8 + 3 * 256 * 12 == 11_264


def test_flops_per_token_take_each_kinds_heads_and_keys() -> None:
    # s = 1024, causal. Projections 2 x weights: 2 x (163,840 + 3 x 196,608 + 4 x 393,216) =
    # 4,653,056. Cores 2 x keys x (qk + v): the full layer 2 x 512 x (256 + 256) = 524,288;
    # a sliding layer's queries see 128 - 128^2 / (2 x 1024) = 120 keys on average,
    # 2 x 120 x (288 + 288) = 138,240, three of them 414,720. Logits 2 x 1000 x 256 = 512,000.
    assert forward_flops_per_token(TWO, 1024) == 4_653_056 + 524_288 + 414_720 + 512_000
    # Megatron-LM's count, 12 B s h^2 [per layer + V / 2h]: the attention term
    # (1 + g/a + keys/h) q/h per kind, the full layer's (1 + 2/8 + 512/256) x 1 = 3.25, a
    # sliding one's (1 + 4/12 + 120/256) x 288/256 = 1557/768, averaged over the 4 layers
    # (2.3330078125); the gated MLP's (f/h) x 1.5 = 3 a layer; logits 1000/512
    per_layer = 4 * ((3.25 + 3 * 1557 / 768) / 4 + 3.0)
    hand = 12 * 1024 * 256**2 * (per_layer + 1000 / 512)
    assert megatron_model_flops(TWO, 1, 1024, True) == pytest.approx(hand, rel=1e-12)
    assert hand == pytest.approx(18_751_684_608, rel=1e-12)


def test_a_sliding_mtp_depth_has_the_sliding_layers_shape() -> None:
    one = TWO.model_copy(update={"mtp_layers": 1, "mtp_weight_sets": 1})
    slides = one.model_copy(update={"mtp_window": True})
    # 2h -> h projection and three norms, an attention layer and the MLP with their norms
    common = 2 * 256 * 256 + 3 * 256 + 2 * 256 + MLP
    assert mtp_param_count(one) == common + ATTN_FULL == 689_408
    assert mtp_param_count(slides) == common + ATTN_SLIDING == 722_176
    # its forward (s = 1024): 2 x (projection + blocks), the sliding core 2 x 120 x 576,
    # its logits
    blocks = 2 * 256 * 256 + ATTN_SLIDING + MLP
    assert mtp_forward_flops_per_token(slides, 1024) == 2 * blocks + 138_240 + 512_000


def test_kv_cache_keeps_each_kinds_heads() -> None:
    # bf16: the full layer 2 x 2 x 32 elements, a sliding one 2 x 4 x 24: 2 (128 + 3 x 192)
    assert kv_bytes_per_token(TWO, 2.0) == 2 * (128 + 3 * 192) == 1408
    # TP4: a rank holds one KV head of each kind: 2 (2 x 32 + 3 x 2 x 24)
    assert kv_bytes_per_token(TWO, 2.0, tp=4) == 2 * (64 + 3 * 48) == 416
    # the windowed layers' share is of the bytes (576 of 704), not of the layers (3 of 4)
    assert window_share(TWO) == pytest.approx(576 / 704)
    # PP2: the stage with the full layer holds it and one sliding layer
    assert kv_bytes_per_token(TWO, 2.0, pp=2) == 2 * (128 + 192)
    assert window_share(TWO, pp=2) == pytest.approx(192 / 320)


def test_serving_prices_each_kinds_pairs() -> None:
    g = get_gpu("h100")
    sm = build_step_model(TWO, g, precision_plan(g, "bf16"), 1, 1, CAL)
    # a pair costs 2 x heads x (qk + v) in a layer: 2 x 8 x 64 = 1,024 in the full one,
    # 2 x 12 x 48 = 1,152 in each sliding one; the sliding layers hold 3,456 of 4,480
    assert sm.attn_flops_per_pair == 1024 + 3 * 1152 == 4480
    assert sm.window_pair_share == pytest.approx(3456 / 4480)
    assert sm.window_share == pytest.approx(576 / 704)
    assert sm.kv_bytes_per_ctx_token == 1408
    # 10,000 pairs of 10 queries: the sliding layers' share capped at 10 x 128 keys
    capped = (1 - 3456 / 4480) * 10_000 + 3456 / 4480 * 1280
    assert sm._attended(10_000.0, 10.0, pairs=True) == pytest.approx(capped)


def test_training_step_averages_the_kinds() -> None:
    p = Plans.of(tp=[1, 2, 4], pp=1, dp=1, mbs=2)
    w2, wf, ws = _workload(TWO), _workload(FULL), _workload(SLIDING)
    tp = p.tp.astype(np.float64)
    s_loc, mbs = np.full(3, 1024.0), p.mbs.astype(np.float64)
    args = (mbs, s_loc, tp, 989e12, 3.35e12, CAL)
    # the attention core: a quarter of the full layer's time, three quarters a sliding one's
    f2, b2 = attention_core_s(w2, *args)
    ff, bf = attention_core_s(wf, *args)
    fs, bs = attention_core_s(ws, *args)
    assert f2 == pytest.approx(0.25 * ff + 0.75 * fs)
    assert b2 == pytest.approx(0.25 * bf + 0.75 * bs)
    # the QKV and output projections and the K/V width a rank holds, the same way
    gemms = Gemms(mbs * s_loc, 700e12, 132, CAL)
    g2, gf, gs = (layer_gemms(w, p, gemms, tp, 700e12) for w in (w2, wf, ws))
    assert g2.attn == pytest.approx(0.25 * gf.attn + 0.75 * gs.attn)
    assert g2.kv_rank == pytest.approx(0.25 * gf.kv_rank + 0.75 * gs.kv_rank)
    # activations kept per layer are linear in the widths and heads averaged over the kinds
    for recompute in (0, 1):
        q = Plans.of(tp=[1, 2, 4], pp=1, dp=1, mbs=2, recompute=recompute)
        a2 = activation_bytes_per_layer(w2, q)
        af, a_s = activation_bytes_per_layer(wf, q), activation_bytes_per_layer(ws, q)
        assert a2 == pytest.approx(0.25 * af + 0.75 * a_s)


def test_tp_must_split_both_kinds_heads() -> None:
    w = _workload(TWO)
    p = Plans.of(tp=[1, 2, 4, 8], pp=1, dp=[8, 4, 2, 1], mbs=1)
    ok, rules = validity(w, p)
    # 8 heads split over TP8, the sliding layers' 12 do not
    assert ok.tolist() == [True, True, True, False]
    broken = [why for mask, why in rules if not mask[3]]
    assert broken == ["heads (8 and 12 (windowed layers)) not divisible by tp"]
    with pytest.raises(InputError, match=r"tp=8.*8 and 12 \(windowed layers\) attention heads"):
        check_plan(w, p.take(np.array([3])))
    assert 8 not in set(enumerate_plans(w).tp.tolist())
    g = get_gpu("h100")
    with pytest.raises(InputError, match=r"tp=8.*divisor of two kinds's 8 and 12"):
        build_step_model(TWO, g, precision_plan(g, "bf16"), 8, 1, CAL)
    # the full layers' KV heads alone would allow TP8 (each replicated); kinds' KV heads that
    # and TP do not divide are a rule of their own
    odd = TWO.model_copy(update={"window_attn": TWO.window_attn.model_copy(update={"kv_heads": 3})})
    ok, rules = validity(_workload(odd), Plans.of(tp=2, pp=1, dp=4, mbs=1))
    assert not ok[0]
    assert [why for mask, why in rules if not mask[0]] == [
        "kv heads (2 and 3 (windowed layers)) and tp do not divide one another"
    ]


def test_the_shape_is_validated() -> None:
    with pytest.raises(ValueError, match=r"window_attn.kv_heads=5 must divide .*heads=12"):
        Model.model_validate({**BASE, "window_attn": {"heads": 12, "kv_heads": 5}})
    for bad in ({"window": 0, "window_layers": None}, {"layers": 8, "pattern": "*-*-*-*-"}):
        with pytest.raises(ValueError, match=r"windowed layers .* of GQA attention"):
            Model.model_validate({**BASE, **bad, "window_attn": {"heads": 12}})
    with pytest.raises(ValueError, match=r"mtp_window need"):
        Model.model_validate({**BASE, "window": 0, "window_layers": None, "mtp_window": True})
    mla = {"q_lora_rank": 0, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
           "v_head_dim": 32}  # fmt: skip
    with pytest.raises(ValueError, match=r"head_gate is a GQA layer's gate"):
        Model.model_validate({**BASE, "mla": mla, "head_gate": True})
    # sizes left out are the model's; the model's own shape is no kind of its own
    m = Model.model_validate({**BASE, "window_attn": {"heads": 16}})
    assert m.window_attn is not None and (m.window_attn.kv_heads, m.window_attn.head_dim) == (2, 32)
    assert Model.model_validate({**BASE, "window_attn": {"heads": 8}}).window_attn is None


def test_step35_flags_and_model_line() -> None:
    m = get_model("step3.5-flash")
    w = _workload(m, gpus=64)
    e = estimate(w, Plans.of(tp=2, pp=1, dp=32, ep=32, mbs=1), CAL)
    notes = megatron_args(e, 0).notes
    assert (
        "the 33 windowed layers have 96 query heads and 8 KV heads of 128 (the others 64, 8 of "
        "128): Megatron-LM has no flag for heads per layer"
    ) in " ".join(notes)
    assert "33 layers with a 512-token window and 96 query heads (the others 64), 8 KV heads" in (
        model_line(m)
    )
    # TP8 splits both kinds' heads (64 and 96)
    assert 8 in set(enumerate_plans(w).tp.tolist())


# literal values of the model before windowed layers could have a shape of their own
UNCHANGED = {
    "llama3-70b": (70_553_706_496, 144_372_137_984.0, 1_774_044_831_547_392.0, 327_680, 40_960),
    "gemma3-27b": (27_008_663_808, 55_114_891_264.0, 677_251_783_852_032.0, 507_904, 63_488),
}


@pytest.mark.parametrize("key", sorted(UNCHANGED))
def test_a_model_without_the_shape_is_priced_as_before(key: str) -> None:
    m = get_model(key)
    assert m.window_attn is None and not m.head_gate and not m.mtp_window
    params, flops, megatron, kv, kv_tp8 = UNCHANGED[key]
    assert param_count(m) == params
    assert forward_flops_per_token(m, 4096) == flops
    assert megatron_model_flops(m, 1, 4096, True) == megatron
    assert (kv_bytes_per_token(m, 2.0), kv_bytes_per_token(m, 2.0, 8)) == (kv, kv_tp8)
    assert window_share(m) == (0.8387096774193549 if key == "gemma3-27b" else 0.0)
