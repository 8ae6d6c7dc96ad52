"""Reading an untrusted request body as a study file: JSON or YAML, bounded in size and depth.

YAML aliases are refused outright: an anchor can be referenced many times, so a few hundred
bytes of nested aliases expand into gigabytes. Nesting is bounded because the parsers recurse
per level (a deep body would otherwise end in RecursionError, a 500, or worse). YAML is parsed
by libyaml (`weightsearch.core.yamlio`): a 64 KiB body in milliseconds.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from weightsearch.core.errors import ConfigError
from weightsearch.core.yamlio import YamlTooDeep, load_yaml

MAX_DEPTH = 32  # a study file nests four levels deep; this leaves ample room

JSON_TYPES = ("application/json",)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")


def media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def parse_body(text: str, content_type: str) -> Any:
    """The body as Python data, parsed by its media type; ConfigError if it is malformed."""
    kind = media_type(content_type)
    if kind in JSON_TYPES:
        value = _parse_json(text)
    elif kind in YAML_TYPES:
        value = _parse_yaml(text)
    else:
        raise ConfigError(f"unsupported Content-Type {content_type!r}; send application/json "
                          "or application/yaml")
    _check_strings(value)
    return value


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all distinct: `{"study": "x", "study": "y"}` would read
    last-wins, past any check made on the first (YAML refuses duplicates the same way)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _parse_json(text: str) -> Any:
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise ConfigError(f"the JSON body gives the key {exc.args[0]!r} twice in one object; "
                          "give each key once") from None
    except RecursionError:
        raise ConfigError(f"the JSON body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise ConfigError(f"the body is not valid JSON: {exc}") from None
    if _depth(value) > MAX_DEPTH:
        raise ConfigError(f"the JSON body nests deeper than {MAX_DEPTH} levels")
    return value


def _parse_yaml(text: str) -> Any:
    try:
        return load_yaml(text, max_depth=MAX_DEPTH)
    except YamlTooDeep:
        raise ConfigError(f"the YAML body nests deeper than {MAX_DEPTH} levels") from None
    except yaml.composer.ComposerError as exc:
        if "alias" in str(exc.problem):
            raise ConfigError("YAML aliases (*name) are not accepted over HTTP; write the "
                              "values out") from None
        raise ConfigError(f"the body is not valid YAML: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"the body is not valid YAML: {exc}") from None


def _check_strings(value: Any) -> None:
    """Every key and string encodes as UTF-8. JSON's escapes can spell a lone surrogate
    ("\\ud800"), which no file name, log or database can hold: a path made of one fails deep
    inside the checks (a 500) or in the job, so it is refused here, naming the field."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            for key, sub in item.items():
                name = f"{where}.{key}" if where else str(key)
                _encodable(key, name)
                stack.append((sub, name))
        elif isinstance(item, list):
            stack.extend((sub, f"{where}[{i}]") for i, sub in enumerate(item))
        else:
            _encodable(item, where or "the body")


def _encodable(item: Any, where: str) -> None:
    if not isinstance(item, str):
        return
    try:
        item.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = item[exc.start]
        raise ConfigError(f"{where.encode('utf-8', 'backslashreplace').decode()}: holds "
                          f"{bad!r}, a lone UTF-16 surrogate, which no file name or setting "
                          "can hold; send valid Unicode text (a \\uD800-\\uDFFF escape "
                          "must be half of a pair)") from None


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict)
                                                  else item))
    return deepest
