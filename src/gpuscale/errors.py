"""User-facing errors: each names the field, the value and what would be valid.

The CLI turns a :class:`InputError` into one line on stderr and exit code 2; anything else
is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable

from rapidfuzz.distance import OSA


class InputError(ValueError):
    """Bad user input. ``str(err)`` is the whole one-line message."""

    def __init__(self, field: str, value: object, valid: str) -> None:
        self.field = field
        self.value = value
        self.valid = valid
        shown = repr(value) if isinstance(value, str | int | float) else _SHORT.repr(value)
        super().__init__(f"{field}={_clip(shown)} is invalid: {_clip(valid, 2000)}")


_SHORT = reprlib.Repr()  # Python 3.11: limits are attributes, not arguments
"""How a list or mapping is echoed: a few items and levels (a YAML alias bomb expands to
millions)."""
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict = 3, 8, 8
_SHORT.maxstring = _SHORT.maxother = 160


def _clip(text: str, limit: int = 200) -> str:
    """``text`` cut to about ``limit`` characters, saying how long it was: a value pasted or
    expanded by mistake (a YAML alias bomb) must not make a message of megabytes."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 40]}… ({len(text):,} characters)"


def closest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The names in ``choices`` closest to ``name`` (for 'did you mean' suggestions)."""
    pool = list(choices)
    lowered = {c.lower(): c for c in pool}
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.4)
    return [lowered[h] for h in hits]


def unknown(field: str, value: str, choices: Iterable[str], shown: int = 12) -> InputError:
    """An :class:`InputError` for an unknown name, suggesting the closest known ones (else
    the first ``shown`` known names, and how many more there are)."""
    pool = sorted(choices)
    near = closest(value, pool)
    more = f", … ({len(pool) - shown} more)" if len(pool) > shown else ""
    known = f"known: {', '.join(pool[:shown])}{more}"
    hint = f"did you mean {', '.join(near)}?" if near else known
    return InputError(field, value, f"unknown; {hint}")


def unknown_key(field: str, value: object, key: str, valid: Iterable[str]) -> InputError:
    """An :class:`InputError` for a key a file's schema does not have: the valid keys one
    typo away (all of them when several are: ``gpuz`` is ``gpu`` or ``gpus``), else the
    closest by similarity, then all the keys."""
    keys = list(valid)
    dist = {k: OSA.distance(key.lower(), k.lower()) for k in keys}
    best = min(dist.values(), default=0)
    near = [k for k in keys if dist[k] == best] if 0 < best <= max(1, len(key) // 3) else []
    near = near[:3] or closest(key, keys, n=1)
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    return InputError(field, value, f"unknown key; {hint}valid keys: {', '.join(keys)}")
