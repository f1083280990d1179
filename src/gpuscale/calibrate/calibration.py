"""The one place where efficiency constants live.

Each constant is a physically meaningful fraction or time (achieved fraction of peak GEMM
FLOP/s, of HBM bandwidth, of link bandwidth; fixed per-step overheads; overlap fractions).
Defaults are fitted on ``shared/validation`` data as a whole (see ``gpuscale calibrate``)
and stored in ``calibration.json`` beside this module; a user refits them from their own
benchmark results with the same command and passes ``--calibration FILE``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from gpuscale.errors import InputError
from gpuscale.spec.files import read_json


@dataclass(frozen=True)
class Calibration:
    # --- compute (training and prefill GEMMs) ---
    gemm_eff_max: float = 0.92
    """Achieved fraction of the GPU's maximum achievable matmul rate (dense peak x the
    catalog's measured ``matmul_eff``) on large, well-shaped training GEMMs."""
    gemm_tile: float = 128.0
    """Edge of the output tile one SM computes; a GEMM runs in ceil(tiles / SMs) waves and the
    last, partial wave leaves SMs idle (wave quantisation)."""
    gemm_half_dim: float = 256.0
    """Reduction depth K at which a GEMM's efficiency halves, eff ~ K / (K + K_half): a short
    reduction (e.g. q/t or ffn/t after tensor parallelism) cannot hide each tile's loads."""
    fp8_gemm_speedup: float = 1.5
    """Achieved FP8-over-BF16 speed-up of the GEMM kernels (the peak ratio is 2)."""
    fp8_cast_bytes: float = 4.0
    """HBM bytes per element moved by the kernels that quantise an FP8 GEMM's inputs (the
    activation in forward, the output gradient in backward): read the 16-bit value, write
    rowwise and columnwise FP8 copies (4 B); current scaling's amax pass reads it again,
    fusion into the preceding norm or activation kernel saves the read."""
    attn_eff: float = 0.55
    """Fused attention (the GPU's fastest kernel): achieved fraction of 16-bit peak FLOP/s."""
    attn_flash2_rel: float = 0.47
    """FlashAttention-2 on Hopper and newer, relative to the fused kernel: FA2 reaches about
    35 % of H100's peak where FlashAttention-3 reaches 75 % (Shah et al. 2024, arXiv
    2407.08608, sec. 1), 35 / 75 = 0.47. On Ampere and older FA2 is the fused kernel (1.0)."""
    attn_half_dim: float = 256.0
    """Head dimension at which a Hopper or Blackwell flash-attention kernel's rate halves,
    eff ~ d / (d + d_half) (its QK^T reduces over the head dimension, as a GEMM over K;
    ``attn_eff`` is the rate at 128). The shipped value is the training fit's
    ``gemm_half_dim``: that fit priced both with one constant and cannot tell them apart.
    ``gpuscale calibrate kernels`` fits it apart from the GEMMs' on measured attention calls
    of another head dimension than 128 (an H200's cuDNN kernels put it at 22-43)."""
    ssd_eff: float = 1.0
    """Mamba-2's chunked-scan (SSD) Triton kernels: achieved fraction of the rate gpuscale's
    composition of their block GEMMs and HBM traffic gives (``perf.kernels.scan_s``), from a
    published kernel microbenchmark (``python -m gpuscale.calibrate.fit_kernels``)."""
    hbm_eff: float = 0.80
    """Achieved fraction of HBM bandwidth for memory-bound kernels (norms, activations, decode)."""
    elementwise_bytes_per_token_layer: float = 34.0
    """Memory-bound traffic per token per layer, in units of hidden x bytes/element x 1 (fwd)."""
    # --- communication ---
    scaleup_eff: float = 0.80
    """Achieved fraction of per-GPU NVLink/NVSwitch bandwidth (NCCL busbw / link rate)."""
    scaleout_eff: float = 0.85
    """Achieved fraction of NIC line rate for inter-node collectives."""
    scaleup_latency_s: float = 0.6e-6
    """One NVLink/PCIe hop of a collective step (NCCL's ring/LL hwLat, 0.6 us; the other
    algorithm/protocol entries keep NCCL's ratios to it)."""
    scaleout_latency_s: float = 2.7e-6
    """One network hop of a collective step on InfiniBand/RoCE (NCCL's ring/LL NET hwLat,
    2.7 us; the other algorithm/protocol entries keep NCCL's ratios to it)."""
    scaleout_latency_efa_s: float = 15e-6
    """The same network hop latency on AWS EFA (SRD via libfabric), a slower transport."""
    scaleout_call_latency_s: float = 0.0
    """Fixed cost of a collective that touches the network, paid once, not per hop
    (NCCL proxy-thread progress, NIC doorbell and completion polling)."""
    hier_overlap: float = 0.8
    """Fraction of the shorter phase hidden when a hierarchical collective pipelines its
    scale-up and scale-out phases (tree / NVLS-tree): 1 = perfect pipelining, 0 = serial."""
    tp_overlap: float = 0.0
    """Fraction of tensor-parallel communication hidden behind GEMMs."""
    dp_overlap: float = 0.85
    """Fraction of the bucketed data-parallel gradient reduce (and the distributed
    optimizer's parameter all-gather) hidden behind backward (forward)."""
    zero3_overlap: float = 0.85
    """Fraction of ZeRO-3/FSDP's per-layer parameter all-gathers and gradient
    reduce-scatters hidden behind the neighbouring layers' compute (prefetching)."""
    zero3_param_gather_Bps: float = 24e9
    """Per-GPU rate (bytes/s) at which per-parameter ZeRO-3 gathers and reduce-scatters move
    a GPU's weights, bound by the implementation (a Python hook, an allocation, a flatten
    copy and a collective launch per tensor), not by the links: DeepSpeed 0.3.16 gathered a
    5B-parameter model's 10 GB on 8 NVLink A100s in ~420 ms, ~24 GB/s (DeepSpeed issue
    #1174)."""
    pp_overlap: float = 0.0
    """Fraction of pipeline point-to-point transfers hidden behind the 1F1B compute."""
    ep_overlap: float = 0.0
    """Fraction of the expert-parallel all-to-alls hidden behind another micro-batch's
    compute (Megatron-Core's MoE A2A overlap, DeepSeek-V3's DualPipe), never more than
    that compute."""
    # --- fixed costs ---
    step_overhead_s: float = 0.0
    """Fixed per-iteration cost (data loading, logging, launch gaps) not modelled elsewhere."""
    microbatch_overhead_s: float = 0.0
    """Fixed per-micro-batch per-stage cost (kernel launches, pipeline bookkeeping)."""
    moe_layer_overhead_s: float = 0.0
    """Extra fixed forward cost per MoE layer and micro-batch: router, token permutation
    kernels and the device-to-host sync of per-expert token counts in dropless routing."""
    moe_expert_overhead_s: float = 0.0
    """Extra fixed forward cost per local expert per MoE layer and micro-batch: the expert
    GEMMs of a grouped linear layer are launched one per expert (and quantised one per
    expert in FP8), so each local expert adds launch and tail latency."""
    layer_overhead_s: float = 0.0
    """Fixed forward cost per transformer layer and micro-batch (kernel launches and small
    kernels between GEMMs); the backward pays twice that."""
    host_layer_s: float = 0.0
    """Host time to issue one transformer layer's forward kernels (the framework's Python,
    the kernel launches); the backward issues twice that, a recomputed forward once more.
    The host runs ahead of the GPU, so this costs nothing while the GPU's work is longer;
    a micro-batch whose GPU work is shorter than its host time takes the host time (the
    GPU waits on the launches: small models, high TP, small micro-batches)."""
    tp_overlap_slowdown: float = 0.05
    """Compute slow-down when TP communication overlaps GEMMs (SMs given to comm kernels)."""
    # --- memory ---
    mem_reserved_bytes: float = 3.0 * 2**30
    """Per-GPU memory not available to tensors: CUDA context, NCCL and cuBLAS workspaces."""
    mem_activation_overhead: float = 1.10
    """Allocator fragmentation and temporary buffers, as a multiplier on activation memory."""
    # --- inference ---
    decode_step_overhead_s: float = 0.0
    """Per-decode-step host/scheduler overhead of a serving engine."""
    inf_seq_overhead_s: float = 0.0
    """Serving: host time per scheduled sequence per step (sampling, detokenising, books)."""
    inf_layer_overhead_s: float = 0.0
    """Serving: each layer's kernels at their minimum time, per step (one pass)."""
    inf_hbm_eff: float = 0.80
    """Serving: achieved fraction of HBM bandwidth for weight and KV-cache reads in a step."""
    inf_gemm_eff: float = 0.75
    """Serving: achieved fraction of the GPU's matmul ceiling (16-bit dense peak x the
    catalog's measured ``matmul_eff``) on the step's linear-layer GEMMs."""
    inf_lowp_gemm_rel: float = 0.75
    """Serving: FP8 GEMM efficiency relative to 16-bit (FP4: its square; scaling, casting)."""
    inf_gemm_half_dim: float = 256.0
    """Serving: per-GPU GEMM width (hidden / TP) at which GEMM efficiency halves."""
    inf_attn_eff: float = 0.50
    """Serving: achieved fraction of 16-bit peak of prefill (flash) attention."""
    inf_request_overhead_s: float = 0.0
    """Serving: client-to-engine time of a request (HTTP, tokenisation) counted in TTFT."""

    def replace(self, **changes: float) -> Calibration:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, float]:
        return {f.name: float(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], origin: str = "calibration") -> Calibration:
        known = {f.name for f in fields(cls)}
        for k, v in data.items():
            if k not in known:
                raise InputError(
                    f"{origin}:{k}", v, f"unknown constant; known: {', '.join(sorted(known))}"
                )
            if isinstance(v, bool) or not isinstance(v, int | float) or not _finite(v):
                raise InputError(f"{origin}:{k}", v, "a finite number is required")
            lo, hi, lo_open = _range(k)
            if v < lo or (lo_open and v == lo) or v > hi:
                left = "(" if lo_open else "["
                right = "]" if math.isfinite(hi) else ")"
                raise InputError(f"{origin}:{k}", v, f"a number in {left}{lo:g}, {hi:g}{right}")
        return cls(**{k: float(v) for k, v in data.items()})

    @classmethod
    def load(cls, path: Path) -> Calibration:
        return cls.from_dict({**default_calibration().to_dict(), **file_keys(path)}, str(path))

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")


_FRACTIONS = ("_eff", "_eff_max")
"""Achieved fractions of a peak: (0, 1]."""
_DIVISORS = ("_rel", "_speedup", "_half_dim", "_tile", "_Bps", "_overhead")
"""Constants a time is divided or scaled by: above zero."""


def _finite(v: float) -> bool:
    """A finite number, an integer too large for a float counting as not finite."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _range(name: str) -> tuple[float, float, bool]:
    """(low, high, low excluded) of a constant, from what its name says it is."""
    if name.endswith(_FRACTIONS):
        return 0.0, 1.0, True
    if name.endswith("_overlap"):
        return 0.0, 1.0, False
    if name == "mem_activation_overhead":
        return 1.0, math.inf, False  # a multiplier on the activations that must be held
    if name.endswith(_DIVISORS):
        return 0.0, math.inf, True
    return 0.0, math.inf, False  # latencies, fixed costs, bytes


def file_keys(path: Path, field: str = "calibration") -> dict[str, float]:
    """The constants a calibration file holds, each checked (name, finite value, physical
    range) as :meth:`Calibration.load` checks them; ``field`` names the option in errors."""
    data = read_json(path, field, "a calibration JSON file")
    if not isinstance(data, dict):
        raise InputError(field, str(path), "a JSON object of constant -> value")
    origin = str(path) if field == "calibration" else f"{field} {path}"
    Calibration.from_dict({**default_calibration().to_dict(), **data}, origin)
    return {k: float(v) for k, v in data.items()}


@cache
def default_calibration() -> Calibration:
    """The fitted defaults shipped in ``calibration.json`` (class defaults where absent)."""
    res = resources.files("gpuscale.calibrate").joinpath("calibration.json")
    if not res.is_file():
        return Calibration()
    data = json.loads(res.read_text())
    return Calibration.from_dict({**Calibration().to_dict(), **data}, "calibration.json")
