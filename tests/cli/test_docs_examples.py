"""Every `gpuscale` command in README.md's bash blocks runs as written and exits 0.

Each command is run in-process, as the `gpuscale` entry point runs it, in an empty working
directory (so that `--html scaling.html` or `--out my.json` writes there), with the paths the
README names under the repository (`examples/...`) taken from the repository's root. The
calibration walk-through reads files that earlier steps measure on a GPU; the repository's
own measurement of one H200 stands in for them. A command whose input only the user can
bring is listed in SKIPPED with why, so that it is reported rather than silently dropped.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from cli_runner import run_cli

from gpuscale.spec import load_training_job

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.DOTALL | re.MULTILINE)

SKIPPED: dict[str, str] = {
    "path/to/config.json": "a placeholder for a Hugging Face config.json on the user's disk",
    "bench.json": "written by `gpuscale bench collectives` under torchrun on the cluster's GPUs",
    "/mnt/checkpoints": "a placeholder for the checkpoint storage to measure (it writes there)",
    "job.yaml": "a placeholder for the user's own workload, with my.json from the steps above",
}
"""An argument naming what only the user has -> why the command that names it is not run."""

MEASURED: dict[str, str] = {
    "gpu.json": "benchmarks/measured/h200_2026-12-04.json",
    "steps.csv": "benchmarks/heldout/training_measured_h200.csv",
    "peaks.csv": "benchmarks/heldout/memory_measured_h200.csv",
}
"""The calibration walk-through's inputs -> the repository's files of the same kind:
benchmarks/gpu_checks.py's JSON from one H200 and the rows benchmarks/gpu_rows.py wrote
from it."""

XFAIL: dict[str, str] = {}
"""A documented command that fails today (its text -> the error), kept visible as xfail."""

OUTPUT_OPTIONS = ("--html", "--out")


def bash_blocks(text: str) -> list[str]:
    """The bodies of the fenced ```bash blocks, backslash-continued lines joined."""
    return [re.sub(r"\\\n", " ", body) for body in BASH_BLOCK.findall(text)]


def gpuscale_commands(text: str) -> list[list[str]]:
    """Each `gpuscale ...` command of the bash blocks as its arguments (without `gpuscale`):
    one per line or per `&&`-joined part of a line, trailing `# comments` dropped."""
    commands = []
    for block in bash_blocks(text):
        for line in block.splitlines():
            part: list[str] = []
            for token in [*shlex.split(line, comments=True), "&&"]:
                if token != "&&":
                    part.append(token)
                    continue
                if part and part[0] == "gpuscale":
                    commands.append(part[1:])
                part = []
    return commands


COMMANDS = gpuscale_commands(README.read_text())


def command_id(args: list[str]) -> str:
    text = " ".join(args)
    return text if len(text) <= 90 else text[:87] + "..."


def skip_reason(args: list[str]) -> str | None:
    return next((why for arg, why in SKIPPED.items() if arg in args), None)


def cases() -> list[object]:
    out: list[object] = []
    seen: dict[str, int] = {}
    for args in COMMANDS:
        text = " ".join(args)
        ident = command_id(args)
        seen[ident] = seen.get(ident, 0) + 1
        if seen[ident] > 1:
            ident = f"{ident} #{seen[ident]}"
        marks: list[pytest.MarkDecorator] = []
        if (why := skip_reason(args)) is not None:
            marks.append(pytest.mark.skip(reason=why))
        if text in XFAIL:
            marks.append(pytest.mark.xfail(strict=True, reason=XFAIL[text]))
        out.append(pytest.param(args, id=ident, marks=marks))
    return out


def in_repo(arg: str) -> str:
    """A relative path the README names under the repository, as an absolute path."""
    if "/" in arg and not arg.startswith(("/", "-")) and (REPO / arg).exists():
        return str(REPO / arg)
    return arg


def test_commands_are_read_as_a_shell_reads_them() -> None:
    text = (
        "```bash\n"
        "pip install -e . && gpuscale train search --workload a.yaml\n"
        "gpuscale train estimate --model m \\\n"
        "    --tp 8   # a comment\n"
        "python x.py --out gpu.json   # not gpuscale\n"
        "```\n"
        "```\ngpuscale cluster show other-language.yaml\n```\n"
    )
    assert gpuscale_commands(text) == [
        ["train", "search", "--workload", "a.yaml"],
        ["train", "estimate", "--model", "m", "--tp", "8"],
    ]


def test_readme_commands_are_found() -> None:
    """The extraction sees the README's examples: enough of them, every command group."""
    assert len(COMMANDS) >= 15, COMMANDS
    groups = {args[0] for args in COMMANDS}
    assert {"train", "infer", "cluster", "comm", "calibrate", "bench"} <= groups, groups
    assert {args[1] for args in COMMANDS if args[0] == "train"} == {"estimate", "search", "scaling"}
    # a skip or stand-in that names nothing in the README any more is stale
    named = {arg for args in COMMANDS for arg in args}
    assert set(SKIPPED) <= named, set(SKIPPED) - named
    assert set(MEASURED) <= named, set(MEASURED) - named
    assert set(XFAIL) <= {" ".join(args) for args in COMMANDS}
    assert all((REPO / path).is_file() for path in MEASURED.values())


def test_readme_opens_with_the_setup_commands() -> None:
    """The README's first two lines install gpuscale and search the bundled example job,
    then install the test extras and run the suite, the line `.ci/run` runs."""
    first = bash_blocks(README.read_text())[0].splitlines()
    assert len(first) == 2, first
    install, suite = first
    assert install.startswith("pip install -e . && gpuscale train search --workload ")
    tokens = shlex.split(install)
    workload = REPO / tokens[tokens.index("--workload") + 1]
    assert workload.is_file(), workload
    assert load_training_job(workload).gpus  # a job the search can run without more flags
    assert "python -m pytest" in suite
    assert suite in (REPO / ".ci" / "run").read_text().splitlines()


@pytest.mark.parametrize("args", cases())
def test_readme_command_runs(
    args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, source in MEASURED.items():
        if name in args:
            shutil.copy(REPO / source, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli([in_repo(arg) for arg in args], capsys)
    assert code == 0, f"gpuscale {shlex.join(args)}\nexit {code}\n{err}\n{out[-3000:]}"
    for i, arg in enumerate(args[:-1]):
        if arg in OUTPUT_OPTIONS:
            assert (tmp_path / args[i + 1]).exists(), f"{arg} {args[i + 1]} not written"
