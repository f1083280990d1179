"""Units: the only place where human units are parsed and formatted.

Inside gpuscale every quantity is in SI base units: bytes, seconds, FLOP, FLOP/s, bytes/s,
watts, joules, US dollars. Decimal prefixes (k, M, G, T, P) are powers of 1000; binary
prefixes (Ki, Mi, Gi, Ti) are powers of 1024, as in nccl-tests and the JEDEC/IEC usage.
"""

from __future__ import annotations

import math
import re

from gpuscale.errors import InputError

_DEC = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}

_NUM = r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
_RE = re.compile(_NUM + r"\s*(?P<prefix>Ki|Mi|Gi|Ti|Pi|[kKMGTPE]?)(?P<unit>[A-Za-z/%]*)$")

# unit suffix -> (canonical kind, multiplier to SI base)
_UNITS: dict[str, tuple[str, float]] = {
    "B": ("bytes", 1.0),
    "": ("number", 1.0),
    "b": ("bits", 1.0),
    "bps": ("bits/s", 1.0),
    "bit/s": ("bits/s", 1.0),
    "b/s": ("bits/s", 1.0),
    "B/s": ("bytes/s", 1.0),
    "Bps": ("bytes/s", 1.0),
    "s": ("seconds", 1.0),
    "ms": ("seconds", 1e-3),
    "us": ("seconds", 1e-6),
    "ns": ("seconds", 1e-9),
    "min": ("seconds", 60.0),
    "h": ("seconds", 3600.0),
    "d": ("seconds", 86400.0),
    "W": ("watts", 1.0),
    "FLOP/s": ("flop/s", 1.0),
    "FLOPS": ("flop/s", 1.0),
    "flops": ("flop/s", 1.0),
    "%": ("fraction", 0.01),
}


def parse_quantity(text: str | float | int, kind: str, field: str) -> float:
    """Parse ``"80GB"``, ``"400Gbps"``, ``"50ms"``, ``"8G"`` (a count or bytes) into SI.

    ``kind`` is the expected canonical kind (``bytes``, ``bits/s`` -> returned as bytes/s,
    ``bytes/s``, ``seconds``, ``watts``, ``flop/s``, ``number``). Plain numbers are taken as
    already in SI base units. Raises :class:`InputError` naming ``field``.
    """
    value = _parse(text, kind, field)
    if not math.isfinite(value):
        raise InputError(field, text, f"a finite quantity, e.g. {_example(kind)}")
    return value


def parse_duration(text: str, field: str) -> float | None:
    """Seconds of a time written with its unit (``30min``, ``2h``, ``2112d``); None when
    ``text`` is not one: unparsable, not a time, not finite, or a bare number (which names
    no unit)."""
    try:
        seconds = parse_quantity(text, "seconds", field)
    except InputError:
        return None
    return None if text.strip()[-1:].isdigit() else seconds


def _parse(text: str | float | int, kind: str, field: str) -> float:
    if isinstance(text, int | float):
        return float(text)
    s = text.strip()
    # time suffixes that collide with SI prefixes ("ms" = milli-seconds, not mega-s)
    for suffix, mult in (("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if kind == "seconds" and s.endswith(suffix):
            try:
                return float(s[: -len(suffix)]) * mult
            except ValueError:
                break
    m = _RE.match(s)
    if not m:
        raise InputError(
            field, text, f"expected a number with an optional unit, e.g. {_example(kind)}"
        )
    num = float(m.group("num"))
    prefix = m.group("prefix")
    unit = m.group("unit")
    if unit not in _UNITS:
        raise InputError(field, text, f"unknown unit {unit!r}; e.g. {_example(kind)}")
    got_kind, mult = _UNITS[unit]
    scale = _BIN[prefix] if prefix in _BIN else _DEC[prefix]
    value = num * scale * mult
    if got_kind == "number" and kind in ("bytes", "number"):
        return value
    if got_kind == "bits/s" and kind == "bytes/s":
        return value / 8.0
    if got_kind == "bits" and kind == "bytes":
        return value / 8.0
    if got_kind != kind:
        raise InputError(field, text, f"expected {kind}, e.g. {_example(kind)}")
    return value


def _example(kind: str) -> str:
    return {
        "bytes": "'80GB' or '64MiB'",
        "bytes/s": "'400Gbps' or '900GB/s'",
        "seconds": "'2s', '50ms' or '30min'",
        "watts": "'700W' or '10.2kW'",
        "flop/s": "'989TFLOP/s'",
        "number": "'8' or '1M'",
    }.get(kind, "'1'")


def fmt_bytes(n: float, binary: bool = True) -> str:
    """Human bytes: ``fmt_bytes(2**30) == '1.00 GiB'``."""
    if binary:
        for p, f in (
            ("Pi", 2.0**50),
            ("Ti", 2.0**40),
            ("Gi", 2.0**30),
            ("Mi", 2.0**20),
            ("Ki", 2.0**10),
        ):
            if abs(n) >= f:
                return f"{n / f:.2f} {p}B"
        return f"{n:.0f} B"
    for p, f in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= f:
            return f"{n / f:.2f} {p}B"
    return f"{n:.0f} B"


YEAR_S = 365.25 * 86400.0
"""A Julian year in seconds."""


def fmt_time(s: float) -> str:
    """Human duration: seconds to 'ms'/'us'/'s'/'min'/'h'/'days'/'years'."""
    a = abs(s)
    if a >= 2 * YEAR_S:
        return f"{s / YEAR_S:,.1f} years"
    if a >= 2 * 86400:
        return f"{s / 86400:.1f} days"
    if a >= 3600:
        return f"{s / 3600:.2f} h"
    if a >= 600:
        return f"{s / 60:.1f} min"
    if a >= 1:
        return f"{s:.3f} s"
    if a >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def fmt_count(x: float) -> str:
    """A large count the way training runs are told: ``fmt_count(1.56e13) == '15.6T'``
    (B for billions, as in '300B tokens')."""
    for p, f in (("P", 1e15), ("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        v = float(f"{x / f:.3g}")  # rounded first: 999.6B is 1T, not 1e+03B
        if abs(v) >= 1.0:
            return f"{v:g}{p}"
    return f"{x:.0f}"


def fmt_rate(x: float, unit: str) -> str:
    """``fmt_rate(1.5e14, 'FLOP/s') == '150.0 TFLOP/s'``."""
    for p, f in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= f:
            return f"{x / f:.1f} {p}{unit}"
    return f"{x:.1f} {unit}"


TFLOPS = 1e12
GB = 1e9
GiB = 2.0**30
MiB = 2.0**20
