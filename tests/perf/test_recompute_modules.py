"""Selective recomputation by Megatron-Core module: names, time and memory, by hand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric
from gpuscale.perf.memory import activation_bytes_per_layer
from gpuscale.perf.plan import Plans, Workload
from gpuscale.perf.recompute import parse_modules, selective_forward_s
from gpuscale.perf.step import step_breakdown
from gpuscale.validate.training_rows import UnsupportedRowError, read_recompute_modules

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


def test_the_default_is_the_attention_core() -> None:
    w = workload("llama3-8b")
    p = Plans.of(tp=1, pp=1, dp=8, mbs=1, recompute=1)
    core = step_breakdown(replace(w, recompute_modules=("core_attn",)), p, CAL)
    assert float(step_breakdown(w, p, CAL).recompute_s[0]) == float(core.recompute_s[0])


def test_norm_recompute_reads_and_writes_both_norms_at_hbm_speed() -> None:
    # Llama 3 8B, 32 layers, hidden 4096, one micro-batch of 4096 tokens per GPU, 8 of them:
    # two norms per layer, each reading and writing 4096 x 4096 16-bit values
    w = replace(workload("llama3-8b"), recompute_modules=("layernorm",))
    p = Plans.of(tp=1, pp=1, dp=8, mbs=1, recompute=1)
    got = float(step_breakdown(w, p, CAL).recompute_s[0])
    per_layer = 2 * 4 * 4096 * 4096 / (w.gpu.hbm_bw_Bps * CAL.hbm_eff)
    assert got == pytest.approx(32 * 8 * per_layer, rel=1e-9)


def test_module_recompute_frees_what_the_modules_alone_keep() -> None:
    # Qwen3-30B-A3B in BF16, 4096 tokens per micro-batch, no TP: recomputing the experts'
    # activation frees fc2's input, top-8 x 768 values per token, 2 bytes each; the norms
    # free their outputs, 2 x 2048 values per token
    w = workload("qwen3-30b-a3b")
    p = Plans.of(tp=1, pp=1, dp=8, ep=8, mbs=1, recompute=1)
    base = activation_bytes_per_layer(w, p)
    act = activation_bytes_per_layer(replace(w, recompute_modules=("moe_act",)), p)
    norms = activation_bytes_per_layer(replace(w, recompute_modules=("layernorm",)), p)
    assert float(base[0] - act[0]) == pytest.approx(4096 * 8 * 768 * 2)
    assert float(base[0] - norms[0]) == pytest.approx(4096 * 2 * 2048 * 2)
    whole = activation_bytes_per_layer(replace(w, recompute_modules=("moe",)), p)
    assert whole[0] < act[0]
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
