"""The rules of a task's fields, as the settings walker of `weightsearch.core.fields` reads them:
each an object with `check(key, value) -> (value, problem)` and, where it has one, `schema()`
(its JSON Schema); and the metric names the registered task types report.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from weightsearch.core.fields import is_number
from weightsearch.trainer.task_types import TASK_TYPES


def known_metrics() -> tuple[str, ...]:
    """Every metric some registered task type reports, in a stable order; read when asked,
    so a type registered later counts at once."""
    return tuple(dict.fromkeys(m for t in TASK_TYPES.values() for m in t.metrics))


@dataclass(frozen=True)
class OneOf:
    """One of the names `options()` gives when the value is checked (a registry may have grown
    since), in any letter case (kept in lower case)."""

    noun: str
    options: Callable[[], Iterable[str]]

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        names = tuple(self.options())
        if not isinstance(value, str) or value.lower() not in names:
            return None, f"{key}: unknown {self.noun} {value!r}; use one of {', '.join(names)}"
        return value.lower(), None

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.options())}


def _column(value: object) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value >= 0:
        return str(value)
    if isinstance(value, str) and value:
        return value
    return None


_COLUMN_SCHEMA = {"anyOf": [{"type": "string", "minLength": 1}, {"type": "integer", "minimum": 0}]}


def _nullable(schema: dict[str, Any], optional: bool = True) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]} if optional else schema


@dataclass(frozen=True)
class Column:
    """A column: its name, or its position from 0 in a file without header (kept as text)."""

    optional: bool = False

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        column = _column(value)
        if column is None:
            null = " (or null)" if self.optional else ""
            return None, (f"{key}: expected a column name or index{null}, got {value!r}; name "
                          "the column, or give its position from 0 in a file without header")
        return column, None

    def schema(self) -> dict[str, Any]:
        return _nullable(_COLUMN_SCHEMA, self.optional)


@dataclass(frozen=True)
class Choices:
    """Multiple choice: the columns of the choices, at least two, all different."""

    optional: bool = True

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        columns = [_column(c) for c in value] if isinstance(value, list | tuple) else [None]
        if len(columns) < 2 or None in columns or len(set(columns)) != len(columns):
            return None, (f"{key}: expected at least two distinct columns, one per choice, got "
                          f"{value!r}; e.g. [ending0, ending1, ending2, ending3]")
        return tuple(columns), None

    def schema(self) -> dict[str, Any]:
        return _nullable({"type": "array", "items": _COLUMN_SCHEMA, "minItems": 2,
                          "uniqueItems": True})


@dataclass(frozen=True)
class DevFiles:
    """A path (the split `dev`), or a mapping split name -> path."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if isinstance(value, str) and value.strip():
            return (("dev", value.strip()),), None
        pairs = tuple((str(k), v) for k, v in value.items()) if isinstance(value, Mapping) else ()
        if not pairs or not all(k and isinstance(v, str) and v.strip() for k, v in pairs):
            return None, (f"{key}: expected a path, or a mapping split name -> path, got "
                          f"{value!r}; e.g. {{matched: MNLI/dev_matched.tsv}}")
        return tuple((k, v.strip()) for k, v in pairs), None

    def schema(self) -> dict[str, Any]:
        path = {"type": "string", "minLength": 1}
        return {"anyOf": [path, {"type": "object", "additionalProperties": path,
                                 "minProperties": 1}]}


@dataclass(frozen=True)
class Labels:
    """The label set in index order, distinct; YAML [0, 1] means the file's "0" and "1". An
    empty list or null: none (regression)."""

    optional: bool = True

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        ok = isinstance(value, list | tuple) and all(
            isinstance(v, str | int) and not isinstance(v, bool) for v in value)
        labels = tuple(str(v) for v in value) if ok else ()
        if not ok or len(set(labels)) != len(labels):
            return None, (f"{key}: must be a list of distinct label values in index order, "
                          "e.g. [not_entailment, entailment], or null for regression")
        return labels or None, None

    def schema(self) -> dict[str, Any]:
        label = {"type": ["string", "integer"]}
        return _nullable({"type": "array", "items": label, "uniqueItems": True})


@dataclass(frozen=True)
class Metrics:
    """A metric name, or a non-empty list of them (each kept once, in order)."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list | tuple) or not names:
            return None, (f"{key}: expected a metric name or a non-empty list of them, got "
                          f"{value!r}; use names from {', '.join(known_metrics())}")
        unknown = [m for m in names if m not in known_metrics()]
        if unknown:
            return None, (f"{key}: unknown metric(s) {', '.join(map(repr, unknown))}; use "
                          f"names from {', '.join(known_metrics())}")
        return tuple(dict.fromkeys(names)), None

    def schema(self) -> dict[str, Any]:
        name = {"type": "string", "enum": list(known_metrics())}
        return {"anyOf": [name, {"type": "array", "items": name, "minItems": 1}]}


@dataclass(frozen=True)
class Dropout:
    """A dropout rate: a number in [0, 1)."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if not is_number(value) or not 0 <= value < 1:
            return None, f"{key}: must be a number in [0, 1), got {value!r}"
        return float(value), None

    def schema(self) -> dict[str, Any]:
        return {"type": "number", "minimum": 0, "exclusiveMaximum": 1}


@dataclass(frozen=True)
class Header:
    """true or false: whether the first line of the file names its columns."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if not isinstance(value, bool):
            return None, f"{key}: must be true or false, got {value!r}"
        return value, None

    def schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


@dataclass(frozen=True)
class TaskName:
    """A task's name, kept in lower case: it names the study and the metrics."""

    pattern: str = r"[A-Za-z0-9][A-Za-z0-9_\-]*"

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if not isinstance(value, str) or not re.fullmatch(self.pattern, value.strip()):
            return None, (f"{key}: expected a task name, got {value!r}; use letters, digits, "
                          "'_' or '-' (it names the study and the metrics)")
        return value.strip().lower(), None

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "pattern": f"^{self.pattern}$"}


@dataclass(frozen=True)
class TypeOption:
    """A setting only some task types have (span_qa's window sizes): null, or a value the check
    of the registered type that has it passes."""

    name: str
    optional: bool = True

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        owner = next((t for t in TASK_TYPES.values() if self.name in t.options), None)
        problem = owner.options[self.name][1](value) if owner is not None else None
        return (None, f"{key}: {problem}") if problem else (value, None)
