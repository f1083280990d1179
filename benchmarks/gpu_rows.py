"""Turn the training steps ``benchmarks/gpu_checks.py`` measured into validation rows.

    python benchmarks/gpu_rows.py MEASURED.json [MORE.json ...] \\
        --training benchmarks/heldout/training_measured_h200.csv \\
        --memory benchmarks/heldout/memory_measured_h200.csv [--gpu h200]

The training file has ``training_runs.csv``'s columns (tokens/s per GPU, the stack named in
the notes as validate reads it: SDPA's cuDNN kernel, eager or compiled elementwise work, an
eager cross-entropy); the memory file has ``memory_published.csv``'s, one row for the
allocated and one for the reserved peak. Score them with ``gpuscale validate training
--runs`` and ``gpuscale validate memory --runs``.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

from gpuscale.catalog import get_gpu, get_model
from gpuscale.errors import InputError
from gpuscale.validate.memory import OPTIONAL as MEMORY_OPTIONAL
from gpuscale.validate.memory import REQUIRED as MEMORY_REQUIRED
from gpuscale.validate.training_cells import COLUMNS

TRAINING_COLUMNS = list(COLUMNS)
_MEMORY = [c for c in (*MEMORY_REQUIRED, *MEMORY_OPTIONAL) if c not in ("id", "source", "notes")]
MEMORY_COLUMNS = ["id", "source", *_MEMORY, "notes"]
"""Each file's schema, as validate reads it (``validate/training_cells.py``, ``memory.py``)."""

BACKENDS = {
    "cudnn_attention": "SDPA's cuDNN backend",
    "flash_attention": "SDPA's flash backend (FlashAttention-2)",
    "efficient_attention": "SDPA's memory-efficient backend",
}
"""What a run's notes say of the SDPA backend PyTorch picked, as validate reads it."""


class RowsError(SystemExit):
    """A file that cannot give rows: one line naming it and why."""


def load(paths: list[Path]) -> list[dict[str, Any]]:
    files = []
    for path in paths:
        d = json.loads(path.read_text())
        if d.get("smoke"):
            raise RowsError(f"{path}: a --smoke run (toy sizes), not a measurement")
        files.append({**d, "path": path})
    return files


def sdpa_backend(files: list[dict[str, Any]], override: str | None) -> str:
    """The backend SDPA picked by default, as recorded by a file of the same device and
    PyTorch (gpu_checks.py's attention section), or as given."""
    if override is not None:
        return override
    seen = {
        x["chosen"]
        for d in files
        for x in d["sections"].get("attention", {}).get("result", [])
        if x.get("backend") == "default" and "chosen" in x
    }
    if len(seen) != 1:
        found = f"record {' and '.join(sorted(seen))}" if seen else "record none"
        raise RowsError(
            f"--sdpa-backend: SDPA's default backend is needed and the files {found}; "
            f"name one of {', '.join(BACKENDS)}"
        )
    return seen.pop()


def catalog_gpu(files: list[dict[str, Any]], gpu: str | None) -> str:
    """The catalog key of the one device the files were measured on (``gpu`` if given)."""
    devices = {(d["device"], d["torch"]) for d in files}
    if len(devices) != 1:
        raise RowsError(f"the files come from more than one device or PyTorch: {devices}")
    return get_gpu(gpu, "--gpu").key if gpu else get_gpu(files[0]["device"], "device").key


def steps(files: list[dict[str, Any]], gpu: str, backend: str) -> list[dict[str, Any]]:
    """The measured training cases of every file, in order, with their source and stack."""
    out = []
    for d in files:
        source = (
            f"gpuscale benchmarks/gpu_checks.py on one {d['device']} "
            f"({d['nvml_device'].get('power_limit_w', '?')} W, driver "
            f"{d['nvml_device'].get('driver', '?')}), PyTorch {d['torch']}; {d['path'].name}"
        )
        for name, sec in d["sections"].items():
            if name.startswith("train") and "result" in sec:
                out.append({**sec["result"], "source": source, "gpu": gpu, "sdpa": backend})
    return out


def tag(r: dict[str, Any]) -> str:
    mode = "compiled" if r["compiled"] else "eager"
    return f"{r['model']}-s{r['seq']}-mbs{r['mbs']}x{r['micro_batches']}-{r['recompute']}-{mode}"


def stack_notes(r: dict[str, Any]) -> str:
    kernels = (
        "each decoder block compiled with torch.compile (norms, RoPE and SwiGLU fused)"
        if r["compiled"]
        else "eager PyTorch ops for RMSNorm, RoPE and SwiGLU"
    )
    rc = "; every block under torch.utils.checkpoint" if r["recompute"] == "full" else ""
    backend = BACKENDS.get(r["sdpa"], r["sdpa"])
    return (
        "a Llama-shaped decoder written in plain PyTorch (random tokens, no data loader), fp32 "
        f"weights under bf16 autocast, fused AdamW; attention through {backend}, PyTorch's "
        f"default on this GPU, with causal masking and GQA; {kernels}; "
        f"eager cross-entropy over fp32 logits{rc}"
    )


def timing(r: dict[str, Any]) -> str:
    if "steps_timed" in r:
        return f"the median step of {r['steps_timed']} after {r['steps_untimed']}"
    return "the median of the timed steps"


def training_row(r: dict[str, Any]) -> dict[str, Any]:
    m = get_model(r["model"])
    return {
        "id": f"measured-{r['gpu']}-{tag(r)}",
        "source": r["source"],
        "model": m.name,
        "params_b": f"{r['params'] / 1e9:.4f}",
        "layers": m.layers,
        "hidden": m.hidden,
        "ffn_hidden": m.ffn_hidden,
        "heads": m.heads,
        "kv_heads": m.kv_heads,
        "vocab": m.vocab,
        "seq_len": r["seq"],
        "global_batch_seqs": r["mbs"] * r["micro_batches"],
        "micro_batch": r["mbs"],
        "gpu": r["gpu"],
        "num_gpus": 1,
        "tp": 1,
        "pp": 1,
        "dp": 1,
        "cp": 1,
        "recompute": r["recompute"],
        "dist_optimizer_or_zero": "none",
        "precision": "bf16",
        "measured_step_time_s": f"{r['step_s']:.4f}",
        "measured_tokens_per_s_per_gpu": f"{r['tokens_per_s']:.0f}",
        "target": "tokens_per_s_per_gpu",
        "notes": (
            f"Measured: {stack_notes(r)}; {r['micro_batches']} micro-batches of {r['mbs']} a "
            f"step; {timing(r)}."
        ),
    }


def memory_rows(r: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for metric, key in (
        ("allocated_peak", "peak_allocated_gib"),
        ("reserved_peak", "peak_reserved_gib"),
    ):
        rows.append(
            {
                "id": f"measured-{r['gpu']}-{tag(r)}-{metric.split('_')[0]}",
                "source": r["source"],
                "model": r["model"],
                "gpu": r["gpu"],
                "num_gpus": 1,
                "seq_len": r["seq"],
                "global_batch": r["mbs"] * r["micro_batches"],
                "micro_batch": r["mbs"],
                "sharding": "none",
                "recompute": r["recompute"],
                "precision": "bf16",
                "compile": "blocks" if r["compiled"] else "no",
                "elementwise": "fused" if r["compiled"] else "eager",
                "loss": "eager",
                "metric": metric,
                "measured_gib": f"{r[key]:.2f}",
                "notes": (
                    f"Measured: {stack_notes(r)}. At the peak: fp32 weights (4 bytes a "
                    "parameter), autocast's 16-bit weight copies (2), fp32 gradients (4) and "
                    "AdamW's two fp32 moments (8), 18 bytes as gpuscale counts Megatron's "
                    "16-bit weights, fp32 gradients, master weights and moments."
                ),
            }
        )
    return rows


def write(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, columns, restval="")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)  # whole or not at all
    print(f"{path}: {len(rows)} rows")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("measured", nargs="+", type=Path, help="gpu_checks.py JSON files")
    ap.add_argument("--training", type=Path, required=True, help="training CSV to write")
    ap.add_argument("--memory", type=Path, required=True, help="memory CSV to write")
    ap.add_argument("--gpu", help="catalog GPU (default: the device the files name)")
    ap.add_argument(
        "--sdpa-backend",
        choices=sorted(BACKENDS),
        help="SDPA's default backend (default: as an attention section of the files records)",
    )
    a = ap.parse_args()
    files = load(a.measured)
    try:
        gpu = catalog_gpu(files, a.gpu)
    except InputError as e:  # an unknown GPU: one line, with the closest catalog names
        raise RowsError(f"error: {e}") from None
    cases = steps(files, gpu, sdpa_backend(files, a.sdpa_backend))
    write(a.training, TRAINING_COLUMNS, [training_row(r) for r in cases])
    write(a.memory, MEMORY_COLUMNS, [row for r in cases for row in memory_rows(r)])


if __name__ == "__main__":
    main()
