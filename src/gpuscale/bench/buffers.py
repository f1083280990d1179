"""The per-rank side of the collective benchmark (:mod:`gpuscale.bench.collectives`).

For one op and one element count: the send, receive and in-place buffers, the pattern they
are filled with and the values a correct result holds (what ``-c 1`` counts as #wrong), and
the out-of-place and in-place torch.distributed calls that are timed. torch is not imported
here: the benchmark passes the module in, so importing gpuscale still works without torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Call = Callable[[], None]


def _seq(*_done: object) -> None:
    """Run calls in argument order inside one lambda (their return values are dropped)."""


class _Bench:
    """Buffers and calls for one op and one count on this rank."""

    def __init__(
        self,
        torch: Any,
        dist: Any,
        op: str,
        count: int,
        n: int,
        rank: int,
        root: int,
        dtype: Any,
        device: Any,
    ) -> None:
        self.t, self.d, self.op, self.c, self.n, self.rank, self.root = (
            torch,
            dist,
            op,
            count,
            n,
            rank,
            root,
        )
        self.dtype, self.device = dtype, device
        self.emulated = False
        total = count * n if op in ("all_gather", "reduce_scatter", "all_to_all") else count
        self.send_len = count * n if op in ("reduce_scatter", "all_to_all") else count
        self.recv_len = total if op in ("all_gather", "all_to_all") else count
        self.send = torch.empty(self.send_len, dtype=dtype, device=device)
        self.recv = torch.empty(self.recv_len, dtype=dtype, device=device)
        self.buf = torch.empty(max(self.send_len, self.recv_len), dtype=dtype, device=device)

    # --- data and expected values (exact in every dtype for small n) -------------------
    def _pattern(self, length: int, offset: int = 0) -> Any:
        return (self.t.arange(offset, offset + length, device=self.device) % 3).to(self.dtype)

    def fill(self, target: Any) -> None:
        r, n, c = self.rank, self.n, self.c
        if self.op == "all_to_all":
            for j in range(n):
                target[j * c : (j + 1) * c] = self._pattern(c) + (r * n + j)
        else:
            target[: self.send_len] = self._pattern(self.send_len) + (r + 1)

    def expected(self) -> Any:
        n, c, r = self.n, self.c, self.rank
        total = n * (n + 1) // 2
        if self.op in ("all_reduce", "reduce"):
            return self._pattern(c) * n + total
        if self.op == "reduce_scatter":
            return self._pattern(c, r * c) * n + total
        if self.op == "all_gather":
            return self.t.cat([self._pattern(c) + (j + 1) for j in range(n)])
        if self.op == "broadcast":
            return self._pattern(c) + (self.root + 1)
        if self.op == "all_to_all":
            return self.t.cat([self._pattern(c) + (j * n + r) for j in range(n)])
        return self._pattern(c) + ((r - 1) % n + 1)  # send_recv

    # --- the calls -------------------------------------------------------------------
    def _rs(self, out: Any, inp: Any) -> None:
        if not self.emulated:
            try:
                self.d.reduce_scatter_tensor(out, inp)
                return
            except (RuntimeError, NotImplementedError, ValueError):
                self.emulated = True
        tmp = inp.clone()
        self.d.all_reduce(tmp)
        out.copy_(tmp[self.rank * self.c : (self.rank + 1) * self.c])

    def _sendrecv(self, out: Any, inp: Any) -> None:
        n, r = self.n, self.rank
        ops = [
            self.d.P2POp(self.d.isend, inp, (r + 1) % n),
            self.d.P2POp(self.d.irecv, out, (r - 1) % n),
        ]
        for w in self.d.batch_isend_irecv(ops):
            w.wait()

    def calls(self) -> tuple[Call, Call, Any, Any]:
        """(out-of-place call, in-place call, out-of-place result, in-place result)."""
        d, c, r, s, rv, b = self.d, self.c, self.rank, self.send, self.recv, self.buf
        op = self.op
        if op == "all_reduce":
            return (
                lambda: _seq(rv.copy_(s), d.all_reduce(rv)),
                lambda: _seq(d.all_reduce(b[:c])),
                rv,
                b[:c],
            )
        if op == "broadcast":
            return (
                lambda: _seq(rv.copy_(s), d.broadcast(rv, src=self.root)),
                lambda: _seq(d.broadcast(b[:c], src=self.root)),
                rv,
                b[:c],
            )
        if op == "reduce":
            return (
                lambda: _seq(rv.copy_(s), d.reduce(rv, dst=self.root)),
                lambda: _seq(d.reduce(b[:c], dst=self.root)),
                rv,
                b[:c],
            )
        if op == "all_gather":
            return (
                lambda: _seq(d.all_gather_into_tensor(rv, s)),
                lambda: _seq(d.all_gather_into_tensor(b, b[r * c : (r + 1) * c])),
                rv,
                b,
            )
        if op == "reduce_scatter":
            return (
                lambda: self._rs(rv, s),
                lambda: self._rs(b[r * c : (r + 1) * c], b),
                rv,
                b[r * c : (r + 1) * c],
            )
        if op == "all_to_all":
            return (
                lambda: _seq(d.all_to_all_single(rv, s)),
                lambda: _seq(d.all_to_all_single(b, b.clone())),
                rv,
                b,
            )
        return (
            lambda: self._sendrecv(rv, s),
            lambda: self._sendrecv(b[:c], b[:c].clone()),
            rv,
            b[:c],
        )

    def prepare(self, in_place: bool) -> None:
        self.fill(self.send)
        if in_place:
            if self.op in ("all_gather",):
                self.buf[self.rank * self.c : (self.rank + 1) * self.c] = self._pattern(self.c) + (
                    self.rank + 1
                )
            else:
                self.fill(self.buf)

    def wrong(self, result: Any) -> int:
        if self.op == "reduce" and self.rank != self.root:
            return 0
        exp = self.expected()
        return int((result[: exp.numel()] != exp).sum().item())
