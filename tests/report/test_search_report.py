"""`train search --html`: every plan that fits, drawn by layout, the best marked, the
ranked table and the reason the best wins, in a page that opens offline."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import run_cli

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import Workload
from gpuscale.report.search import search_figure, write_search_report
from gpuscale.search.plans import explain, search_plans
from gpuscale.units import GiB


def result():  # type: ignore[no-untyped-def]
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    w = Workload(get_model("llama3-8b"), g, s, Fabric.from_system(s, 64), 64, 4096, 256, "bf16")
    return search_plans(w, default_calibration())


def test_every_fitting_plan_is_drawn_once_by_layout_and_the_best_is_marked() -> None:
    res = result()
    fig = search_figure(res)
    layouts = [t for t in fig.data if t.name != "best plan"]
    assert sum(len(t.x) for t in layouts) == len(res.order)
    e = res.estimate
    for t in layouts:  # each trace holds one TP x PP layout
        tp, pp = (int(v[2:]) for v in t.name.split())
        assert all(f"TP{tp} PP{pp} " in label for label in t.text)
    star = next(t for t in fig.data if t.name == "best plan")
    b = res.best
    assert star.x[0] == pytest.approx(float(e.memory.total[b]) / GiB)
    assert star.y[0] == pytest.approx(float(e.tokens_per_s_per_gpu[b]))
    assert star.y[0] == max(max(t.y) for t in layouts)  # the fastest plan is the best
    assert fig.layout.xaxis.title.text == "memory per GPU (GiB)"


def test_page_has_the_table_and_the_reason(tmp_path: Path) -> None:
    res = result()
    out = tmp_path / "search.html"
    write_search_report(out, res, 3)
    html = out.read_text()
    assert "<script src=" not in html and "Plotly.newPlot" in html
    assert res.estimate.plans.label(res.best) in html
    assert explain(res).split(" is ")[0] in html
    assert [q.name for q in tmp_path.iterdir()] == ["search.html"]


def test_cli_refuses_a_missing_directory_before_searching(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "64"]
    code, out, err = run_cli(
        ["train", "search", *job, "--html", str(tmp_path / "no" / "s.html")], capsys
    )
    assert code == 2 and out == ""
    assert err.strip().startswith("error: html=")
