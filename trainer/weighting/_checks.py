"""The rules of the schemes' settings, and the checks against the run's tasks they share."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from weightsearch.core.fields import is_real, unknown_keys

PREFIX = "weighting"

# The largest loss weight taken: far beyond the paper's 1-15, and far below where a weighted
# loss overflows (a weight of 1e39 turned every update after the first into NaN).
MAX_WEIGHT = 1000.0


def _weight_problem(key: str, value: object) -> str | None:
    """A loss weight: finite, from 0 to MAX_WEIGHT. Zero is a real weight (it switches the
    task's loss off)."""
    if not is_real(value) or not 0 <= float(value) <= MAX_WEIGHT:  # type: ignore[arg-type]
        return (f"{key}: must be a number from 0 to {MAX_WEIGHT:g} (the paper sweeps 1-15), "
                f"got {value!r}")
    return None


# The rules of the schemes' settings (`weightsearch.core.fields.setting`). A value that passes is
# kept as given: the settings record what the config said (`dataclasses.asdict` is the run
# config's `weighting`, and its digest).
@dataclass(frozen=True)
class Weight:
    """A loss weight (see `_weight_problem`)."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        problem = _weight_problem(key, value)
        return (None, problem) if problem else (value, None)


@dataclass(frozen=True)
class WeightMap:
    """A mapping task name -> loss weight; one problem per bad entry. None allowed where
    `optional`."""

    optional: bool = False

    def check(self, key: str, value: Any) -> tuple[Any, Any]:
        if not isinstance(value, Mapping):
            return None, (f"{key}: must be a mapping of task name to weight, e.g. {{mrpc: 2}}, "
                          f"got {type(value).__name__}")
        found: list[str] = []
        for task, weight in value.items():
            if not isinstance(task, str):
                found.append(f"{key}: task names must be strings, got {task!r}")
                continue
            problem = _weight_problem(f"{key}.{task}", weight)
            if problem:
                found.append(problem)
        return (None, tuple(found)) if found else (value, None)


@dataclass(frozen=True)
class OneOf:
    """One of a few names, spelled exactly."""

    options: tuple[str, ...]

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if value not in self.options:
            return None, f"{key}: must be one of {', '.join(self.options)}, got {value!r}"
        return value, None


@dataclass(frozen=True)
class Updates:
    """A whole number of updates >= 1."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return None, f"{key}: must be a whole number of updates >= 1, got {value!r}"
        return value, None


@dataclass(frozen=True)
class Positive:
    """A finite number > 0; `says` follows `must be a number > 0` in the message, up to the
    value. None allowed where `optional`."""

    says: str
    optional: bool = False

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if not is_real(value) or float(value) <= 0:
            return None, f"{key}: must be a number > 0{self.says}{value!r}"
        return value, None


def check_unknown_tasks(
    weights: Mapping[str, object], field: str, tasks: Iterable[str], problems: list[str]
) -> None:
    known = list(tasks)
    for task in weights:
        if task not in known:
            problems.append(
                f"{PREFIX}.{field}.{task}: not one of the run's tasks ({', '.join(known)})"
                f"{_did_you_mean(str(task), known)}"
            )


def check_keys(
    raw: Mapping[str, object], allowed: Iterable[str], scheme: str, problems: list[str]
) -> None:
    """Every key must be a setting of the chosen scheme: a typo must not be silently ignored."""
    unknown_keys(raw, ["scheme", *allowed], problems, f"{PREFIX}.", owner=f"scheme {scheme!r}")


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
