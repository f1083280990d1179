"""A config.json's dropout probabilities decide whether training keeps dropout masks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuscale.catalog.hf import load_hf_config
from gpuscale.errors import InputError

GPT2: dict[str, Any] = {
    "model_type": "gpt2",
    "n_layer": 32,
    "n_embd": 4096,
    "n_head": 32,
    "n_inner": 16384,
    "vocab_size": 50257,
    "n_positions": 2048,
}
LLAMA: dict[str, Any] = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "intermediate_size": 11008,
    "vocab_size": 32000,
    "attention_dropout": 0.0,
}


def _model(tmp_path: Path, cfg: dict[str, Any]) -> Any:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return load_hf_config(path)


@pytest.mark.parametrize(
    ("cfg", "dropout"),
    [
        ({**GPT2, "resid_pdrop": 0.1, "attn_pdrop": 0.1, "embd_pdrop": 0.1}, True),  # GPT-2
        ({**GPT2, "resid_pdrop": 0.0, "attn_pdrop": 0.0, "embd_pdrop": 0.0}, False),
        ({**GPT2, "model_type": "opt", "dropout": 0.1, "attention_dropout": 0.0}, True),  # OPT
        ({**GPT2, "model_type": "bloom", "hidden_dropout": 0.0}, False),  # BLOOM 176B
        (LLAMA, False),
        # attention dropout alone keeps no mask under flash attention
        ({**LLAMA, "attention_dropout": 0.05}, False),
        ({**GPT2, "attn_pdrop": 0.1}, False),
        (GPT2, False),  # no key: nothing says the model trains with dropout
    ],
)
def test_dropout_is_read_from_its_probabilities(
    tmp_path: Path, cfg: dict[str, Any], dropout: bool
) -> None:
    assert _model(tmp_path, cfg).dropout is dropout


@pytest.mark.parametrize("value", ["0.1", True, -0.1, 1.0, [0.1]])
def test_a_bad_probability_names_its_key(tmp_path: Path, value: Any) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**GPT2, "resid_pdrop": value}))
    with pytest.raises(InputError) as exc:
        load_hf_config(path)
    assert exc.value.field.endswith("config.json:resid_pdrop")
    assert "0 <= p < 1" in exc.value.valid


def test_dropout_masks_add_to_the_activations(tmp_path: Path) -> None:
    """Korthikanti et al. 2022, Table 2: without recomputation a layer keeps
    s*b*h*(34 + 5*a*s/h) bytes, of which the dropout masks are 2*s*b*h (two hidden-state
    dropouts, one byte an element) plus a*s^2*b (the attention dropout, which flash
    attention does not keep). With flash attention the masks add 2*s*b*h a layer."""
    from gpuscale.calibrate import default_calibration
    from gpuscale.catalog import get_gpu, system_for_gpu
    from gpuscale.perf.comm import Fabric
    from gpuscale.perf.memory import memory_breakdown
    from gpuscale.perf.plan import Plans, Workload

    with_masks = _model(tmp_path, {**GPT2, "resid_pdrop": 0.1})
    without = with_masks.model_copy(update={"dropout": False})
    gpu = get_gpu("h100-sxm")
    system = system_for_gpu(gpu)
    plan = Plans.of(dp=8, mbs=1, recompute=0, sharding=0)
    acts = []
    for m in (with_masks, without):
        w = Workload(m, gpu, system, Fabric.from_system(system, 8), 8, 2048, 8)
        acts.append(float(memory_breakdown(w, plan, default_calibration()).activations[0]))
    s, h, layers = 2048, 4096, 32
    # the memory model holds 10 % more activation memory for the caching allocator
    assert acts[0] - acts[1] == pytest.approx(1.1 * layers * 2 * s * h, rel=0.02)
