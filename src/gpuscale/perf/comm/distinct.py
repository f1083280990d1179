"""Collective costs evaluated once per distinct (size, group, placement) among many plans.

Plans that differ only in switches (recompute, sharding, overlap) share their collectives,
so the training model de-duplicates them before costing: a search several times faster.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.perf.comm.fabric import Fabric, FloatArray
from gpuscale.perf.comm.model import collective_time_s


def collective_s(
    op: str,
    size: FloatArray,
    n: FloatArray | float,
    k: FloatArray | float,
    f: Fabric,
    cal: Calibration,
) -> FloatArray:
    """``collective_time_s`` evaluated once per distinct (size, group, placement), for a
    training step: every GPU of a node runs a group of the same kind at once."""
    return per_distinct(
        lambda s, nn, kk: collective_time_s(
            op, s, nn, f, cal, members_per_domain=kk, concurrent=True
        ),
        size,
        n,
        k,
    )


def per_distinct(
    cost: Callable[[FloatArray, FloatArray, FloatArray], FloatArray],
    size: FloatArray,
    n: FloatArray | float,
    k: FloatArray | float,
) -> FloatArray:
    """``cost(size, group, members per domain)`` evaluated once per distinct triple.

    Plans that differ only in switches (recompute, sharding, overlap) share their
    collectives, so de-duplicating first makes a search several times faster.
    """
    size_a, n_a, k_a = np.broadcast_arrays(
        np.asarray(size, dtype=np.float64),
        np.asarray(n, dtype=np.float64),
        np.asarray(k, dtype=np.float64),
    )
    if size_a.size < 64:
        return cost(size_a, n_a, k_a)
    # one complex key per point: size in the real part, (group, placement) in the imaginary
    keys = size_a.ravel() + 1j * (n_a.ravel() * 65536.0 + k_a.ravel())
    uniq, inv = np.unique(keys, return_inverse=True)
    n_u = np.floor(uniq.imag / 65536.0)
    t = cost(uniq.real, n_u, uniq.imag - n_u * 65536.0)
    return t[inv.ravel()].reshape(size_a.shape)
