"""A registry of named extension classes: weighting schemes, batch samplers, search strategies.

Each kind keeps one `Registry` (a plain dict name -> class, so lookups read as today) whose
`register` refuses a class that is not of the kind, has no `name`, or takes a name another
class holds, and whose `unregister` takes one out again (tests, plug-ins).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


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
