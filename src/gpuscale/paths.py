"""Checking the paths users give before reading or writing them, with errors that say what
is wrong (a directory, no such file, a device, a name too long for the system)."""

from __future__ import annotations

import os
import stat
import tempfile
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


def writable_target(path: Path, field: str) -> Path:
    """The file an output at ``path`` is written to (a symlink's target); an error before any
    work when its directory is missing or not writable, or it is a directory or a device."""
    try:
        target = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop, an unreadable component
        raise InputError(field, str(path), "a file path that resolves") from None
    parent = target.parent
    kind = path_kind(target, field) if path_kind(parent, field) == "dir" else "no directory"
    if kind in ("no directory", "dir"):
        raise InputError(field, str(path), "a file path in an existing directory")
    if kind == "other":  # a device, a FIFO, a socket
        raise InputError(field, str(path), "a new or a regular file")
    if not os.access(parent, os.W_OK):
        raise InputError(field, str(path), f"a file path in a writable directory ({parent})")
    return target


def write_atomic(path: Path, text: str, field: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place, so that a
    failed write leaves nothing (and an existing file whole); an unwritable path is an
    :class:`InputError` naming ``field``."""
    target = writable_target(path, field)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(field, str(path), f"a writable file path ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if target.exists():  # a file replaced keeps its permissions
            mode = stat.S_IMODE(target.stat().st_mode)
        else:  # an ordinary new file, not mkstemp's 0600
            mask = os.umask(0)
            os.umask(mask)
            mode = 0o666 & ~mask
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(field, str(path), f"a writable file path ({exc.strerror})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
