"""Measure one GPU the way gpuscale's training model prices it, and write what it measured.

    python benchmarks/gpu_checks.py --out measured.json [--budget-s 300] [--smoke]

Sections, each timed with CUDA events (median of the timed calls after warm-ups) and each
skipped, with its reason in the output, once the time budget is spent:

- ``matmul``: 16-bit GEMMs of square sizes (the achievable fraction of peak, MAMF) and the
  forward, data-gradient and weight-gradient GEMMs of Llama 3 8B and 70B layers at tensor
  parallel 1, 2, 4 and 8 (the shapes ``perf/kernels.py::gemm_s`` prices); the same in FP8
  (``torch._scaled_mm``, per-tensor scales, as Transformer Engine's default recipe runs all
  three) where the GPU has FP8 tensor cores;
- ``hbm``: a device-to-device copy (bytes read + written per second);
- ``attention``: PyTorch's ``scaled_dot_product_attention``, causal, GQA, 32K tokens a
  call from 1K to 32K a sequence at head dimension 128 and at 4K and 8K at 64 and 256 (what
  ``gpuscale calibrate kernels`` fits attention's head-dimension penalty on), forward and
  forward + backward (the input gradients, none accumulated), by backend, and the backend
  PyTorch picks by default;
- ``train``: training steps of Llama-shaped decoders written in plain PyTorch (fp32
  weights, bf16 autocast, fused AdamW, eager cross-entropy): step time, tokens/s and the
  peak and static memory the caching allocator reports, with and without full
  recomputation, eager and with each block compiled;
- ``nvml``: power, SM clock and memory used, sampled through NVML during every section.

``gpuscale validate kernels --runs FILE.json`` (and ``benchmarks/gpu_measured.py``, by
case) sets these figures beside gpuscale's predictions; ``gpuscale calibrate kernels``
fits the kernel constants on them. Random inputs throughout: zeros run faster on Hopper
(less switching power). ``--smoke`` runs every section at toy sizes on whatever device
there is (the CPU too) to check the script.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (PyTorch's own spelling)
from torch import nn
from torch.utils.checkpoint import checkpoint

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
BF16 = torch.bfloat16

# Llama 3 8B and 70B (hidden, heads, kv heads, FFN): meta-llama/Meta-Llama-3.1-*/config.json
LLAMA_LAYERS = {"llama3-8b": (4096, 32, 8, 14336), "llama3-70b": (8192, 64, 8, 28672)}
# decoders trained whole on one GPU (catalog names): layers, hidden, heads, kv, ffn, vocab
TRAIN_MODELS = {
    "llama3.2-1b": (16, 2048, 32, 8, 8192, 128256),
    "llama3.2-3b": (28, 3072, 24, 8, 8192, 128256),
}


class Clock:
    """Seconds per call of a callable: the median over ``reps`` timings of ``inner`` calls
    launched back to back (CUDA events around them all, so the host's launch latency
    hides behind the GPU's work as it does in a training step; one call timed alone would
    add it to a short kernel), after ``warmup`` calls. The wall clock off a GPU."""

    def __init__(self, warmup: int, inner: int, reps: int = 5) -> None:
        self.warmup, self.inner, self.reps = warmup, inner, reps

    def median_s(self, fn: Callable[[], Any]) -> float:
        for _ in range(self.warmup):
            fn()
        sync()
        times = []
        for _ in range(self.reps):
            if DEV.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(True)
                start.record()
                for _ in range(self.inner):
                    fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3 / self.inner)
            else:
                t0 = time.perf_counter()
                for _ in range(self.inner):
                    fn()
                times.append((time.perf_counter() - t0) / self.inner)
        return statistics.median(times)


def nvml_handle(nv: Any) -> Any:
    """NVML's handle of the GPU torch runs on: by its UUID (NVML counts GPUs in its own
    order, whatever CUDA_VISIBLE_DEVICES says), by index where torch gives no UUID."""
    dev = torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(dev), "uuid", None)
    if uuid is not None:
        try:
            return nv.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        except Exception:
            pass
    return nv.nvmlDeviceGetHandleByIndex(dev)


class Nvml:
    """Samples power, SM clock and memory used every 50 ms, tagged with the section."""

    def __init__(self) -> None:
        self.samples: list[dict[str, Any]] = []
        self.section = "idle"
        self._stop = threading.Event()
        self.error = ""
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nv = pynvml
            self._h = nvml_handle(pynvml)
        except Exception as e:  # no NVML on this machine: sections run unsampled
            self.error = f"{type(e).__name__}: {e}"
            self._nv = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        if self._nv is not None:
            self._thread.start()

    def _run(self) -> None:
        nv, h = self._nv, self._h
        while not self._stop.wait(0.05):
            try:
                self.samples.append(
                    {
                        "section": self.section,
                        "t": time.time(),
                        "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1e3,
                        "sm_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                        "mem_used_mib": nv.nvmlDeviceGetMemoryInfo(h).used / 2**20,
                        "util_pct": nv.nvmlDeviceGetUtilizationRates(h).gpu,
                        "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
                    }
                )
            except Exception as e:
                self.error = f"{type(e).__name__}: {e}"
                return

    def device(self) -> dict[str, Any]:
        if self._nv is None:
            return {"error": self.error}
        nv, h = self._nv, self._h
        out: dict[str, Any] = {"driver": nv.nvmlSystemGetDriverVersion()}
        for key, fn in (
            ("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3),
            ("max_sm_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
            ("max_mem_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
            ("memory_total_mib", lambda: nv.nvmlDeviceGetMemoryInfo(h).total / 2**20),
        ):
            try:
                out[key] = fn()
            except Exception as e:
                out[key] = f"{type(e).__name__}: {e}"
        return out

    def summary(self) -> dict[str, Any]:
        self._stop.set()
        by: dict[str, list[dict[str, Any]]] = {}
        for s in self.samples:
            by.setdefault(s["section"], []).append(s)
        out: dict[str, Any] = {"error": self.error, "sections": {}}
        for sec, rows in by.items():
            out["sections"][sec] = {
                "samples": len(rows),
                "power_w_mean": statistics.fmean(r["power_w"] for r in rows),
                "power_w_max": max(r["power_w"] for r in rows),
                "sm_mhz_mean": statistics.fmean(r["sm_mhz"] for r in rows),
                "sm_mhz_min": min(r["sm_mhz"] for r in rows),
                "util_pct_mean": statistics.fmean(r["util_pct"] for r in rows),
                "mem_used_mib_max": max(r["mem_used_mib"] for r in rows),
                "temp_c_max": max(r["temp_c"] for r in rows),
            }
        return out


def rand(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.randn(*shape, device=DEV, dtype=torch.float32).to(dtype)


def gemm_shapes(smoke: bool) -> list[dict[str, Any]]:
    """(label, M, N, K) of square GEMMs and of the linear layers' three GEMMs per pass."""
    rows: list[dict[str, Any]] = []
    for n in (64, 128) if smoke else (2048, 4096, 8192, 16384):
        rows.append({"case": "square", "m": n, "n": n, "k": n})
    tokens = 64 if smoke else 8192  # one micro-batch of 8,192 tokens (mbs 1 x seq 8192)
    for model, (h, heads, kv, ffn) in LLAMA_LAYERS.items():
        if smoke:
            h, heads, kv, ffn = h // 32, heads // 8, kv // 8 or 1, ffn // 32
        hd = h // heads
        linears = {
            "qkv": (h, (heads + 2 * kv) * hd),
            "proj": (heads * hd, h),
            "fc1": (h, 2 * ffn),
            "fc2": (ffn, h),
        }
        for tp in (1, 2, 4, 8):
            for name, (fan_in, fan_out) in linears.items():
                # column-parallel layers split their output, row-parallel their input
                row_parallel = name in ("proj", "fc2")
                i, o = (fan_in // tp, fan_out) if row_parallel else (fan_in, fan_out // tp)
                base = {"model": model, "tp": tp, "linear": name, "tokens": tokens}
                rows.append({**base, "case": "fwd", "m": tokens, "n": o, "k": i})
                rows.append({**base, "case": "dgrad", "m": tokens, "n": i, "k": o})
                rows.append({**base, "case": "wgrad", "m": o, "n": i, "k": tokens})
    return rows


def check_matmul(clock: Clock, smoke: bool, fp8: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"bf16": [], "fp8": [], "fp8_error": ""}
    for row in gemm_shapes(smoke):
        m, n, k = row["m"], row["n"], row["k"]
        a, b = rand(m, k), rand(k, n)
        s = clock.median_s(lambda a=a, b=b: a @ b)
        out["bf16"].append({**row, "s": s, "tflops": 2.0 * m * n * k / s / 1e12})
        del a, b
    if not fp8:
        out["fp8_error"] = "no FP8 tensor cores (compute capability below 8.9) or no GPU"
        return out
    one = torch.ones((), device=DEV, dtype=torch.float32)
    for row in gemm_shapes(smoke):
        m, n, k = row["m"], row["n"], row["k"]
        a = rand(m, k, dtype=torch.float8_e4m3fn)
        b = rand(n, k, dtype=torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
        # Transformer Engine accumulates the forward GEMM in FP8's fast mode and splits the
        # gradients' accumulation (its _2X_ACC_FPROP False, _2X_ACC_DGRAD/WGRAD True)
        fast = row["case"] in ("fwd", "square")
        try:
            s = clock.median_s(
                lambda a=a, b=b, fast=fast: torch._scaled_mm(
                    a, b, scale_a=one, scale_b=one, out_dtype=BF16, use_fast_accum=fast
                )
            )
        except Exception as e:
            out["fp8_error"] = f"{type(e).__name__}: {e}"[:300]
            break
        out["fp8"].append({**row, "s": s, "tflops": 2.0 * m * n * k / s / 1e12, "fast_accum": fast})
        del a, b
    return out


def check_hbm(clock: Clock, smoke: bool) -> dict[str, Any]:
    nbytes = 2**20 if smoke else 4 * 2**30
    src = torch.empty(nbytes // 2, device=DEV, dtype=BF16).normal_()
    dst = torch.empty_like(src)
    s = clock.median_s(lambda: dst.copy_(src))
    return {"bytes_copied": nbytes, "s": s, "read_plus_write_tb_s": 2.0 * nbytes / s / 1e12}


def attention_flops(b: int, heads: int, s: int, d: int) -> float:
    """Forward FLOPs of causal attention: QK^T and PV over the lower triangle."""
    return 4.0 * b * heads * s * s * d / 2.0


def check_attention(clock: Clock, smoke: bool) -> list[dict[str, Any]]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends: dict[str, list[Any]] = {
        "default": [],
        "flash": [SDPBackend.FLASH_ATTENTION],
        "cudnn": [SDPBackend.CUDNN_ATTENTION],
    }
    rows = []
    # (batch, heads, kv heads, head dim, sequence): the same tokens a call from 1K to 32K
    seqs = (1024, 2048, 4096, 8192, 16384, 32768)
    cases = [(1, 4, 2, 128, 32)] if smoke else [(32768 // q, 32, 8, 128, q) for q in seqs]
    if not smoke:  # head dimensions 64 (64 heads) and 256 (16 heads) at the same width
        cases += [(32768 // q, 64, 16, 64, q) for q in (4096, 8192)]
        cases += [(32768 // q, 16, 4, 256, q) for q in (4096, 8192)]
    for b, heads, kv, d, s in cases:
        for name, kinds in backends.items():
            row: dict[str, Any] = {"backend": name, "batch": b, "heads": heads, "kv_heads": kv}
            row.update({"head_dim": d, "seq": s})
            q = rand(b, heads, s, d).requires_grad_()
            k = rand(b, kv, s, d).requires_grad_()
            v = rand(b, kv, s, d).requires_grad_()
            go = rand(b, heads, s, d)

            def fwd(q: torch.Tensor = q, k: torch.Tensor = k, v: torch.Tensor = v) -> Any:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

            try:
                with sdpa_kernel(kinds) if kinds else contextlib.nullcontext():
                    row["fwd_s"] = clock.median_s(fwd)
                    row["fwd_bwd_s"] = clock.median_s(
                        lambda fwd=fwd, go=go, qkv=(q, k, v): torch.autograd.grad(fwd(), qkv, go)
                    )
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"[:300]
                rows.append(row)
                continue
            if name == "default":
                row["chosen"] = sdpa_choice(q, k, v)
            f = attention_flops(b, heads, s, d)
            row["fwd_tflops"] = f / row["fwd_s"] / 1e12
            row["fwd_bwd_tflops"] = 3.5 * f / row["fwd_bwd_s"] / 1e12  # backward = 2.5 x fwd
            rows.append(row)
    return rows


def sdpa_choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str:
    """The backend PyTorch's SDPA picks for these inputs by default (its own dispatcher)."""
    from torch.nn.attention import SDPBackend

    try:
        idx = torch._fused_sdp_choice(q, k, v, is_causal=True, enable_gqa=True)
        return str(SDPBackend(idx).name).lower()
    except Exception as e:
        return f"unknown ({type(e).__name__}: {e})"[:120]


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Block(nn.Module):
    """A Llama decoder layer: RMSNorm, fused QKV with GQA and RoPE, flash attention, output
    projection, RMSNorm, SwiGLU MLP; no biases, no dropout."""

    def __init__(self, h: int, heads: int, kv: int, ffn: int) -> None:
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv, h // heads
        self.n1, self.n2 = nn.RMSNorm(h), nn.RMSNorm(h)
        self.qkv = nn.Linear(h, (heads + 2 * kv) * self.hd, bias=False)
        self.o = nn.Linear(heads * self.hd, h, bias=False)
        self.fc1 = nn.Linear(h, 2 * ffn, bias=False)
        self.fc2 = nn.Linear(ffn, h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        hd = self.hd
        q, k, v = self.qkv(self.n1(x)).split([self.heads * hd, self.kv * hd, self.kv * hd], -1)
        q = rope(q.view(b, t, self.heads, hd).transpose(1, 2), cos, sin)
        k = rope(k.view(b, t, self.kv, hd).transpose(1, 2), cos, sin)
        v = v.view(b, t, self.kv, hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        g, u = self.fc1(self.n2(x)).chunk(2, dim=-1)
        return x + self.fc2(F.silu(g) * u)


class Decoder(nn.Module):
    def __init__(self, layers: int, h: int, heads: int, kv: int, ffn: int, vocab: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, h)
        self.blocks = nn.ModuleList(Block(h, heads, kv, ffn) for _ in range(layers))
        self.norm = nn.RMSNorm(h)
        self.hd = h // heads
        self.recompute = False

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        inv = 1.0 / (500000.0 ** (torch.arange(0, self.hd, 2, device=ids.device) / self.hd))
        ang = torch.outer(torch.arange(t, device=ids.device, dtype=torch.float32), inv)
        cos, sin = ang.cos().to(BF16), ang.sin().to(BF16)
        x = self.emb(ids)
        for blk in self.blocks:
            if self.recompute:
                x = checkpoint(blk, x, cos, sin, use_reentrant=False)
            else:
                x = blk(x, cos, sin)
        return F.linear(self.norm(x), self.emb.weight)  # tied output layer


def train_case(
    name: str,
    seq: int,
    mbs: int,
    accum: int,
    recompute: bool,
    compiled: bool,
    steps: int,
    smoke: bool,
) -> dict[str, Any]:
    layers, h, heads, kv, ffn, vocab = TRAIN_MODELS[name]
    if smoke:
        layers, h, heads, kv, ffn, vocab = 2, 64, 4, 2, 128, 512
    row: dict[str, Any] = {"model": name, "seq": seq, "mbs": mbs, "micro_batches": accum}
    row.update({"recompute": "full" if recompute else "none", "compiled": compiled})
    torch.manual_seed(0)
    model = Decoder(layers, h, heads, kv, ffn, vocab).to(DEV)
    model.recompute = recompute
    if compiled:
        for blk in model.blocks:
            blk.compile()
    row["params"] = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=DEV.type == "cuda")
    ids = torch.randint(0, vocab, (accum, mbs, seq + 1), device=DEV)

    def step() -> None:
        for i in range(accum):
            with torch.autocast(DEV.type, dtype=BF16):
                logits = model(ids[i, :, :-1])
            loss = F.cross_entropy(logits.float().view(-1, vocab), ids[i, :, 1:].reshape(-1))
            (loss / accum).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    t0 = time.perf_counter()
    step()  # the first step allocates the optimizer's states (and compiles)
    sync()
    row["first_step_s"] = time.perf_counter() - t0
    if DEV.type == "cuda":
        row["static_gib"] = torch.cuda.memory_allocated() / 2**30
        torch.cuda.reset_peak_memory_stats()
    row["step_s"] = Clock(1, 1, steps).median_s(step)
    row["steps_timed"], row["steps_untimed"] = steps, 2  # the first step and one warm-up
    if DEV.type == "cuda":
        row["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        row["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    tokens = accum * mbs * seq
    row["tokens_per_s"] = tokens / row["step_s"]
    # model FLOPs (no recompute counted): 6 x non-embedding params x tokens, the output
    # layer's 6 x h x vocab, and causal attention's 3 x 2 x 2 x seq/2 x h per token and layer
    dense = row["params"] - vocab * h
    per_token = 6.0 * dense + 6.0 * h * vocab + 6.0 * layers * seq * h
    row["model_tflops_per_s"] = per_token * tokens / row["step_s"] / 1e12
    return row


def sync() -> None:
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def free() -> None:
    import gc

    gc.collect()
    if DEV.type == "cuda":
        torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON file the figures are written to")
    ap.add_argument("--budget-s", type=float, default=300.0, help="skip sections after this")
    ap.add_argument("--smoke", action="store_true", help="toy sizes, any device")
    ap.add_argument(
        "--only", default="", help="comma-separated section names or prefixes (default: all)"
    )
    a = ap.parse_args()
    t_start = time.perf_counter()
    torch.backends.cuda.matmul.allow_tf32 = True
    res: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name() if DEV.type == "cuda" else "cpu",
        "smoke": a.smoke,
    }
    if DEV.type == "cuda":
        p = torch.cuda.get_device_properties(0)
        res.update(sms=p.multi_processor_count, capability=f"{p.major}.{p.minor}")
        res["cuda"] = torch.version.cuda
        res["memory_gib"] = p.total_memory / 2**30
    nvml = Nvml()
    res["nvml_device"] = nvml.device()
    nvml.start()
    clock = Clock(2 if a.smoke else 5, 2 if a.smoke else 10)
    fp8 = DEV.type == "cuda" and torch.cuda.get_device_capability() >= (8, 9)
    steps = 2 if a.smoke else 6
    sections: list[tuple[str, Callable[[], Any]]] = [
        ("hbm", lambda: check_hbm(clock, a.smoke)),
        ("matmul", lambda: check_matmul(clock, a.smoke, fp8)),
        ("attention", lambda: check_attention(clock, a.smoke)),
    ]
    # (model, sequence, micro-batch, micro-batches a step, full recompute, compiled)
    train = [
        ("llama3.2-1b", 4096, 4, 2, False, False),
        ("llama3.2-1b", 8192, 2, 2, False, False),
        ("llama3.2-1b", 4096, 1, 8, False, False),
        ("llama3.2-1b", 2048, 8, 2, False, False),
        ("llama3.2-1b", 16384, 1, 2, False, False),
        ("llama3.2-3b", 4096, 2, 2, False, False),
        ("llama3.2-3b", 4096, 2, 2, True, False),
        ("llama3.2-1b", 4096, 4, 2, False, True),
        ("llama3.2-3b", 4096, 2, 2, False, True),
    ]
    for model, seq, mbs, acc, rc, comp in train:
        label = f"train {model} s{seq} mbs{mbs} x{acc} {'full' if rc else 'none'}"
        label += " compiled" if comp else " eager"
        sections.append(
            (
                label,
                lambda m=model, q=seq, b=mbs, g=acc, r=rc, c=comp: train_case(
                    m, 64 if a.smoke else q, b, g, r, c, steps, a.smoke
                ),
            )
        )
    res["sections"] = {}
    only = [x.strip() for x in a.only.split(",") if x.strip()]
    sections = [(n, f) for n, f in sections if not only or any(n.startswith(o) for o in only)]
    for name, fn in sections:
        elapsed = time.perf_counter() - t_start
        if elapsed > a.budget_s:
            res["sections"][name] = {"skipped": f"time budget spent ({elapsed:.0f} s)"}
            continue
        nvml.section = name
        t0 = time.perf_counter()
        try:
            res["sections"][name] = {"result": fn()}
        except Exception as e:  # one failed check must not lose the others' figures
            res["sections"][name] = {"error": f"{type(e).__name__}: {e}"[:500]}
        free()
        res["sections"][name]["wall_s"] = time.perf_counter() - t0
        print(f"{name}: {res['sections'][name]['wall_s']:.1f} s", flush=True)
        with open(a.out, "w") as f:  # after every section: a killed run keeps what it did
            json.dump({**res, "nvml": {"partial": True}}, f, indent=1)
    nvml.section = "done"
    res["nvml"] = nvml.summary()
    res["total_s"] = time.perf_counter() - t_start
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(summary(res), indent=1))


def summary(res: dict[str, Any]) -> dict[str, Any]:
    """The headline figures, for the terminal."""
    out: dict[str, Any] = {"device": res["device"]}
    for name, sec in res["sections"].items():
        r = sec.get("result")
        if r is None:
            out[name] = sec.get("error") or sec.get("skipped")
        elif name == "matmul":
            sq = [x for x in r["bf16"] if x["case"] == "square"]
            out["bf16 square TFLOP/s"] = {x["m"]: round(x["tflops"]) for x in sq}
            out["fp8"] = r["fp8_error"] or {
                x["m"]: round(x["tflops"]) for x in r["fp8"] if x["case"] == "square"
            }
        elif name == "hbm":
            out["copy TB/s"] = round(r["read_plus_write_tb_s"], 2)
        elif name == "attention":
            out["attention fwd+bwd TFLOP/s"] = {
                f"{x['backend']} s{x['seq']} d{x['head_dim']}": round(x["fwd_bwd_tflops"])
                if "error" not in x
                else x["error"][:80]
                for x in r
            }
        else:
            out[name] = {k: r.get(k) for k in ("step_s", "tokens_per_s", "peak_reserved_gib")}
    return out


if __name__ == "__main__":
    main()
