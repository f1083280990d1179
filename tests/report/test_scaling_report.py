"""`train scaling --html`: a self-contained page (plotly.js inlined, no network), with the
curves' figures, axis titles with units, and nothing left behind when it cannot be written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import Workload
from gpuscale.report.scaling import scaling_figure, write_scaling_report
from gpuscale.search.scaling import ScalingPoint, scaling_curve

SCALING = ("train", "scaling", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "64")


def gpuscale(*args: str) -> subprocess.CompletedProcess[str]:
    entry = "from gpuscale.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", entry, *args], capture_output=True, text=True, check=False
    )


def workload(n: int = 256) -> Workload:
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    return Workload(get_model("llama3-8b"), g, s, Fabric.from_system(s, n), n, 4096, 512, "bf16")


def test_figure_plots_efficiency_and_every_nonzero_term() -> None:
    w = workload()
    pts = scaling_curve(w, default_calibration(), "strong")
    fig = scaling_figure({"strong": pts})
    fitted = [p for p in pts if p.step_s is not None]
    eff = next(t for t in fig.data if t.name == "efficiency")
    assert list(eff.x) == [p.gpus for p in fitted]
    assert list(eff.y) == pytest.approx([100 * (p.efficiency or 0.0) for p in fitted])
    bars = {t.name: t for t in fig.data if t.type == "bar"}
    assert "compute" in bars
    # the stacked bars are GPU-time per token in microseconds: they add up to 1e6 / tok/s/GPU
    for k, p in enumerate(fitted):
        total = sum(b.y[k] for b in bars.values())
        assert total == pytest.approx(1e6 / (p.tokens_per_s_per_gpu or 1.0))
    titles = {a.title.text for a in (fig.layout.xaxis, fig.layout.yaxis2)}
    assert "GPUs" in titles and "GPU-microseconds per token" in titles


def test_page_is_self_contained_and_written_whole(tmp_path: Path) -> None:
    w = workload()
    curves = {"strong": scaling_curve(w, default_calibration(), "strong")}
    out = tmp_path / "scaling.html"
    write_scaling_report(out, w, curves)
    html = out.read_text()
    assert "<script src=" not in html  # plotly.js is inlined: the page opens offline
    assert "Plotly.newPlot" in html and "Llama 3 8B" in html
    assert [p.name for p in tmp_path.iterdir()] == ["scaling.html"]  # no temporary left
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def test_a_report_into_a_missing_directory_is_refused_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="html"):
        write_scaling_report(tmp_path / "nope" / "r.html", workload(), {})
    r = gpuscale(*SCALING, "--mode", "strong", "--html", str(tmp_path / "nope" / "r.html"))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().startswith("error: html=")


def test_cli_writes_the_page_and_still_prints_json(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    r = gpuscale(*SCALING, "--mode", "strong", "--html", str(out), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["strong"][0]["gpus"] == 8
    assert out.stat().st_size > 1_000_000  # plotly.js inside


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_both_modes_share_one_legend_entry_and_colour_per_term() -> None:
    from gpuscale.ops.reliability import FailurePolicy
    from gpuscale.perf.storage import StoragePolicy
    from gpuscale.report.scaling import TERM_COLOURS, TERM_ORDER

    w = workload(1024)
    cal = default_calibration()
    store = StoragePolicy(checkpoint_every_s=3600.0, write_Bps=50e9)
    fail = FailurePolicy(2112 * 86400.0, 600.0)
    curves = {m: scaling_curve(w, cal, m, store, fail) for m in ("strong", "weak")}
    for pts in curves.values():
        for p in pts:
            assert set(p.gpu_s_per_token) <= set(TERM_ORDER)  # every term has its colour
    fig = scaling_figure(curves)
    names = [t.name for t in fig.data if t.showlegend]
    assert len(names) == len(set(names))  # each name once in the legend
    assert {"efficiency", "goodput", "failures", "checkpoints"} <= set(names)
    for t in fig.data:
        if t.type == "bar":
            assert t.marker.color == TERM_COLOURS[t.legendgroup]


def test_page_has_the_summary_and_follows_a_symlink(tmp_path: Path) -> None:
    w = workload()
    curves = {"strong": scaling_curve(w, default_calibration(), "strong")}
    real = tmp_path / "real.html"
    real.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(real)
    write_scaling_report(link, w, curves)
    assert link.is_symlink() and "GPU-time per token changes" in real.read_text()


def test_a_failed_write_is_an_input_error_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = workload()
    curves = {"strong": scaling_curve(w, default_calibration(), "strong")}

    def refuse(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(InputError, match="No space left on device"):
        write_scaling_report(tmp_path / "r.html", w, curves)
    assert list(tmp_path.iterdir()) == []


def test_the_page_says_how_each_mode_sets_the_batch(tmp_path: Path) -> None:
    w = workload(64)
    cal = default_calibration()
    for mode, said in (
        ("strong", "Strong scaling: a global batch of 512 sequences at every GPU count."),
        ("weak", "Weak scaling: the global batch grows with the GPUs, 512 sequences at 64."),
    ):
        path = tmp_path / f"{mode}.html"
        write_scaling_report(path, w, {mode: scaling_curve(w, cal, mode)})
        assert said in path.read_text()


def test_rates_net_of_run_costs_are_marked_as_such() -> None:
    from gpuscale.report.cells import scaling_header

    assert scaling_header(False, "bf16")[4:6] == ("tok/s/GPU", "MFU (bf16 peak)")
    # with checkpoints priced the rates count their time: not a search's per-step rates
    assert scaling_header(True, "fp8")[4:7] == ("tok/s/GPU net", "MFU (fp8 peak) net", "goodput")


def _point(gpus: int, tokens: float, eff: float) -> ScalingPoint:
    g = {"compute_s": 1.0 / tokens}  # GPU-seconds a token, all compute
    return ScalingPoint(gpus, 64, "TP1", gpus, 1.0, tokens, 0.5, eff, "", {}, g)


def test_the_summary_names_the_point_with_the_most_tokens_per_gpu() -> None:
    # a first point that barely fits (800 tok/s/GPU), a peak of 1,200 at 128 GPUs and 720
    # at the last: efficiency 90 % against the first, 60 % of the peak
    from gpuscale.report.cells import scaling_summary

    pts = [_point(16, 800.0, 1.0), _point(128, 1200.0, 1.5), _point(1024, 720.0, 0.9)]
    text = scaling_summary(pts)
    assert text is not None
    assert text.endswith(
        ". The most tokens/s per GPU is at 128 GPUs (1,200); 1,024 GPUs reach 60.0% of it"
    )
    # the first or the last the best: nothing added
    flat = scaling_summary([pts[0], pts[2], _point(2048, 700.0, 0.875)])
    assert flat is not None and "The most tokens/s" not in flat
