"""Continuous-batching engines' scheduler and memory settings, as their docs give them.

TensorRT-LLM (the default) and vLLM: sequences and tokens an iteration may take, chunked
prefill, the share of GPU memory the KV pool may use and how it is counted, and the paged
KV block size. :mod:`.inference` prices an engine's steps with these limits.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscale.errors import InputError


@dataclass(frozen=True)
class EngineConfig:
    """Scheduler and memory settings of a continuous-batching engine (documented defaults)."""

    name: str = "trtllm"
    max_batch: int = 2048
    """Max sequences per iteration. TensorRT-LLM default 2048
    (docs/source/performance/tuning-max-batch-size-and-max-num-tokens.md)."""
    max_num_tokens: int = 8192
    """Token budget of one iteration (TensorRT-LLM default 8192, same doc)."""
    chunked_prefill: bool = True
    """Split long prompts across iterations and mix them with decodes (Sarathi-Serve;
    TensorRT-LLM recommends enabling it)."""
    mem_fraction: float = 0.90
    """TensorRT-LLM ``kv_cache_free_gpu_mem_fraction`` default 0.90 (perf-overview.md);
    vLLM ``gpu_memory_utilization`` default 0.9."""
    fraction_of_free: bool = True
    """True: KV pool = fraction x (memory - weights - activations) (TensorRT-LLM);
    False: whole process within fraction x memory (vLLM)."""
    block_tokens: int = 32
    """Paged-KV block size (TensorRT-LLM tokens_per_block 32; vLLM block_size 16)."""
    reserved_bytes: float = 1.5 * 2**30
    """CUDA context, communication buffers and library workspaces outside the KV pool."""

    def __post_init__(self) -> None:
        for f, v in (
            ("max_batch", self.max_batch),
            ("max_num_tokens", self.max_num_tokens),
            ("block_tokens", self.block_tokens),
        ):
            if v < 1:
                raise InputError(f, v, "a positive integer")
        if not 0.0 < self.mem_fraction <= 1.0:
            raise InputError("mem_fraction", self.mem_fraction, "a fraction in (0, 1]")


ENGINES: dict[str, EngineConfig] = {
    "trtllm": EngineConfig(),
    # vLLM EngineArgs defaults: max_num_seqs 256, gpu_memory_utilization 0.9, block_size 16;
    # chunked prefill with max_num_batched_tokens 8192 (V1 engine)
    "vllm": EngineConfig(
        name="vllm",
        max_batch=256,
        max_num_tokens=8192,
        mem_fraction=0.90,
        fraction_of_free=False,
        block_tokens=16,
    ),
}


def get_engine(name: str) -> EngineConfig:
    """The serving engine's settings by name, in any case (:data:`ENGINES`); an unknown name is
    an error listing the known ones."""
    try:
        return ENGINES[name.lower()]
    except KeyError:
        raise InputError("engine", name, f"one of {', '.join(ENGINES)}") from None
