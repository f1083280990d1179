"""Reading the YAML and JSON files users write (workloads, clusters, prices, Hugging Face
config.json, calibrations), with errors that say which file, where, and what was expected."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from gpuscale.errors import InputError
from gpuscale.paths import require_file


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

# Numbers as YAML 1.2 reads them: integers decimal (with _ between digits), 0o octal or 0x
# hex, and no base-60 numbers. YAML 1.1, PyYAML's default, reads 0512 as octal (330) and
# 1:04 as base 60 (64); here the first is 512 and the second a string the schema rejects.
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_UniqueKeyLoader.add_implicit_resolver(
    _INT_TAG,
    re.compile(r"^(?:[-+]?[0-9](?:_?[0-9])*|0o[0-7]+|0x[0-9a-fA-F]+)$"),
    list("-+0123456789"),
)
_UniqueKeyLoader.add_implicit_resolver(
    _FLOAT_TAG,
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def _int(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node)).replace("_", "")
    return int(text, 0) if text[:2] in ("0o", "0x") else int(text, 10)


_UniqueKeyLoader.add_constructor(_INT_TAG, _int)


LONG_INTEGER = (
    f"integers of at most {sys.get_int_max_str_digits():,} digits (Python's limit for reading one)"
)


def read_yaml(path: Path, field: str, what: str) -> Any:
    """The parsed document of the YAML file ``path`` (``what`` it should be, for errors)."""
    require_file(path, field, what)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(field, str(path), f"not a readable UTF-8 text file ({exc})") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except RecursionError:
        raise InputError(
            field, str(path), "YAML nested at most a few hundred levels deep"
        ) from None
    except ValueError as exc:  # an integer past Python's conversion limit, or a bad date
        valid = LONG_INTEGER if "integer string conversion" in str(exc) else f"valid YAML ({exc})"
        raise InputError(field, str(path), valid) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise InputError(field, str(path), f"well-formed YAML ({where}{problem})") from None


class _RepeatedKeyError(ValueError):
    """A JSON object naming one key twice (the message is the key)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out and out[key] != value:  # the same value twice changes nothing
            raise _RepeatedKeyError(key)
        out[key] = value
    return out


def read_json(path: Path, field: str, what: str) -> Any:
    """The parsed document of the JSON file ``path`` (``what`` it should be, for errors)."""
    require_file(path, field, what)
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"), object_pairs_hook=_unique_keys)
    except _RepeatedKeyError as exc:
        # the last value would silently win, as a repeated YAML key is refused
        raise InputError(
            field, str(path), f"each key once in an object; repeated with two values: {exc}"
        ) from None
    except RecursionError:
        raise InputError(
            field, str(path), "JSON nested at most a few hundred levels deep"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(field, str(path), f"not a readable JSON file ({exc})") from None
    except ValueError:  # an integer past Python's conversion limit
        raise InputError(field, str(path), LONG_INTEGER) from None
