"""Writing a report page: whole or not at all, to a path checked before any work."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
from markupsafe import Markup, escape

from gpuscale.paths import writable_target, write_atomic

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
    return writable_target(path, "html")


def write_page(path: Path, html: str) -> None:
    """Write ``html`` to ``path`` whole or not at all (:func:`gpuscale.paths.write_atomic`)."""
    write_atomic(path, html, "html")
