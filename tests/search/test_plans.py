"""Parallelism plan search: ranked plans are valid and fit, the best is fastest, fixed
knobs are honoured, ``explain`` names the runner-up."""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import replace

import numpy as np
import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.errors import InputError
from gpuscale.export.megatron import megatron_args
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import PP_SPLITS, RECOMPUTE, SHARDING, Plans, Workload
from gpuscale.perf.step import step_breakdown
from gpuscale.perf.training import estimate
from gpuscale.perf.validity import validity
from gpuscale.search.explain import explain
from gpuscale.search.plans import SearchResult, enumerate_plans, search_plans
from gpuscale.units import fmt_time

CAL = default_calibration()


def workload(
    model: str, gpu: str, gpus: int, seq: int, gbs: int, precision: str = "bf16"
) -> Workload:
    g = get_gpu(gpu)
    s = system_for_gpu(g)
    return Workload(get_model(model), g, s, Fabric.from_system(s, gpus), gpus, seq, gbs, precision)


@pytest.fixture(scope="module")
def gpt3() -> tuple[Workload, SearchResult]:
    w = workload("gpt3-175b", "a100-sxm-80gb", 1024, 2048, 1536)
    return w, search_plans(w, CAL)


@pytest.fixture(scope="module")
def mtnlg() -> tuple[Workload, SearchResult]:
    # Smith et al. 2022 (arXiv 2201.11990): global batch 1920 -> 2520 sequences of 2048
    w = workload("mt-nlg-530b", "a100-sxm-80gb", 5128, 2048, 2520)
    return w, search_plans(w, CAL)


def test_every_ranked_plan_is_valid_and_fits(gpt3: tuple[Workload, SearchResult]) -> None:
    w, r = gpt3
    e = r.estimate
    assert len(r.order) > 0
    ok, _ = validity(w, e.plans)
    assert ok[r.order].all()
    assert e.memory.fits[r.order].all()
    # a partial-recompute plan fills memory exactly, to rounding
    assert (e.memory.total[r.order] <= w.gpu.memory_bytes * (1 + 1e-9)).all()
    used = e.plans.gpus_used()[r.order]
    assert (used <= w.num_gpus).all() and (used >= 1).all()
    # global batch = dp x mbs x micro-batches, exactly
    dp, mbs = e.plans.dp[r.order], e.plans.mbs[r.order]
    assert (w.global_batch % (dp * mbs) == 0).all()
    # the ranking holds every fitting plan and nothing else
    assert set(r.order.tolist()) == set(np.flatnonzero(e.memory.fits).tolist())


def test_best_is_fastest_fitting_plan(gpt3: tuple[Workload, SearchResult]) -> None:
    _, r = gpt3
    e = r.estimate
    fits = e.memory.fits
    assert float(e.step_s[r.best]) == float(e.step_s[fits].min())
    # fastest first; within a microsecond, the plan with less memory (to a kilobyte) first
    steps = np.round(e.step_s[r.order], 6)
    assert (np.diff(steps) >= 0).all()
    tie = np.diff(steps) == 0
    assert (np.diff(np.round(e.memory.total[r.order], -3))[tie] >= 0).all()
    # the best plan re-estimated on its own gives the same step time (no chunking effects)
    alone = estimate(r.estimate.workload, e.plans.take(np.array([r.best])), CAL)
    assert float(alone.step_s[0]) == pytest.approx(float(e.step_s[r.best]), rel=1e-12)


def test_best_beats_every_full_machine_plan_on_a_hand_grid() -> None:
    # Exhaustive check on a small workload: build every plan that uses all 64 GPUs over
    # TP x PP x micro-batch x recompute x sharding x SP by hand, and verify that none that
    # fits is faster than the search's best.
    w = workload("llama3-8b", "h100-sxm", 64, 4096, 256)
    r = search_plans(w, CAL)
    rows = []
    for tp, pp, mbs, rc, sh, sp in itertools.product(
        [1, 2, 4, 8],
        [1, 2, 4, 8],
        [1, 2, 4],
        range(len(RECOMPUTE)),
        range(len(SHARDING)),
        [False, True],
    ):
        if sp and tp == 1:
            continue
        dp = 64 // (tp * pp)
        if 256 % (dp * mbs):
            continue
        rows.append((tp, pp, dp, mbs, rc, sh, sp))
    a = np.array(rows)
    grid = Plans.of(
        tp=a[:, 0],
        pp=a[:, 1],
        dp=a[:, 2],
        mbs=a[:, 3],
        recompute=a[:, 4],
        sharding=a[:, 5],
        sp=a[:, 6].astype(bool),
    )
    ok, _ = validity(w, grid)
    e = estimate(w, grid.take(ok), CAL)
    fastest = float(e.step_s[e.memory.fits].min())
    assert float(r.estimate.step_s[r.best]) <= fastest * (1 + 1e-12)


def test_fixed_knobs_are_honoured() -> None:
    w = workload("gpt3-175b", "a100-sxm-80gb", 1024, 2048, 1536)
    fixed = {
        "tp": 8,
        "pp": 8,
        "mbs": 1,
        "recompute": RECOMPUTE.index("selective"),
        "sharding": SHARDING.index("dist-opt"),
        "sp": True,
    }
    r = search_plans(w, CAL, fixed)
    p = r.estimate.plans
    assert len(p) > 0
    assert (p.tp == 8).all() and (p.pp == 8).all() and (p.mbs == 1).all()
    assert (p.recompute == 1).all() and (p.sharding == 1).all() and p.sp.all()
    row = p.row(r.best)
    assert (row["tp"], row["pp"], row["mbs"], row["recompute"], row["sharding"]) == (
        8,
        8,
        1,
        "selective",
        "dist-opt",
    )


def test_fixed_dp_and_vpp_are_honoured() -> None:
    w = workload("gpt3-175b", "a100-sxm-80gb", 1024, 2048, 1536)
    r = search_plans(w, CAL, {"dp": 16, "vpp": 2})
    p = r.estimate.plans
    assert (p.dp == 16).all() and (p.vpp == 2).all()
    assert (p.pp > 1).all()  # interleaving needs a pipeline


def test_mt_nlg_search_uses_at_most_5128_gpus(mtnlg: tuple[Workload, SearchResult]) -> None:
    _, r = mtnlg
    e = r.estimate
    used = int(e.plans.gpus_used()[r.best])
    # 5,128 = 2^3 x 641 has no useful factorisation: the best plan leaves GPUs idle
    assert 0 < used <= 5128
    assert (e.plans.gpus_used()[r.order] <= 5128).all()
    row = e.plans.row(r.best)
    assert 2520 % (row["dp"] * row["mbs"]) == 0
    assert 0.0 < float(e.mfu[r.best]) < 1.0


def test_explain_names_best_and_runner_up(mtnlg: tuple[Workload, SearchResult]) -> None:
    _, r = mtnlg
    e = r.estimate
    ru = r.runner_up()
    assert ru is not None and ru != r.best
    # the runner-up differs in its parallel layout, not only in a switch
    key = ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs")
    assert any(getattr(e.plans, k)[ru] != getattr(e.plans, k)[r.best] for k in key)
    assert float(e.step_s[ru]) >= float(e.step_s[r.best])
    text = explain(r)
    assert e.plans.label(r.best) in text
    rank = int(np.flatnonzero(r.order == ru)[0]) + 1
    assert f"fastest plan with another parallel layout, {e.plans.label(ru)} (#{rank})" in text
    # the gain and the memory clause are the two plans' own figures
    # the runner-up's step over the best's, less one (the search table's "vs #1")
    gain = (float(e.step_s[ru]) / float(e.step_s[r.best]) - 1) * 100
    assert f"is {gain:.1f}% faster per step" in text
    net = (float(e.step_s[ru]) - float(e.step_s[r.best])) * 1e3
    assert f"(net {net:.1f} ms a step" in text
    # the named savings, less the named costs, plus the terms too small to name: the net
    saves, _, costs = text.partition(" costs ")
    named = sum(map(float, re.findall(r"([\d.]+) ms of", saves.split("(net")[0])))
    named -= sum(map(float, re.findall(r"([\d.]+) ms of", costs.split("(net")[0])))
    small = re.search(r", ([-+][\d.]+) ms of it from terms not itemised\)", text)
    assert named + (float(small.group(1)) if small else 0.0) == pytest.approx(net, abs=0.5)
    gib_b, gib_r = (float(e.memory.total[i]) / 2**30 for i in (r.best, ru))
    if f"{gib_b:.1f}" == f"{gib_r:.1f}":
        assert f"both use {gib_b:.1f} GiB" in text
    else:
        assert f"({gib_b:.1f} vs {gib_r:.1f} GiB)" in text
    # each verb once: "saves a, b and c", "costs d"
    assert text.count("saves") <= 1 and text.count("costs") <= 1


def test_a_long_steps_gain_names_the_terms_that_make_it() -> None:
    # a 186 s step won by 1.19 s: 987 ms less recomputation and 160 ms less bubble (a
    # tenth of the net or more) are both named, though the bubble is under 0.1 % of the step
    from gpuscale.search.explain import _itemised, least_itemised

    least = least_itemised(186.0, 1.187)
    assert least == pytest.approx(0.1187)
    diffs = [("recompute_s", 0.987), ("bubble_s", 0.1605), ("overhead_s", 0.02)]
    assert [k for k, _ in _itemised(diffs, 1.187, least)] == ["recompute_s", "bubble_s"]
    # a short step keeps the per-mille floor; a tie, the hundred-thousandth
    assert least_itemised(2.0, 0.5) == pytest.approx(2e-3)
    assert least_itemised(2.0, 0.0) == pytest.approx(2e-5)


def test_itemised_terms_leave_out_no_more_than_a_quarter_of_the_net() -> None:
    from gpuscale.search.explain import _itemised

    # Llama 3 405B on 16,384 H100 (ms): PP16 saves DP communication against PP8 and costs
    # compute, bubble, TP communication, fixed overhead and memory-bound kernels
    diffs = [("dp", 319.7), ("compute", -151.0), ("bubble", -30.3), ("tp", -16.3)]
    diffs += [("overhead", -15.7), ("memory", -11.9), ("pp", 0.1)]
    net = sum(d for _k, d in diffs)  # 94.6
    got = [k for k, _d in _itemised(diffs, net, 0.05)]
    # a tenth of the largest (32 ms) names two; the next three are named while those left
    # out would add up to more than 23.65 ms (a quarter of the net): -74.1, -43.8, -27.5
    assert got == ["dp", "compute", "bubble", "tp", "overhead"]
    assert abs(net - sum(d for k, d in diffs if k in got)) <= 0.25 * net
    # every term at least a tenth of the largest is named, whatever the remainder
    wide = [("a", 100.0), ("b", -60.0), ("c", 12.0), ("d", 1.0)]
    assert [k for k, _d in _itemised(wide, 53.0, 0.05)] == ["a", "b", "c"]
    # none under the floor, even when the remainder is large
    assert _itemised([("a", 10.0), ("b", -9.0), ("c", 0.04)], 0.96, 0.05) == [
        ("a", 10.0),
        ("b", -9.0),
    ]


@pytest.mark.parametrize(
    ("items", "text"),
    [(["a"], "a"), (["a", "b"], "a and b"), (["a", "b", "c"], "a, b and c")],
)
def test_terms_are_listed_as_a_sentence(items: list[str], text: str) -> None:
    from gpuscale.search.explain import _listed

    assert _listed(items) == text


def test_explain_with_a_single_fitting_plan() -> None:
    w = workload("gpt3-175b", "a100-sxm-80gb", 1024, 2048, 1536)
    fixed = {
        "tp": 8,
        "pp": 8,
        "dp": 16,
        "vpp": 1,
        "cp": 1,
        "mbs": 1,
        "recompute": 1,
        "sharding": 1,
        "sp": True,
        "tp_overlap": False,
    }
    r = search_plans(w, CAL, fixed)
    assert len(r.order) == 1
    assert explain(r) == f"{r.estimate.plans.label(r.best)} is the only plan that fits."


def test_explain_with_the_layout_fixed_compares_the_next_plan_and_says_so() -> None:
    # the layout fixed, only the switches (sharding, recompute) differ between plans
    w = workload("gpt3-175b", "a100-sxm-80gb", 1024, 2048, 1536)
    fixed = {"tp": 8, "pp": 8, "dp": 16, "vpp": 1, "cp": 1, "mbs": 1}
    r = search_plans(w, CAL, fixed)
    ru = r.runner_up()
    assert ru == int(r.order[1])
    label = r.estimate.plans.label(ru)
    assert f"than the next plan, {label} (#2), of the same layout (no other is ranked)" in (
        explain(r)
    )


def test_an_uneven_even_split_is_priced_as_its_layout() -> None:
    # Llama 3 70B's 80 layers on PP3: 27, 27 and 26 beside the output layer (2 x 128,256 x
    # 8,192 = 2.1 GFLOP a token, 1.2 layers' forward FLOPs, but no layer's fixed costs and
    # TP communication: the 27-layer stages are slower in time and set the pace), the
    # layout the exported --decoder-last-pipeline-num-layers 26 runs; the balanced split
    # places the same layers, so it prices the same step, and a search trying both ranks
    # the layout once
    w = workload("llama3-70b", "h100-sxm", 384, 8192, 384)
    plan = {"tp": 8, "pp": 3, "dp": 16, "mbs": 1, "sp": True, "sharding": 1}
    even = estimate(w, Plans.of(**plan), CAL)
    st = even.plan_stages(0)
    assert (float(st.fullest[0]), float(st.last[0]), float(st.head[0])) == (27.0, 26.0, 0.0)
    balanced = estimate(w, Plans.of(**plan, split=PP_SPLITS.index("balanced")), CAL)
    assert float(balanced.step_s[0]) == float(even.step_s[0])
    args = megatron_args(even, 0).args
    assert args[args.index("--decoder-last-pipeline-num-layers") + 1] == "26"
    both = search_plans(
        replace(w, pp_split="balanced"), CAL, {"tp": 8, "pp": 3, "vpp": 1, "mbs": 1, "cp": 1}
    )
    p = both.estimate.plans
    layouts = {(int(p.dp[i]), int(p.recompute[i]), int(p.sharding[i]), bool(p.sp[i]),
                bool(p.tp_overlap[i])) for i in range(len(p))}  # fmt: skip
    assert len(layouts) == len(p)  # no plan twice under two names
    assert "faster than the same plan placed evenly" not in explain(both)


def test_exact_gpus_keeps_full_machine_plans() -> None:
    w = workload("gpt3-175b", "a100-sxm-80gb", 1024, 2048, 1536)
    r = search_plans(w, CAL, exact_gpus=True)
    assert (r.estimate.plans.gpus_used() == 1024).all()


def test_nothing_fits_is_an_input_error() -> None:
    w = workload("llama3-405b", "a100-sxm-40gb", 8, 8192, 8)
    with pytest.raises(InputError) as exc:
        search_plans(w, CAL)
    # the GPU count is what to change (or the GPU), not the model
    assert exc.value.field == "gpus" and exc.value.value == 8
    assert "short by" in exc.value.valid and "GiB" in exc.value.valid


def test_unsatisfiable_fixed_knobs_are_an_input_error() -> None:
    w = workload("gpt3-175b", "a100-sxm-80gb", 1024, 2048, 1536)
    with pytest.raises(InputError) as exc:
        search_plans(w, CAL, {"tp": 5})  # 5 does not divide the 96 heads
    assert exc.value.field == "plan"
    assert "tp=5" in str(exc.value)
    assert "heads (96) not divisible by tp" in str(exc.value)  # the rule it breaks


def test_a_dense_model_with_expert_parallelism_says_so() -> None:
    w = workload("gpt3-175b", "a100-sxm-80gb", 1024, 2048, 1536)
    with pytest.raises(InputError) as exc:
        search_plans(w, CAL, {"ep": 2})
    assert "ep > 1 on a dense model" in str(exc.value)
    assert "layers" not in str(exc.value)  # not the generic list of what must divide


def test_tp_groups_stay_inside_the_scale_up_domain() -> None:
    # OPT-175B has 96 heads: TP 3 and 6 divide them but not an 8-GPU node; on an NVL72
    # rack they divide the 72-GPU NVLink domain
    w = workload("opt-175b", "a100-sxm-80gb", 64, 2048, 64)
    tps = set(search_plans(w, CAL, require_fit=False).estimate.plans.tp.tolist())
    assert tps == {1, 2, 4, 8}
    w = workload("opt-175b", "gb200", 72, 2048, 72)
    tps = set(search_plans(w, CAL, require_fit=False).estimate.plans.tp.tolist())
    assert {3, 6, 12, 24} <= tps


def test_fixed_partial_recompute_that_needs_no_recompute_still_ranks() -> None:
    # Llama 3 8B on 64 H100s fits without recomputation: partial recomputes no layer, the
    # same plan as none; with the mode fixed to partial it must still be ranked, not dropped
    w = workload("llama3-8b", "h100-sxm", 64, 2048, 64)
    r = search_plans(w, CAL, {"recompute": RECOMPUTE.index("partial")})
    assert len(r.order) > 0
    e = r.estimate
    assert (e.plans.recompute[r.order] == RECOMPUTE.index("partial")).all()
    assert float(e.memory.recompute_fraction[r.best]) == 0.0


def test_weak_scaling_batch_stays_near_proportional() -> None:
    from gpuscale.search.scaling import weak_batch

    assert weak_batch(1024, 8, 1024) == 8  # whole: exactly proportional
    assert weak_batch(512, 8, 16) == 256
    # 512 x 8 / 12 = 341.3: a multiple of 64 (a quarter of 256), not the power of two 256
    assert weak_batch(512, 8, 12) == 320
    for batch, n, total in ((512, 8, 12), (512, 64, 100), (2520, 8, 5128), (7, 2, 8)):
        exact = batch * n / total
        assert abs(weak_batch(batch, n, total) - exact) <= exact / 8 + 0.5


def test_pipeline_degrees_include_uneven_powers_of_two() -> None:
    # DeepSeek-V3's 61 layers: divisors of 61 and 63 give PP 1, 3, 7, 9, 21, 61 only;
    # DeepSeek trained on PP16 (uneven stages), so the powers of two are searched too
    w = workload("deepseek-v3", "h800", 2048, 4096, 1920, "fp8")
    plans = enumerate_plans(w, {"tp": 1, "cp": 1, "ep": 64, "mbs": 1, "recompute": 0})
    pps = set(np.unique(plans.pp).tolist())
    assert {2, 4, 8, 16, 32}.issubset(pps) and {3, 7, 9, 21}.issubset(pps)
    # the fullest of 16 stages holds ceil(61 / 16) = 4 layers
    assert Plans.of(pp=16).stage_layers(61)[0] == 4.0


def test_a_gpu_count_with_an_odd_factor_is_filled_by_a_pipeline_of_that_degree() -> None:
    # 24 GPUs (three 8-GPU nodes), a batch of 512: every data-parallel degree is a power of
    # two, so only a model-parallel group of 3 (or 6, 12, 24) GPUs fills the machine. Llama
    # 3 8B's 32 layers (34 with the embedding and loss) divide by none of 3, 6, 12, 24 and
    # 8 heads by no multiple of 3: PP3 (11-11-10 layers) is the only way to use all 24, and
    # it beats the best 16-GPU plan
    w = workload("llama3-8b", "h100-sxm", 24, 4096, 512)
    res = search_plans(w, CAL)
    pe, b = res.estimate.plans, res.best
    assert int(pe.pp[b]) % 3 == 0
    assert int(pe.tp[b] * pe.pp[b] * pe.dp[b] * pe.cp[b]) == 24
    pps = set(np.unique(enumerate_plans(w, {}).pp).tolist())
    assert {3, 6, 12, 24}.issubset(pps)


def test_uneven_interleaving_prices_the_layout_it_exports() -> None:
    # Llama 3 70B on PP8 x VPP3: 80 layers on 24 chunks, ceil(80 / 24) = 4 on the first 8
    # and 3 on the other 16 (8 x 4 + 16 x 3 = 80), chunk k on stage k mod 8: every stage
    # holds 4 + 3 + 3 = 10 layers, as on PP8 x VPP2 (5 + 5), and is priced so
    w = workload("llama3-70b", "h100-sxm", 64, 8192, 64)
    p = Plans.of(tp=8, pp=8, dp=1, vpp=3, mbs=1, sp=True, sharding=1)
    assert p.stage_layers(80)[0] == 10.0
    e = estimate(w, p, CAL)
    assert not any("upper bound" in n for n in e.notes(0))
    args = " ".join(megatron_args(e, 0).args)
    layout = "E" + "tttt|" * 8 + "ttt|" * 15 + "tttL"
    assert f"--pipeline-model-parallel-layout {layout}" in args
    even = estimate(w, Plans.of(tp=8, pp=8, dp=1, vpp=2, mbs=1, sp=True, sharding=1), CAL)
    assert float(e.memory.weights[0]) == float(even.memory.weights[0])
    # 94 layers on PP8 x VPP4 (chunks 3 x 30, 2 x 2): 12 on stages 0-5, 11 on 6 and 7
    four = estimate(workload("qwen3-235b-a22b", "h100-sxm", 256, 4096, 256), Plans.of(
        tp=2, pp=8, dp=16, vpp=4, ep=32, mbs=1, sp=True, sharding=1), CAL)  # fmt: skip
    assert float(four.plan_stages(0).fullest[0]) == 12.0
    assert float(four.plan_stages(0).last[0]) == 11.0
    assert any("12 on the fullest stage (4 chunks of 3), 11 and" in n for n in four.notes(0))


def test_partial_recompute_says_how_much_it_recomputes() -> None:
    w = workload("llama3-405b", "h100-sxm", 16384, 8192, 2048)
    p = Plans.of(tp=8, pp=16, dp=128, mbs=1, sp=True, recompute=RECOMPUTE.index("partial"))
    e = estimate(w, p, CAL)
    frac = float(e.memory.recompute_fraction[0])
    assert 0.0 < frac < 1.0 and bool(e.memory.fits[0])
    # the least recomputation that fits: the memory is full
    assert float(e.memory.total[0]) == pytest.approx(e.memory.capacity, rel=1e-6)
    note = next(n for n in e.notes(0) if n.startswith("partial recompute"))
    assert (
        f"{100 * frac:.0f} % of the layers" in note and f"~{frac * 8:.1f} of the stage's 8" in note
    )
    # Megatron recomputes whole layers: the count to set, rounded up
    assert f"--recompute-num-layers {math.ceil(frac * 8)} (" in note
    assert e.summary(0)["recompute_fraction"] == frac


def test_partial_recompute_names_layers_per_virtual_chunk() -> None:
    # 80 layers on PP4 x VPP5: chunks of 4 layers; Megatron counts recomputed layers per chunk
    w = workload("llama3-70b", "h100-sxm", 1024, 8192, 1024)
    p = Plans.of(tp=4, pp=4, vpp=5, dp=64, mbs=1, sp=True, tp_overlap=True, sharding=1, recompute=3)
    e = estimate(w, p, CAL)
    frac = float(e.memory.recompute_fraction[0])
    assert 0.0 < frac < 1.0
    note = next(n for n in e.notes(0) if n.startswith("partial recompute"))
    whole = math.ceil(frac * 4)
    assert f"--recompute-num-layers {whole} of each 4-layer chunk" in note
    # what those whole layers cost: the same plan with whole / 4 of its layers recomputed,
    # dearer than the fraction priced and cheaper than recomputing all
    at = float(step_breakdown(w, p, CAL, np.array([whole / 4])).step_s[0])
    knobs = {"tp": 4, "pp": 4, "vpp": 5, "dp": 64, "mbs": 1, "sp": True, "tp_overlap": True}
    full = estimate(w, Plans.of(**knobs, sharding=1, recompute=2), CAL)
    assert at < float(full.step_s[0])
    assert float(e.step_s[0]) < at
    more = 100 * (at / float(e.step_s[0]) - 1)
    assert f"priced: a step of {fmt_time(at)}, {more:.1f} % longer)" in note


@pytest.mark.parametrize(
    ("seq", "plan", "rule"),
    [
        # causal CP splits the sequence into 2 x cp load-balanced chunks
        (8200, {"cp": 8, "dp": 8}, "not divisible by 2 x cp"),
        (8192, {"cp": 8, "dp": 8}, None),
        # Megatron overlaps TP collectives only under sequence parallelism
        (8192, {"tp": 8, "dp": 8, "tp_overlap": True}, "tp communication overlap needs"),
        (8192, {"tp": 8, "dp": 8, "tp_overlap": True, "sp": True}, None),
        # userbuffers / symmetric memory reach the GPUs of one scale-up domain (8 on HGX)
        (8192, {"tp": 16, "dp": 4, "tp_overlap": True, "sp": True}, "at most 8"),
        (8192, {"tp": 16, "dp": 4, "sp": True}, None),
    ],
)
def test_context_parallel_chunks_and_tp_overlap_rules(
    seq: int, plan: dict[str, object], rule: str | None
) -> None:
    w = workload("llama3-8b", "h100-sxm", 64, seq, 64)
    p = Plans.of(**{"mbs": 1, **plan})
    ok, rules = validity(w, p)
    broken = [why for mask, why in rules if not mask[0]]
    if rule is None:
        assert bool(ok[0]) and not broken
    else:
        assert not bool(ok[0]) and any(rule in why for why in broken)


def test_a_plan_leaving_gpus_idle_says_so() -> None:
    w = workload("gpt3-175b", "a100-sxm-80gb", 1000, 2048, 1536)
    e = estimate(w, Plans.of(tp=8, pp=8, dp=12, mbs=1, sp=True), CAL)  # 768 of 1000
    assert any(n.startswith("the plan uses 768 of the 1,000 GPUs (232 idle)") for n in e.notes(0))
    full = estimate(w, Plans.of(tp=8, pp=5, dp=24, mbs=1, sp=True), CAL)  # 960: still idle
    assert any("(40 idle)" in n for n in full.notes(0))


def test_mamba_heads_split_over_tp_and_cp() -> None:
    # Nemotron-H 8B's 128 Mamba heads: TP8 leaves 16 a rank, which CP32 cannot re-split
    # (Megatron-Core's MambaContextParallel asserts heads % (tp x cp) == 0)
    w = workload("nemotron-h-8b", "h100-sxm", 512, 524288, 2)
    ok, _ = validity(w, Plans.of(tp=[8, 4], cp=[32, 32], dp=[2, 2], mbs=1, sp=True))
    assert ok.tolist() == [False, True]


def test_partial_recompute_that_cannot_fit_says_so() -> None:
    w = workload("llama3-70b", "h100-sxm", 8, 4096, 8)
    e = estimate(w, Plans.of(tp=8, dp=1, mbs=1, sp=True, recompute=RECOMPUTE.index("partial")), CAL)
    assert not bool(e.memory.fits[0])
    assert "partial recompute: even recomputing every layer, the plan does not fit" in e.notes(0)


def test_zero2_under_a_pipeline_is_searched_only_when_asked_for() -> None:
    # with pp > 1 ZeRO-2 costs what the distributed optimizer costs: listed once, as that
    w = workload("llama3-8b", "h100-sxm", 64, 4096, 256)
    z2 = SHARDING.index("zero2")
    free = enumerate_plans(w)
    assert ((free.sharding == z2) & (free.pp == 1)).any()
    assert not ((free.sharding == z2) & (free.pp > 1)).any()
    asked = enumerate_plans(w, {"sharding": z2, "pp": 2})
    assert len(asked) > 0 and (asked.sharding == z2).all()


def test_the_explanation_names_the_costs_beside_the_saving() -> None:
    # Llama 3 70B on 1,024 H100 at 4K: the best plan wins by a net few tens of ms; every
    # term that moved by a tenth of the largest change is named, costs as well as savings
    w = workload("llama3-70b", "h100-sxm", 1024, 4096, 1024)
    res = search_plans(w, CAL)
    text = explain(res)
    e, b, r = res.estimate, res.best, res.runner_up()
    assert r is not None
    diffs = {k: float(v[r] - v[b]) for k, v in e.step.terms().items()}
    top = max(abs(d) for d in diffs.values())
    named = [k for k, d in diffs.items() if abs(d) >= 0.1 * top]
    assert len(named) >= 2
    for k in sorted(named, key=lambda k: -abs(diffs[k]))[:6]:
        assert f"{abs(diffs[k]) * 1e3:.1f} ms of " in text
    if any(d < 0 for k, d in diffs.items() if k in named):
        assert "but costs" in text


def test_one_replica_is_listed_once_not_once_per_sharding() -> None:
    # Llama 3 8B on 8 GPUs with TP8: one data-parallel replica, nothing to shard
    w = workload("llama3-8b", "h100-sxm", 8, 4096, 8)
    plans = enumerate_plans(w, {"tp": 8, "pp": 1, "mbs": 1, "recompute": 0})
    assert set(plans.sharding.tolist()) == {SHARDING.index("none")}
    # with two replicas every sharding is a plan of its own
    two = enumerate_plans(w, {"tp": 4, "pp": 1, "mbs": 1, "recompute": 0})
    assert set(two.sharding.tolist()) == set(range(len(SHARDING)))


def test_context_parallelism_costs_its_ring_merges() -> None:
    # at 8K, CP2 with micro-batch 2 does the same work per GPU as micro-batch 1 without CP
    # and its ring exchange hides behind the attention; what it adds is the ring's merges:
    # 10 bytes an element (16-bit partial read, fp32 running one read and written) of the
    # output forward and of dQ, dK and dV backward, the first step every query and the
    # second (of the causal load-balanced layout's two) half the ranks every query, half
    # the later chunk's: 1.75 steps. Llama 3 70B, TP8: a rank's output and dQ 8192 / 8 =
    # 1024 wide, its K and V one 128-wide head each.
    w = workload("llama3-70b", "h100-sxm", 1024, 8192, 1024)
    cols = {"tp": 8, "pp": 4, "sp": True, "sharding": SHARDING.index("dist-opt")}
    p = Plans.of(**cols, dp=[32, 16], cp=[1, 2], mbs=[1, 2])
    e = estimate(w, p, CAL)
    tokens = 2 * 4096
    merge_bytes = 1.75 * 10.0 * tokens * (1024 + (1024 + 2 * 128))
    per_mb = 80 / 4 * merge_bytes / (w.gpu.hbm_bw_Bps * CAL.hbm_eff)
    mb = 1024 / 32  # micro-batches a replica: 1024 / (DP32 x 1) = 1024 / (DP16 x 2)
    t = e.step.terms()
    assert float(t["compute_s"][1] - t["compute_s"][0]) == pytest.approx(mb * per_mb, rel=1e-9)
    assert float(t["cp_comm_s"][1]) == 0.0  # the K/V exchange is hidden
    assert float(e.step_s[1]) > float(e.step_s[0])
    # the search ranks the plan without CP ahead of its CP twin
    res = search_plans(w, CAL)
    rank = {int(i): n for n, i in enumerate(res.order)}
    pe = res.estimate.plans

    def index(cp: int, mbs: int) -> int:
        ok = (pe.tp == 8) & (pe.pp == 4) & (pe.cp == cp) & (pe.mbs == mbs) & (pe.vpp == 1)
        ok &= (pe.sharding == SHARDING.index("dist-opt")) & pe.sp & (pe.recompute == 0)
        return int(np.flatnonzero(ok & ~pe.tp_overlap)[0])

    assert rank[index(1, 1)] < rank[index(2, 2)]


def test_zero1_in_a_megatron_core_plan_says_what_fp32_gradients_would_add() -> None:
    # interleaving with zero1 is Megatron's distributed optimizer with bf16 gradients; its
    # default fp32 gradients double the 2-byte gradients the plan holds
    w = workload("llama3-70b", "h100-sxm", 1024, 8192, 1024)
    common = dict(tp=4, pp=4, vpp=5, dp=64, mbs=1, sp=True, tp_overlap=True, recompute=0)
    z1 = estimate(w, Plans.of(sharding=SHARDING.index("zero1"), **common), CAL)
    dist = estimate(w, Plans.of(sharding=SHARDING.index("dist-opt"), **common), CAL)
    extra = float(dist.memory.gradients[0] - z1.memory.gradients[0])
    assert extra == pytest.approx(float(z1.memory.gradients[0]), rel=1e-9)
    note = next(n for n in z1.notes(0) if n.startswith("zero1 with Megatron-Core"))
    assert f"{extra / 2**30:.2f} GiB more a GPU here" in note
    assert not any(n.startswith("zero1 with") for n in dist.notes(0))


def test_plans_that_tie_share_a_rank() -> None:
    # two plans the model cannot tell apart (here the same plan twice) share a rank, shown
    # "=1" for both; the next plan ranks 3
    w = workload("llama3-70b", "h100-sxm", 1024, 8192, 1024)
    cols = {"tp": 8, "pp": 4, "sp": True, "sharding": SHARDING.index("dist-opt")}
    e = estimate(w, Plans.of(**cols, dp=[32, 32, 16], cp=[1, 1, 2], mbs=[1, 1, 2]), CAL)
    order = np.argsort(e.step_s, kind="stable")
    assert list(order) == [0, 1, 2]
    r = SearchResult(estimate=e, order=order, evaluated=3, valid=3)
    assert r.ranks(3) == ["=1", "=1", "3"]
    assert r.ranks(1) == ["1"]  # a tie beyond the rows shown is not marked


@pytest.mark.parametrize(
    ("fixed", "close"),
    [
        # the same layout; the best recomputes only what it must, the runner-up all (10 %)
        ({"tp": 8, "pp": 16, "dp": 8, "mbs": 4}, False),
        # the same layout; no recomputation against selective (under 1 %)
        ({"tp": 8, "pp": 8, "dp": 16, "mbs": 1}, True),
    ],
)
def test_explain_says_to_measure_plans_closer_than_the_ranking_error(
    fixed: dict[str, object], close: bool
) -> None:
    from gpuscale.search.explain import TIE_GAP

    switches = {"vpp": 1, "cp": 1, "sharding": 1, "sp": False, "tp_overlap": False}
    r = search_plans(workload("gpt3-175b", "a100-sxm-80gb", 1024, 2048, 1536), CAL,
                     {**fixed, **switches})  # fmt: skip
    e, ru = r.estimate, r.runner_up()
    assert ru is not None
    gain = float(e.step_s[ru]) / float(e.step_s[r.best]) - 1
    assert (gain < TIE_GAP) is close
    text = explain(r)
    assert ("A gap under 5 % is within gpuscale's plan-ranking error" in text) is close
    assert ("measure both before committing to one." in text) is close


def test_the_search_tries_the_largest_data_parallel_degree_on_half_the_gpus() -> None:
    # TP8 CP2 PP16 (256 GPUs a replica) at a batch of 2,048 on 65,536 GPUs: DP 256 fills
    # them; DP 128 (the most that fits on 32,768) leaves half idle and is tried too, with
    # any degree the caller adds (a scaling curve's earlier best plans); DP 64 is not
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    n = 65536
    w = Workload(get_model("llama3-405b"), g, s, Fabric.from_system(s, n), n, 8192, 2048)
    fixed = {"tp": 8, "cp": 2, "pp": 16, "vpp": 8, "mbs": 1, "recompute": 0}
    dp = enumerate_plans(w, fixed).dp
    assert set(dp) == {256, 128} and (dp == 256).sum() == (dp == 128).sum()
    assert set(enumerate_plans(w, fixed, extra_dp={32, 3}).dp) == {256, 128, 32}
    best = search_plans(w, CAL, fixed)
    assert int(best.estimate.plans.dp[best.best]) == 128  # a shallower batch per replica


def test_the_plan_space_lists_each_plan_once() -> None:
    # 450 GPUs at a batch of 1,000: at TP1 the largest data-parallel degree on half the
    # GPUs (200) also lies within a factor of two of the largest on all (250)
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    w = Workload(get_model("llama3-8b"), g, s, Fabric.from_system(s, 450), 450, 8192, 1000)
    plans = enumerate_plans(w, extra_dp={200, 125})
    assert {200, 250, 125} <= set(plans.dp[plans.tp == 1])
    rows = {tuple(sorted(plans.row(i).items())) for i in range(len(plans))}
    assert len(rows) == len(plans)


def test_the_search_tries_every_interleaving_degree_that_divides_a_stage() -> None:
    # Llama 3 70B on 64 H100 at a batch of 128: PP4's 20 layers a stage interleave as 1, 2,
    # 4, 5, 10 or 20 chunks (Megatron-Bridge's recipes run 10 to 24); the best of them is
    # the search's best or ties it, and no plan train estimate takes beats the search
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    w = Workload(get_model("llama3-70b"), g, s, Fabric.from_system(s, 64), 64, 4096, 128)
    fixed = {"tp": 4, "pp": 4, "mbs": 2}
    assert set(enumerate_plans(w, fixed).vpp) == {1, 2, 4, 5, 10, 20}
    best = search_plans(w, CAL, {})
    chosen = search_plans(w, CAL, {**fixed, "vpp": 20})
    best_s = float(best.estimate.step.step_s[best.best])
    assert best_s <= float(chosen.estimate.step.step_s[chosen.best]) * (1 + 1e-12)


def test_a_fixed_shard_group_shards_every_plan_over_it() -> None:
    # FSDP over groups of 8 data-parallel ranks (HSDP), fixed: every plan it splits (more
    # than 8 ranks) carries it; fixed to 0 (all ranks), no hybrid twin is added
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    w = Workload(get_model("llama3-8b"), g, s, Fabric.from_system(s, 64), 64, 4096, 256)
    eight = enumerate_plans(w, {"sharding": 4, "shard_group": 8})
    assert ((eight.shard_group == 8) == (eight.dp * eight.cp > 8)).all()
    assert set(enumerate_plans(w, {"sharding": 4, "shard_group": 0}).shard_group) == {0}
    assert len(set(enumerate_plans(w, {"sharding": 4}).shard_group)) > 1


def test_partial_recompute_that_recomputes_nothing_says_so() -> None:
    # Llama 3 8B on 64 H100 at sequence 2,048 fits whole: nothing to recompute, no flags
    w = workload("llama3-8b", "h100-sxm", 64, 2048, 256)
    e = estimate(w, Plans.of(dp=64, recompute=RECOMPUTE.index("partial"), sharding=1), CAL)
    assert float(e.memory.recompute_fraction[0]) == 0.0
    notes = [n for n in e.notes(0) if n.startswith("partial recompute")]
    assert notes == [
        "partial recompute: the plan fits without recomputing any layer; Megatron runs it "
        "without recompute flags"
    ]
    assert "--recompute-granularity" not in megatron_args(e, 0).args
