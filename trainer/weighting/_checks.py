"""Small validators shared by the schemes' settings; each appends a message naming the field."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from weightsearch.core.fields import is_real, unknown_keys

PREFIX = "weighting"




# The largest loss weight taken: far beyond the paper's 1-15, and far below where a weighted
# loss overflows (a weight of 1e39 turned every update after the first into NaN).
MAX_WEIGHT = 1000.0


def check_weight(value: object, field: str, problems: list[str]) -> None:
    """A loss weight: finite, from 0 to MAX_WEIGHT. Zero is a real weight (it switches the
    task's loss off)."""
    if not is_real(value) or not 0 <= float(value) <= MAX_WEIGHT:  # type: ignore[arg-type]
        problems.append(f"{PREFIX}.{field}: must be a number from 0 to {MAX_WEIGHT:g} (the "
                        f"paper sweeps 1-15), got {value!r}")


def check_weight_map(value: object, field: str, problems: list[str]) -> None:
    """A mapping task name -> weight."""
    if not isinstance(value, Mapping):
        problems.append(
            f"{PREFIX}.{field}: must be a mapping of task name to weight, e.g. {{mrpc: 2}}, "
            f"got {type(value).__name__}"
        )
        return
    for task, weight in value.items():
        if not isinstance(task, str):
            problems.append(f"{PREFIX}.{field}: task names must be strings, got {task!r}")
            continue
        check_weight(weight, f"{field}.{task}", problems)


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
