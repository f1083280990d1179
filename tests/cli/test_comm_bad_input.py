"""`gpuscale comm estimate` bad input: one line naming the flag, exit code 2, no hang."""

from __future__ import annotations

import pytest
from cli_runner import run_cli

DGX = ["comm", "estimate", "--system", "dgx-h100", "--nodes", "1"]
DGX2 = ["comm", "estimate", "--system", "dgx-h100", "--nodes", "2", "--gpus", "16"]


run = run_cli


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--members-per-domain", "0"], "--members-per-domain=0"),
        (["--members-per-domain", "-3"], "--members-per-domain=-3"),
        (["--members-per-domain", "100"], "--members-per-domain=100"),
        (["--members-per-domain", "nan"], "--members-per-domain=nan"),
        (["--members-per-domain", "2.5"], "--members-per-domain=2.5"),
        (["--members-per-domain", "3"], "a divisor of the group's 8 GPUs"),
        (["--cluster", "examples/clusters/dgx-h100-superpod-1su.yaml"], "either --cluster or"),
        (["-b", "1", "-e", "3"], "-e/--maxbytes='3'"),
        (["-f", "1.0000001", "-e", "1M"], "-f/--stepfactor=1.0000001"),
        (["--op", "send_recv", "--gpus", "1"], "--gpus=1"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    extra: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([*DGX, *extra], capsys)
    assert code == 2, out
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_members_per_domain_needs_domains_the_cluster_has(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(
        [*DGX2, "--members-per-domain", "1"],
        capsys,
    )
    assert code == 2 and "need 16 domains" in err


def test_a_valid_members_per_domain_and_small_sizes_still_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(
        [*DGX2, "--members-per-domain", "8", "-b", "1", "-e", "64", "--op", "send_recv"],
        capsys,
    )
    assert code == 0, err
    sizes = [int(ln.split()[0]) for ln in out.splitlines() if not ln.startswith("#")]
    assert sizes == [4, 8, 16, 32, 64]


def test_the_least_step_factor_suggested_is_one_the_sweep_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 8 B to 8 GiB in at most 10,000 sizes: a factor of at least 2^30^(1/9,999) = 1.0020817,
    # suggested rounded up to six figures (1.00209), never down (1.00208 gives 10,008)
    code, _, err = run([*DGX2, "-b", "8", "-e", "8G", "-f", "1.00208"], capsys)
    assert code == 2 and "gives 10,008 sizes" in err and "at least 1.00209)" in err
    code, _, err = run([*DGX2, "-b", "8", "-e", "8G", "-f", "1.00209"], capsys)
    assert code == 0, err
