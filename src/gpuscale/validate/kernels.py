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
  file records SDPA chose, or the one ``sdpa_backend`` names for files that predate that
  record (else those rows are skipped); the memory-efficient and math backends are not
  kernels the model prices;
- the HBM copy: its bytes read and written at the catalog bandwidth x ``hbm_eff``.

Every row compares times: predicted / measured - 1, so a negative error is a kernel
predicted faster than it ran. Row ids carry the file's name, so that two files measuring
the same shape stay two rows.
"""

from __future__ import annotations

import json
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
from gpuscale.validate.numbers import json_number, json_positive
from gpuscale.validate.report import RowResult, ValidationReport, signed_error_pct

SDPA_KERNELS = {"cudnn": "fused", "flash": "flash2"}
"""SDPA backends as gpu_checks.py names them, and the attention kernel the model prices
each as."""
SDPA_CHOICE = {"cudnn_attention": "cudnn", "flash_attention": "flash"}
"""SDPA's own names of its backends (``SDPBackend``), as a file records the default's
choice and ``sdpa_backend`` names it, by gpu_checks.py's names."""
SDPA_BACKENDS = ("cudnn_attention", "flash_attention", "efficient_attention", "math")


def _workload(gpu: GPU, model: Model, seq: int, precision: str, attention: str) -> Workload:
    """One GPU's job of ``model`` as the step model sees it (its kernels' rates are the
    GPU's, whatever the job around them)."""
    system = system_for_gpu(gpu)
    fabric = Fabric.from_system(system, 8)
    return Workload(model, gpu, system, fabric, 8, seq, 8, precision, attention=attention)


def _obj(v: Any, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise InputError(where, v, "a JSON object, as benchmarks/gpu_checks.py writes it")
    return v


def _objs(v: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise InputError(where, v, "a list of JSON objects, as benchmarks/gpu_checks.py writes it")
    return v


def _size(x: dict[str, Any], key: str, where: str, top: int = 1 << 40) -> int:
    """A shape: a whole number from 1 to ``top``."""
    v = json_number(x.get(key))
    if v is None or not v.is_integer() or not 1 <= v <= top:
        raise InputError(f"{where}:{key}", x.get(key), f"a whole number from 1 to {top:,}")
    return int(v)


def load_measurements(paths: list[Path], field: str = "--runs") -> list[dict[str, Any]]:
    """The gpu_checks.py files, each checked: JSON of one device's measurements, not a
    ``--smoke`` run (toy sizes), each file once."""
    files = []
    seen: set[Path] = set()
    stems: set[str] = set()
    for path in paths:
        require_file(path, field, "a JSON file written by benchmarks/gpu_checks.py")
        if path.resolve() in seen:
            raise InputError(field, str(path), "each file once (its rows would count twice)")
        if path.stem in stems:  # row ids carry the file's name
            raise InputError(field, str(path), "files of different names (rows are named by it)")
        seen.add(path.resolve())
        stems.add(path.stem)
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
    device = files[0].get("device")
    if not isinstance(device, str) or not device:
        path = files[0]["path"]
        raise InputError(f"{path.name}:device", device, "the GPU's name (or give --gpu NAME)")
    return get_gpu(device, f"{files[0]['path'].name}:device (or give --gpu NAME)")


def _row(
    rid: str, pred: float, s: float, group: str, metric: str, detail: dict[str, object]
) -> RowResult:
    """A scored row comparing a predicted time with the measured one."""
    return RowResult(rid, pred, s, signed_error_pct(pred, s), "scored", "", group, metric, detail)


def _results(files: list[dict[str, Any]], section: str) -> list[tuple[Path, Any, str]]:
    """Each file's result of ``section``: (path, result, where it is, for errors)."""
    out = []
    for d in files:
        sec = d["sections"].get(section)
        if sec is None:
            continue
        path = d["path"]
        where = f"{path.name}:sections.{section}"
        sec = _obj(sec, where)
        if "result" in sec:
            out.append((path, sec["result"], f"{path.name}:{section}"))
    return out


def gemm_rows(files: list[dict[str, Any]], gpu: GPU, cal: Calibration) -> list[RowResult]:
    """One row per measured GEMM of the benchmark files' ``matmul`` results (bf16 and fp8): the
    predicted seconds of :func:`gemm_s` at the rate the step prices GEMMs at (the sustained
    16-bit peak x the GPU's MAMF fraction x the precision's speed-up) against the measured s."""
    out = []
    llama = get_model("llama3-8b")
    for path, res, where in _results(files, "matmul"):
        res = _obj(res, where)
        for prec in ("bf16", "fp8"):
            shapes = _objs(res.get(prec, []), f"{where}.{prec}")
            if not shapes:
                continue
            if prec == "fp8" and "fp8" not in gpu.peak_tflops:
                raise InputError(
                    f"{where}.{prec}", f"{len(shapes)} GEMMs", f"none: the {gpu.key} has no "
                    f"{prec} peak (--gpu names the part measured)",
                )  # fmt: skip
            # the rate the step prices GEMMs at: the sustained 16-bit peak x the part's MAMF
            # fraction x the precision's speed-up
            w = _workload(gpu, llama, 4096, prec, "fused")
            peak = sustained_peak16(gpu) * gpu.matmul_eff * low_precision_speedup(w, cal)
            for i, x in enumerate(shapes):
                at = f"{where}.{prec}[{i}]"
                m, n, k = (_size(x, c, at) for c in ("m", "n", "k"))
                s = json_positive(x, "s", at)
                pred = float(gemm_s(m, n, k, 1, peak, gpu.sms, cal))
                case = str(x.get("case", ""))
                rid = f"gemm-{prec}-{case}-{m}x{n}x{k}@{path.stem}"
                detail: dict[str, object] = {"m": m, "n": n, "k": k, "case": case}
                detail.update({c: x[c] for c in ("model", "tp", "linear") if c in x})
                detail["file"] = path.name
                out.append(_row(rid, pred, s, f"GEMM {prec}", f"gemm_{prec}_s", detail))
    return out


def _kernel(x: dict[str, Any], sdpa_backend: str | None) -> tuple[str | None, str]:
    """The model's kernel for a measured SDPA backend (None when it prices none) and, for
    SDPA's default, the backend it ran."""
    backend = str(x.get("backend", ""))
    if backend == "default":
        chosen = x.get("chosen") or sdpa_backend
        if chosen is None:
            return None, "which backend SDPA's default ran is not recorded (--sdpa-backend)"
        backend = SDPA_CHOICE.get(str(chosen), str(chosen))
    kind = SDPA_KERNELS.get(backend)
    return kind, "" if kind else f"SDPA's {backend} backend is not a kernel gpuscale prices"


def attention_rows(
    files: list[dict[str, Any]], gpu: GPU, cal: Calibration, sdpa_backend: str | None = None
) -> list[RowResult]:
    """One row per measured attention kernel of the benchmark files: the predicted forward +
    backward seconds of :func:`attention_core_s` for a Llama 3 8B layer with the benchmark's
    heads against the measured ``fwd_bwd_s``; a backend the model prices no kernel for, or a
    recorded error, is a skipped row."""
    out = []
    for path, res, where in _results(files, "attention"):
        for i, x in enumerate(_objs(res, where)):
            at = f"{where}[{i}]"
            rid = f"attention-{x.get('backend')}-s{x.get('seq')}-d{x.get('head_dim')}@{path.stem}"
            if "error" in x:
                why = f"the benchmark recorded an error: {str(x['error'])[:200]}"
                out.append(RowResult.skip(rid, why, group="attention", metric="attention_s"))
                continue
            kind, why = _kernel(x, sdpa_backend)
            if kind is None:
                out.append(RowResult.skip(rid, why, group="attention", metric="attention_s"))
                continue
            batch, seq = _size(x, "batch", at), _size(x, "seq", at, 1 << 24)
            heads, kv, hd = (_size(x, c, at, 1024) for c in ("heads", "kv_heads", "head_dim"))
            if heads % kv:
                raise InputError(f"{at}:kv_heads", kv, f"a divisor of heads ({heads})")
            s = json_positive(x, "fwd_bwd_s", at)
            # Llama 3 8B's layer with the benchmark's heads
            model = get_model("llama3-8b").model_copy(
                update={"heads": heads, "kv_heads": kv, "head_dim": hd}
            )
            w = _workload(gpu, model, seq, "bf16", kind)
            one = np.array([1.0])
            bw = gpu.hbm_bw_Bps * cal.hbm_eff
            fwd, bwd = attention_core_s(
                w, one * batch, one * seq, one, sustained_peak16(gpu), bw, cal
            )
            pred = float(fwd[0] + bwd[0])
            detail = {"kernel": kind, "seq": seq, "head_dim": hd, "file": path.name}
            detail["backend"] = str(x.get("backend"))
            out.append(_row(rid, pred, s, f"attention {kind}", "attention_s", detail))
    return out


def hbm_rows(files: list[dict[str, Any]], gpu: GPU, cal: Calibration) -> list[RowResult]:
    """One row per measured HBM copy of the benchmark files: predicted seconds 2 x bytes copied /
    (HBM bytes/s x ``hbm_eff``), a copy reading and writing every byte, against the measured s."""
    out = []
    for path, res, where in _results(files, "hbm"):
        res = _obj(res, where)
        moved, s = json_positive(res, "bytes_copied", where), json_positive(res, "s", where)
        # a copy reads and writes every byte, at the bandwidth the memory-bound terms get
        pred = 2.0 * moved / (gpu.hbm_bw_Bps * cal.hbm_eff)
        detail: dict[str, object] = {"bytes_copied": moved, "file": path.name}
        out.append(_row(f"hbm-copy@{path.stem}", pred, s, "HBM copy", "hbm_copy_s", detail))
    return out


def check_sdpa_backend(name: str | None) -> str | None:
    """The ``--sdpa-backend`` name unchanged (None when not given); a name not in
    :data:`SDPA_BACKENDS` is an error."""
    if name is not None and name not in SDPA_BACKENDS:
        raise InputError("--sdpa-backend", name, f"one of {', '.join(SDPA_BACKENDS)}")
    return name


def validate_kernels(
    paths: list[Path],
    cal: Calibration,
    gpu: str | None = None,
    sdpa_backend: str | None = None,
) -> ValidationReport:
    """Every GEMM, attention and HBM measurement of the files against the kernel model;
    ``sdpa_backend`` is the backend SDPA's default ran where a file does not record it."""
    check_sdpa_backend(sdpa_backend)
    files = load_measurements(paths)
    rep = kernel_report(files, measured_gpu(files, gpu), cal, sdpa_backend)
    if not rep.rows:
        raise InputError(
            "--runs", ", ".join(map(str, paths)), "files with matmul, attention or hbm results"
        )
    return rep


def kernel_report(
    files: list[dict[str, Any]], gpu: GPU, cal: Calibration, sdpa_backend: str | None = None
) -> ValidationReport:
    """The rows of loaded measurement files (:func:`load_measurements`) on ``gpu``."""
    rows = gemm_rows(files, gpu, cal) + attention_rows(files, gpu, cal, sdpa_backend)
    return ValidationReport("kernels", rows + hbm_rows(files, gpu, cal))
