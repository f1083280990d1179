"""Pipeline stage placement (perf/stages.py): which layers each stage holds, hand-computed.

nanotron's 1B benchmark model (Ultra-Scale Playbook): 16 layers, hidden 2048, MHA with 32
heads of 64, gated MLP 8192, vocabulary 131,072, sequence 4,096. Per token, forward:
a layer's GEMMs 2 (4 h^2 + 3 h f) = 134,217,728 FLOPs and its causal attention core
2 (s/2)(2 h) = 16,777,216, so 150,994,944; the output layer 2 V h = 536,870,912, i.e.
3.5556 layers (r).

Balanced on p stages: the last holds k layers and the output layer, the others
ceil((16 - k) / (p - 1)); k minimises max(k + r, ceil((16 - k) / (p - 1))).
  p = 2: k = 6 -> max(9.56, 10) = 10 (k = 7: max(10.56, 9) = 10.56)
  p = 4: k = 1 -> max(4.56, 5) = 5   (k = 2: max(5.56, 5) = 5.56)
  p = 8: k = 0 -> max(3.56, 3) = 3.56: the output layer alone is the slowest stage
Account (Megatron's account-for-embedding/loss split): (L + 2) / (p v) places a chunk,
the embedding one on the first stage, the loss one on the last; the fullest stage without
the output layer holds a whole stage's places in layers (with p > 2).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.catalog.schema import Model
from gpuscale.errors import InputError
from gpuscale.export.megatron import megatron_args
from gpuscale.perf.comm import Fabric
from gpuscale.perf.memory import memory_breakdown
from gpuscale.perf.plan import PP_SPLITS, Plans, Workload
from gpuscale.perf.stages import even_chunks, head_layers, pipeline_stages
from gpuscale.perf.step import step_breakdown
from gpuscale.perf.training import estimate
from gpuscale.perf.validity import check_plan, validity
from gpuscale.search.explain import explain
from gpuscale.search.plans import search_plans

R_1B = 536_870_912 / 150_994_944  # 3.5556


def nanotron_1b() -> Model:
    d = get_model("llama3-8b").model_dump()
    d.update(
        key="nanotron-1b",
        aliases=[],
        layers=16,
        hidden=2048,
        heads=32,
        kv_heads=32,
        head_dim=64,
        ffn_hidden=8192,
        dense_ffn_hidden=8192,
        vocab=131072,
    )
    return Model(**d)


def workload(model: Model, split: str, gpus: int = 8, seq: int = 4096, gbs: int = 256) -> Workload:
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    return Workload(model, g, s, Fabric.from_system(s, gpus), gpus, seq, gbs, pp_split=split)


def placed(w: Workload, **degrees: int | np.ndarray) -> Plans:
    """Plans placed as the workload asks (each plan carries its placement)."""
    return Plans.of(split=PP_SPLITS.index(w.pp_split), **degrees)


def test_output_layer_in_layers_of_the_1b_model() -> None:
    assert head_layers(workload(nanotron_1b(), "balanced")) == pytest.approx(R_1B, rel=1e-12)
    assert abs(R_1B - 3.5556) < 1e-4


@pytest.mark.parametrize(
    ("pp", "first", "last", "slowest", "head"),
    [(1, 16, 16, 16, 1), (2, 10, 6, 10, 0), (4, 5, 1, 5, 0), (8, 3, 0, 0, 1)],
)
def test_balanced_split_of_the_1b_model(
    pp: int, first: int, last: int, slowest: int, head: int
) -> None:
    w = workload(nanotron_1b(), "balanced")
    s = pipeline_stages(w, placed(w, pp=pp, dp=8 // pp))
    assert (s.fullest[0], s.last[0], s.slowest[0], s.head[0]) == (first, last, slowest, head)


@pytest.mark.parametrize(("pp", "vpp", "layers"), [(2, 1, 8), (4, 1, 4), (4, 2, 4), (8, 1, 2)])
def test_even_split_puts_the_output_layer_beside_a_full_stage(
    pp: int, vpp: int, layers: int
) -> None:
    w = workload(nanotron_1b(), "even")
    s = pipeline_stages(w, placed(w, pp=pp, vpp=vpp, dp=8 // pp))
    assert (s.fullest[0], s.last[0], s.slowest[0], s.head[0]) == (layers, layers, layers, 1)


def test_account_split_of_llama_405b_on_pp8_vpp8() -> None:
    # (126 + 2) / 64 chunks = 2 a chunk, 16 a stage: the first 15 + embedding, the last
    # 15 + loss. At sequence 8192 a layer is 2 (2 h^2 + 2 h 1024 + 3 h 53248) + 2 (s/2)
    # (2 h) = 6,643,777,536 FLOPs a token and the output layer 2 x 128256 x 16384 =
    # 4,202,692,608: 0.6326 of a layer, so a middle stage's 16 layers set the pace
    w = workload(get_model("llama3.1-405b"), "account", gpus=1024, seq=8192, gbs=512)
    assert head_layers(w) == pytest.approx(4_202_692_608 / 6_643_777_536, rel=1e-12)
    s = pipeline_stages(w, placed(w, tp=8, pp=8, vpp=8, dp=16))
    assert (s.fullest[0], s.last[0], s.slowest[0], s.head[0]) == (16, 15, 16, 0)


def test_account_split_of_bloom_on_12_stages() -> None:
    # BLOOM's 70 layers + the tied embedding at both ends: 72 / 12 = 6 a stage, the first
    # and the last 5 layers; 2 V h = 7.19 GFLOP against a layer's ~5.1: the last stage
    # (5 + 1.4) is the slowest
    w = workload(get_model("bloom-176b"), "account", gpus=384, seq=2048, gbs=2048)
    r = head_layers(w)
    assert 1.3 < r < 1.5
    s = pipeline_stages(w, placed(w, tp=4, pp=12, dp=8))
    assert (s.fullest[0], s.last[0], s.slowest[0], s.head[0]) == (6, 5, 5, 1)


def test_account_needs_layers_plus_two_to_divide_into_the_chunks() -> None:
    # Llama 3 8B: 32 + 2 = 34 places, which 4 chunks do not divide (Megatron asserts it);
    # 2 chunks (17 places each) do
    w = workload(get_model("llama3-8b"), "account")
    ok, _ = validity(w, placed(w, pp=np.array([4, 2]), dp=np.array([2, 4])))
    assert ok.tolist() == [False, True]
    with pytest.raises(InputError) as e:
        check_plan(w, placed(w, pp=4, dp=2))
    assert "pp-split" in str(e.value) and "34 places" in str(e.value)
    s = pipeline_stages(w, placed(w, pp=2, dp=4))
    assert (s.fullest[0], s.last[0]) == (16, 16)  # 17 places less the embedding, the loss


@settings(max_examples=60, deadline=None)
@given(layers=st.integers(2, 200), pp=st.integers(2, 32), vocab=st.integers(1000, 300_000))
def test_balanced_never_slower_than_even_and_places_every_layer(
    layers: int, pp: int, vocab: int
) -> None:
    pp = min(pp, layers)
    d = nanotron_1b().model_dump()
    d.update(layers=layers, vocab=vocab)
    w = workload(Model(**d), "balanced")
    r = head_layers(w)
    p = placed(w, pp=pp)
    s = pipeline_stages(w, p)
    load = float(s.slowest[0] + s.head[0] * r)
    even = float(p.stage_layers(layers)[0]) + r
    assert load <= even + 1e-9
    assert load >= (layers + r) / pp - 1e-9  # no stage below the average
    # the other stages hold the rest: at most `first` each, every layer placed
    assert (pp - 1) * float(s.fullest[0]) >= layers - float(s.last[0])
    assert float(s.last[0]) + r <= load + 1e-9 and float(s.fullest[0]) <= load + 1e-9


def test_the_step_prices_the_slowest_stage_it_is_given() -> None:
    # per micro-batch, the compute of balanced PP4's slowest stage is 5 layers (5 t_l),
    # balanced PP8's the output layer alone (t_h), even PP4's 4 layers and the output
    # layer: 4 t_l + t_h, whatever the GEMMs' efficiencies
    cal = default_calibration()
    w_bal, w_even = workload(nanotron_1b(), "balanced"), workload(nanotron_1b(), "even")

    def per_mb(w: Workload, **degrees: int) -> float:
        p = placed(w, **degrees)
        return float(step_breakdown(w, p, cal).compute_s[0] / p.microbatches(w)[0])

    t_l = per_mb(w_bal, pp=4, dp=2) / 5.0
    t_h = per_mb(w_bal, pp=8, dp=1)
    assert per_mb(w_even, pp=4, dp=2) == pytest.approx(4.0 * t_l + t_h, rel=1e-9)
    # the output layer's GEMM runs faster than a layer's smaller ones: under r layers
    assert 1.0 < t_h / t_l < R_1B
    steps = [
        float(step_breakdown(w, placed(w, pp=4, dp=2), cal).step_s[0]) for w in (w_bal, w_even)
    ]
    assert steps[0] < 0.85 * steps[1]


def test_unknown_split_names_the_field_and_the_valid_ones() -> None:
    with pytest.raises(InputError) as e:
        workload(nanotron_1b(), "uneven")
    assert "pp-split" in str(e.value) and "even, account, balanced" in str(e.value)


def test_without_a_pipeline_every_split_is_the_same_step() -> None:
    cal = default_calibration()
    steps = {
        split: float(step_breakdown(w, placed(w, tp=2, dp=4), cal).step_s[0])
        for split in ("even", "account", "balanced")
        for w in (workload(nanotron_1b(), split),)
    }
    assert len(set(steps.values())) == 1
    assert np.isfinite(list(steps.values())).all()


def test_the_search_tries_the_asked_placement_beside_the_even_split() -> None:
    # Llama 3 8B on 8 GPUs, PP4 fixed: with --pp-split balanced every pipelined plan is
    # tried evenly and balanced; the best is never slower than the even-only search's, and
    # the balanced one wins here (the 2.2-layer output layer off the last stage)
    cal = default_calibration()
    fixed = {"pp": 4, "tp": 1}
    even = search_plans(workload(get_model("llama3-8b"), "even"), cal, fixed)
    bal = search_plans(workload(get_model("llama3-8b"), "balanced"), cal, fixed)
    assert len(bal.estimate.plans) > len(even.estimate.plans)
    assert set(bal.estimate.plans.split.tolist()) == {0, PP_SPLITS.index("balanced")}
    best_even, best_bal = (float(r.estimate.step_s[r.best]) for r in (even, bal))
    assert best_bal < best_even
    assert bal.estimate.plans.row(bal.best)["pp_split"] == "balanced"
    # a fixed placement is the only one tried
    only = search_plans(workload(get_model("llama3-8b"), "balanced"), cal, {**fixed, "split": 0})
    assert set(only.estimate.plans.split.tolist()) == {0}


def test_only_placements_a_framework_runs_are_tried_and_explained() -> None:
    # balanced is priced stage by stage: no interleaving; account needs the L + 2 places to
    # divide into the chunks
    cal = default_calibration()
    w = workload(get_model("llama3-8b"), "balanced")
    with pytest.raises(InputError) as e:
        check_plan(w, placed(w, pp=4, vpp=2, dp=2))
    assert "pp-split" in str(e.value) and "vpp 1, not 2" in str(e.value)
    res = search_plans(w, cal)
    p = res.estimate.plans
    bal = p.split == PP_SPLITS.index("balanced")
    assert bal.any() and (p.vpp[bal] == 1).all() and (p.pp[bal] > 1).all()
    best = p.row(res.best)
    assert (best["pp"], best["pp_split"]) == (2, "balanced")
    # the explanation names what the placement gains over the same plan placed evenly
    twin = res.even_twin(res.best)
    assert twin is not None and p.row(twin) == {**best, "pp_split": "even"}
    gain = res.vs_best(twin) * 100.0
    assert gain > 0.0
    assert f"Its balanced layer placement makes it {gain:.1f}% faster" in explain(res)
    # Llama 3.1 405B: 128 places; its account plans are those whose chunks divide them
    # and whose stages the placement changes (pp > 2: the ends one layer short)
    w405 = workload(get_model("llama3.1-405b"), "account", gpus=512, seq=8192, gbs=512)
    acc = search_plans(w405, cal, {"tp": 8}).estimate.plans
    a = acc.split == PP_SPLITS.index("account")
    assert a.any() and (128 % (acc.pp[a] * acc.vpp[a]) == 0).all() and (acc.pp[a] > 2).all()


@given(st.integers(2, 130), st.integers(2, 16), st.integers(1, 6))
def test_even_split_prices_the_fullest_stage_of_the_chunks_it_places(
    layers: int, pp: int, vpp: int
) -> None:
    # every layer placed once, chunks within one layer of each other, and the vectorised
    # fullest stage (what the step and memory price) is the fullest of those chunks' stages
    if pp * vpp > layers:
        return
    sizes = even_chunks(layers, pp, vpp)
    assert len(sizes) == pp * vpp and sum(sizes) == layers and min(sizes) >= 1
    assert max(sizes) - min(sizes) <= (1 if vpp > 1 else max(sizes))
    stages = [sum(sizes[r::pp]) for r in range(pp)]
    assert Plans.of(pp=pp, vpp=vpp).stage_layers(layers)[0] == max(stages)
    # and no placement of the chunks' sizes does better than ceil(L / pp) on a stage
    assert max(stages) >= -(-layers // pp)
    if layers % (pp * vpp) == 0:
        assert stages == [layers // pp] * pp


def _on_h100(model: str, gpus: int, seq: int, gbs: int, split: str = "even") -> Workload:
    """``model`` on ``gpus`` H100 SXM at sequence ``seq``, ``gbs`` sequences a step."""
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    f = Fabric.from_system(s, gpus)
    return Workload(get_model(model), g, s, f, gpus, seq, gbs, pp_split=split)


def test_the_first_stage_holds_its_larger_first_chunk_through_the_warm_up() -> None:
    # Llama 3 70B on PP8: Megatron's interleaved warm-up runs 2 (p - 1) + (v - 1) p chunks
    # and the one in flight on the first stage, p of each chunk and p - 1 more of its first.
    # VPP2: chunks of 5 and 5, 8 x 10 + 7 x 5 = 115 layer-micro-batches held; VPP3: chunks
    # of 4, 3 and 3, 8 x 10 + 7 x 4 = 108 (the average chunk's 10/3 would give 103.3)
    w = _on_h100("llama3-70b", 64, 8192, 64)
    cal = default_calibration()
    acts = [
        float(
            memory_breakdown(
                w, Plans.of(tp=8, pp=8, vpp=v, mbs=1, sp=True, sharding=1), cal
            ).activations[0]
        )
        for v in (2, 3)
    ]
    assert acts[1] / acts[0] == pytest.approx(108 / 115, rel=1e-12)


def test_a_gated_deltanet_pipeline_places_whole_megatron_layers() -> None:
    # Qwen3.5-35B-A3B: 80 blocks, 40 Megatron layers (mixer + MLP each). PP3 x VPP14: 42
    # chunks, one layer on each of the first 40: 14 layers (28 blocks) on the first stage,
    # as the exported layout holds them
    w = _on_h100("qwen3.5-35b-a3b", 24, 4096, 48)
    p = Plans.of(tp=1, pp=3, vpp=14, dp=8, ep=8, mbs=2, sharding=1)
    assert float(pipeline_stages(w, p).fullest[0]) == 28.0
    e = estimate(w, p, default_calibration())
    args = megatron_args(e, 0).args
    layout = args[args.index("--pipeline-model-parallel-layout") + 1].split("|")
    assert [sum(c.count("t") for c in layout[r::3]) for r in range(3)] == [14, 13, 13]
    # pp x vpp counts Megatron layers (+ the embedding's and the loss's chunks): 42, not 82
    assert not validity(w, Plans.of(tp=1, pp=3, vpp=15, dp=8, ep=8, mbs=2))[0][0]


def test_a_balanced_hybrid_pipeline_prices_the_kinds_its_layout_holds() -> None:
    # Nemotron-H 56B (118 blocks) on PP16, balanced: the stage kinds the memory prices
    # are the layout's stages, layer for layer
    from gpuscale.perf.stage_kinds import stage_layers
    from gpuscale.perf.stages import balanced_chunks

    w = _on_h100("nemotron-h-56b", 128, 8192, 128, "balanced")
    m = w.model
    p = Plans.of(tp=8, pp=16, dp=1, mbs=1, sp=True, split=PP_SPLITS.index("balanced"))
    last = int(pipeline_stages(w, p).last[0])
    sizes = balanced_chunks(m.layers, 16, last)
    held = stage_layers(m.pattern, 16, 1, PP_SPLITS.index("balanced"), last)
    assert [len(h) for h in held] == sizes and sum(sizes) == m.layers
    assert max(sizes) - min(sizes[:-1]) <= 1


def test_a_balanced_gated_deltanet_pipeline_places_whole_layers() -> None:
    # Qwen3.8 27B: 64 Megatron layers (128 blocks) on PP4, balanced: the output layer, the
    # MTP depth and its head beside it on the last stage put 10 layers there and 18 on each
    # other stage, whole layers (36 and 20 blocks), as the exported
    # --decoder-last-pipeline-num-layers 10 runs them
    w = _on_h100("qwen3.8-27b", 32, 4096, 64, "balanced")
    p = Plans.of(tp=2, pp=4, dp=4, mbs=1, sp=True, split=PP_SPLITS.index("balanced"))
    st = pipeline_stages(w, p)
    assert (float(st.fullest[0]), float(st.last[0])) == (36.0, 20.0)
    args = megatron_args(estimate(w, p, default_calibration()), 0).args
    assert args[args.index("--decoder-last-pipeline-num-layers") + 1] == "10"


def test_the_pace_is_the_stage_whose_step_is_longer() -> None:
    # DeepSeek-V3 on TP4 PP21 EP32 with ZeRO-3: 3 layers on the fullest stages, 1 beside the
    # output layer and the MTP depth on the last. Priced on each, the step is the longer of
    # the two (its data-parallel gathers, hidden behind the stage's work, are part of it)
    from gpuscale.perf.stages import Stages
    from gpuscale.perf.step import _on_stage, full_recompute_fraction

    w = _on_h100("deepseek-v3", 1024, 4096, 1024)
    p = Plans.of(tp=4, pp=21, dp=8, ep=32, mbs=1, recompute=2, sharding=4)
    cal = default_calibration()
    st = pipeline_stages(w, p)
    assert (float(st.fullest[0]), float(st.last[0])) == (3.0, 1.0)
    frac = full_recompute_fraction(w, p, cal, None)
    one = np.ones(1)
    on_last = _on_stage(w, p, cal, Stages(st.fullest, st.last, st.last, one), frac)
    on_fullest = _on_stage(w, p, cal, Stages(st.fullest, st.last, st.fullest, 0 * one), frac)
    step = step_breakdown(w, p, cal)
    longer = max(float(on_last.step_s[0]), float(on_fullest.step_s[0]))
    assert float(step.step_s[0]) == pytest.approx(longer, rel=1e-12)
    assert step.pace is not None
    assert float(step.pace.head[0]) == float(on_last.step_s[0] > on_fullest.step_s[0])


def test_a_search_in_chunks_keeps_each_plan_s_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    # a search joins its chunks' estimates: the stages each plan is paced on join too
    import gpuscale.search.plans as search

    w = _on_h100("deepseek-v3", 256, 4096, 512)
    fixed = {"pp": 16, "ep": 16, "tp": 1, "cp": 1}
    whole = search_plans(w, default_calibration(), fixed)
    monkeypatch.setattr(search, "CHUNK", 50)
    chunked = search_plans(w, default_calibration(), fixed)
    assert whole.estimate.step.pace is not None and chunked.estimate.step.pace is not None
    assert np.array_equal(whole.estimate.step_s, chunked.estimate.step_s)
    for k in ("fullest", "last", "slowest", "head"):
        a, b = getattr(whole.estimate.step.pace, k), getattr(chunked.estimate.step.pace, k)
        assert np.array_equal(a, b)
