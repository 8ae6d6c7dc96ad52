"""What every conformance suite shares: its checks are `test_*` methods without arguments, so
a subclass named `Test...` is a pytest test class as it stands, and `run_suite` runs the same
checks without pytest (the `check_*` functions). A broken contract raises `ConformanceError`,
an AssertionError that says which check failed and what it found.

No check needs pytest: the suites are plain Python, so a plug-in's own tests may use any
runner, and a check says what is wrong in words rather than through assertion rewriting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from weightsearch.core.registry import Registry


class ConformanceError(AssertionError):
    """A plug-in broke its contract: the check, and what it found."""


def expect(condition: object, message: str) -> None:
    """Raise ConformanceError(message) unless `condition` holds (unlike `assert`, kept under
    `python -O`)."""
    if not condition:
        raise ConformanceError(message)


def refuses(error: type[BaseException], call: Callable[..., Any], *args: Any) -> bool:
    """Whether `call(*args)` raises `error`; any other exception propagates."""
    try:
        call(*args)
    except error:
        return True
    return False


def registered(registry: Registry, name: str) -> Any:
    """The class registered as `name`, checked to be of the registry's kind."""
    cls = registry.get(name)
    expect(cls is not None, f"no {registry.kind} is registered as {name!r}; register it first")
    expect(isinstance(cls, type) and issubclass(cls, registry.base),
           f"{cls!r} is not a {registry.base.__name__}")
    return cls


class Conformance:
    """Base of the suites. A subclass sets the class attributes its suite names (the plug-in's
    registered name, and example settings or data), and each `test_*` method checks one part
    of the contract."""

    @classmethod
    def checks(cls) -> list[str]:
        """The names of the suite's checks, base class first, each in declaration order."""
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            names += [n for n in vars(klass) if n.startswith("test_") and n not in names]
        return names

    @classmethod
    def settings_names(cls) -> set[str]:
        """The class attributes a suite may be given (declared, with or without a value)."""
        names: set[str] = set()
        for klass in cls.__mro__:
            names.update(getattr(klass, "__annotations__", {}))
        return names


def run_suite(suite: type[Conformance], attributes: Mapping[str, Any]) -> None:
    """Run every check of `suite` with `attributes` set on it; raise one ConformanceError that
    lists every check that failed (the first failure's exception chained)."""
    unknown = sorted(set(attributes) - suite.settings_names())
    if unknown:
        raise TypeError(f"{suite.__name__} has no setting {', '.join(unknown)}; its settings are "
                        f"{', '.join(sorted(suite.settings_names()))}")
    configured: type[Conformance] = type(f"Check{suite.__name__}", (suite,), dict(attributes))
    failures: list[str] = []
    first: BaseException | None = None
    for name in configured.checks():
        try:
            getattr(configured(), name)()
        except Exception as err:  # a plug-in may raise anything; each is a broken contract
            first = first or err
            what = str(err) if isinstance(err, ConformanceError) else f"{type(err).__name__}: {err}"
            failures.append(f"{name}: {what}")
    if failures:
        raise ConformanceError(f"{suite.__name__}: {len(failures)} of "
                               f"{len(configured.checks())} checks failed\n"
                               + "\n".join(failures)) from first
