"""nccl-tests conventions without torch: size sweep, counts, bandwidths, row layout.

Shared by the benchmark (:mod:`gpuscale.bench.collectives`) and the model's table
(``gpuscale comm estimate``) so both print the same columns. Sources: NVIDIA/nccl-tests
``README.md`` (flags), ``doc/PERFORMANCE.md`` (algbw, busbw), ``src/*.cu`` ``*GetBw`` and
``GetCollByteCount`` (what ``size`` and ``count`` mean per collective).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from gpuscale.errors import InputError
from gpuscale.perf.comm import OPS, busbw_factor, check_op

DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "float64": 8,
    "double": 8,
    "int32": 4,
    "int64": 8,
    "int8": 1,
    "uint8": 1,
}
NCCL_TYPE: dict[str, str] = {
    "float32": "float",
    "float": "float",
    "float16": "half",
    "half": "half",
    "bfloat16": "bfloat16",
    "float64": "double",
    "double": "double",
    "int32": "int32",
    "int64": "int64",
    "int8": "int8",
    "uint8": "uint8",
}
ROOTED = ("broadcast", "reduce")
REDUCING = ("all_reduce", "reduce_scatter", "reduce")
PER_RANK_TOTAL = ("all_gather", "reduce_scatter", "all_to_all")
"""Ops whose nccl-tests ``size`` is the whole n-rank buffer (count is per rank)."""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*$", re.IGNORECASE)
_MULT = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(text: str, field: str) -> int:
    """nccl-tests sizes: '8', '64K', '1M', '8G' are powers of 1024 (as its -b/-e flags)."""
    m = _SIZE.match(str(text))
    if not m:
        raise InputError(field, text, "a byte count such as 8, 64K, 1M or 8G (K/M/G = 1024^n)")
    value = float(m.group(1)) * _MULT[m.group(2).upper()]
    if not 0 < value <= MAX_BYTES:
        raise InputError(field, text, "a positive byte count up to 1024T")
    if value != int(value):
        raise InputError(field, text, "a whole number of bytes (0.5K is 512, 0.5 is not one)")
    return int(value)


MAX_BYTES = float(2**50)
"""Largest size a sweep or a storage run takes (1024T): beyond any device or file system."""


MAX_SIZES = 10_000
"""Most message sizes one sweep may have (-b .. -e by -f); more is a mistyped factor."""


def size_sweep(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """-b .. -e multiplying by -f, as nccl-tests does (both ends included when reached);
    at most :data:`MAX_SIZES` sizes."""
    if min_bytes > max_bytes:
        raise InputError("-b/--minbytes", min_bytes, f"at most -e/--maxbytes ({max_bytes})")
    if not factor > 1:
        raise InputError("-f/--stepfactor", factor, "a multiplication factor greater than 1")
    if not math.isinf(factor):
        n = math.floor(math.log(max_bytes / min_bytes) / math.log(factor) + 1e-9) + 1
        if n > MAX_SIZES:
            least = (max_bytes / min_bytes) ** (1.0 / (MAX_SIZES - 1))
            digits = 5 - math.floor(math.log10(least))  # six significant, rounded up
            least = math.ceil(least * 10**digits) / 10**digits
            raise InputError(
                "-f/--stepfactor",
                factor,
                f"gives {n:,} sizes from {min_bytes} to {max_bytes} bytes; at most "
                f"{MAX_SIZES:,} are allowed (a factor of at least {least:.6g})",
            )
    out, s = [], float(min_bytes)
    while s <= max_bytes:
        out.append(int(s))
        s *= factor
    return out


def count_for(op: str, size_bytes: int, n: int, type_bytes: int) -> int:
    """nccl-tests ``count`` for a row of ``size_bytes`` (per-rank count for AG/RS/A2A)."""
    check_op(op)
    per = size_bytes // type_bytes
    return per // n if op in PER_RANK_TOTAL else per


def row_size(op: str, count: int, n: int, type_bytes: int) -> int:
    """The size a row prints for ``count`` (rounded like nccl-tests)."""
    return count * type_bytes * (n if op in PER_RANK_TOTAL else 1)


def bandwidths(op: str, size_bytes: float, time_s: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s = 1e9 B/s, nccl-tests PERFORMANCE.md."""
    if time_s <= 0:
        return 0.0, 0.0
    alg = size_bytes / time_s / 1e9
    return alg, alg * float(busbw_factor(op, n))


@dataclass(frozen=True)
class Row:
    """One printed nccl-tests row (one size), out-of-place and in-place halves."""

    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    oop_time_us: float
    oop_algbw: float
    oop_busbw: float
    oop_wrong: int
    ip_time_us: float
    ip_algbw: float
    ip_busbw: float
    ip_wrong: int


HEADER = (
    "#\n#                                                              out-of-place"
    "                       in-place\n"
    "#       size         count      type   redop    root     time   algbw   busbw"
    " #wrong     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
    "            (us)  (GB/s)  (GB/s)"
)


def fmt_us(us: float, width: int = 7) -> str:
    """A time in microseconds as nccl-tests prints it: two decimals below 100 us, one below
    10,000 us, none above, so that the column keeps its width."""
    decimals = 2 if us < 100.0 else (1 if us < 10_000.0 else 0)
    return f"{us:{width}.{decimals}f}"


def _wrong(w: int) -> str:
    return "N/A" if w < 0 else str(w)


def format_row(r: Row) -> str:
    """A result row as nccl-tests prints it: size (bytes), count, type, redop, root, then time in
    us, algbw and busbw in GB/s and #wrong, out-of-place and in-place."""
    return (
        f"{r.size_bytes:12d}  {r.count:12d}  {r.dtype:>8s}  {r.redop:>6s}  {r.root:6d}  "
        f"{fmt_us(r.oop_time_us)}  {r.oop_algbw:6.2f}  {r.oop_busbw:6.2f}  "
        f"{_wrong(r.oop_wrong):>5s}  "
        f"{fmt_us(r.ip_time_us)}  {r.ip_algbw:6.2f}  {r.ip_busbw:6.2f}  {_wrong(r.ip_wrong):>5s}"
    )


def avg_busbw(rows: list[Row]) -> float:
    """nccl-tests' footer: mean busbw over every printed value, in- and out-of-place."""
    vals = [v for r in rows for v in (r.oop_busbw, r.ip_busbw)]
    return sum(vals) / len(vals) if vals else 0.0


def op_names() -> tuple[str, ...]:
    """The collectives the benchmark and the model know (:data:`OPS`)."""
    return OPS
