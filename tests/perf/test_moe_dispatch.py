"""Expert-parallel token dispatch: network crossings per token, hand-computed; invariants."""

from __future__ import annotations

from fractions import Fraction
from math import prod

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_system
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric, collective_time_s, domains_hit, moe_dispatch_time_s
from gpuscale.perf.training import TrainingEstimate

CAL = default_calibration()
HGX_B200 = Fabric.from_system(get_system("hgx-b200"), total_gpus=1024)
NVL72 = Fabric.from_system(get_system("gb200-nvl72"), total_gpus=1024)
MB = 1e6


def test_qwen3_235b_over_four_nodes_crosses_2_72_nodes_not_6_copies() -> None:
    # 128 experts, top-8, EP 32 over 4 nodes (32 experts each): a token misses one other
    # node when all 8 draws land among the 96 experts elsewhere
    miss = Fraction(prod(range(89, 97)), prod(range(121, 129)))
    expected = 3 * (1 - miss)
    assert float(expected) == pytest.approx(2.7218, abs=1e-4)
    got = domains_hit(8, 128, np.array([4.0]))[0]
    assert got == pytest.approx(float(expected), rel=1e-12)
    # NCCL's all-to-all sends 8 * 24/32 = 6 copies of the token over the network
    assert got / 6.0 == pytest.approx(0.4537, abs=1e-4)


@pytest.mark.parametrize(
    ("top_k", "experts", "domains", "expected"),
    [
        (1, 64, 8, 7 / 8),  # one expert: a remote domain with probability (m-1)/m
        (4, 64, 1, 0.0),  # one domain: nothing crosses
        (9, 16, 2, 1.0),  # 9 draws among 16 experts, 8 per domain: both domains hit
        (2, 4, 2, 5 / 6),  # 2 of 4 experts: both in the own domain w.p. 2/4 * 1/3
    ],
)
def test_domains_hit_limits_by_hand(
    top_k: int, experts: int, domains: int, expected: float
) -> None:
    assert domains_hit(top_k, experts, np.array([float(domains)]))[0] == pytest.approx(expected)


def test_inside_one_nvlink_domain_both_dispatchers_cost_an_all_to_all() -> None:
    size = 256 * MB
    nccl = collective_time_s("all_to_all", size, 64, NVL72, CAL, members_per_domain=64)
    for how in ("hierarchical", "all_to_all"):
        t = moe_dispatch_time_s(size, 64, 64, 22, 512, NVL72, CAL, how)
        assert t == pytest.approx(nccl, rel=1e-9)


def test_across_nodes_the_network_carries_one_copy_per_domain_hit() -> None:
    # Nemotron 3 Super's 512 experts, top-22, EP 64 over 8 HGX B200 nodes
    size = 369 * MB  # all 22 copies of a rank's tokens in its latent width
    flat = moe_dispatch_time_s(size, 64, 8, 22, 512, HGX_B200, CAL, "all_to_all")
    tree = moe_dispatch_time_s(size, 64, 8, 22, 512, HGX_B200, CAL, "hierarchical")
    # bandwidth-bound: the time ratio is the ratio of network copies, 6.65 / 19.25
    ratio = domains_hit(22, 512, np.array([8.0]))[0] / (22 * 56 / 64)
    assert ratio == pytest.approx(0.3456, abs=1e-4)
    assert tree / flat == pytest.approx(ratio, rel=0.01)


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from([(HGX_B200, 8), (NVL72, 72)]),
    st.sampled_from([8, 12, 16, 20, 32, 64, 80, 96, 128, 144, 256]),
    st.sampled_from([1, 2, 4, 8, 22]),
    st.sampled_from([64, 96, 128, 160, 256, 512]),
    st.floats(1e3, 1e9),
)
def test_hierarchical_never_sends_more_than_nccl_all_to_all(
    system: tuple[Fabric, int], ep: int, top_k: int, experts: int, size: float
) -> None:
    # as the training step places an EP group: whole domains, the last one perhaps partly
    fabric, dom = system
    k = min(dom, ep)
    flat = moe_dispatch_time_s(size, ep, k, top_k, experts, fabric, CAL, "all_to_all")
    tree = moe_dispatch_time_s(size, ep, k, top_k, experts, fabric, CAL, "hierarchical")
    assert tree <= flat * (1 + 1e-12)
    hits = domains_hit(top_k, experts, np.array([ep / k]))[0]
    assert 0.0 <= hits <= top_k * (ep - k) / ep + 1e-12


def test_a_partly_filled_last_domain_counts_as_its_fraction() -> None:
    # Llama 4 Maverick (128 experts, top-1) with EP 128 on NVL72: 72 + 56 GPUs; a token's one
    # expert is in the other rack with probability 56/128, never more often
    assert domains_hit(1, 128, np.array([128 / 72]))[0] == pytest.approx(56 / 128)


def test_without_nvlink_every_copy_travels_on_its_own() -> None:
    pcie = Fabric.from_system(get_system("pcie-8gpu-gen5"), total_gpus=64)
    flat = moe_dispatch_time_s(64 * MB, 8, 1, 8, 128, pcie, CAL, "all_to_all")
    assert moe_dispatch_time_s(64 * MB, 8, 1, 8, 128, pcie, CAL) == pytest.approx(flat)


def test_an_unknown_dispatcher_is_an_input_error_naming_the_flag() -> None:
    with pytest.raises(InputError) as exc:
        moe_dispatch_time_s(MB, 16, 8, 8, 128, HGX_B200, CAL, "deepep")
    assert exc.value.field == "ep-dispatch"
    assert "hierarchical" in exc.value.valid


def _notes(e: TrainingEstimate) -> list[str]:
    """Plan 0's notes but the one on what its fixed overhead is (these MoE steps' host
    costs make it 5 % or more)."""
    return [n for n in e.notes(0) if not n.startswith("fixed overhead")]


def test_the_estimate_says_how_often_a_token_crosses_the_network() -> None:
    from dataclasses import replace

    from gpuscale.catalog import get_gpu, get_model, system_for_gpu
    from gpuscale.perf.plan import Plans, Workload
    from gpuscale.perf.training import estimate

    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    w = Workload(get_model("qwen3-30b-a3b"), g, s, Fabric.from_system(s, 64), 64, 4096, 256)
    over_nodes = Plans.of(tp=1, pp=1, dp=64, ep=32, mbs=1, recompute=0)
    (note,) = _notes(estimate(w, over_nodes, CAL))
    assert "spans 4 NVLink domains" in note
    assert "2.72 times" in note and "would make 6.00" in note  # 8 x 24/32 copies
    (flat,) = _notes(estimate(replace(w, ep_dispatch="all_to_all"), over_nodes, CAL))
    assert "6.00 times" in flat and "would make 2.72" in flat
    in_node = Plans.of(tp=1, pp=1, dp=64, ep=8, mbs=1, recompute=0)
    assert _notes(estimate(w, in_node, CAL)) == []
    # the JSON says which dispatch and which recompute modules it priced: none for a plan
    # that does not recompute selectively
    summary = estimate(replace(w, ep_dispatch="all_to_all"), in_node, CAL).summary(0)
    assert (summary["ep_dispatch"], summary["recompute_modules"]) == ("all_to_all", [])
    sel = Plans.of(tp=1, pp=1, dp=64, ep=8, mbs=1, recompute=1)
    assert estimate(w, sel, CAL).summary(0)["recompute_modules"] == ["core_attn"]


def test_the_note_counts_a_partly_filled_rack_and_skips_pcie() -> None:
    from gpuscale.catalog import get_gpu, get_model
    from gpuscale.perf.plan import Plans, Workload
    from gpuscale.perf.training import estimate

    g = get_gpu("gb200")
    sys_ = get_system("gb200-nvl72")
    w = Workload(
        get_model("llama4-maverick"), g, sys_, Fabric.from_system(sys_, 256), 256, 4096, 256
    )
    (note,) = _notes(estimate(w, Plans.of(tp=1, pp=1, dp=256, ep=128, mbs=1, recompute=0), CAL))
    # 72 + 56 GPUs: two racks, 56/128 of the top-1 copies leave the rack either way
    assert "spans 2 NVLink domains" in note and "0.44 times" in note
    h = get_gpu("h100-pcie")
    pcie = get_system("pcie-8gpu-gen5")
    w = Workload(get_model("qwen3-30b-a3b"), h, pcie, Fabric.from_system(pcie, 8), 8, 4096, 64)
    assert _notes(estimate(w, Plans.of(tp=1, pp=1, dp=8, ep=8, mbs=1, recompute=0), CAL)) == []


def test_group_limited_routing_reaches_at_most_its_groups_domains() -> None:
    # DeepSeek-V3: 256 experts in 8 groups, a token's top-8 drawn from 4 of them. Over 8
    # domains (one group each) its experts lie in 4 domains' 128 experts: it touches
    # 4 (1 - prod_{i<8} (96 - i) / (128 - i)) of them, the own domain a 1/8 share
    miss = np.prod([(96 - i) / (128 - i) for i in range(8)])
    want = 7 / 8 * 4 * (1 - miss)
    got = float(domains_hit(8, 256, np.array([8.0]), 8, 4)[0])
    assert got == pytest.approx(want, rel=1e-12)
    uniform = float(domains_hit(8, 256, np.array([8.0]))[0])
    assert got < uniform
    # two groups a domain (4 domains): domains holding one of the 4 chosen groups of 8
    hold = 4 * (1 - (6 / 8) * (5 / 7) * (4 / 6) * (3 / 5))
    assert float(domains_hit(8, 256, np.array([4.0]), 8, 4)[0]) == pytest.approx(3 / 4 * hold)
    # no limit (topk_groups 0, or every group) is the uniform count; one domain, none
    for kg in (0, 8):
        assert float(domains_hit(8, 256, np.array([8.0]), 8, kg)[0]) == uniform
    assert float(domains_hit(8, 256, np.array([1.0]), 8, 4)[0]) == 0.0


def test_the_note_names_deepseek_v3_s_group_limited_routing() -> None:
    from gpuscale.catalog import get_gpu, get_model, system_for_gpu
    from gpuscale.perf.plan import Plans, Workload
    from gpuscale.perf.training import estimate

    g = get_gpu("h800")
    s = system_for_gpu(g)
    w = Workload(get_model("deepseek-v3"), g, s, Fabric.from_system(s, 128), 128, 4096, 256, "fp8")
    e = estimate(w, Plans.of(tp=1, pp=2, dp=64, ep=64, mbs=1, recompute=0), CAL)
    note = next(n for n in e.notes(0) if "NVLink domains" in n)
    hits = float(domains_hit(8, 256, np.array([8.0]), 8, 4)[0])
    assert f"{hits:.2f} times" in note and "drawn from 4 of 8 expert groups" in note
