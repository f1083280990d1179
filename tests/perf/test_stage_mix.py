"""The kinds of layers each pipeline stage holds (perf/stage_kinds.py) and the parameters
and memory of the fullest, hand-computed.

DeepSeek-V3 (no MTP depth): 61 layers, the first 3 dense (SwiGLU MLP of 18,432), the other
58 MoE (256 routed experts and 1 shared, each a SwiGLU MLP of 2,048); hidden 7,168; MLA
with q_lora_rank 1,536, kv_lora_rank 512, 128 heads of 128 + 64 (rope) for queries and keys
and 128 for values; vocabulary 129,280, embeddings untied. Per layer:
  MLA: 7168 x 1536 (q_a) + 1536 x 128 x 192 (q_b) + 7168 x (512 + 64) (kv_a)
       + 512 x 128 x (128 + 128) (kv_b) + 128 x 128 x 7168 (o) + 1536 + 512 (q_a, kv_a norms)
     = 187,107,328
  dense MLP: 3 x 7168 x 18432 = 396,361,728; an expert: 3 x 7168 x 2048 = 44,040,192
  router: 256 x 7168 = 1,835,008; the layer's two norms: 2 x 7168
Under TP1 PP16 EP128 (even split, ceil(61 / 16) = 4 layers a stage), stage 0 holds layers
0-3: the 3 dense layers and 1 MoE layer, whose GPU keeps the shared expert and 256 / 128 = 2
routed ones; and the input embedding, 129,280 x 7,168. Averaging the layers' kinds instead
(3 of 61 dense) gives it 2,263 M parameters, 25 % short.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.catalog.schema import Model
from gpuscale.perf.comm import Fabric
from gpuscale.perf.memory import memory_breakdown
from gpuscale.perf.plan import PP_SPLITS, SHARDING, Plans, Workload
from gpuscale.perf.stage_kinds import AVERAGE, layer_kinds, stage_candidates
from gpuscale.perf.stage_params import candidate_params, heaviest_stage_params

MLA = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168 + 2048
DENSE_MLP = 3 * 7168 * 18432
EXPERT = 3 * 7168 * 2048
ROUTER = 256 * 7168
NORMS = 2 * 7168
EMBEDDING = 129280 * 7168


def first(x: object) -> float:
    return float(np.asarray(x).ravel()[0])


def deepseek(gpus: int = 2048) -> Workload:
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    d = get_model("deepseek-v3").model_dump()
    m = Model(**{**d, "mtp_layers": 0, "mtp_weight_sets": None})
    return Workload(m, g, s, Fabric.from_system(s, gpus), gpus, 4096, 15360)


def test_layer_kinds() -> None:
    assert MLA == 187_107_328
    assert layer_kinds(deepseek()) == "---" + "E" * 58
    w = deepseek()
    maverick = replace(w, model=get_model("llama4-maverick"))
    # Hugging Face: layer i is MoE where (i + 1) % interleave_moe_layer_step == 0
    assert layer_kinds(maverick) == "-E" * 24


def test_stage_mixes_of_deepseek_v3() -> None:
    w = deepseek()
    c0, c_last, *middle = stage_candidates(w, Plans.of(pp=16, dp=128, ep=128))
    # stage 0: 3 dense of its 4 layers against 3 of 61; 1 MoE of 4 against 58 of 61
    assert first(c0.rank) == 0 and first(c_last.rank) == 15
    assert first(c0.mix.mlp) == pytest.approx((3 / 4) / (3 / 61), rel=1e-12)
    assert first(c0.mix.moe) == pytest.approx((1 / 4) / (58 / 61), rel=1e-12)
    assert first(c0.mix.attn) == 1.0
    # stages 1-15 hold MoE layers only: the earliest, with the most in flight, is priced
    assert [first(c.rank) for c in middle] == [1]
    assert first(middle[0].mix.moe) == pytest.approx(61 / 58, rel=1e-12)
    assert first(middle[0].mix.mlp) == 0.0
    # account split over 9 stages: 63 places, 7 a stage; stage 0 the embedding and layers
    # 0-5, 3 dense and 3 MoE
    acc = stage_candidates(w, Plans.of(pp=9, dp=227, ep=1, split=PP_SPLITS.index("account")))
    assert first(acc[0].mix.mlp) == pytest.approx((3 / 6) / (3 / 61), rel=1e-12)
    assert first(acc[0].mix.moe) == pytest.approx((3 / 6) / (58 / 61), rel=1e-12)
    # no pipeline: the model's average
    assert all(c.mix.moe == 1.0 for c in stage_candidates(w, Plans.of(dp=2048, ep=128)))


def test_llama4_maverick_alternates_its_stages() -> None:
    # 48 layers, dense and MoE in turn; PP16, 3 a stage: stage 0 "-E-", stage 1 "E-E"
    w = replace(deepseek(), model=get_model("llama4-maverick"))
    c0, _, *middle = stage_candidates(w, Plans.of(pp=16, dp=128, ep=8))
    assert first(c0.mix.moe) == pytest.approx((1 / 3) / (24 / 48), rel=1e-12)
    assert [first(c.rank) for c in middle] == [1]
    assert first(middle[0].mix.moe) == pytest.approx((2 / 3) / (24 / 48), rel=1e-12)


def test_a_model_of_one_kind_of_layer_keeps_the_average() -> None:
    w = replace(deepseek(), model=get_model("llama3-70b"))
    cands = stage_candidates(w, Plans.of(pp=8, dp=256))
    assert [c.mix for c in cands] == [AVERAGE, AVERAGE]
    assert [first(c.rank) for c in cands] == [0, 7]


def test_first_stage_weights_hold_the_dense_layers() -> None:
    w = deepseek()
    p = Plans.of(pp=16, dp=128, ep=128, sharding=SHARDING.index("zero1"))
    dense, expert, _ = candidate_params(w, p, stage_candidates(w, p)[0])
    dense_layer = MLA + DENSE_MLP + NORMS
    moe_layer = MLA + NORMS + ROUTER + EXPERT + 2 * EXPERT  # shared + 256 / 128 routed
    # the final norm (7,168) is counted half on each end stage, with the embeddings
    params = 3 * dense_layer + moe_layer + EMBEDDING + 7168 // 2  # 2,996 M
    assert first(dense + expert) == pytest.approx(params, rel=1e-12)


def test_memory_is_that_of_the_fullest_stage() -> None:
    # 120 micro-batches (15,360 / 128): stage 0 holds 16 in flight, stage 1 15; stage 1's
    # four MoE layers keep more activations than stage 0's three dense and one MoE, and its
    # weights are what the model reports: 4 x (MLA + norms + router + shared and 256 / 64
    # routed experts), 16-bit, no embedding
    w = deepseek(gpus=2048)
    p = Plans.of(pp=16, dp=128, ep=64, sharding=SHARDING.index("zero1"))
    mem = memory_breakdown(w, p, default_calibration())
    stage1 = 4 * (MLA + NORMS + ROUTER + EXPERT + 4 * EXPERT)
    assert first(mem.weights) == pytest.approx(2.0 * stage1, rel=1e-12)
    dense, expert, _ = candidate_params(w, p, stage_candidates(w, p)[0])
    assert first(dense + expert) > 1.5 * stage1  # stage 0 holds more parameters, fewer bytes
    # data-parallel gradients: the stage with the most parameters
    d, e = heaviest_stage_params(w, p)
    assert first(d + e) == pytest.approx(first(dense + expert), rel=1e-12)


def test_data_parallel_time_is_the_slowest_stages() -> None:
    # DeepSeek-V3, TP1 PP2 DP512 EP64 on 1,024 H100: the step's DP communication and
    # optimizer are those of the stage whose reduction takes longest, which need not be
    # the one with the most parameters
    from gpuscale.perf.data_parallel import StageWork, _stage_dp_s, data_parallel_s

    w = deepseek(gpus=1024)
    p = Plans.of(pp=2, dp=512, ep=64, mbs=4, sharding=SHARDING.index("dist-opt"))
    args = (np.ones(1), np.ones(1), np.array([7.5]), np.array([31.0]), np.zeros(1))
    dp, opt = data_parallel_s(w, p, default_calibration(), *args)
    per_stage = [
        _stage_dp_s(w, p, default_calibration(), StageWork(*args), *candidate_params(w, p, c)[:2])
        for c in stage_candidates(w, p)
    ]
    assert len(per_stage) >= 2
    slowest = max(per_stage, key=lambda t: first(t[0] + t[1]))
    assert (first(dp), first(opt)) == (first(slowest[0]), first(slowest[1]))
