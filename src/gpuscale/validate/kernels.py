"""One GPU's measured kernels against the kernel model the training step is built from.

The measurements are the JSON ``benchmarks/gpu_checks.py`` writes on a GPU (any number of
its files, of one device): GEMMs by shape in BF16 and FP8 (``matmul``), SDPA attention
forward + backward by backend and sequence (``attention``), an HBM copy (``hbm``). Each
becomes a row that ``gpuscale validate kernels`` scores and ``gpuscale calibrate kernels``
fits the kernel constants on (GEMM efficiency and shape constants, the FP8 speed-up,
attention efficiency, HBM efficiency):

- a GEMM of (M, N, K): ``perf/kernels.py::gemm_s`` at the rate the step prices GEMMs at
  (the sustained 16-bit peak x the part's MAMF fraction x the precision's speed-up);
- attention: ``attention_core_s`` for a Llama 3 8B layer with the measured heads, one
  sequence per batch element, no tensor parallelism; SDPA's cuDNN backend is the model's
  fused kernel and its flash backend FlashAttention-2; the default backend is the one the
  file records SDPA chose (older files do not say: those rows are skipped); the
  memory-efficient backend is not a kernel the model prices;
- the HBM copy: its bytes read and written at the catalog bandwidth x ``hbm_eff``.

Every row compares times: predicted / measured - 1, so a negative error is a kernel
predicted faster than it ran.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.catalog import GPU, Model, get_gpu, get_model, system_for_gpu
from gpuscale.errors import InputError
from gpuscale.paths import require_file
from gpuscale.perf.comm import Fabric
from gpuscale.perf.kernels import attention_core_s, gemm_s, low_precision_speedup, sustained_peak16
from gpuscale.perf.plan import Workload
from gpuscale.validate.report import RowResult, ValidationReport, signed_error_pct

SDPA_KERNELS = {"cudnn": "fused", "cudnn_attention": "fused", "flash": "flash2"}
"""SDPA backends (as gpu_checks.py names them, and as SDPA reports its choice) and the
attention kernel the model prices each as."""
SDPA_CHOICE = {"cudnn_attention": "cudnn", "flash_attention": "flash"}


def _workload(gpu: GPU, model: Model, seq: int, precision: str, attention: str) -> Workload:
    """One GPU's job of ``model`` as the step model sees it (its kernels' rates are the
    GPU's, whatever the job around them)."""
    system = system_for_gpu(gpu)
    fabric = Fabric.from_system(system, 8)
    return Workload(model, gpu, system, fabric, 8, seq, 8, precision, attention=attention)


def load_measurements(paths: list[Path], field: str = "--runs") -> list[dict[str, Any]]:
    """The gpu_checks.py files, each checked: JSON of one device's measurements, not a
    ``--smoke`` run (toy sizes)."""
    files = []
    for path in paths:
        require_file(path, field, "a JSON file written by benchmarks/gpu_checks.py")
        try:
            d = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(field, str(path), f"a JSON file ({exc})") from None
        if not isinstance(d, dict) or not isinstance(d.get("sections"), dict):
            raise InputError(
                field, str(path), "benchmarks/gpu_checks.py's JSON (an object with sections)"
            )
        if d.get("smoke"):
            raise InputError(field, str(path), "a measurement, not a --smoke run (toy sizes)")
        files.append({**d, "path": path})
    devices = {str(d.get("device")) for d in files}
    if len(devices) > 1:
        raise InputError(field, ", ".join(map(str, paths)), f"one device's files, not {devices}")
    return files


def measured_gpu(files: list[dict[str, Any]], gpu: str | None) -> GPU:
    """The catalog GPU the files were measured on: ``gpu`` if given, else their device name."""
    if gpu is not None:
        return get_gpu(gpu, "--gpu")
    return get_gpu(str(files[0].get("device")), "device (the files' GPU; --gpu names it)")


def _row(
    rid: str, pred: float, s: float, group: str, metric: str, detail: dict[str, object]
) -> RowResult:
    """A scored row comparing a predicted time with the measured one."""
    return RowResult(rid, pred, s, signed_error_pct(pred, s), "scored", "", group, metric, detail)


def _results(files: list[dict[str, Any]], section: str) -> Iterator[tuple[Path, Any]]:
    for d in files:
        sec = d["sections"].get(section)
        if isinstance(sec, dict) and "result" in sec:
            yield d["path"], sec["result"]


def _num(x: dict[str, Any], key: str, where: str) -> float:
    v = x.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
        raise InputError(f"{where}:{key}", v, "a positive number")
    return float(v)


def gemm_rows(files: list[dict[str, Any]], gpu: GPU, cal: Calibration) -> list[RowResult]:
    out = []
    llama = get_model("llama3-8b")
    for path, res in _results(files, "matmul"):
        for prec in ("bf16", "fp8"):
            # the rate the step prices GEMMs at: the sustained 16-bit peak x the part's MAMF
            # fraction x the precision's speed-up
            w = _workload(gpu, llama, 4096, prec, "fused")
            peak = sustained_peak16(gpu) * gpu.matmul_eff * low_precision_speedup(w, cal)
            for i, x in enumerate(res.get(prec, [])):
                where = f"{path.name}:matmul.{prec}[{i}]"
                m, n, k, s = (_num(x, c, where) for c in ("m", "n", "k", "s"))
                pred = float(gemm_s(m, n, k, 1, peak, gpu.sms, cal))
                case = str(x.get("case", ""))
                rid = f"gemm-{prec}-{case}-{int(m)}x{int(n)}x{int(k)}"
                detail = {"m": m, "n": n, "k": k, "case": case, "file": path.name}
                out.append(_row(rid, pred, s, f"GEMM {prec}", f"gemm_{prec}_s", detail))
    return out


def _kernel(x: dict[str, Any]) -> str | None:
    """The model's kernel for a measured SDPA backend, None when it prices none."""
    backend = str(x.get("backend", ""))
    if backend == "default":
        backend = SDPA_CHOICE.get(str(x.get("chosen", "")), "")
    return SDPA_KERNELS.get(backend)


def attention_rows(files: list[dict[str, Any]], gpu: GPU, cal: Calibration) -> list[RowResult]:
    out = []
    for path, res in _results(files, "attention"):
        for i, x in enumerate(res):
            if "error" in x:
                continue
            where = f"{path.name}:attention[{i}]"
            rid = f"attention-{x.get('backend')}-s{x.get('seq')}-d{x.get('head_dim')}"
            kind = _kernel(x)
            if kind is None:
                why = (
                    "which backend SDPA's default ran is not recorded"
                    if x.get("backend") == "default"
                    else f"SDPA's {x.get('backend')} backend is not a kernel gpuscale prices"
                )
                out.append(RowResult.skip(rid, why, group="attention", metric="attention_s"))
                continue
            batch, seq, s = (_num(x, c, where) for c in ("batch", "seq", "fwd_bwd_s"))
            heads, kv, hd = (int(_num(x, c, where)) for c in ("heads", "kv_heads", "head_dim"))
            # Llama 3 8B's layer with the benchmark's heads
            model = get_model("llama3-8b").model_copy(
                update={"heads": heads, "kv_heads": kv, "head_dim": hd}
            )
            w = _workload(gpu, model, int(seq), "bf16", kind)
            one = np.array([1.0])
            bw = gpu.hbm_bw_Bps * cal.hbm_eff
            fwd, bwd = attention_core_s(
                w, one * batch, one * seq, one, sustained_peak16(gpu), bw, cal
            )
            pred = float(fwd[0] + bwd[0])
            detail = {"kernel": kind, "seq": int(seq), "head_dim": hd, "file": path.name}
            out.append(_row(rid, pred, s, f"attention {kind}", "attention_s", detail))
    return out


def hbm_rows(files: list[dict[str, Any]], gpu: GPU, cal: Calibration) -> list[RowResult]:
    out = []
    for path, res in _results(files, "hbm"):
        where = f"{path.name}:hbm"
        moved, s = _num(res, "bytes_copied", where), _num(res, "s", where)
        # a copy reads and writes every byte, at the bandwidth the memory-bound terms get
        pred = 2.0 * moved / (gpu.hbm_bw_Bps * cal.hbm_eff)
        detail = {"bytes_copied": moved, "file": path.name}
        out.append(_row(f"hbm-copy-{path.stem}", pred, s, "HBM copy", "hbm_copy_s", detail))
    return out


def validate_kernels(
    paths: list[Path], cal: Calibration, gpu: str | None = None
) -> ValidationReport:
    """Every GEMM, attention and HBM measurement of the files against the kernel model."""
    files = load_measurements(paths)
    part = measured_gpu(files, gpu)
    rows = gemm_rows(files, part, cal) + attention_rows(files, part, cal)
    rows += hbm_rows(files, part, cal)
    if not rows:
        raise InputError(
            "--runs", ", ".join(map(str, paths)), "files with matmul, attention or hbm results"
        )
    return ValidationReport("kernels", rows)
