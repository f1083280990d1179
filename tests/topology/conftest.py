from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscale.topology import ClusterSpec, load_cluster_spec, parse_cluster_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"


@pytest.fixture
def example() -> Any:
    def load(name: str) -> ClusterSpec:
        return load_cluster_spec(EXAMPLES / f"{name}.yaml")

    return load


@pytest.fixture
def variant() -> Any:
    """An example spec with some keys replaced (dotted paths), parsed."""

    def make(name: str, **changes: Any) -> ClusterSpec:
        raw = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
        for dotted, value in changes.items():
            *parents, last = dotted.split("__")
            node = raw
            for p in parents:
                node = node.setdefault(p, {})
            node[last] = value
        return parse_cluster_spec(raw)

    return make
