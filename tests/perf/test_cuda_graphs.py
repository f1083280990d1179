"""Whole-step CUDA graphs: the per-step host overhead is not paid, nothing else changes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_runner import run_cli

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import SHARDING, Plans, Workload
from gpuscale.perf.training import estimate
from gpuscale.validate.training_stack import cuda_graphs

CAL = default_calibration()


def test_whole_step_graphs_drop_exactly_the_step_overhead() -> None:
    g = get_gpu("gb300")
    s = system_for_gpu(g)
    w = Workload(get_model("llama3-8b"), g, s, Fabric.from_system(s, 8), 8, 8192, 16, "fp8")
    p = Plans.of(dp=8, mbs=2, sharding=SHARDING.index("dist-opt"))
    eager, graphed = estimate(w, p, CAL), estimate(replace(w, cuda_graphs=True), p, CAL)
    assert CAL.step_overhead_s > 0
    assert float(eager.step_s[0] - graphed.step_s[0]) == pytest.approx(CAL.step_overhead_s)
    assert float(eager.step.overhead_s[0] - graphed.step.overhead_s[0]) == (
        pytest.approx(CAL.step_overhead_s)
    )
    assert float(eager.step.compute_s[0]) == float(graphed.step.compute_s[0])


def test_the_flag_and_the_workload_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["train", "estimate", "--model", "llama3-8b", "--gpu", "gb300", "--gpus", "8"]
    args += ["--seq-len", "8192", "--global-batch", "16", "--mbs", "2", "--json"]
    code, out, _ = run_cli(args, capsys)
    assert code == 0 and json.loads(out)["cuda_graphs"] is False
    code, out, _ = run_cli([*args, "--cuda-graphs"], capsys)
    graphed = json.loads(out)
    assert code == 0 and graphed["cuda_graphs"] is True
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpu: gb300\ngpus: 8\ncuda_graphs: true\n")
    code, out, _ = run_cli(["train", "estimate", "--workload", str(job), "--json"], capsys)
    assert code == 0 and json.loads(out)["cuda_graphs"] is True
    job.write_text("model: llama3-8b\ngpu: gb300\ngpus: 8\ncuda_graphs: often\n")
    code, _, err = run_cli(["train", "estimate", "--workload", str(job)], capsys)
    assert code == 2 and "cuda_graphs" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("notes", "graphed"),
    [
        ("cuda_graph_impl=local, cuda_graph_scope=full_iteration", True),
        ("full-iteration CUDA graphs", True),
        ("CUDA graphs of the whole step", True),
        ("--cuda-graph-scope full_iteration", True),
        ("megatron.core.full_cuda_graph.FullCudaGraphWrapper", True),
        ("torch.compile graph of the whole step", False),
        # Megatron-Core's default scope and the Megatron-Bridge recipes' are per layer
        ("CUDA graphs (config_common_cg.sh)", False),
        ("LAYER_CUDA_GRAPH=1", False),
        ("cuda_graph_scope: [attn, mamba]", False),
        ("no full-iteration CUDA graphs", False),
    ],
)
def test_rows_name_whole_step_graphs(notes: str, graphed: bool) -> None:
    assert cuda_graphs({"notes": notes})[0] is graphed
