"""Writing a report page: whole or not at all, to a path checked before any work."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import jinja2
from markupsafe import Markup, escape

from gpuscale.errors import InputError
from gpuscale.paths import path_kind

HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{{ title }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 1200px; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; margin: 1em 0 2em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
p.note { color: #555; }
{% block style %}{% endblock %}
</style></head><body>
<h1>{{ title }}</h1>
<p>{{ workload }}</p>
{% block body %}{% endblock %}
</body></html>
"""
"""The frame every report page shares (jinja2 blocks ``style`` and ``body``)."""


def code(text: str) -> Markup:
    """``text`` escaped, its `backticked` spans (commands, flags) as <code>."""
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(text))))


def template(body: str) -> jinja2.Template:
    """A page template: :data:`HEAD` with ``body``'s ``style`` and ``body`` blocks; the
    filter ``code`` sets a text's backticked spans as code."""
    env = jinja2.Environment(
        loader=jinja2.DictLoader({"head": HEAD, "page": body}),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["code"] = code
    return env.get_template("page")


def check_target(path: Path) -> Path:
    """The file a report at ``path`` is written to (a symlink's target); an error before any
    work when its directory is missing or not writable."""
    try:
        target = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop, an unreadable component
        raise InputError("html", str(path), "a file path that resolves") from None
    parent = target.parent
    kind = path_kind(target, "html") if path_kind(parent, "html") == "dir" else "no directory"
    if kind in ("no directory", "dir"):
        raise InputError("html", str(path), "a file path in an existing directory")
    if kind == "other":  # a device, a FIFO, a socket
        raise InputError("html", str(path), "a new or a regular file")
    if not os.access(parent, os.W_OK):
        raise InputError("html", str(path), f"a file path in a writable directory ({parent})")
    return target


def write_page(path: Path, html: str) -> None:
    """Write ``html`` to ``path`` through a temporary file renamed into place, so that a
    failed write leaves nothing; an unwritable path is an :class:`InputError`."""
    target = check_target(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputError("html", str(path), f"a writable file path ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(html)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # as an ordinary new file, not mkstemp's 0600
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise InputError("html", str(path), f"a writable file path ({exc.strerror})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
