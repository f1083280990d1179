"""Context parallelism's three exchanges (``Workload.cp_comm``): the ring (p2p), Ulysses'
all-to-alls (a2a) and Llama 3's all-gather, priced by hand from Transformer Engine's
``context_parallel.py``: which tensors move, how often, and what each needs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.errors import InputError
from gpuscale.export.megatron import megatron_args
from gpuscale.perf.comm import Fabric
from gpuscale.perf.comm.model import collective_time_s
from gpuscale.perf.kernels import attention_core_s
from gpuscale.perf.memory import memory_breakdown
from gpuscale.perf.plan import Plans, Workload
from gpuscale.perf.step import step_breakdown
from gpuscale.perf.training import estimate
from gpuscale.perf.validity import check_plan, validity

CAL = default_calibration()


def _llama3_8b(cp_comm: str, gpus: int = 8, seq: int = 32768, gbs: int = 4) -> Workload:
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    return Workload(
        get_model("llama3-8b"), g, s, Fabric.from_system(s, gpus), gpus, seq, gbs, "bf16",
        cp_comm=cp_comm,
    )  # fmt: skip


def _coll(w: Workload, op: str, size: float, n: float) -> float:
    # every CP rank in one node (TP1 CP8 on an 8-GPU HGX): all n members in the domain
    return float(collective_time_s(op, np.array([size]), n, w.fabric, CAL, n)[0])


# Llama 3 8B: 32 query heads of 128, 8 KV heads; 32 layers. CP8 at 32K: 4,096 local tokens
LOCAL = 4096.0
Q = LOCAL * 32 * 128 * 2.0  # one rank's queries (and output), bytes
KV = LOCAL * 8 * 128 * 2.0  # one rank's keys (and values)


def test_ulysses_moves_q_k_v_and_the_output_forward_and_five_tensors_backward() -> None:
    w = _llama3_8b("a2a")
    p = Plans.of(tp=1, pp=1, dp=1, cp=8, mbs=1, recompute=0)
    b = step_breakdown(w, p, CAL)
    q, kv = _coll(w, "all_to_all", Q, 8), _coll(w, "all_to_all", KV, 8)
    fwd = q + 2 * kv + q  # Q, K, V before the kernel, O after
    bwd = 2 * q + q + 2 * kv  # O and dO before, dQ, dK, dV after
    micro_batches = 4
    assert float(b.cp_comm_s[0]) == pytest.approx(micro_batches * 32 * (fwd + bwd), rel=1e-9)


def test_recomputing_the_layer_runs_the_forward_exchange_again() -> None:
    base = Plans.of(tp=1, pp=1, dp=1, cp=8, mbs=1, recompute=0)
    full = Plans.of(tp=1, pp=1, dp=1, cp=8, mbs=1, recompute=2)
    for kind in ("a2a", "all_gather"):
        w = _llama3_8b(kind)
        once = float(step_breakdown(w, base, CAL).cp_comm_s[0])
        again = float(step_breakdown(w, full, CAL).cp_comm_s[0])
        if kind == "a2a":
            fwd = 2 * _coll(w, "all_to_all", Q, 8) + 2 * _coll(w, "all_to_all", KV, 8)
        else:
            fwd = 2 * _coll(w, "all_gather", KV * 8, 8)
        assert again - once == pytest.approx(4 * 32 * fwd, rel=1e-9)


def test_all_gather_gathers_k_and_v_twice_and_reduce_scatters_their_gradients() -> None:
    w = _llama3_8b("all_gather")
    b = step_breakdown(w, Plans.of(tp=1, pp=1, dp=1, cp=8, mbs=1, recompute=0), CAL)
    gather = _coll(w, "all_gather", KV * 8, 8)  # K (or V) of the whole sequence
    scatter = _coll(w, "reduce_scatter", KV * 8, 8)
    per_layer = 2 * gather + 2 * gather + 2 * scatter
    assert float(b.cp_comm_s[0]) == pytest.approx(4 * 32 * per_layer, rel=1e-9)


def test_only_the_ring_merges_partial_results() -> None:
    one = np.array([1.0])
    args = (one, one * LOCAL, one, 1e15, 3e12, CAL)
    ring = _llama3_8b("p2p")
    f_ring, b_ring = attention_core_s(ring, *args)
    for kind in ("a2a", "all_gather"):
        f, b = attention_core_s(replace(ring, cp_comm=kind), *args)
        assert float(f[0]) < float(f_ring[0]) and float(b[0]) < float(b_ring[0])
    # without CP there is nothing to merge: every exchange prices the same kernels
    whole = (one, one * 32768.0, one, 1e15, 3e12, CAL)
    same = {kind: attention_core_s(replace(ring, cp_comm=kind), *whole) for kind in ("p2p", "a2a")}
    assert float(same["p2p"][0][0]) == float(same["a2a"][0][0])


def test_the_ring_hides_what_the_exposed_exchanges_cannot() -> None:
    # at 32K on one NVLink node the ring's K/V transfers hide behind each step's attention;
    # the all-gather and the all-to-alls are all exposed
    p = Plans.of(tp=1, pp=1, dp=1, cp=8, mbs=1, recompute=0)
    cp = {k: float(step_breakdown(_llama3_8b(k), p, CAL).cp_comm_s[0]) for k in ("p2p", "a2a")}
    assert cp["p2p"] == 0.0 < cp["a2a"]


def test_ulysses_needs_whole_heads_on_each_cp_rank() -> None:
    # 8 KV heads: CP8 splits them at TP1; at TP2 a rank holds 4, which CP8 cannot split;
    # CP16 never can
    w = _llama3_8b("a2a", gpus=32, seq=65536, gbs=4)
    p = Plans.of(
        tp=np.array([1, 2, 1]), pp=1, dp=np.array([4, 2, 2]), cp=np.array([8, 8, 16]), mbs=1
    )
    ok, rules = validity(w, p)
    assert ok.tolist() == [True, False, False]
    broken = [why for mask, why in rules if not mask[1]]
    assert broken == [
        "--cp-comm a2a needs the query heads (32 / tp) and KV heads (8 / tp, at least 1) a "
        "tensor-parallel rank holds divisible by cp"
    ]
    with pytest.raises(InputError) as exc:
        check_plan(w, Plans.of(tp=2, pp=1, dp=2, cp=8, mbs=1))
    assert exc.value.field == "cp" and exc.value.value == 8
    # the ring and the all-gather take any head count
    for kind in ("p2p", "all_gather"):
        assert validity(replace(w, cp_comm=kind), p)[0].all()


def test_mla_runs_context_parallelism_as_the_ring_only() -> None:
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    w = Workload(get_model("deepseek-v3"), g, s, Fabric.from_system(s, 64), 64, 8192, 64, "bf16")
    p = Plans.of(tp=1, pp=1, dp=np.array([64, 32]), cp=np.array([1, 2]), ep=8, mbs=1)
    for kind in ("a2a", "all_gather"):
        ok, rules = validity(replace(w, cp_comm=kind), p)
        assert ok.tolist() == [True, False]
        assert [why for mask, why in rules if not mask[1]] == [
            f"--cp-comm {kind} with MLA attention (Transformer Engine runs it as p2p)"
        ]
    assert validity(w, p)[0].all()


def test_all_gather_holds_the_whole_sequence_keys_values_and_their_gradients() -> None:
    # during a layer's backward: K and V of all 32,768 tokens gathered again, and dK, dV of
    # all of them before the reduce-scatter, 16-bit, under the activation overhead
    p = Plans.of(tp=1, pp=1, dp=1, cp=8, mbs=1, recompute=0)
    ring = memory_breakdown(_llama3_8b("p2p"), p, CAL).activations[0]
    gathered = memory_breakdown(_llama3_8b("all_gather"), p, CAL).activations[0]
    whole = 2 * 32768 * 8 * 128 * 2.0  # K and V
    assert gathered - ring == pytest.approx(2 * whole * CAL.mem_activation_overhead)
    assert memory_breakdown(_llama3_8b("a2a"), p, CAL).activations[0] == ring


def test_megatron_arguments_name_the_exchange() -> None:
    p = Plans.of(tp=1, pp=1, dp=1, cp=8, mbs=1, recompute=0)
    for kind, flag in (("p2p", None), ("a2a", "a2a"), ("all_gather", "all_gather")):
        args = list(megatron_args(estimate(_llama3_8b(kind), p, CAL), 0).args)
        if flag is None:
            assert "--cp-comm-type" not in args
        else:
            assert args[args.index("--cp-comm-type") + 1] == flag


def test_the_exchange_is_one_of_three_and_megatrons_spelling_reads() -> None:
    assert _llama3_8b("AllGather").cp_comm == "all_gather"
    assert _llama3_8b(" A2A ").cp_comm == "a2a"
    with pytest.raises(InputError) as exc:
        _llama3_8b("ring")
    assert exc.value.field == "cp-comm" and "p2p, a2a, all_gather" in str(exc.value)


def test_a_context_parallel_plan_notes_the_other_exchanges_step_times() -> None:
    p = Plans.of(tp=1, pp=1, dp=1, cp=8, mbs=1, recompute=0)
    ring = estimate(_llama3_8b("p2p"), p, CAL)
    steps = {k: float(estimate(_llama3_8b(k), p, CAL).step_s[0]) for k in ("a2a", "all_gather")}
    (note,) = [n for n in ring.notes(0) if n.startswith("context parallelism")]
    base = float(ring.step_s[0])
    assert note.startswith("context parallelism (CP8) is priced as the ring; ")
    for kind, name in (("a2a", "Ulysses' all-to-alls"), ("all_gather", "Llama 3's K/V all-gather")):
        change = (steps[kind] / base - 1.0) * 100.0
        assert f"{name} (--cp-comm {kind}) would take " in note
        assert f"a step ({change:+.1f} %" in note
    # at TP2 a rank holds 4 KV heads, which CP8 cannot split: the all-to-alls cannot run it
    w = _llama3_8b("p2p", gpus=16)
    two = estimate(w, Plans.of(tp=2, pp=1, dp=1, cp=8, mbs=1), CAL)
    (note,) = [n for n in two.notes(0) if n.startswith("context parallelism")]
    assert "(--cp-comm a2a) need the query and KV heads a tensor-parallel rank holds " in note
    # without CP, or with MLA (the ring only), no such note
    flat = estimate(_llama3_8b("p2p"), Plans.of(tp=8, pp=1, dp=1, cp=1, mbs=1), CAL)
    assert not [n for n in flat.notes(0) if n.startswith("context parallelism")]


def test_the_rings_windowed_layers_run_the_all_to_alls() -> None:
    # GPT-OSS 120B: 18 of its 36 attention layers slide a 128-token window, which
    # Transformer Engine's ring refuses; under p2p they pay Ulysses' exposed all-to-alls
    # (64 query heads and 8 KV heads of 64), the other 18 the ring
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    w = Workload(get_model("gpt-oss-120b"), g, s, Fabric.from_system(s, 8), 8, 65536, 8, "bf16")
    p = Plans.of(tp=1, pp=1, dp=1, cp=8, ep=8, mbs=1, recompute=0)
    ring = float(step_breakdown(w, p, CAL).cp_comm_s[0])
    local = 65536 / 8
    q = _coll(w, "all_to_all", local * 64 * 64 * 2.0, 8)
    kv = _coll(w, "all_to_all", local * 8 * 64 * 2.0, 8)
    a2a_layer = (q + 2 * kv + q) + (2 * q + q + 2 * kv)
    windowed = 8 * 18 * a2a_layer  # 8 micro-batches
    # the full layers' ring hides behind their attention: the windowed layers' alone show
    assert ring == pytest.approx(windowed, rel=1e-9)
    # the windowed layers' heads must split over cp for the all-to-alls: 8 KV heads, not 16
    wide = replace(w, num_gpus=16, fabric=Fabric.from_system(s, 16), global_batch=16)
    p16 = Plans.of(tp=1, pp=1, dp=1, cp=16, ep=8, mbs=1)
    ok, rules = validity(wide, p16)
    assert not ok[0]
    assert [why for mask, why in rules if not mask[0]] == [
        "--cp-comm p2p runs the windowed layers' context parallelism as all-to-alls "
        "(Transformer Engine's ring refuses them), which need the query heads (64 / tp) and "
        "KV heads (8 / tp, at least 1) a tensor-parallel rank holds divisible by cp"
    ]
    assert validity(replace(wide, cp_comm="all_gather"), p16)[0].all()


def test_partial_recompute_makes_room_for_the_gathered_keys_and_values() -> None:
    # Llama 3 70B at 128K on 128 H100, TP8 PP4 CP4: recomputing just enough to fit must
    # count the all-gather's whole-sequence K/V (and gradients) a layer's backward holds
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    w = Workload(
        get_model("llama3-70b"), g, s, Fabric.from_system(s, 128), 128, 131072, 64, "bf16",
        cp_comm="all_gather",
    )  # fmt: skip
    p = Plans.of(tp=8, pp=4, cp=4, dp=1, mbs=1, sp=True, recompute=3, sharding=1)
    mem = memory_breakdown(w, p, CAL)
    assert 0.0 < float(mem.recompute_fraction[0]) < 1.0
    assert float(mem.headroom[0]) == pytest.approx(0.0, abs=1.0)  # fills the GPU exactly
    ring = memory_breakdown(replace(w, cp_comm="p2p"), p, CAL)
    assert float(mem.recompute_fraction[0]) > float(ring.recompute_fraction[0])


def test_a_ring_across_nodes_is_paced_by_one_nics_sends() -> None:
    # Llama 3 8B at 16K on 16 H100, TP2 CP8: each CP ring has 4 ranks in either node, and
    # its hops between the nodes are one GPU's sends through one NIC, so the ring's forward
    # is a one-NIC all-gather of the 8 chunks (not one striped over the node's NICs)
    w = _llama3_8b("p2p", gpus=16, seq=16384, gbs=1)
    p = Plans.of(tp=2, pp=1, dp=1, cp=8, mbs=1, sp=True, recompute=0)
    b = step_breakdown(w, p, CAL)
    chunk = 2 * 2048 * (8 * 128 / 2) * 2.0  # K and V of 2,048 local tokens, 4 KV heads
    one_nic = float(
        collective_time_s("all_gather", np.array([chunk * 8]), 8, w.fabric, CAL, 1.0)[0]
    )
    striped = float(
        collective_time_s("all_gather", np.array([chunk * 8]), 8, w.fabric, CAL, 4.0)[0]
    )
    assert one_nic > 2 * striped
    one = np.array([1.0])
    peak = w.gpu.peak_flops("bf16") * w.gpu.clock_fraction
    fwd, bwd = attention_core_s(
        w, one, one * 2048, one * 2, peak, w.gpu.hbm_bw_Bps * CAL.hbm_eff, CAL
    )
    assert one_nic > float(fwd[0])  # exposed: the test checks the transfer, not a max(0)
    per_layer = max(one_nic - float(fwd[0]), 0.0) + max(2 * one_nic - float(bwd[0]), 0.0)
    assert float(b.cp_comm_s[0]) == pytest.approx(32 * per_layer, rel=1e-9)


def test_deepseek_sparse_attention_runs_context_parallelism_as_the_all_gather() -> None:
    # Megatron's DSAttention: "context parallelism currently supports cp_comm_type=allgather
    # only": the default ring is priced as the all-gather, Ulysses' all-to-alls refused
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    w = Workload(get_model("deepseek-v3.2"), g, s, Fabric.from_system(s, 64), 64, 65536, 16, "bf16")
    p = Plans.of(tp=1, pp=1, dp=16, cp=4, ep=64, mbs=1)
    assert validity(w, p)[0][0]
    ring = step_breakdown(w, p, CAL)
    gathered = step_breakdown(replace(w, cp_comm="all_gather"), p, CAL)
    assert float(ring.cp_comm_s[0]) == float(gathered.cp_comm_s[0]) > 0.0
    assert w.cp_exchange == "all_gather"
    e = estimate(w, p, CAL)
    args = list(megatron_args(e, 0).args)
    assert args[args.index("--cp-comm-type") + 1] == "allgather"
    assert any("DeepSeek Sparse Attention runs no other" in n for n in e.notes(0))
    ok, _ = validity(replace(w, cp_comm="a2a"), p)
    assert not ok[0]
    # what the all-gather holds in a layer's backward: MLA's whole up-projected K and V
    # (128 heads x (192 + 128)) of all 65,536 tokens, and their gradients, 16-bit
    from gpuscale.perf.memory import _gathered_kv

    whole = 65536 * 128 * (192 + 128) * 2.0
    assert float(_gathered_kv(w, p)[0]) == pytest.approx(2 * whole)
