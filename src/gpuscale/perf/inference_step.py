"""The step-time formula of one serving replica: :class:`StepModel` turns an engine
iteration's prefill and decode work into seconds on the critical path (the simulator's hot
path), :class:`StepBreakdown` splits those seconds by part. The coefficients come from
:func:`gpuscale.perf.inference.build_step_model`; that module's docstring gives the formula.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from gpuscale.catalog import GPU, Model
from gpuscale.perf.engines import EngineConfig
from gpuscale.perf.kv import MemoryPlan, PrecisionPlan
from gpuscale.sim.serving import EngineLimits


@dataclass(frozen=True)
class StepBreakdown:
    """Seconds of one engine step on the critical path, by part."""

    gemm_s: float
    attention_s: float
    kv_read_s: float
    tp_comm_s: float
    pp_comm_s: float
    overhead_s: float
    bound: str
    """'compute' or 'memory' for the GEMM part."""

    @property
    def total_s(self) -> float:
        return (
            self.gemm_s
            + self.attention_s
            + self.kv_read_s
            + self.tp_comm_s
            + self.pp_comm_s
            + self.overhead_s
        )

    def to_dict(self) -> dict[str, float | str]:
        return {
            "gemm_s": self.gemm_s,
            "attention_s": self.attention_s,
            "kv_read_s": self.kv_read_s,
            "tp_comm_s": self.tp_comm_s,
            "pp_comm_s": self.pp_comm_s,
            "overhead_s": self.overhead_s,
            "total_s": self.total_s,
            "gemm_bound": self.bound,
        }


@dataclass(frozen=True)
class StepModel:
    """Coefficients of the step-time formula for one replica (per GPU, per PP stage)."""

    model: Model
    gpu: GPU
    precision: PrecisionPlan
    tp: int
    pp: int
    engine: EngineConfig
    memory: MemoryPlan
    # derived coefficients (SI)
    gemm_rate_flops: float
    attn_rate_flops: float
    hbm_Bps: float
    flops_per_token: float
    """Linear-layer FLOPs per processed token on one GPU of one stage (no LM head)."""
    head_flops_per_sample: float
    fixed_weight_bytes: float
    """Weights every step reads on one GPU of one stage (dense, shared experts, head)."""
    routed_bytes: float
    """All routed-expert bytes on one GPU of one stage (read in proportion to experts hit)."""
    attn_flops_per_pair: float
    """Attention FLOPs per (query, key) pair on one GPU of one stage."""
    kv_bytes_per_ctx_token: float
    """KV bytes per context token read by a decode step on one GPU of one stage."""
    ar_alpha_s: float
    ar_beta_s_per_token: float
    """TP all-reduces of one step (all layers of a stage): alpha + beta x tokens."""
    pp_hop_alpha_s: float
    pp_hop_beta_s_per_token: float
    overhead_s: float
    seq_overhead_s: float
    moe_k_over_e: float = 0.0
    num_experts: int = 1
    window_share: float = 0.0
    """Share of the attention layers with a window (their pairs and KV reads are capped)."""
    window_pair_share: float | None = None
    """The windowed layers' share of the attention FLOPs of a pair where it is not their
    share of the KV bytes (Step 3.5's windowed layers have more query heads); None: the
    same."""
    window_tokens: int = 0
    sparse_tokens: int = 0
    """Keys a query attends to in a DeepSeek Sparse Attention model's sparse layers (their
    pairs and KV reads are capped; the cache keeps every token); 0 without DSA."""
    sparse_share: float = 0.0
    """Share of the attention layers with sparse attention (all of DeepSeek-V3.2's)."""
    index_flops_per_pair: float = 0.0
    """DSA indexer scoring FLOPs per (query, key) pair, over all earlier keys, on one GPU."""
    index_bytes_per_ctx_token: float = 0.0
    """DSA indexer key bytes per context token a decode step reads on one GPU (all of them)."""
    decode_attn_flops_per_pair: float = 0.0
    """Attention FLOPs per (query, cached token) pair of a decode step on one GPU: the
    prefill's, but MLA's absorbed form (scores and sums in its latent), as decode kernels
    run it. A decode step's attention takes the longer of its cache reads and these FLOPs."""
    extras: dict[str, float] = field(default_factory=dict)

    @cached_property
    def _compute_excess_s(self) -> tuple[float, float]:
        """Seconds a decode step's attention spends beyond its reads, per cached token read
        and per indexer key scored: the FLOPs at the attention rate past the bytes at HBM
        speed, 0 where the reads take longer (GQA: always; MLA's heads share one latent
        and DeepSeek-V4's one K = V head, so theirs can be compute-bound)."""
        attn = self.decode_attn_flops_per_pair / self.attn_rate_flops
        attn -= self.kv_bytes_per_ctx_token / self.hbm_Bps
        index = self.index_flops_per_pair / self.attn_rate_flops
        index -= self.index_bytes_per_ctx_token / self.hbm_Bps
        return max(attn, 0.0), max(index, 0.0)

    def limits(self) -> EngineLimits:
        """The simulator's view of this replica: batch, token budget and KV blocks."""
        eng, mem = self.engine, self.memory
        return EngineLimits(
            eng.max_batch,
            eng.max_num_tokens,
            mem.kv_blocks,
            mem.block_tokens,
            eng.chunked_prefill,
            self.window_share,
            self.window_tokens,
        )

    # --- the formula -------------------------------------------------------------------
    def _caps(self, pairs: bool = False) -> tuple[tuple[float, int], tuple[float, int]]:
        """(share of the attention layers, keys a query takes there): the windowed layers'
        window, a DSA model's sparse layers' top-k; ``pairs``: the windowed layers' share of
        the pairs' FLOPs."""
        window = self.window_share
        if pairs and self.window_pair_share is not None:
            window = self.window_pair_share
        return (window, self.window_tokens), (self.sparse_share, self.sparse_tokens)

    def _attended(self, amount: float, per: float, pairs: bool = False) -> float:
        """``amount`` (query-key pairs, ``pairs``, or cached tokens read) that the attention
        core takes: each capped share of the layers at ``per`` x its keys (``per``: the
        queries, or the decoding sequences)."""
        for share, keys in self._caps(pairs):
            cap = per * keys
            if share > 0.0 and amount > cap:
                amount = (1.0 - share) * amount + share * cap
        return amount

    def _stage(
        self,
        prefill_tokens: float,
        prefill_pairs: float,
        prefill_seqs: float,
        decode_seqs: int,
        ctx_tokens: float,
    ) -> tuple[float, float, float, float, float, str]:
        """One PP stage's share of a step (one of its micro-batches): GEMM, attention, KV
        read, TP and PP communication seconds, and what bounds the GEMMs. The step's
        sequences fill at most PP micro-batches and no micro-batch holds less than one: a
        single prompt passes every stage whole, its prefill as long as without PP."""
        pp = min(self.pp, max(prefill_seqs + decode_seqs, 1))
        pre, dec = prefill_tokens / pp, decode_seqs / pp
        tokens = (prefill_tokens + decode_seqs) / pp
        samples = (prefill_seqs + decode_seqs) / pp
        flops = self.flops_per_token * tokens + self.head_flops_per_sample * samples
        wbytes = self.fixed_weight_bytes
        if self.num_experts > 1 and tokens > 0:
            wbytes += self.routed_bytes * (1.0 - (1.0 - self.moe_k_over_e) ** tokens)
        t_c = flops / self.gemm_rate_flops
        t_m = wbytes / self.hbm_Bps
        gemm = t_c if t_c > t_m else t_m
        pairs = self._attended(prefill_pairs / pp, pre, pairs=True)
        index = self.index_flops_per_pair * prefill_pairs / pp  # a DSA indexer's, all pairs
        attn = (self.attn_flops_per_pair * pairs + index) / self.attn_rate_flops
        read = self._attended(ctx_tokens / pp, dec)
        index_read = self.index_bytes_per_ctx_token * ctx_tokens / pp
        kv = (self.kv_bytes_per_ctx_token * read + index_read) / self.hbm_Bps
        # a compute-bound decode attention (MLA, DeepSeek-V4) adds its excess over the reads
        per_read, per_key = self._compute_excess_s
        if per_read or per_key:
            attn += per_read * read + per_key * ctx_tokens / pp
        comm = (self.ar_alpha_s + self.ar_beta_s_per_token * tokens) if tokens > 0 else 0.0
        hop = self.pp_hop_beta_s_per_token * (prefill_tokens + decode_seqs) / pp
        hop = self.pp_hop_alpha_s + hop if self.pp > 1 else 0.0
        return gemm, attn, kv, comm, hop, ("compute" if t_c > t_m else "memory")

    def step_time_s(
        self,
        prefill_tokens: float,
        prefill_pairs: float,
        prefill_seqs: float,
        decode_seqs: int,
        ctx_tokens: float,
    ) -> float:
        """One iteration: ``prefill_tokens`` prompt tokens (``prefill_pairs`` causal
        query-key pairs), ``decode_seqs`` decoding sequences with ``ctx_tokens`` context.

        The simulator's hot path: the same sum as :meth:`breakdown`, without building it."""
        g, a, k, c, hop, _ = self._stage(
            prefill_tokens, prefill_pairs, prefill_seqs, decode_seqs, ctx_tokens
        )
        samples = prefill_seqs + decode_seqs
        return self.pp * (g + a + k + c + hop) + self.overhead_s + self.seq_overhead_s * samples

    def breakdown(
        self,
        prefill_tokens: float,
        prefill_pairs: float,
        prefill_seqs: float,
        decode_seqs: int,
        ctx_tokens: float,
    ) -> StepBreakdown:
        pp = self.pp
        g, a, k, c, hop, bound = self._stage(
            prefill_tokens, prefill_pairs, prefill_seqs, decode_seqs, ctx_tokens
        )
        return StepBreakdown(
            gemm_s=pp * g,
            attention_s=pp * a,
            kv_read_s=pp * k,
            tp_comm_s=pp * c,
            pp_comm_s=pp * hop,
            overhead_s=self.overhead_s + self.seq_overhead_s * (prefill_seqs + decode_seqs),
            bound=bound,
        )

    def decode_coeffs(self, batch: int, ctx_tokens: float) -> tuple[float, float]:
        """Pure-decode step time as ``a + b x context`` for a fixed batch (closed form), the
        line through ``ctx_tokens``: once the mean context is past the window, windowed
        layers read a fixed ``batch x window`` tokens."""
        a = self.step_time_s(0.0, 0.0, 0, batch, 0.0)
        per_read, per_key = self._compute_excess_s
        b = self.kv_bytes_per_ctx_token / self.hbm_Bps + per_read
        for share, keys in self._caps():
            # past its window (top-k), a capped share of the layers reads batch x keys
            cap = batch * keys
            if share > 0.0 and ctx_tokens >= cap:
                a += share * b * cap
                b *= 1.0 - share
        return a, b + self.index_bytes_per_ctx_token / self.hbm_Bps + per_key

    def prefill_time_s(self, input_len: int, batch: int = 1) -> float:
        """A whole prompt (or ``batch`` prompts) in one iteration, no decodes."""
        return self.step_time_s(
            float(input_len * batch), batch * causal_pairs(0, input_len), batch, 0, 0.0
        )

    def decode_time_s(self, batch: int, ctx_len: float) -> float:
        """One decode step of ``batch`` sequences each with ``ctx_len`` tokens of context."""
        return self.step_time_s(0.0, 0.0, 0, batch, batch * ctx_len)

    def decode_time_s_vec(self, batch: np.ndarray, ctx_len: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`decode_time_s` over arrays of batch sizes and context lengths."""
        seqs = np.asarray(batch, dtype=np.float64)
        b = seqs / np.clip(seqs, 1.0, float(self.pp))  # per micro-batch, at least one sequence
        flops = (self.flops_per_token + self.head_flops_per_sample) * b
        wbytes = np.full_like(b, self.fixed_weight_bytes)
        if self.num_experts > 1:
            wbytes = wbytes + self.routed_bytes * (1.0 - (1.0 - self.moe_k_over_e) ** b)
        gemm = np.maximum(flops / self.gemm_rate_flops, wbytes / self.hbm_Bps)
        ctx = np.asarray(ctx_len, dtype=np.float64)
        full = ctx
        for share, keys in self._caps():
            if share > 0.0:
                ctx = (1.0 - share) * ctx + share * np.minimum(ctx, keys)
        index_read = self.index_bytes_per_ctx_token * b * full
        kv = (self.kv_bytes_per_ctx_token * b * ctx + index_read) / self.hbm_Bps
        per_read, per_key = self._compute_excess_s
        if per_read or per_key:  # a compute-bound decode attention's excess over its reads
            kv = kv + (per_read * ctx + per_key * full) * b
        comm = self.ar_alpha_s + self.ar_beta_s_per_token * b
        hop = (self.pp_hop_alpha_s + self.pp_hop_beta_s_per_token * b) if self.pp > 1 else 0.0
        return np.asarray(
            self.pp * (gemm + kv + comm + hop)
            + self.overhead_s
            + self.seq_overhead_s * np.asarray(batch, dtype=np.float64)
        )


def causal_pairs(offset: int, chunk: int) -> float:
    """Query-key pairs of a causal prefill chunk of ``chunk`` tokens after ``offset`` cached."""
    return chunk * offset + chunk * (chunk + 1) / 2.0
