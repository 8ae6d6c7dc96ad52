"""A registry of named extension classes: weighting schemes, batch samplers, search strategies.

Each kind keeps one `Registry` (a plain dict name -> class, so lookups read as today) whose
`register` refuses a class that is not of the kind, has no `name`, or takes a name another
class holds, and whose `unregister` takes one out again (tests, plug-ins).

An extension's settings are declared as a run config's are (`weightsearch.core.fields`): a
frozen dataclass whose plain settings are fields `x: T = setting(default, Rule, doc=...)`.
`DeclaredKeys` gives such a class its `KEYS` (the YAML keys it reads) and `check_settings` walks
its rules; every family parses through one `from_mapping(raw, context, problems)`.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from weightsearch.core.fields import RULE, check_fields


class Registry(dict):
    def __init__(self, kind: str, base: type, check: Callable[[type], None] | None = None):
        """`kind` names the extension in messages ("batch sampler"); `check` refuses a class
        whose other attributes are wrong (by raising TypeError or ValueError)."""
        super().__init__()
        self.kind, self.base, self.check = kind, base, check

    def register(self, cls: Any) -> Any:
        """Make `cls` available under its `name` (usable as a decorator)."""
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise TypeError(f"{cls!r} is not a {self.base.__name__} subclass")
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"{cls.__name__} needs a class attribute `name`")
        if self.check is not None:
            self.check(cls)
        if name in self and self[name] is not cls:
            raise ValueError(f"a {self.kind} named {name!r} is already registered "
                             f"({self[name].__name__})")
        self[name] = cls
        return cls

    def unregister(self, name: str) -> None:
        """Remove the class registered as `name`; absent: nothing."""
        self.pop(name, None)


class DeclaredKeys:
    """`KEYS` of a settings dataclass: its init fields' names in declaration order (a `scheme`
    field naming the extension is init=False, so not among them). A class that lists its own
    `KEYS` (as extensions written for 0.1 do) keeps that list."""

    def __get__(self, obj: Any, owner: type) -> tuple[str, ...]:
        if not dataclasses.is_dataclass(owner):
            return ()
        return tuple(f.name for f in dataclasses.fields(owner) if f.init)


def check_settings(raw: Mapping[str, Any], cls: type, problems: list[str],
                   prefix: str = "") -> dict[str, Any]:
    """`check_fields` over the settings `cls` declares, with what the extension families need
    besides: a setting whose rule says `required` is checked when absent too (as null, so its
    rule words the problem); a rule that finds several problems in one value (a mapping of
    task to weight) returns them as a tuple, each kept as a problem of its own; and a setting
    declared without a rule is taken as given (a mapping copied, so that the settings do not
    alias the caller's YAML tree)."""
    fields = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    absent = {f.name: None for f in fields
              if getattr(f.metadata.get(RULE), "required", False) and f.name not in raw}
    found: list[Any] = []
    values = check_fields({**raw, **absent}, cls, found, prefix)
    for problem in found:
        problems.extend(problem if isinstance(problem, tuple) else (problem,))
    for f in fields:
        if RULE not in f.metadata and f.name in raw:
            given = raw[f.name]
            values[f.name] = dict(given) if isinstance(given, Mapping) else given
    return values


def positional_parameters(method: Callable[..., Any]) -> int:
    """How many positional arguments `method` takes (a bound classmethod: without `cls`); tells
    a `from_mapping` written for 0.1's signature from today's."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in kinds for p in inspect.signature(method).parameters.values())
