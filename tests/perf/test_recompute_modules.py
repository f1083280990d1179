"""Selective recomputation by Megatron-Core module: names, time and memory, by hand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric
from gpuscale.perf.kernels import attention_core_s
from gpuscale.perf.memory import activation_bytes_per_layer
from gpuscale.perf.plan import Plans, Workload
from gpuscale.perf.recompute import parse_modules, selective_forward_s
from gpuscale.perf.step import step_breakdown
from gpuscale.validate.training_cells import UnsupportedRowError, read_recompute_modules

CAL = default_calibration()


def workload(model: str, gpus: int = 8, seq: int = 4096, gbs: int = 64) -> Workload:
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    return Workload(get_model(model), g, s, Fabric.from_system(s, gpus), gpus, seq, gbs)


@pytest.mark.parametrize(
    ("names", "modules"),
    [
        (["norm", "act"], ("layernorm", "moe_act")),  # the Model Zoo's spellings
        (["moe", "layernorm"], ("layernorm", "moe")),  # canonical order
        (["mlp", "up_proj"], ("mla_up_proj", "mlp")),
        (["core attention".replace(" ", "_")], ("core_attn",)),
        (["Core_Attn", "core_attn"], ("core_attn",)),  # case and repeats
    ],
)
def test_module_names_and_aliases(names: list[str], modules: tuple[str, ...]) -> None:
    assert parse_modules(names) == modules


def test_unknown_or_no_module_is_an_error_naming_it() -> None:
    with pytest.raises(InputError, match="'attn_scores'"):
        parse_modules(["layernorm", "attn_scores"])
    with pytest.raises(InputError, match="at least one"):
        parse_modules([" "])


def test_a_module_inside_a_chosen_one_counts_once() -> None:
    parts = {"moe": 5.0, "moe_act": 1.0, "shared_experts": 2.0, "layernorm": 0.5}
    assert float(selective_forward_s(("layernorm", "moe", "moe_act"), parts)[0]) == 5.5
    assert float(selective_forward_s(("moe_act", "shared_experts"), parts)[0]) == 3.0


def test_modules_are_summed_in_megatron_order_whatever_the_hash_seed() -> None:
    # 1e16 + 1 rounds back to 1e16 in float64: summed core_attn, layernorm, moe_act (the
    # RECOMPUTE_MODULES order) the total is 0; in set order it was 0 or 1 by PYTHONHASHSEED
    parts = {"core_attn": 1e16, "layernorm": 1.0, "moe_act": -1e16}
    for order in (("moe_act", "layernorm", "core_attn"), ("layernorm", "core_attn", "moe_act")):
        assert float(selective_forward_s(order, parts)[0]) == 0.0


def test_the_default_is_the_attention_core_once_more() -> None:
    # Llama 3 8B: 32 layers, 8 micro-batches of one 4096-token sequence per GPU
    w = workload("llama3-8b")
    p = Plans.of(tp=1, pp=1, dp=8, mbs=1, recompute=1)
    fwd, _ = attention_core_s(
        w,
        np.array([1.0]),
        np.array([4096.0]),
        np.array([1.0]),
        w.gpu.peak_flops("bf16") * w.gpu.clock_fraction,
        w.gpu.hbm_bw_Bps * CAL.hbm_eff,
        CAL,
    )
    got = float(step_breakdown(w, p, CAL).recompute_s[0])
    assert got == pytest.approx(32 * 8 * float(fwd[0]), rel=1e-9)


def test_norm_recompute_covers_the_norms_that_are_modules_of_their_own() -> None:
    # Qwen3-30B-A3B: an MoE layer's pre-norm is its own module (read and write 2048 x 4096
    # 16-bit values per layer, 48 layers, 8 micro-batches); Llama's norms are fused into
    # the QKV and fc1 GEMMs, so recomputing "layernorm" costs nothing there
    w = replace(workload("qwen3-30b-a3b"), recompute_modules=("layernorm",))
    p = Plans.of(tp=1, pp=1, dp=8, ep=8, mbs=1, recompute=1)
    got = float(step_breakdown(w, p, CAL).recompute_s[0])
    per_layer = 4 * 2048 * 4096 / (w.gpu.hbm_bw_Bps * CAL.hbm_eff)
    assert got == pytest.approx(48 * 8 * per_layer, rel=1e-9)
    llama = replace(workload("llama3-8b"), recompute_modules=("layernorm",))
    q = Plans.of(tp=1, pp=1, dp=8, mbs=1, recompute=1)
    assert float(step_breakdown(llama, q, CAL).recompute_s[0]) == 0.0


def test_a_whole_moe_layer_includes_its_activation_and_reruns_its_dispatch() -> None:
    w = workload("qwen3-30b-a3b", gpus=16, gbs=128)
    p = Plans.of(tp=1, pp=1, dp=16, ep=16, mbs=1, recompute=1)  # EP over two nodes
    moe = step_breakdown(replace(w, recompute_modules=("moe",)), p, CAL)
    both = step_breakdown(replace(w, recompute_modules=("moe", "moe_act")), p, CAL)
    assert float(both.recompute_s[0]) == float(moe.recompute_s[0])
    attn = step_breakdown(w, p, CAL)
    cal0 = CAL.replace(ep_overlap=0.0)
    a2a_moe = float(step_breakdown(replace(w, recompute_modules=("moe",)), p, cal0).ep_comm_s[0])
    a2a_attn = float(step_breakdown(w, p, cal0).ep_comm_s[0])
    # dispatch and combine forward once more: 6 all-to-alls per layer instead of 4
    assert a2a_moe / a2a_attn == pytest.approx(6 / 4, rel=1e-9)
    assert float(moe.recompute_s[0]) > float(attn.recompute_s[0])


def test_module_recompute_frees_what_the_modules_alone_keep() -> None:
    # Qwen3-30B-A3B, 4096 tokens per micro-batch, no TP: the experts' activation frees fc2's
    # input (top-8 x 768 values per token); the MoE pre-norm its output (2048 per token);
    # the whole MoE layer its 6 x 6144 expert values and 2 x 8 x 2048 permuted copies
    w = workload("qwen3-30b-a3b")
    p = Plans.of(tp=1, pp=1, dp=8, ep=8, mbs=1, recompute=1)
    for precision, gemm_input in (("bf16", 2), ("fp8", 1)):
        wp = replace(w, precision=precision)
        base = float(activation_bytes_per_layer(wp, p)[0])

        def freed(*mods: str, wp: Workload = wp, base: float = base) -> float:
            return base - float(
                activation_bytes_per_layer(replace(wp, recompute_modules=mods), p)[0]
            )

        assert freed("moe_act") == pytest.approx(4096 * 8 * 768 * gemm_input)
        assert freed("layernorm") == pytest.approx(4096 * 2048 * 2)
        whole = 6 * 6144 + 2 * 8 * 2048 - (2 - gemm_input) * 6144
        assert freed("moe") == pytest.approx(4096 * whole)
        assert freed("moe", "moe_act") == freed("moe")
    # no recompute and full recompute do not depend on the modules
    for mode in (0, 2):
        q = Plans.of(tp=1, pp=1, dp=8, ep=8, mbs=1, recompute=mode)
        assert np.array_equal(
            activation_bytes_per_layer(w, q),
            activation_bytes_per_layer(replace(w, recompute_modules=("moe",)), q),
        )


@pytest.mark.parametrize(
    ("cell", "modules"),
    [
        ("selective (layernorm, moe)", ("layernorm", "moe")),
        ("selective (norm, act)", ("layernorm", "moe_act")),
        ("Selective (core attention)", ("core_attn",)),
        ("selective (+ MoE act)", ("core_attn", "moe_act")),  # added to the default
        ("selective", None),
        ("full", None),
    ],
)
def test_a_runs_file_names_its_modules(cell: str, modules: tuple[str, ...] | None) -> None:
    assert read_recompute_modules(cell) == modules


def test_a_module_gpuscale_does_not_know_skips_the_row() -> None:
    with pytest.raises(UnsupportedRowError, match="'indexer'"):
        read_recompute_modules("selective (layernorm, indexer)")


def test_a_workload_refuses_modules_not_in_canonical_form() -> None:
    with pytest.raises(InputError, match="recompute-modules"):
        replace(workload("llama3-8b"), recompute_modules=("norm",))


def test_per_op_checkpointing_keeps_every_other_matmul_output() -> None:
    # Llama 3 8B (h 4096, 32 heads, 8 KV heads of 128, f 14336), torchtitan's op policy:
    # wq, wk, wv, wo, w1, w3, w2 in forward order, the odd ones kept: Q (4096), V (1024),
    # w1 (14336) and w2 (4096) per token, beside the layer input (4096), the attention
    # output (4096) and its fp32 log-sum-exp (32 x 4 bytes), all 16-bit but the last
    w = replace(workload("llama3-8b"), recompute_modules=("ops",))
    got = activation_bytes_per_layer(w, Plans.of(tp=1, pp=1, dp=8, mbs=2, recompute=1))
    per_token = 2 * (4096 + 4096 + 1024 + 14336 + 4096 + 4096) + 4 * 32
    assert float(got[0]) == 2 * 4096 * per_token
    # under TP 2 with sequence parallelism: the column-parallel outputs halve, w2's output
    # is the full-width partial sum, the input and the two reduce-scattered block outputs
    # are sequence shards
    tp2 = activation_bytes_per_layer(w, Plans.of(tp=2, pp=1, dp=4, mbs=2, sp=True, recompute=1))
    per_token2 = 2 * (2048 + 2048 + 512 + 7168 + 4096 + 2048 + 2 * 2048) + 4 * 16
    assert float(tp2[0]) == 2 * 4096 * per_token2
    # between full recompute (the input alone) and none
    full = activation_bytes_per_layer(w, Plans.of(tp=1, pp=1, dp=8, mbs=2, recompute=2))
    none = activation_bytes_per_layer(w, Plans.of(tp=1, pp=1, dp=8, mbs=2, recompute=0))
    assert float(full[0]) < float(got[0]) < float(none[0])


def test_per_op_checkpointing_reruns_the_even_matmuls_and_the_elementwise_kernels() -> None:
    # Llama 3 8B on 8 H100, bf16, 4096-token micro-batches, 8 of them per GPU
    from gpuscale.perf.kernels import gemm_s

    w = replace(workload("llama3-8b"), recompute_modules=("ops",))
    p = Plans.of(tp=1, pp=1, dp=8, mbs=1, recompute=1)
    b = step_breakdown(w, p, CAL)
    peak = w.gpu.peak_flops("bf16") * w.gpu.clock_fraction * w.gpu.matmul_eff
    tokens = 4096.0
    # wk (4096 -> 1024), wo (4096 -> 4096), w3 (4096 -> 14336), one micro-batch, one layer
    gemms = sum(
        float(np.asarray(gemm_s(tokens, n, 4096.0, 1.0, peak, w.gpu.sms, CAL)))
        for n in (1024.0, 4096.0, 14336.0)
    )
    # the elementwise kernels' forward: the step's memory-bound time less the output
    # layer's fp32 logits traffic (3 passes forward and backward of 4 bytes a logit), per
    # layer and pass
    bw = w.gpu.hbm_bw_Bps * CAL.hbm_eff
    mb = 8.0
    logits = 3.0 * 3.0 * 4.0 * tokens * 128256 / bw
    elementwise = (float(b.memory_bound_s[0]) / mb - logits) / 3.0 / 32
    # and one forward's kernel launches (bf16: no input casts to redo)
    launches = CAL.layer_overhead_s
    assert float(b.recompute_s[0]) == pytest.approx(
        32 * mb * (gemms + elementwise + launches), rel=1e-9
    )


def test_per_op_checkpointing_is_a_policy_of_its_own_for_plain_layers() -> None:
    assert parse_modules(["op"]) == ("ops",)
    with pytest.raises(InputError, match="alone"):
        parse_modules(["ops", "core_attn"])
    with pytest.raises(InputError, match="MoE, MLA or Mamba"):
        replace(workload("qwen3-30b-a3b"), recompute_modules=("ops",))


def test_per_op_checkpointing_gathers_the_sequence_parallel_inputs_again() -> None:
    # Llama 3 8B on TP2 with SP, no TP overlap: a layer's forward takes 2 all-reduce-sized
    # collectives (all-gather + reduce-scatter per block) and its backward 2; per-op
    # checkpointing reruns the two all-gathers (one all-reduce's worth), the attention-core
    # recompute none. With the embedding's and the output layer's 2: (32 x 5 + 2) against
    # (32 x 4 + 2) all-reduces per micro-batch
    p = Plans.of(tp=2, pp=1, dp=4, mbs=1, sp=True, recompute=1)
    core = step_breakdown(workload("llama3-8b"), p, CAL)
    ops = step_breakdown(replace(workload("llama3-8b"), recompute_modules=("ops",)), p, CAL)
    assert float(ops.tp_comm_s[0]) / float(core.tp_comm_s[0]) == pytest.approx(162 / 130)


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(["llama3-8b", "llama3-70b", "gpt3-175b", "llama2-7b"]),
    tp=st.sampled_from([1, 2, 4, 8]),
    sp=st.booleans(),
    mbs=st.integers(1, 4),
    seq=st.sampled_from([2048, 4096, 8192]),
)
def test_per_op_memory_lies_between_full_and_no_recompute(
    model: str, tp: int, sp: bool, mbs: int, seq: int
) -> None:
    # whatever the shape: more than the layer input alone (full recompute), less than
    # keeping everything without TP, and the rerun costs time
    w = replace(workload(model, seq=seq), recompute_modules=("ops",))
    sp = sp and tp > 1
    plans = {
        rc: Plans.of(tp=tp, pp=1, dp=8 // tp if tp <= 8 else 1, mbs=mbs, sp=sp, recompute=rc)
        for rc in (0, 1, 2)
    }
    none, ops, full = (float(activation_bytes_per_layer(w, plans[rc])[0]) for rc in (0, 1, 2))
    assert full < ops
    if tp == 1:
        assert ops < none
    # under TP every rank keeps w2's full-width partial sum (the saved mm output before its
    # reduce-scatter): at TP8 with SP that can outweigh what no checkpointing keeps
    assert float(step_breakdown(w, plans[1], CAL).recompute_s[0]) > 0.0
