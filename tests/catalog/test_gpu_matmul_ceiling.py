"""Every catalog GPU carries its matmul ceiling (MAMF / dense peak) and says where it is from."""

from __future__ import annotations

from gpuscale.catalog import gpus


def test_every_gpu_has_a_sourced_matmul_ceiling() -> None:
    for key, g in gpus().items():
        assert 0.3 < g.matmul_eff <= 1.0, key
        assert "matmul_eff" in g.source, key
        said = "measured" in g.source or "estimated" in g.source
        assert said, f"{key}: its source must say whether matmul_eff is measured or estimated"


def test_a_die_without_its_own_measurement_takes_the_dies_fraction() -> None:
    g = gpus()
    assert g["a800-sxm-80gb"].matmul_eff == g["a100-sxm-80gb"].matmul_eff
    assert g["h800"].matmul_eff == g["h100-sxm"].matmul_eff
    assert g["gb300"].matmul_eff == g["b300"].matmul_eff
    assert g["mi350x"].matmul_eff == g["mi355x"].matmul_eff
    # measured parts differ: Hopper and Blackwell reach less of their peak than Ampere,
    # MI300X about half of its
    assert g["a100-sxm-80gb"].matmul_eff > g["h100-sxm"].matmul_eff > g["b200"].matmul_eff
    assert g["mi300x"].matmul_eff < 0.55
