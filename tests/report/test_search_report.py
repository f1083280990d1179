"""`train search --html`: every plan that fits, drawn by layout, the best marked, the
ranked table and the reason the best wins, in a page that opens offline."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from cli_runner import run_cli

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import Workload
from gpuscale.report.search import search_figure, write_search_report
from gpuscale.search.explain import explain
from gpuscale.search.plans import SearchResult, search_plans
from gpuscale.units import GiB, fmt_bytes, fmt_time


def result(gpus: int = 64, gbs: int = 256, headroom: float = 0.0) -> SearchResult:
    g = get_gpu("h100-sxm")
    s = system_for_gpu(g)
    f = Fabric.from_system(s, gpus)
    w = Workload(get_model("llama3-8b"), g, s, f, gpus, 4096, gbs, "bf16", memory_headroom=headroom)
    return search_plans(w, default_calibration())


def test_every_fitting_plan_is_drawn_once_by_tp_and_the_best_is_on_top() -> None:
    # 1,000 GPUs and a batch of 250: some plans leave GPUs idle and run faster per GPU
    # they use; over all 1,000 GPUs the fastest step is the highest point
    res = result(1000, 250)
    e, p = res.estimate, res.estimate.plans
    assert (e.plans.gpus_used()[res.order] < 1000).any()
    fig = search_figure(res)
    groups = [t for t in fig.data if t.name != "best plan"]
    assert sum(len(t.x) for t in groups) == len(res.order)
    for t in groups:  # each trace holds one tensor-parallel degree
        assert all(label.startswith(t.name + " ") for label in t.text)
    assert len({t.marker.color for t in groups}) == len(groups)
    star = fig.data[-1]  # drawn last, on top
    assert star.name == "best plan" and star.type == "scattergl"
    b = res.best
    assert star.x[0] == pytest.approx(float(e.memory.total[b]) / GiB)
    rate = float(e.tokens_per_s_per_gpu[b]) * int(p.gpus_used()[b]) / 1000
    assert star.y[0] == pytest.approx(rate)
    assert star.y[0] == pytest.approx(max(max(t.y) for t in groups))
    assert fig.layout.xaxis.title.text == "memory per GPU (GiB)"
    assert fig.layout.yaxis.title.text == "tokens/s per GPU (of all 1,000 GPUs)"


def test_the_memory_line_is_what_a_plan_may_use() -> None:
    res = result(headroom=0.1)
    fig = search_figure(res)
    line = fig.layout.shapes[0]
    usable = float(res.estimate.memory.capacity) / GiB
    assert line.x0 == pytest.approx(usable)
    assert usable == pytest.approx(0.9 * 81559 / 1024, rel=1e-6)  # H100: 81,559 MiB
    assert "10 % headroom" in fig.layout.annotations[0].text


def test_page_has_the_table_and_the_reason(tmp_path: Path) -> None:
    res = result()
    out = tmp_path / "search.html"
    write_search_report(out, res, 3)
    html = out.read_text()
    assert "Plotly.newPlot" in html
    for external in ("<script src=", "<link", "<img", "@import"):
        assert external not in html
    e, b = res.estimate, res.best
    assert e.plans.label(b) in html
    # the reason, its `commands` set as code
    why = explain(res).replace("'", "&#39;")
    assert re.sub(r"`([^`]+)`", r"<code>\1</code>", why) in html
    assert "`gpuscale validate training`" in why and "`gpuscale" not in html
    ranked = html.split("<h2>The fastest plans</h2>")[1].split("</table>")[0]
    assert ranked.count("<tr>") == 1 + 3  # the header and the top 3
    # the best plan's memory and step time by term, the terms adding up to the step
    best = html.split("<h2>The best plan: ")[1].split("<h2>")[0]
    assert f"<td>weights</td><td>{fmt_bytes(float(e.memory.weights[b]))}</td>" in best
    terms = {k: float(v[b]) for k, v in e.step.terms().items() if float(v[b]) > 0}
    assert best.count("<tr>") == (1 + 6) + (1 + len(terms) + 1)
    assert f"<td>step</td><td>{fmt_time(float(e.step_s[b]))}</td>" in best
    assert sum(terms.values()) == pytest.approx(float(e.step_s[b]), rel=1e-12)
    assert "&#34;goodput&#34;" in html or '"goodput"' in html  # the columns are defined
    assert [q.name for q in tmp_path.iterdir()] == ["search.html"]
    # the best plan's Megatron-LM arguments, its own tensor-parallel degree first
    tp = int(res.estimate.plans.tp[res.best])
    assert f"<pre>--tensor-model-parallel-size {tp} " in html


def test_cli_refuses_a_missing_directory_before_searching(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "64"]
    code, out, err = run_cli(
        ["train", "search", *job, "--html", str(tmp_path / "no" / "s.html")], capsys
    )
    assert code == 2 and out == ""
    assert err.strip().startswith("error: html=")


def test_a_device_or_a_directory_is_not_a_report_path(tmp_path: Path) -> None:
    from gpuscale.errors import InputError
    from gpuscale.report.page import check_target

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="a new or a regular file"):
        check_target(fifo)
    with pytest.raises(InputError, match="existing directory"):
        check_target(tmp_path)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(InputError, match="html"):
        check_target(loop)


def test_each_ranked_plan_is_compared_with_the_first() -> None:
    from gpuscale.report.cells import search_cells, search_header

    res = result()
    e = res.estimate
    top = res.top(5)
    col = search_header(False, "bf16").index("vs #1")
    cells = [search_cells(res, i, str(n), None) for n, i in enumerate(top, 1)]
    assert cells[0][col] == "-"
    for i, c in zip(top[1:], cells[1:], strict=True):
        # step time over the best's, less one: never negative, the plans are ranked by it
        slower = float(e.step_s[i]) / float(e.step_s[res.best]) - 1.0
        assert slower >= 0.0
        assert c[col] == f"{100 * slower:+.1f}%"


def test_vs_first_is_the_step_time_over_the_first_less_one() -> None:
    from gpuscale.report.cells import search_cells, search_header

    res = result()
    e = res.estimate
    second = int(res.top(2)[1])
    e.step_s[res.best], e.step_s[second] = 2.0, 2.468  # 2.468 / 2 - 1 = +23.4 %
    col = search_header(False, "bf16").index("vs #1")
    assert search_cells(res, second, "2", None)[col] == "+23.4%"
    assert search_cells(res, res.best, "1", None)[col] == "-"


def test_every_step_term_is_said_in_words() -> None:
    from gpuscale.perf.step import STEP_TERMS
    from gpuscale.report.search import TERM_MEANING

    assert set(TERM_MEANING) == set(STEP_TERMS)


def test_the_page_says_the_time_to_train_as_the_terminal_does(tmp_path: Path) -> None:
    # a batch of 64 on 1,024 H100: the best plan leaves half the GPUs idle, and the page
    # gives the GPU-hours of all of them too, in the terminal's words
    from gpuscale.report.cells import time_to_train

    res = result(1024, 64)
    out = tmp_path / "p.html"
    write_search_report(out, res, 5, train_tokens=1e12)
    s = res.estimate.summary(res.best, 1e12)
    assert s["gpus_used"] < s["gpus"]
    text = time_to_train(s, 1e12)
    assert f"of all {s['gpus']:,}" in text and f"Time to train: {text}." in out.read_text()
