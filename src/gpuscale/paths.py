"""Checking the paths users give before reading or writing them, with errors that say what
is wrong (a directory, no such file, a device, a name too long for the system)."""

from __future__ import annotations

import stat
from pathlib import Path

from gpuscale.errors import InputError


def path_kind(path: Path, field: str) -> str:
    """``file``, ``dir``, ``missing`` or ``other`` (a device, a pipe, a socket); a path the
    system cannot look up at all (a name longer than it allows) is an :class:`InputError`."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as exc:
        raise InputError(field, str(path), f"a path the system can open ({exc.strerror})") from None
    except ValueError:  # a NUL character
        raise InputError(field, str(path), "a path without NUL characters") from None
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


def require_file(path: Path, field: str, what: str) -> None:
    """An :class:`InputError` unless ``path`` is an existing regular file (``what`` it
    should be, for the message)."""
    kind = path_kind(path, field)
    if kind != "file":
        said = {
            "dir": "a directory",
            "missing": "no such file",
            "other": "not a regular file (a device, pipe or socket)",
        }[kind]
        raise InputError(field, str(path), f"{said}; give {what}")
