"""Megatron-LM arguments for a priced plan (export/megatron.py), flag by flag by hand."""

from __future__ import annotations

import numpy as np
import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.catalog.schema import Model
from gpuscale.export.megatron import megatron_args
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import PP_SPLITS, RECOMPUTE, SHARDING, Plans, Workload
from gpuscale.perf.training import estimate

CAL = default_calibration()


def _args(
    model: str | Model, gpus: int, seq: int, gbs: int, precision: str = "bf16", **plan: object
) -> tuple[list[str], list[str]]:
    m = get_model(model) if isinstance(model, str) else model
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    kw = {k: plan.pop(k) for k in list(plan) if k in Workload.__dataclass_fields__}
    w = Workload(m, g, s, Fabric.from_system(s, gpus), gpus, seq, gbs, precision, **kw)
    e = estimate(w, Plans.of(**plan), CAL)
    a = megatron_args(e, 0)
    return list(a.args), list(a.notes)


def test_dense_interleaved_plan() -> None:
    # Llama 3 70B, 80 layers on 4 stages of 5 chunks: 4 layers a virtual stage
    args, notes = _args(
        "llama3-70b", 1024, 8192, 1024, tp=8, pp=4, vpp=5, dp=32, mbs=1, sp=True,
        recompute=RECOMPUTE.index("selective"), sharding=SHARDING.index("dist-opt"),
    )  # fmt: skip
    assert args == [
        "--tensor-model-parallel-size", "8",
        "--pipeline-model-parallel-size", "4",
        "--num-layers-per-virtual-pipeline-stage", "4",
        "--sequence-parallel",
        "--micro-batch-size", "1",
        "--global-batch-size", "1024",
        "--seq-length", "8192",
        "--recompute-granularity", "selective",
        "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
        "--bf16",
    ]  # fmt: skip
    assert notes == []


def test_moe_fp8_plan() -> None:
    args, notes = _args(
        "qwen3-235b-a22b", 256, 4096, 2048, "fp8", tp=2, pp=8, vpp=4, dp=16, ep=32, mbs=1,
        sp=True, tp_overlap=True, sharding=SHARDING.index("zero1"),
        recompute=RECOMPUTE.index("selective"), recompute_modules=("layernorm", "moe_act"),
    )  # fmt: skip
    line = " ".join(args)
    # 94 layers on 32 chunks: ceil(94 / 32) = 3 on the first 30, 2 on the last two
    # (30 x 3 + 2 x 2 = 94), as a layout (E the embedding, L the loss, | between chunks):
    # stages 0-5 hold 12 layers, stages 6 and 7 (chunks 30 and 31 are their fourth) 11
    layout = "E" + "ttt|" * 30 + "tt|ttL"
    assert f"--pipeline-model-parallel-layout {layout}" in line
    assert "--num-virtual-stages-per-pipeline-rank" not in line
    assert notes == []  # priced as laid out: 12 layers on stages 0-5, 11 on 6 and 7
    assert "--expert-model-parallel-size 32 --expert-tensor-parallel-size 1" in line
    # one copy of a token per remote 8-GPU NVLink domain: DeepEP
    assert "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep" in line
    assert "--tp-comm-overlap" in line
    assert "--recompute-granularity selective --recompute-modules layernorm moe_act" in line
    assert "--use-distributed-optimizer" in line and "--grad-reduce-in-bf16" in line
    assert line.endswith("--bf16 --fp8-format hybrid --fp8-recipe tensorwise")


def test_uneven_layers_without_interleaving() -> None:
    # 80 layers on 12 stages: ceil(80 / 12) = 7 on each of 11, the last 80 - 77 = 3
    args, _ = _args("llama3-70b", 96, 4096, 96, tp=8, pp=12, dp=1, mbs=1)
    i = args.index("--decoder-last-pipeline-num-layers")
    assert args[i + 1] == "3"


def test_account_and_balanced_placements() -> None:
    account, _ = _args(
        "llama3-405b", 512, 8192, 64, tp=8, pp=8, vpp=8, dp=8, mbs=1, sp=True,
        split=PP_SPLITS.index("account"),
    )  # fmt: skip
    # 126 + 2 places on 64 chunks: 2 a chunk
    assert "--account-for-embedding-in-pipeline-split" in account
    assert "--account-for-loss-in-pipeline-split" in account
    assert "--num-layers-per-virtual-pipeline-stage" not in account
    # Llama 3 8B, sequence 4096: the output layer is r = 2 V h / (a layer's forward FLOPs)
    # = 2.2 layers; on 2 stages the last holds k with the least max(k + r, 32 - k): k = 15
    # (17.2 against 17; k = 14: 18, k = 16: 18.2)
    balanced, _ = _args(
        "llama3-8b", 8, 4096, 256, tp=1, pp=2, dp=4, mbs=2, split=PP_SPLITS.index("balanced")
    )
    i = balanced.index("--decoder-last-pipeline-num-layers")
    assert balanced[i + 1] == "15"
    assert "--decoder-first-pipeline-num-layers" not in balanced


def test_balanced_stages_without_equal_middle_ones_are_a_layout() -> None:
    # nanotron's 1B (16 layers, output layer 3.56 layers) on 8 stages: none on the last,
    # 16 over the other 7 (3, 3, 2, 2, 2, 2, 2): no equal middle stages, and Megatron's
    # last-stage flag must be positive
    from tests.perf.test_stages import nanotron_1b

    args, notes = _args(
        nanotron_1b(), 8, 4096, 256, tp=1, pp=8, dp=1, mbs=1, split=PP_SPLITS.index("balanced")
    )
    assert "--decoder-last-pipeline-num-layers" not in args
    i = args.index("--pipeline-model-parallel-layout")
    assert args[i + 1] == "Ettt|ttt|tt|tt|tt|tt|tt|L"
    assert notes == []


@pytest.mark.parametrize(
    ("recompute", "expected"),
    [
        ("full", ["--recompute-granularity", "full", "--recompute-method", "uniform",
                  "--recompute-num-layers", "1"]),
        ("none", []),
    ],
)  # fmt: skip
def test_recompute_modes(recompute: str, expected: list[str]) -> None:
    args, _ = _args(
        "llama3-8b", 8, 8192, 64, tp=1, pp=1, dp=8, mbs=1, recompute=RECOMPUTE.index(recompute)
    )
    got = [a for a in args if a.startswith("--recompute")]
    assert got == [a for a in expected if a.startswith("--")]
    if expected:
        i = args.index("--recompute-granularity")
        assert args[i : i + len(expected)] == expected


def test_partial_recompute_is_whole_layers_of_each_chunk() -> None:
    m = get_model("llama3-70b")
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    # 32 GPUs, 4 sequences a micro-batch: most, not all, layers must be recomputed to fit
    w = Workload(m, g, s, Fabric.from_system(s, 32), 32, 8192, 64)
    plans = Plans.of(tp=8, pp=4, dp=1, mbs=4, sp=True, recompute=RECOMPUTE.index("partial"))
    e = estimate(w, plans, CAL)
    frac = float(e.memory.recompute_fraction[0])
    assert 0 < frac < 1
    args = list(megatron_args(e, 0).args)
    i = args.index("--recompute-method")
    assert args[i : i + 4] == ["--recompute-method", "block", "--recompute-num-layers", args[i + 3]]
    # 20 layers a stage: the fewest whole layers covering the fraction priced
    whole = int(np.ceil(frac * 20 - 1e-9))
    assert int(args[i + 3]) == whole
    # more than the fraction priced: the notes say so, and what runs as priced
    (note,) = [n for n in megatron_args(e, 0).notes if n.startswith("priced recomputing")]
    assert f"{whole} of each 20-layer chunk ({100 * whole / 20:.0f} %), slower than" in note
    assert "selective --recompute-modules that free as much run as priced" in note


def test_before_hopper_moe_runs_megatrons_all_to_all_dispatcher() -> None:
    # DeepEP and HybridEP need Hopper: on A100 the exported dispatcher is the all-to-all,
    # and a note says the hierarchical dispatch priced is not what it runs
    m = get_model("mixtral-8x7b")
    for gpu, dispatcher in (("a100-sxm-80gb", "alltoall"), ("h100-sxm", "flex")):
        g = get_gpu(gpu)
        s = system_for_gpu(g)
        w = Workload(m, g, s, Fabric.from_system(s, 64), 64, 4096, 512)
        a = megatron_args(estimate(w, Plans.of(tp=1, pp=1, dp=64, ep=8, mbs=1), CAL), 0)
        args = list(a.args)
        assert args[args.index("--moe-token-dispatcher-type") + 1] == dispatcher
        named = any(n.startswith("DeepEP and HybridEP need Hopper") for n in a.notes)
        assert named == (dispatcher == "alltoall")


def test_fsdp_and_hybrid_sharding() -> None:
    args, _ = _args(
        "llama3-8b", 64, 8192, 64, tp=1, pp=1, dp=64, mbs=1,
        sharding=SHARDING.index("zero3"), shard_group=8,
    )  # fmt: skip
    line = " ".join(args)
    assert "--use-megatron-fsdp --use-distributed-optimizer" in line
    assert "--data-parallel-sharding-strategy optim_grads_params" in line
    assert "--ckpt-format fsdp_dtensor" in line
    # 64 data-parallel ranks sharded in groups of 8: 8 copies of the sharded states
    assert "--num-distributed-optimizer-instances 8" in line


def test_settings_megatron_lm_cannot_say_are_notes() -> None:
    _, notes = _args(
        "llama3-8b", 8, 8192, 64, tp=1, pp=1, dp=8, mbs=1, elementwise="eager",
        grad_accumulation="separate",
    )  # fmt: skip
    assert any("DeepSpeed's BF16 optimizer" in n for n in notes)
    assert any("eager PyTorch" in n for n in notes)


def test_estimate_and_search_print_and_emit_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from cli_runner import run_cli

    base = "train estimate --model llama3-8b --gpu h100-sxm --gpus 8 --seq-len 4096"
    base += " --global-batch 64 --tp 2 --dist-opt"
    code, out, _ = run_cli([*base.split(), "--json"], capsys)
    assert code == 0
    got = json.loads(out)["megatron"]
    assert got["args"][:2] == ["--tensor-model-parallel-size", "2"]
    assert "--use-distributed-optimizer" in got["args"] and got["notes"] == []
    code, out, _ = run_cli(base.split(), capsys)
    assert code == 0 and "--tensor-model-parallel-size 2" in " ".join(out.split())
    search = "train search --model llama3-8b --gpu h100-sxm --gpus 8 --seq-len 4096"
    code, out, _ = run_cli(
        [*search.split(), "--global-batch", "64", "--json", "--top", "2"], capsys
    )
    plans = json.loads(out)["plans"]
    assert code == 0 and len(plans) == 2
    for p in plans:  # each plan's own degrees
        args = p["megatron"]["args"]
        assert args[1] == str(p["plan"]["tp"])


def test_hybrid_mamba_stages_are_marked_in_the_pattern() -> None:
    # Nemotron 3 Nano, 52 blocks on 4 stages: 13 each, | between them in the pattern
    args, _ = _args("nemotron3-nano-30b-a3b", 32, 4096, 64, tp=2, pp=4, dp=4, ep=8, mbs=1, sp=True)
    pattern = get_model("nemotron3-nano-30b-a3b").pattern
    i = args.index("--hybrid-layer-pattern")
    assert args[i + 1] == "|".join(pattern[k : k + 13] for k in range(0, 52, 13))


def test_gated_deltanet_layers_are_mixer_and_mlp_pairs() -> None:
    # Qwen3-Next: 96 blocks, 48 Megatron layers; PP 2 x VPP 4: 12 blocks, 6 layers a chunk
    args, _ = _args("qwen3-next-80b-a3b", 64, 4096, 256, tp=1, pp=2, vpp=4, dp=32, ep=32, mbs=1)
    i = args.index("--num-layers-per-virtual-pipeline-stage")
    assert args[i + 1] == "6"
    assert args[args.index("--mtp-num-layers") + 1] == "1"


def test_fp16_keeps_fp32_gradients_and_zero2_under_a_pipeline_is_dist_opt() -> None:
    args, notes = _args(
        "llama3-8b", 16, 4096, 64, "fp16", tp=1, pp=2, dp=8, mbs=1,
        sharding=SHARDING.index("zero2"),
    )  # fmt: skip
    assert "--fp16" in args and "--accumulate-allreduce-grads-in-fp32" in args
    assert "--use-distributed-optimizer" in args and "--use-megatron-fsdp" not in args
    assert any(n.startswith("zero2 under a pipeline") for n in notes)


def test_idle_gpus_are_a_note() -> None:
    _, notes = _args("llama3-8b", 16, 4096, 64, tp=1, pp=1, dp=8, mbs=1)
    assert notes == [
        "run on 8 of the 16 GPUs: Megatron-LM takes the data-parallel degree from the world size"
    ]


def test_a_layout_carries_the_mtp_depths() -> None:
    # DeepSeek-V3: 61 layers and one MTP depth on 8 stages x 4 chunks: ceil(61 / 32) = 2 on
    # 29 chunks, 1 on the last 3 (Megatron's layout must name the MTP depth, m)
    args, _ = _args(
        "deepseek-v3", 1024, 4096, 2048, tp=2, pp=8, vpp=4, dp=64, ep=64, mbs=1, sp=True
    )
    layout = args[args.index("--pipeline-model-parallel-layout") + 1]
    assert layout == "E" + "tt|" * 29 + "t|t|tmL"
    assert args[args.index("--mtp-num-layers") + 1] == "1"


def test_partial_recompute_counts_megatron_layers_of_a_gated_deltanet_model() -> None:
    from gpuscale.perf.training_notes import block_recompute_layers

    # Qwen3-Next: 96 blocks are 48 Megatron layers (mixer + MoE each); 55 % of them is
    # 26.4, so 27 whole layers; Nemotron 3 Nano's 52 blocks are Megatron's 52 layers
    assert block_recompute_layers(get_model("qwen3-next-80b-a3b"), 0.55, 96, 1) == (27, 48.0)
    assert block_recompute_layers(get_model("nemotron3-nano-30b-a3b"), 0.55, 52, 2) == (15, 26.0)


def test_deepseek_sparse_attention_flags() -> None:
    args, notes = _args("GLM-5.2", 256, 4096, 1024, pp=8, dp=32, ep=32, mbs=1)
    line = " ".join(args)
    assert (
        "--experimental-attention-variant dsa --dsa-indexer-n-heads 32 "
        "--dsa-indexer-head-dim 128 --dsa-indexer-topk 2048"
    ) in line
    assert any("--dsa-indexer-loss-coeff" in n for n in notes)
    assert any(n.startswith("21 of the 78 sparse-attention layers run an indexer") for n in notes)
    # DeepSeek-V3.2 runs an indexer in every layer: no such note
    _, notes = _args("deepseek-v3.2", 256, 4096, 1024, pp=8, dp=32, ep=32, mbs=1)
    assert not any("reuse" in n for n in notes)
    # a model without DSA gets no DSA flag
    args, _ = _args("deepseek-v3", 256, 4096, 1024, pp=8, dp=32, ep=32, mbs=1)
    assert "--experimental-attention-variant" not in args


def test_tp_beyond_the_kv_heads_is_said_to_be_refused_by_megatron() -> None:
    # Qwen3-235B-A22B has 4 KV heads: TP8 is priced with a copy of one on each rank, which
    # Megatron-LM's TransformerConfig refuses; TP4 is silent
    _, notes = _args("qwen3-235b-a22b", 64, 4096, 64, tp=8, pp=1, dp=8, ep=8, mbs=1, sp=True)
    assert any("num_query_groups (4) must be a multiple of tensor_model_parallel_size (8)" in n
               for n in notes)  # fmt: skip
    _, notes = _args("qwen3-235b-a22b", 64, 4096, 64, tp=4, pp=1, dp=16, ep=8, mbs=1, sp=True)
    assert not any("num_query_groups" in n for n in notes)
