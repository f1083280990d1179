"""`gpuscale export launch` bad input: one line naming the field, exit 2, nothing half-written."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

import gpuscale.export.launch as launch_mod
from gpuscale.cli import main
from gpuscale.errors import InputError
from gpuscale.export import render_launch, write_launch
from gpuscale.topology import load_cluster_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"
CLUSTER = EXAMPLES / "dgx-h100-superpod-1su.yaml"
JOB = "dgx-h100-superpod-1su-collectives-32n"
SBATCH, MANIFEST = f"{JOB}.sbatch", f"{JOB}.pytorchjob.yaml"


def _fail(capsys: Any, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main(["export", "launch", "--cluster", str(CLUSTER), *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def _ok(*argv: str, cluster: Path = CLUSTER) -> None:
    main(["export", "launch", "--cluster", str(cluster), *argv])


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --- 1. a target that is a directory: all files or none -----------------------------------
@pytest.mark.parametrize("blocked", [MANIFEST, SBATCH])
def test_a_target_that_is_a_directory_writes_nothing(
    tmp_path: Path, capsys: Any, blocked: str
) -> None:
    out = tmp_path / "out"
    (out / blocked).mkdir(parents=True)
    err = _fail(capsys, "--out", str(out))
    assert err.startswith(f"error: --out={str(out)!r}") and blocked in err
    assert "is a directory" in err
    assert _tree(out) == [blocked]  # the other file was not written either


def test_a_failed_rename_rolls_back_the_files_already_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / SBATCH).write_text("old sbatch\n")
    files = render_launch(load_cluster_spec(CLUSTER))
    real_replace = os.replace
    calls: list[str] = []

    def flaky_replace(src: Any, dst: Any) -> None:
        calls.append(str(dst))
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(launch_mod.os, "replace", flaky_replace)
    with pytest.raises(InputError) as err:
        write_launch(files, out)
    monkeypatch.undo()
    assert err.value.field == "--out" and "No space left" in err.value.valid
    assert _tree(out) == [SBATCH]  # no temporary or backup file left
    assert (out / SBATCH).read_text() == "old sbatch\n"


def test_rewriting_replaces_both_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _ok("--out", str(out), "--nodes", "4")
    _ok("--out", str(out), "--nodes", "4", "--image", "nvcr.io/nvidia/pytorch:24.05-py3")
    name4 = "dgx-h100-superpod-1su-collectives-4n"
    assert _tree(out) == [f"{name4}.pytorchjob.yaml", f"{name4}.sbatch"]
    assert "nvcr.io/nvidia/pytorch:24.05-py3" in (out / f"{name4}.pytorchjob.yaml").read_text()


# --- 2. --out that cannot be a directory ------------------------------------------------
def test_out_that_is_a_file_or_under_a_file(tmp_path: Path, capsys: Any) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    err = _fail(capsys, "--out", str(afile))
    assert err.startswith(f"error: --out={str(afile)!r}") and "not a directory" in err
    err = _fail(capsys, "--out", str(afile / "sub" / "dir"))
    assert "--out=" in err and f"{afile} exists and is not a directory" in err
    assert afile.read_text() == "x\n"


@pytest.mark.parametrize("where", ["/proc/gpuscale-no-such/out", "/proc/1", "/sys/gpuscale-out"])
def test_out_that_cannot_be_created_or_written(capsys: Any, where: str) -> None:
    top = Path("/", where.split("/")[1])
    if not top.is_dir():
        pytest.skip(f"no {top} here")
    err = _fail(capsys, "--out", where)
    assert err.startswith(f"error: --out={where!r} is invalid:")
    assert not Path(where, SBATCH).exists()


def test_out_too_long_for_the_system_or_empty(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    long = tmp_path / ("a" * 300) / "sub"  # a name past NAME_MAX (255 bytes)
    err = _fail(capsys, "--out", str(long))
    assert "--out=" in err and "a path the system can open (File name too long)" in err
    monkeypatch.chdir(tmp_path)  # an empty --out is refused, not read as "."
    err = _fail(capsys, "--out", "")
    assert "out='' is invalid: empty" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
def test_out_in_a_read_only_directory(tmp_path: Path, capsys: Any) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    try:
        err = _fail(capsys, "--out", str(ro / "new"))
        assert "--out=" in err and "not writable" in err
    finally:
        ro.chmod(0o700)


def test_out_created_with_its_parents(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "c"
    _ok("--out", str(out))
    assert _tree(out) == [MANIFEST, SBATCH]


# --- 3. --image -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "image",
    ["foo: bar", '"quoted', "a\nb", "", " ", "Upper/Case", "a b", "x:tag with space", "a'b"],
)
def test_bad_image_is_an_input_error(tmp_path: Path, capsys: Any, image: str) -> None:
    out = tmp_path / "out"
    err = _fail(capsys, "--out", str(out), "--image", image)
    if image.strip():
        said = f"error: --image={image!r} is invalid: a container image reference"
    else:  # an empty value, refused as every option's is
        said = f"error: image={image!r} is invalid: empty: give a value (see --image"
    assert err.startswith(said)
    assert not out.exists()


@pytest.mark.parametrize(
    "image",
    [
        "gpuscale:latest",
        "nvcr.io/nvidia/pytorch:24.05-py3",
        "localhost:5000/team/bench",
        "ghcr.io/org/img:v1.2@sha256:" + "0123456789abcdef" * 4,
        "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
    ],
)
def test_good_image_lands_verbatim_in_every_container(image: str) -> None:
    files = render_launch(load_cluster_spec(CLUSTER), nodes=2, image=image)
    job = yaml.safe_load(files.files[f"{files.job_name}.pytorchjob.yaml"])
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert {r["template"]["spec"]["containers"][0]["image"] for r in specs.values()} == {image}


# --- 4. cluster name with control characters ----------------------------------------------
@pytest.mark.parametrize(
    "name", ["weird: name\n  x: 1", "a\nrm -rf ~", "tab\there", "cr\rx", "ls\u2028x", "nul\x00"]
)
def test_cluster_name_with_control_characters_is_rejected(
    tmp_path: Path, capsys: Any, name: str
) -> None:
    raw = yaml.safe_load(CLUSTER.read_text())
    raw["name"] = name
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main(["export", "launch", "--cluster", str(cluster), "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"error: name={name!r} is invalid:")
    assert "control characters" in err
    assert not out.exists()


def test_cluster_name_with_odd_printable_characters_stays_in_its_comment(tmp_path: Path) -> None:
    raw = yaml.safe_load(CLUSTER.read_text())
    raw["name"] = "weird: name $(id) `x` # [y]"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"
    _ok("--out", str(out), cluster=cluster)
    (sbatch,) = out.glob("*.sbatch")
    (manifest,) = out.glob("*.yaml")
    lines = [ln for ln in sbatch.read_text().splitlines() if "weird" in ln]
    assert lines and all(ln.startswith("#") for ln in lines)
    assert yaml.safe_load(manifest.read_text())["kind"] == "PyTorchJob"


# --- 5. file modes ------------------------------------------------------------------------
def test_manifest_is_0644_and_sbatch_is_0755(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _ok("--out", str(out))
    assert stat.S_IMODE((out / MANIFEST).stat().st_mode) == 0o644
    assert stat.S_IMODE((out / SBATCH).stat().st_mode) == 0o755
