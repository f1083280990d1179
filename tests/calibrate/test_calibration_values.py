"""A calibration file's values: finite, and within what each constant physically is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuscale.calibrate import Calibration, default_calibration
from gpuscale.errors import InputError


def _load(tmp_path: Path, data: dict[str, Any]) -> Calibration:
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data))
    return Calibration.load(path)


@pytest.mark.parametrize(
    ("key", "value", "valid"),
    [
        ("hbm_eff", 0, "(0, 1]"),
        ("gemm_eff_max", 50, "(0, 1]"),
        ("dp_overlap", 1.5, "[0, 1]"),
        ("fp8_gemm_speedup", 0, "(0, inf)"),
        ("mem_activation_overhead", 0.5, "[1, inf)"),
        ("step_overhead_s", -1, "[0, inf)"),
        ("gemm_eff_max", "0.8", "a finite number"),
        ("gemm_eff_max", True, "a finite number"),
    ],
)
def test_an_impossible_constant_is_refused(
    tmp_path: Path, key: str, value: Any, valid: str
) -> None:
    with pytest.raises(InputError) as exc:
        _load(tmp_path, {key: value})
    assert exc.value.field.endswith(f":{key}")
    assert valid in exc.value.valid


def test_nan_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    path.write_text('{"gemm_eff_max": NaN}')
    with pytest.raises(InputError, match="finite"):
        Calibration.load(path)


def test_the_shipped_calibration_is_within_range(tmp_path: Path) -> None:
    shipped = default_calibration().to_dict()
    assert _load(tmp_path, shipped).to_dict() == shipped
