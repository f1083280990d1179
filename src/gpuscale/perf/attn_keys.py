"""Keys a query attends to, averaged over a sequence: causal full attention, a sliding
window, chunked attention, DeepSeek-V4's compressed layers and a DSA indexer's scored keys
(the attention core's FLOPs scale with them); :func:`gpuscale.perf.transformer.keys_per_query`
averages them over a model's attention layers."""

from __future__ import annotations

from gpuscale.catalog import Model


def mean_keys(seq_len: float, window: float) -> float:
    """Keys a causal query attends to, averaged over a sequence of ``seq_len``: s/2 without
    a window; with one of w < s tokens, w - w^2/(2 s) (the first w queries see fewer)."""
    s = float(seq_len)
    if window <= 0 or window >= s:
        return s / 2.0
    return window - window * window / (2.0 * s)


def chunk_keys(seq_len: float, chunk: float, causal: bool = True) -> float:
    """Keys a query attends to in chunked attention (each query sees its own block of
    ``chunk`` tokens only), averaged over the sequence: n full chunks and a remainder r,
    (n c^2 + r^2) / (2 s) when causal, twice that when not."""
    s, c = float(seq_len), float(chunk)
    n = s // c
    r = s - n * c
    both = (n * c * c + r * r) / s
    return both / 2.0 if causal else both


def ratio_keys(m: Model, ratio: int, seq_len: float, causal: bool = True) -> float:
    """Keys per query of a DeepSeek-V4 layer of compression ``ratio``, averaged over the
    sequence: its window's, plus (CSA) the indexer's top-k of the s / ratio entries, a
    query seeing those of the windows it has passed, or (HCA) all of them."""
    assert m.compressed is not None
    c, s = m.compressed, float(seq_len)
    win = mean_keys(s, c.window) if causal else min(float(c.window), s)
    if ratio == 0:
        return win
    entries = s / ratio
    if ratio == c.csa_ratio and m.sparse is not None:
        k = float(m.sparse.topk)
        return win + (mean_keys(entries, k) if causal else min(k, entries))
    return win + (entries / 2.0 if causal else entries)


def indexed_keys(m: Model, seq_len: float, causal: bool = True) -> float:
    """Keys a DSA indexer scores per query, averaged over the sequence: every earlier
    token (s/2), or DeepSeek-V4's compressed entries (s / (2 x ratio))."""
    keys = seq_len / 2.0 if causal else float(seq_len)
    return keys / m.compressed.csa_ratio if m.compressed is not None else keys
