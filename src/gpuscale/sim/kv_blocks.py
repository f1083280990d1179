"""Paged KV-cache blocks one request holds, with sliding-window or chunked layers.

The serving simulator admits a request only when these blocks are free, and the memory
model (:mod:`gpuscale.perf.kv`) sizes a replica's sequences with the same count.
"""

from __future__ import annotations

import math


def seq_blocks(tokens: int, block_tokens: int, window_share: float, window_tokens: int) -> int:
    """Paged-KV blocks one sequence of ``tokens`` holds, a block being one block's worth of
    every attention layer. Layers with a window of ``window_tokens`` (``window_share`` of the
    KV bytes) keep at most the blocks that cover it, ceil(window / block) + 1 when it does
    not start on a block boundary: vLLM's hybrid KV cache manager reserves sliding-window
    layers "slots only for the most recent sliding_window_size tokens" and chunked ones
    their chunk (docs.vllm.ai/en/latest/design/hybrid_kv_cache_manager); TensorRT-LLM keeps a
    pool per attention window size (TensorRT-LLM features/kvcache.md)."""
    nb = max(-(-tokens // block_tokens), 1)
    kept = -(-window_tokens // block_tokens) + 1
    if window_share <= 0.0 or window_tokens <= 0 or nb <= kept:
        return nb
    return math.ceil((1.0 - window_share) * nb + window_share * kept - 1e-9)


def window_kept(window_tokens: int, prompt: int, max_num_tokens: int) -> int:
    """Tokens a windowed layer holds for one request at most: its window and, while the
    prompt is prefilled, a chunk of it (at most the token budget of one step; TensorRT-LLM
    reserves window + min(max_num_tokens, prompt - window), vLLM window - 1 +
    max_num_batched_tokens); 0 without windowed layers."""
    return window_tokens + min(prompt, max_num_tokens) if window_tokens else 0
