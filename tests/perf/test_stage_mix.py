"""The kinds of layers the first pipeline stage holds (perf/stages.py ``first_stage_mix``)
and the parameters it so holds, hand-computed.

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
from gpuscale.perf.stages import StageMix, first_stage_mix, layer_kinds

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


def test_first_stage_mix_of_deepseek_v3() -> None:
    w = deepseek()
    p = Plans.of(pp=16, dp=128, ep=128)
    mix = first_stage_mix(w, p)
    # stage 0: 3 dense of its 4 layers against 3 of 61; 1 MoE of 4 against 58 of 61
    assert first(mix.mlp) == pytest.approx((3 / 4) / (3 / 61), rel=1e-12)
    assert first(mix.moe) == pytest.approx((1 / 4) / (58 / 61), rel=1e-12)
    assert first(mix.attn) == 1.0
    # account split: 63 places over 16 stages, 4 a stage; stage 0 the embedding and layers
    # 0-2, all dense
    acc = first_stage_mix(w, Plans.of(pp=16, dp=128, ep=128, split=PP_SPLITS.index("account")))
    assert first(acc.moe) == 0.0
    # no pipeline, or a model whose layers are alike: the model's average
    assert first_stage_mix(w, Plans.of(dp=2048, ep=128)) == StageMix()


def test_first_stage_weights_hold_the_dense_layers() -> None:
    w = deepseek()
    p = Plans.of(pp=16, dp=128, ep=128, sharding=SHARDING.index("zero1"))
    mem = memory_breakdown(w, p, default_calibration())
    dense_layer = MLA + DENSE_MLP + NORMS
    moe_layer = MLA + NORMS + ROUTER + EXPERT + 2 * EXPERT  # shared + 256 / 128 routed
    # the final norm (7,168) is counted half on each end stage, with the embeddings
    params = 3 * dense_layer + moe_layer + EMBEDDING + 7168 // 2  # 2,996 M
    assert float(mem.weights[0]) == pytest.approx(2.0 * params, rel=1e-9)
