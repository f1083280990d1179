"""Reading the YAML files users write (workloads, clusters, prices), with errors that say
which file, where, and what was expected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpuscale.errors import InputError


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error
    (PyYAML keeps the last value silently)."""


def _mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, str | int | float | bool) and key is not None:
            raise yaml.constructor.ConstructorError(
                None, None, "a key must be a plain name, not a list or mapping", key_node.start_mark
            )
        if key in seen:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice", mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def read_yaml(path: Path, field: str, what: str) -> Any:
    """The parsed document of the YAML file ``path`` (``what`` it should be, for errors)."""
    if path.is_dir():
        raise InputError(field, str(path), f"a directory; give {what}")
    if not path.is_file():
        raise InputError(field, str(path), f"no such file; give {what}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(field, str(path), f"not a readable UTF-8 text file ({exc})") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise InputError(field, str(path), f"well-formed YAML ({where}{problem})") from None
