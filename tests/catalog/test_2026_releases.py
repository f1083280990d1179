"""2026 releases that reuse an architecture the catalog holds (aliases or a twin entry with
its own context length) and the new shapes: each resolves to the shape its sources give,
with the parameter count transformers gives on the meta device (5.25: Kimi K2.6's and
Mistral Large 3's text models exactly; Qwen3.5-122B-A10B and Qwen3-VL-30B-A3B but their
Q/K and gate norms, which gpuscale does not count)."""

from __future__ import annotations

import pytest

from gpuscale.catalog import get_model
from gpuscale.perf.transformer import active_param_count, param_count


def _shape(key: str) -> dict[str, object]:
    return get_model(key).model_dump(exclude={"key", "name", "source", "aliases", "max_seq"})


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("GLM-4.6", "glm4.7-355b-a32b"),
        ("GLM-4.7", "glm4.7-355b-a32b"),
        ("GLM-5.1", "glm5-744b-a40b"),
        ("MiniMax-M2.1", "minimax-m2"),
        ("MiniMax-M2.5", "minimax-m2"),
        ("Kimi K2 Thinking", "kimi-k2.5"),
        ("Kimi-K2.6", "kimi-k2.5"),
        ("DeepSeek-V3.1-Terminus", "deepseek-v3"),
        ("Qwen3.6-27B", "qwen3.8-27b"),
        ("Qwen3.5-27B", "qwen3.8-27b"),
        ("Mistral Large 3", "mistral-large-3-675b"),
    ],
)
def test_release_names_resolve(name: str, key: str) -> None:
    assert get_model(name).key == key


def test_twins_differ_only_in_context() -> None:
    assert _shape("glm4.7-355b-a32b") == _shape("glm4.5-355b-a32b")
    assert get_model("GLM-4.7").max_seq == 202_752
    assert _shape("kimi-k2.5") == _shape("kimi-k2")
    assert get_model("Kimi-K2.5").max_seq == 262_144
    for vl, text in (
        ("qwen3-vl-235b-a22b", "qwen3-235b-a22b"),
        ("qwen3-vl-30b-a3b", "qwen3-30b-a3b"),
    ):
        assert param_count(get_model(vl)) == param_count(get_model(text))
        assert get_model(vl).max_seq == 262_144


def test_new_shapes_count_as_transformers() -> None:
    assert param_count(get_model("Kimi-K2.6")) == 1_026_408_209_408
    large3 = get_model("Mistral Large 3")
    assert param_count(large3) == 673_421_089_792
    # DeepSeek-V3's blocks with 128 experts of 4096, top-4: 39.9 B active (its card: 39 B)
    assert active_param_count(large3) == pytest.approx(39.95e9, rel=1e-3)
    qwen = get_model("Qwen3.5-122B-A10B")
    assert qwen.pattern.count("M") == 36 and qwen.attn_layers == 12
    assert param_count(qwen) == pytest.approx(122_111_526_912, rel=2e-6)
    assert param_count(get_model("qwen3-vl-30b-a3b")) == pytest.approx(30_532_122_624, rel=1e-6)
