"""Hybrid sharding (HSDP): states sharded over a group of data-parallel ranks, replicated
across groups, gradient shards all-reduced across the replicas (PyTorch FSDP HYBRID_SHARD,
Megatron's --num-distributed-optimizer-instances)."""

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
from gpuscale.perf.comm.distinct import collective_s
from gpuscale.perf.data_parallel import data_parallel_s
from gpuscale.perf.memory import memory_breakdown
from gpuscale.perf.plan import SHARDING, Plans, Workload
from gpuscale.perf.sharding import ShardGroups
from gpuscale.perf.stage_params import params_per_gpu
from gpuscale.perf.step import step_breakdown
from gpuscale.perf.validity import check_plan, validity

CAL = default_calibration()


def workload(model: str = "llama3-70b", gpus: int = 128, shard_group: int = 0) -> Workload:
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    return Workload(
        get_model(model),
        g,
        s,
        Fabric.from_system(s, gpus),
        gpus,
        4096,
        1024,
        shard_group=shard_group,
    )


def plan(**kw: object) -> Plans:
    cols: dict[str, object] = {"tp": 8, "dp": 16, "sharding": SHARDING.index("zero3")}
    cols.update(kw)
    return Plans.of(**cols)


@pytest.mark.parametrize("sharding", ["dist-opt", "zero1", "zero2", "zero3"])
def test_states_take_the_memory_of_a_data_parallel_group_as_large_as_the_shard_group(
    sharding: str,
) -> None:
    # 16 replicas of TP8 sharded over 4 of them hold what 4 replicas sharded over all do
    s = SHARDING.index(sharding)
    hybrid = memory_breakdown(workload(shard_group=4), plan(sharding=s), CAL)
    small = memory_breakdown(workload(gpus=32), plan(dp=4, sharding=s), CAL)
    for part in ("weights", "gradients", "optimizer"):
        assert getattr(hybrid, part)[0] == pytest.approx(getattr(small, part)[0], rel=1e-12)


def test_zero3_bytes_per_parameter_over_the_shard_group() -> None:
    # ZeRO-3: (2 + 2 + 12) / g bytes a parameter, g = 4 (not the 16 data-parallel ranks)
    w = workload(shard_group=4)
    dense, _, _ = params_per_gpu(w, plan())
    mem = memory_breakdown(w, plan(), CAL)
    assert mem.weights[0] == pytest.approx(2 * dense[0] / 4, rel=1e-12)
    assert mem.gradients[0] == pytest.approx(2 * dense[0] / 4, rel=1e-12)
    assert mem.optimizer[0] == pytest.approx(12 * dense[0] / 4, rel=1e-12)


@pytest.mark.parametrize(
    ("gpus", "group", "replicas", "replicas_per_node"),
    [
        # two 8-GPU nodes, one shard group per node: each 1/8 shard all-reduced between the
        # two nodes (one member per node)
        (16, 8, 2, 1),
        # four nodes in groups of 4: each node holds two shard groups, and each replica
        # group of 8 has 2 members in every node
        (32, 4, 8, 2),
    ],
)
def test_distributed_optimizer_reduces_within_the_group_then_across_the_replicas(
    gpus: int, group: int, replicas: int, replicas_per_node: int
) -> None:
    # TP1: fp32 gradients reduce-scattered over the group (all of it in one node), the
    # 1/group shard all-reduced across the replicas, 16-bit weights all-gathered over the group
    w = workload(model="llama3-8b", gpus=gpus, shard_group=group)
    p = plan(tp=1, dp=gpus, sharding=SHARDING.index("dist-opt"))
    dense, _, _ = params_per_gpu(w, p)
    zero = np.zeros(1)
    comm, opt = data_parallel_s(w, p, CAL, zero, zero, np.ones(1), np.full(1, 32.0), zero)
    f, g = w.fabric, float(group)
    expected = (
        collective_s("reduce_scatter", dense * 4.0, g, g, f, CAL)
        + collective_s("all_reduce", dense * 4.0 / g, float(replicas), replicas_per_node, f, CAL)
        + collective_s("all_gather", dense * 2.0, g, g, f, CAL)
    )
    # no backward to hide behind (busy 0): all of it exposed
    assert comm[0] == pytest.approx(expected[0], rel=1e-12)
    # Adam reads and writes the states of 1/group of the parameters
    bw = w.gpu.hbm_bw_Bps * CAL.hbm_eff
    assert opt[0] == pytest.approx(dense[0] / g * 30.0 / bw, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    dp=st.sampled_from([1, 2, 4, 8, 16]),
    sharding=st.sampled_from(["dist-opt", "zero1", "zero2", "zero3"]),
    pp=st.sampled_from([1, 2]),
)
def test_a_shard_group_of_all_data_parallel_ranks_is_full_sharding(
    dp: int, sharding: str, pp: int
) -> None:
    w = workload(gpus=8 * dp * pp)
    p = plan(dp=dp, pp=pp, sharding=SHARDING.index(sharding))
    for group in (dp, w.num_gpus):  # the whole group, or more ranks than there are
        same = replace(w, shard_group=group)
        assert step_breakdown(same, p, CAL).step_s[0] == pytest.approx(
            step_breakdown(w, p, CAL).step_s[0], rel=1e-12
        )
        assert memory_breakdown(same, p, CAL).total[0] == memory_breakdown(w, p, CAL).total[0]


def test_expert_states_split_over_the_replicas_as_distributed_optimizer_instances() -> None:
    # DeepSeek-V3 shaped: DP64 x TP1 / EP32 = 2 expert-data-parallel ranks; 8 replicas of
    # a shard group of 8 leave each expert group a single rank (no expert sharding)
    w = workload(model="deepseek-v3", gpus=256, shard_group=8)
    g = ShardGroups.of(w, Plans.of(tp=1, pp=4, dp=64, ep=32))
    assert (g.dense[0], g.dense_replicas[0]) == (8.0, 8.0)
    assert (g.expert[0], g.expert_replicas[0]) == (1.0, 2.0)


def test_plans_that_cannot_split_into_shard_groups_are_invalid() -> None:
    w = workload(shard_group=3)
    ok, rules = validity(w, plan())
    assert not ok[0]
    assert any("multiple of the shard group (3)" in why for m, why in rules if not m[0])
    w = workload(shard_group=4)
    with pytest.raises(InputError, match="unless the optimizer is sharded") as exc:
        check_plan(w, plan(sharding=SHARDING.index("none")))
    assert (exc.value.field, exc.value.value) == ("shard-group", 4)


@pytest.mark.parametrize("bad", [-1, True, 2**25, 2.5])
def test_the_shard_group_is_a_rank_count(bad: object) -> None:
    with pytest.raises(InputError) as exc:
        workload(shard_group=bad)  # type: ignore[arg-type]
    assert exc.value.field == "shard-group"
    assert "0 to shard over all of them" in exc.value.valid


def test_a_shard_group_larger_than_the_gpus_is_full_sharding_not_an_error() -> None:
    # train scaling starts at 8 GPUs with the shard group given for the largest point
    w, p = workload(gpus=8, shard_group=16), plan(dp=1)
    assert ShardGroups.of(w, p).dense_replicas[0] == 1.0


def test_moe_expert_ranks_must_split_over_the_replicas() -> None:
    # Qwen3-30B-A3B, DP64 EP8: 8 expert data-parallel ranks cannot be split over the 32
    # replicas of shard groups of 2 (Megatron asserts the same)
    w = workload(model="qwen3-30b-a3b", gpus=64, shard_group=2)
    with pytest.raises(InputError, match=r"replicas \(64 / 2 = 32\) divide the 8 expert"):
        check_plan(w, Plans.of(tp=1, dp=64, ep=8, sharding=SHARDING.index("dist-opt")))
    _, rules = validity(w, Plans.of(tp=1, dp=64, ep=8, sharding=1))
    assert any("multiple of the shard group's replicas" in why for m, why in rules if not m[0])
    ok, _ = validity(replace(w, shard_group=8), Plans.of(tp=1, dp=64, ep=8, sharding=1))
    assert ok[0]


def test_search_tries_each_fsdp_plan_sharded_within_one_scale_up_domain() -> None:
    from gpuscale.search.plans import enumerate_plans

    w = workload(model="llama3-8b", gpus=64)
    plans = enumerate_plans(w, {"sharding": SHARDING.index("zero3"), "tp": 2})
    hybrid = plans.take(plans.shard_group > 0)
    # TP2 leaves 4 data-parallel ranks in an 8-GPU NVLink domain: shard over those 4
    assert len(hybrid) > 0 and set(hybrid.shard_group.tolist()) == {4}
    assert (hybrid.dp * hybrid.cp > 4).all()
    assert "zero3 hsdp4" in hybrid.label(0)
    # a shard group counts DP x CP ranks: with TP1 CP2 a domain still holds 8 of them
    long = replace(w, seq_len=32768)
    cp2 = enumerate_plans(long, {"sharding": SHARDING.index("zero3"), "tp": 1, "cp": 2})
    assert set(cp2.take(cp2.shard_group > 0).shard_group.tolist()) == {8}
    # each hybrid plan is the twin of a fully sharded one
    full = plans.take(plans.shard_group == 0)
    assert len(full) > len(hybrid)
    # asked for a shard group, the search prices every plan with it and adds no twin
    fixed = enumerate_plans(replace(w, shard_group=8), {"sharding": SHARDING.index("zero3")})
    # each plan the group splits (more than 8 data-parallel ranks) carries it, the others 0
    assert ((fixed.shard_group == 8) == (fixed.dp * fixed.cp > 8)).all()
    assert set(fixed.shard_group.tolist()) == {0, 8}
