"""Time of one kernel class on one GPU: GEMMs (shape-dependent efficiency), the attention
core (fused flash kernels or Megatron's unfused path), the chunked scan of a hybrid's mixer
(Mamba-2's SSD or the gated delta rule), and the GEMM
speed-up and input-quantisation traffic of a low precision. :mod:`gpuscale.perf.step`
composes them into a step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.catalog import GPU, Model
from gpuscale.perf.attn_kinds import attn_kinds, windowed_share
from gpuscale.perf.plan import FloatArrayT, Workload
from gpuscale.perf.transformer import (
    attn_core_dims,
    indexed_keys,
    indexer_core_flops_per_token,
    indexer_layers,
    keys_per_query,
    kv_pair_width,
)

FloatArray = FloatArrayT

FLASH_BWD_FACTOR = 2.5
"""Backward / forward FLOPs of flash attention (FlashAttention-2, arXiv 2307.08691, sec. 3)."""
UNFUSED_FWD_BYTES = 13.0
"""HBM bytes per attention-score element, forward, of Megatron's unfused path (16-bit
scores) with attention dropout: QK^T writes 2, scaled masked softmax reads 2 and writes 2,
dropout reads 2 and writes 2 plus a 1-byte mask, PV reads 2."""
UNFUSED_BWD_BYTES = 19.0
"""The same, backward: dP written 2; dropout backward reads 2 + mask 1, writes 2; softmax
backward reads the probabilities 2 and the gradient 2, writes 2; dQ and dK read dS 2 each,
dV reads the probabilities 2."""
UNFUSED_DROPOUT_FWD_BYTES = 5.0
UNFUSED_DROPOUT_BWD_BYTES = 5.0
"""Of those, what the attention dropout adds (its read, mask and write, forward and
backward): a model trained without dropout does not pay them."""


def sustained_peak16(gpu: GPU) -> float:
    """The part's dense 16-bit peak FLOP/s (bf16, fp16 on a part without it) at the clock it
    sustains: a power-capped part runs below its rated clock (``GPU.clock_fraction``)."""
    half = "bf16" if "bf16" in gpu.peak_tflops else "fp16"
    return gpu.peak_flops(half) * gpu.clock_fraction


def gemm_s(
    m_rows: FloatArray | float,
    n_cols: FloatArray | float,
    k_red: FloatArray | float,
    count: FloatArray | float,
    peak: float,
    sms: int,
    cal: Calibration,
) -> FloatArray:
    """Seconds for ``count`` GEMMs of (M x K) @ (K x N), run as one grouped launch.

    ``peak`` is the rate the part can reach (its peak x ``matmul_eff``).
    Efficiency = gemm_eff_max x wave quantisation of the output tiles over the SMs
    x K / (K + gemm_half_dim) (a short reduction cannot hide the tile's load latency).
    """
    m_a = np.asarray(m_rows, dtype=np.float64)
    n_a = np.asarray(n_cols, dtype=np.float64)
    k_a = np.asarray(k_red, dtype=np.float64)
    flops = 2.0 * m_a * n_a * k_a * count
    eff = cal.gemm_eff_max * k_a / (k_a + cal.gemm_half_dim)
    if sms > 0:
        tiles = np.ceil(m_a / cal.gemm_tile) * np.ceil(n_a / cal.gemm_tile) * count
        eff = eff * tiles / (np.ceil(tiles / sms) * sms)
    out: FloatArray = flops / (peak * eff)
    return out


# Head-dimension half point of flash attention on Volta/Ampere (FlashAttention-2's kernels):
# there head dimension 64 runs at about 0.85-0.9x the TFLOP/s of head dimension 128 (Dao
# 2023, FlashAttention-2, A100 forward + backward benchmarks): d / (d + 22) gives 0.87.
# Hopper and Blackwell kernels (FlashAttention-3, cuDNN) lose more on short heads, about
# 0.7x at 64 (Shah et al. 2024, FlashAttention-3, H100 benchmarks), as a GEMM's
# reduction does: they use the calibration's attn_half_dim (0.64x at 64 as shipped).
AMPERE_ATTN_HALF_DIM = 22.0


def attention_core_s(
    w: Workload,
    mbs: FloatArray,
    s_loc: FloatArray,
    tp: FloatArray,
    peak16: float,
    bw: float,
    cal: Calibration,
) -> tuple[FloatArray, FloatArray]:
    """Forward and backward seconds of the attention core (softmax(QK^T) V), one layer,
    one micro-batch, per GPU, for the workload's attention kernel: the average of the
    attention layers' kinds (Step 3.5's full and windowed layers, each with its heads)."""
    m = w.model
    if m.window_attn is not None:
        fwd = bwd = np.zeros_like(mbs)
        for n, v in attn_kinds(m):
            f, b = _core_s(w, v, mbs, s_loc, tp, peak16, bw, cal)
            fwd, bwd = fwd + n / m.attn_layers * f, bwd + n / m.attn_layers * b
        return fwd, bwd
    fwd, bwd = _core_s(w, m, mbs, s_loc, tp, peak16, bw, cal)
    if m.sparse is not None:
        idx_f, idx_b = _indexer_s(w, mbs, s_loc, peak16, bw, cal)
        fwd, bwd = fwd + idx_f, bwd + idx_b
    return fwd, bwd


RING_MERGE_BYTES = 10.0
"""HBM bytes per element a context-parallel ring step merges: the step's 16-bit partial
result read (2) and the fp32 running one read and written (8)."""


def _ring_merge_s(
    w: Workload, m: Model, mbs: FloatArray, s_loc: FloatArray, tp: FloatArray, bw: float
) -> tuple[FloatArray, FloatArray]:
    """Forward and backward seconds of a context-parallel ring's merges, one attention layer,
    one micro-batch, per GPU. Ring attention (Liu et al. 2023; Transformer Engine's
    point-to-point context parallel) runs the core once per ring step, on the local queries
    against the K/V chunk that step brings, and folds each step's partial output into the
    running one with the log-sum-exp rescaling; backward, each step's dQ adds into the
    running dQ and its dK and dV into the running sums that travel on around the ring, all
    kept in fp32 (zhuzilin/ring-flash-attention, ``update_out_and_lse`` and the backward's
    accumulators), RING_MERGE_BYTES an element. With the causal load-balanced layout (each
    rank two chunks, one from each end) the first step merges every query, and of the
    other cp - 1 steps half merge every query and half the later chunk's only: 1 + 3/4 x
    (cp - 1) steps' worth; the same for dK and dV. Sliding-window layers run context
    parallelism as all-to-alls (Transformer Engine's a2a, the one it supports for them):
    no merges. None without CP, nor with the exchanges that run one kernel on whole keys
    (``cp_comm`` a2a or all_gather). The merges run on the compute stream, so the next
    step's K/V transfer hides behind them too."""
    cp = w.seq_len / s_loc
    if w.cp_exchange != "p2p":
        none = np.zeros_like(mbs * s_loc)
        return none, none
    steps = np.where(cp > 1.0, 1.0 + 0.75 * (cp - 1.0), 0.0)
    full = 1.0 - windowed_share(m)
    qk_w, v_w = attn_core_dims(m)
    kv = kv_pair_width(m, tp)  # MLA's whole up-projected heads, as the kernel gets them
    tokens = full * steps * mbs * s_loc
    fwd = RING_MERGE_BYTES * tokens * v_w / tp / bw
    bwd = RING_MERGE_BYTES * tokens * (qk_w / tp + kv) / bw
    return fwd, bwd


def _core_s(
    w: Workload,
    m: Model,
    mbs: FloatArray,
    s_loc: FloatArray,
    tp: FloatArray,
    peak16: float,
    bw: float,
    cal: Calibration,
) -> tuple[FloatArray, FloatArray]:
    """:func:`attention_core_s` of one attention layer of ``m``'s shape (no indexer): the
    kernels' seconds and, under context parallelism, the ring's merges (the unfused path
    runs one softmax over the whole sequence: nothing to merge)."""
    qk_w, v_w = attn_core_dims(m)
    if w.attention == "unfused":
        heads = mbs * m.heads / tp  # (sequence, head) pairs per GPU, one batched GEMM each
        s_kv = float(w.seq_len)
        mm16 = peak16 * w.gpu.matmul_eff  # batched cuBLAS GEMMs, as the model's others
        bmm = gemm_s(s_loc, s_kv, qk_w / m.heads, heads, mm16, w.gpu.sms, cal) + gemm_s(
            s_loc, v_w / m.heads, s_kv, heads, mm16, w.gpu.sms, cal
        )
        scores = heads * s_loc * s_kv
        drop = 0.0 if m.dropout else 1.0  # without dropout, none of its traffic
        fwd = bmm + (UNFUSED_FWD_BYTES - drop * UNFUSED_DROPOUT_FWD_BYTES) * scores / bw
        bwd = 2.0 * bmm + (UNFUSED_BWD_BYTES - drop * UNFUSED_DROPOUT_BWD_BYTES) * scores / bw
        return fwd, bwd
    # the kernel's QK^T reduces over the head dimension: a short one starves the tensor
    # cores (K / (K + K_half)); attn_eff is the efficiency at head dimension 128
    d = qk_w / m.heads
    old_arch = w.gpu.arch in ("volta", "ampere")
    hd_half = AMPERE_ATTN_HALF_DIM if old_arch else cal.attn_half_dim
    eff = cal.attn_eff * (d / (d + hd_half)) / (128.0 / (128.0 + hd_half))
    if w.attention == "flash2" and w.gpu.arch in ("hopper", "blackwell"):
        eff *= cal.attn_flash2_rel
    eff *= w.gpu.attention_rel  # Blackwell Ultra's doubled exponential units
    # flash kernels skip the masked upper triangle (s/2 keys per query) and, in
    # sliding-window layers, the blocks beyond the window
    flops = 2.0 * mbs * s_loc * keys_per_query(m, w.seq_len) * (qk_w + v_w) / tp
    fwd = flops / (peak16 * eff)
    fwd_x, bwd_x = softmax_factors(w.gpu, d)
    merge_fwd, merge_bwd = _ring_merge_s(w, m, mbs, s_loc, tp, bw)
    return fwd * fwd_x + merge_fwd, FLASH_BWD_FACTOR * fwd * bwd_x + merge_bwd


def softmax_factors(gpu: GPU, head_dim: float) -> tuple[float, float]:
    """How many times its tensor-core time a flash-attention forward and backward take at
    ``head_dim`` on ``gpu``: one exponential a score on the special-function units
    (MUFU.EX2), the forward's against 4 d FLOPs of its GEMMs, the backward's (P recomputed)
    against 10 d, so below the GPU's ``softmax_head_dim`` (and 0.4 of it) those units set
    the pace; 1 where they do not. ``softmax_head_dim`` = dense 16-bit tensor FLOPs / (4 x
    exponentials), both a clock and SM: H100 4,096 / (4 x 16) = 64; B200 and GB200, whose
    tensor cores doubled while the units stayed at 16 a clock (FlashAttention-4, Zadouri et
    al. 2026), 128, so their forward at d = 64 takes twice as long; Blackwell Ultra doubles
    the units: 64. Absent from the catalog: no head dimension a model uses is bound."""
    bal = gpu.softmax_head_dim or 0.0
    return max(1.0, bal / head_dim), max(1.0, 0.4 * bal / head_dim)


INDEXER_LOGIT_BYTES = 8.0
"""HBM bytes per (query, key) pair of a DSA indexer: its fp32 score written by the scoring
kernel and read back by the top-k selection."""


def _indexer_s(
    w: Workload, mbs: FloatArray, s_loc: FloatArray, peak16: float, bw: float, cal: Calibration
) -> tuple[FloatArray, FloatArray]:
    """Forward and backward seconds of the DeepSeek Sparse Attention indexers' scoring, per
    attention layer (spread over those that run one), one micro-batch, per GPU: each query's
    heads against every earlier key (DeepSeek-V4: compressed entry) at the attention
    kernel's rate, and the fp32 scores written and read for the top-k. The indexer is taken
    as replicated across tensor-parallel ranks (each scores its whole sequence shard;
    implementations that split its heads over TP run it cheaper), and it learns from its
    own loss on a detached input (DeepSeek-V3.2-Exp report sec. 2.1): its backward is the
    two gradient GEMMs of the scoring, 2 x its forward FLOPs."""
    m = w.model
    share = indexer_layers(m) / m.attn_layers
    pairs = mbs * s_loc * indexed_keys(m, w.seq_len)
    flops = mbs * s_loc * indexer_core_flops_per_token(m, w.seq_len)
    fwd = share * (flops / (peak16 * cal.attn_eff) + INDEXER_LOGIT_BYTES * pairs / bw)
    return fwd, share * 2.0 * flops / (peak16 * cal.attn_eff)


def scan_s(
    w: Workload, tokens: FloatArray, tp: FloatArray, peak16: float, bw: float, cal: Calibration
) -> FloatArray:
    """Forward time of one chunked scan of a hybrid model's mixer: Mamba-2's SSD (chunked
    state-space duality kernels), or the gated delta rule (:func:`_gated_delta_scan_s`).

    Its block matmuls (``scan_flops_per_token``) are batched GEMMs, one per chunk of Q tokens
    and head (group for C B^T), priced as the model's other GEMMs at the GPU's matmul
    ceiling: C B^T (Q x Q over the state N, causal half), the masked scores times X (Q x P
    over Q, causal half), the chunk states B^T X (N x P over Q) and their read-out C h
    (Q x P over N). Their short reductions (N = Q = 128 in Nemotron 3) keep them well below
    a large GEMM's rate. On top, the five kernels' HBM traffic per token (Mamba-2's Triton
    implementation): x read twice (chunk state, chunk scan) and y written (3 d), B and C
    read twice (4 G N), 16-bit; the fp32 C B^T chunk scores written and read (2 G Q), the
    fp32 chunk states written, passed along (read + write) and read (4 H P N / Q). The
    kernels reach ``cal.ssd_eff`` of that rate. Heads and groups split over TP; the backward
    is taken as FLASH_BWD_FACTOR x this.
    """
    m = w.model
    if m.mamba is None:
        return np.zeros_like(tokens)
    x = m.mamba
    mm16 = peak16 * w.gpu.matmul_eff
    if x.rule == "gated_delta":
        return _gated_delta_scan_s(w, tokens, tp, mm16, bw, cal)
    q, n, p = float(x.chunk), float(x.state), float(x.head_dim)
    chunks = tokens / q
    heads, groups = x.heads / tp, x.groups / tp
    sms = w.gpu.sms
    matmuls = (
        gemm_s(q / 2.0, q, n, chunks * groups, mm16, sms, cal)  # C B^T, causal half
        + gemm_s(q / 2.0, p, q, chunks * heads, mm16, sms, cal)  # scores x X, causal half
        + gemm_s(n, p, q, chunks * heads, mm16, sms, cal)  # chunk states B^T X
        + gemm_s(q, p, n, chunks * heads, mm16, sms, cal)  # read-out C h
    )
    per_token = 2.0 * (3.0 * x.inner + 4.0 * x.groups * x.state)
    per_token += 4.0 * 2.0 * x.groups * x.chunk
    per_token += 4.0 * 4.0 * x.heads * x.head_dim * x.state / x.chunk
    # Mamba-2's Triton kernels run at ssd_eff of this composition (a published H100
    # microbenchmark of the forward, calibrate/fit_kernels.py)
    return (matmuls + tokens * per_token / tp / bw) / cal.ssd_eff


def _gated_delta_scan_s(
    w: Workload, tokens: FloatArray, tp: FloatArray, mm16: float, bw: float, cal: Calibration
) -> FloatArray:
    """Forward time of one chunked gated-delta-rule scan (flash-linear-attention's
    ``chunk_gated_delta_rule``: the chunk's K K^T, its triangular inverse T, W = T K and
    U = T V, the inter-chunk states, then the output).

    The block matmuls of :func:`~gpuscale.perf.transformer.scan_flops_per_token` as batched
    GEMMs per chunk of Q tokens and value head, at the GPU's matmul ceiling like every GEMM:
    K K^T, Q K^T and W = T K (Q/2 x Q or N over N or Q, lower triangles), U = T V and the
    scores times the corrected values (Q/2 x P over Q), the inverse (Q/6 x Q over Q), and
    per chunk the state's W S and Q S (Q x P over N) and its update K^T V (N x P over Q).
    HBM traffic per token, 16-bit: queries and keys expanded from the G key heads to the H
    value heads (Megatron-Core and transformers repeat them before the kernel: read 2 G N,
    write 2 H N), the expanded keys read four times and queries once (5 H N), values read
    twice and the output written (3 d), W and U written and read (2 x (H N + H P));
    fp32: the chunk's T written and read (2 H Q) and the chunk states written, passed
    along and read (4 H P N / Q, as Mamba-2's).
    Heads and key heads split over TP; the backward is taken as FLASH_BWD_FACTOR x this.
    """
    x = w.model.mamba
    assert x is not None
    q, n, p = float(x.chunk), float(x.state), float(x.head_dim)
    batch = tokens / q * x.heads / tp
    sms = w.gpu.sms
    matmuls = (
        2.0 * gemm_s(q / 2.0, q, n, batch, mm16, sms, cal)  # K K^T and Q K^T, lower halves
        + gemm_s(q / 2.0, n, q, batch, mm16, sms, cal)  # W = T K
        + 2.0 * gemm_s(q / 2.0, p, q, batch, mm16, sms, cal)  # U = T V, scores x values
        + gemm_s(q / 6.0, q, q, batch, mm16, sms, cal)  # the triangular inverse
        + 2.0 * gemm_s(q, p, n, batch, mm16, sms, cal)  # W S and Q S
        + gemm_s(n, p, q, batch, mm16, sms, cal)  # state update K^T V
    )
    per_token = 2.0 * (3.0 * x.inner + 7.0 * x.heads * x.state + 2.0 * x.groups * x.state)
    per_token += 2.0 * 2.0 * x.heads * (n + p)
    per_token += 4.0 * 2.0 * x.heads * q
    per_token += 4.0 * 4.0 * x.heads * p * n / q
    return matmuls + tokens * per_token / tp / bw


def low_precision_speedup(w: Workload, cal: Calibration) -> float:
    """GEMM kernel speed-up of the workload's precision over 16-bit on its GPU.

    FP8 is the fitted ``fp8_gemm_speedup`` of the GEMM kernels alone (the quantisation
    passes that feed them are costed apart, :func:`cast_bytes_per_element`). NVFP4 GEMMs are
    taken to reach the same fraction of the GPU's FP4 peak as FP8 GEMMs reach of the FP8
    peak: the fitted FP8 figure is scaled by the catalog's FP4/FP8 dense peak ratio (2 on
    B200/GB200, 3 on Blackwell Ultra). No published NVFP4 run is in the calibration set.
    """
    if w.precision == "fp8":
        return cal.fp8_gemm_speedup
    if w.precision == "fp4":
        return cal.fp8_gemm_speedup * w.gpu.peak_flops("fp4") / w.gpu.peak_flops("fp8")
    return 1.0


NVFP4_CAST_BYTES = 2.0 + 2.0 * (2.0 + 0.5 + 1.0 / 16.0)
"""HBM bytes per element Transformer Engine's NVFP4 recipe moves to quantise a 16-bit GEMM
input (NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv 2509.25149, sec. 4):
a per-tensor amax pass reads it (2), then the rowwise and the columnwise copies (the latter
after the 16-point random Hadamard transform for the weight gradient) each read it (2) and
write 4-bit values (0.5) with an E4M3 scale per 16 elements (1/16)."""
FP8_CAST_BYTES = 2.0 + 1.0 + 1.0
"""The same for FP8: one pass reads the 16-bit input (2) and writes its rowwise and its
columnwise (transposed) FP8 copies (1 + 1)."""


def cast_bytes_per_element(w: Workload, cal: Calibration) -> float:
    """HBM bytes moved per GEMM input element that the workload's precision quantises.

    Every low-precision GEMM's input is quantised first, its activation X in the forward
    (rowwise for the GEMM, columnwise for the weight gradient) and its output gradient dY
    in the backward, by kernels that run at HBM speed. ``fp8_cast_bytes`` is the fitted
    figure for FP8 (an amax pass adds to :data:`FP8_CAST_BYTES`, fusion into the preceding
    norm or activation saves from it); NVFP4 moves ``NVFP4_CAST_BYTES / FP8_CAST_BYTES``
    times as much. 16-bit precisions quantise nothing.
    """
    if w.precision == "fp8":
        return cal.fp8_cast_bytes
    if w.precision == "fp4":
        return cal.fp8_cast_bytes * NVFP4_CAST_BYTES / FP8_CAST_BYTES
    return 0.0


@dataclass(frozen=True)
class Rates:
    """The rates one GPU's kernels run at, for every plan alike."""

    peak16_flops: float
    """The dense 16-bit peak FLOP/s at the clock the part sustains (attention, scans)."""
    mm16_flops: float
    """The 16-bit GEMM rate the part can reach: peak x matmul_eff, the GPU's measured
    maximum achievable matmul rate (MAMF; the catalog). The output layer and the router."""
    gemm_flops: float
    """``mm16_flops`` at the workload's GEMM precision (FP8, NVFP4: perf/kernels.py)."""
    hbm_Bps: float
    """The HBM bandwidth achieved: the GPU's rated bandwidth x hbm_eff."""

    @classmethod
    def of(cls, w: Workload, cal: Calibration) -> Rates:
        """The rates of the workload's GPU under ``cal``."""
        peak16 = sustained_peak16(w.gpu)
        mm16 = peak16 * w.gpu.matmul_eff
        gemm_flops = mm16 * low_precision_speedup(w, cal)
        return cls(peak16, mm16, gemm_flops, w.gpu.hbm_bw_Bps * cal.hbm_eff)
