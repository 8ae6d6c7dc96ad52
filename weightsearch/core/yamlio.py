"""YAML reading with YAML 1.2 numbers: `1e-4` is a float, as users expect, not the string
PyYAML's YAML 1.1 rules make of it (they demand `1.0e-4`).

Stricter than PyYAML's safe loader where a config file or a request body can hurt: a key given
twice is an error (PyYAML keeps the last one silently), aliases (`*name`) are refused, since a
few nested anchors expand a body of a few hundred bytes into gigabytes, and nesting is bounded
(libyaml's composer recurses per level and crashes the process on a deep enough document).

libyaml (PyYAML's C extension) parses where it is installed, some 15 times faster than PyYAML's
pure-Python parser; a first pass over its event stream, which does not recurse, checks aliases
and depth before the composer sees the document.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from weightsearch.core.errors import ConfigError

_Base: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
C_PARSER = _Base is not yaml.SafeLoader
MAX_DEPTH = 64  # a run config nests four levels deep, a study file five


class YamlTooDeep(yaml.YAMLError):
    def __init__(self, limit: int, mark: Any = None) -> None:
        self.problem = f"nesting deeper than {limit} levels; flatten the document"
        self.problem_mark = mark
        super().__init__(self.problem)


class _Loader(_Base):  # type: ignore[misc, valid-type]
    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, (str, int, float, bool)) or key is None:
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key!r}: give each setting once",
                            key_node.start_mark)
                    seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)

_BRACKETS = re.compile(r"[\[\]{}]")


def _check_brackets(text: str, limit: int) -> None:
    # Both parsers scan ahead through a whole run of opening brackets before their first event
    # (libyaml in quadratic time), so bracket nesting is bounded first. A bracket inside a
    # quoted string counts too: harmless at these limits.
    depth = 0
    for match in _BRACKETS.finditer(text):
        depth += 1 if match.group() in "[{" else -1
        if depth > limit:
            raise YamlTooDeep(limit)


def _check_events(text: str, limit: int) -> None:
    loader = _Base(text)
    depth = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.AliasEvent):
                raise yaml.composer.ComposerError(
                    None, None, "aliases (*name) are not allowed; write the value out",
                    event.start_mark)
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > limit:
                    raise YamlTooDeep(limit, event.start_mark)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    finally:
        loader.dispose()


def load_yaml(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """The document as Python data; yaml.YAMLError (with a mark where known) when it is
    malformed, uses an alias, repeats a key or nests deeper than `max_depth`."""
    _check_brackets(text, max_depth)
    _check_events(text, max_depth)
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def yaml_problem(exc: yaml.YAMLError) -> str:
    """`not valid YAML at line L, column C: <what>`: the user's words for a parse error."""
    mark = getattr(exc, "problem_mark", None)
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"not valid YAML{at}: {reason}"


def read_yaml_file(path: Path, noun: str = "file") -> Any:
    """The YAML document in `path` ({} when empty); ConfigError, labelled with the path, when
    it is missing, unreadable or malformed. `noun` names the file in the message."""
    from weightsearch.core.files import read_text_bounded

    text = read_text_bounded(path, noun)
    try:
        return load_yaml(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError([yaml_problem(exc)], str(path)) from None
