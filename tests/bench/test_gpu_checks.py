"""benchmarks/gpu_checks.py (the device checks) and gpu_rows.py (their validation rows)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
MEASURED = sorted((BENCH / "measured").glob("h200_*.json"))


def test_the_checks_run_at_toy_sizes_on_the_cpu(tmp_path: Path) -> None:
    """--smoke runs each section but the compiled ones on any device and writes figures
    whose rates follow from their times."""
    torch = pytest.importorskip("torch")
    if tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 5):
        pytest.skip("gpu_checks.py needs torch 2.5 (SDPA's enable_gqa, nn.RMSNorm)")
    out = tmp_path / "m.json"
    only = "hbm,matmul,attention,train llama3.2-1b s4096 mbs4 x2 none eager"
    cmd = [sys.executable, str(BENCH / "gpu_checks.py"), "--smoke", "--out", str(out)]
    subprocess.run([*cmd, "--only", only], check=True, capture_output=True, timeout=300)
    d = json.loads(out.read_text())
    assert set(d["sections"]) == {
        "hbm",
        "matmul",
        "attention",
        "train llama3.2-1b s4096 mbs4 x2 none eager",
    }
    sq = [r for r in d["sections"]["matmul"]["result"]["bf16"] if r["case"] == "square"]
    assert [r["m"] for r in sq] == [64, 128]
    for r in sq:
        assert r["tflops"] == pytest.approx(2 * r["m"] ** 3 / r["s"] / 1e12)
    train = d["sections"]["train llama3.2-1b s4096 mbs4 x2 none eager"]["result"]
    # the toy decoder: 2 layers of hidden 64, 4 heads (2 KV) of 16, FFN 128, vocab 512, tied
    # embedding; per layer 2 norms (128) + QKV 64 x 128 + proj 64 x 64 + fc1 64 x 256
    # + fc2 128 x 64, then the final norm (64) and the embedding (512 x 64)
    layer = 128 + 64 * 128 + 64 * 64 + 64 * 256 + 128 * 64
    assert train["params"] == 2 * layer + 64 + 512 * 64
    assert train["tokens_per_s"] == pytest.approx(2 * 4 * 64 / train["step_s"])


@pytest.mark.skipif(not MEASURED, reason="no stored measurements")
def test_the_held_out_rows_are_what_the_stored_measurements_give(tmp_path: Path) -> None:
    """benchmarks/heldout/*_measured_h200.csv regenerate from benchmarks/measured/."""
    t, m = tmp_path / "t.csv", tmp_path / "m.csv"
    cmd = [sys.executable, str(BENCH / "gpu_rows.py"), *map(str, MEASURED), "--sdpa-backend"]
    cmd.append("cudnn_attention")  # the stored files predate its record: cuDNN, by its rates
    subprocess.run([*cmd, "--training", str(t), "--memory", str(m)], check=True, timeout=120)
    assert t.read_text() == (BENCH / "heldout" / "training_measured_h200.csv").read_text()
    assert m.read_text() == (BENCH / "heldout" / "memory_measured_h200.csv").read_text()
    rows = list(csv.DictReader(t.open()))
    for r in rows:  # tokens/s per GPU = the step's tokens / its time, on one GPU
        tokens = int(r["global_batch_seqs"]) * int(r["seq_len"])
        step = float(r["measured_step_time_s"])
        assert float(r["measured_tokens_per_s_per_gpu"]) == pytest.approx(tokens / step, 1e-3)
