"""A model's attention layers by kind, where its windowed layers have a shape of their own
(:attr:`~gpuscale.catalog.schema.Model.window_attn`: Step 3.5's 96 query heads in its
sliding layers, 64 in its full ones): the full-attention layers and the windowed ones,
each priced as a view of the model whose every attention layer is of that kind, so that the
per-layer formulas hold unchanged and the kinds' results are summed (totals) or weighted by
their layers (per-layer averages). A model whose attention layers share one shape is one
kind, itself: its numbers are the formulas' as they were."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from gpuscale.catalog import Model

FloatArray = NDArray[np.float64]
T = TypeVar("T", float, FloatArray)


def window_view(m: Model) -> Model:
    """The model as its windowed layers see it: every attention layer windowed, with the
    windowed layers' heads, KV heads, head dimension and K = V projection or not."""
    x = m.window_attn
    update: dict[str, object] = {"window_layers": m.attn_layers, "window_attn": None}
    if x is not None:
        update |= {
            "heads": x.heads,
            "kv_heads": x.kv_heads,
            "head_dim": x.head_dim,
            "k_eq_v": x.k_eq_v,
        }
    return m.model_copy(update=update)


def full_view(m: Model) -> Model:
    """The model as its full-attention layers see it: no attention layer windowed."""
    return m.model_copy(update={"window_layers": 0, "window_attn": None})


def windowed_share(m: Model) -> float:
    """The share of the attention layers that attend within a window (or chunk)."""
    return (m.window_layers or 0) / max(m.attn_layers, 1) if m.window else 0.0


def attn_kinds(m: Model) -> tuple[tuple[int, Model], ...]:
    """(attention layers, view) of each kind: the full-attention layers and the windowed
    ones where these have a shape of their own; else the model itself, all its attention
    layers."""
    if m.window_attn is None:
        return ((m.attn_layers, m),)
    win = int(m.window_layers or 0)
    return ((m.attn_layers - win, full_view(m)), (win, window_view(m)))


def mtp_view(m: Model) -> Model:
    """The model as an MTP depth's attention sees it: a windowed layer where the depths
    slide (:attr:`~gpuscale.catalog.schema.Model.mtp_window`), else a full-attention one."""
    if m.mtp_window:
        return window_view(m)
    return m if m.window_attn is None else full_view(m)


def kind_mean(m: Model, f: Callable[[Model], T]) -> T:
    """``f`` (a number, or an array per plan) averaged over the attention layers, each kind
    weighted by its layers (``f(m)`` itself where they share one shape)."""
    if m.window_attn is None:
        return f(m)
    kinds = attn_kinds(m)
    out = kinds[0][0] / m.attn_layers * f(kinds[0][1])
    for n, v in kinds[1:]:
        out = out + n / m.attn_layers * f(v)
    return out


def heads_said(m: Model) -> str:
    """The query head counts as messages give them: "64", or "64 and 96 (windowed layers)"."""
    return _said([h for h, _ in m.head_counts])


def kv_heads_said(m: Model) -> str:
    """The KV head counts as messages give them (see :func:`heads_said`)."""
    return _said([k for _, k in m.head_counts])


def _said(counts: list[int]) -> str:
    """One count where the kinds share it, else the full layers' and the windowed ones'."""
    if len(set(counts)) == 1:
        return str(counts[0])
    return f"{counts[0]} and {counts[1]} (windowed layers)"
