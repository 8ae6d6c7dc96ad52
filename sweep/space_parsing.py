"""Parsing `search.space` (and the `weights:` shorthand's range) into a `Space`: each
dimension's values, range or task group checked, every problem reported at once. The space
itself (its points, keys, folders and Optuna params): `sweep/space.py`."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from weightsearch.core.fields import Flag, Number, check_fields, setting, unknown_keys
from weightsearch.studies import schema as S
from weightsearch.sweep.space import (
    CENTRAL_WEIGHT,
    GROUP,
    MAX_DIMENSION_VALUES,
    PATH_PATTERN,
    SWEEP_OWNED,
    Dimension,
    Space,
    default_space,
    is_finite_number,
    step_count,
)


def parse_space(raw: Any, tasks: Sequence[str], problems: list[str],
                where: str = "search.space") -> Space:
    """A Space from its YAML mapping; each problem names its path and the fix."""
    if raw is None:
        return default_space()
    if not isinstance(raw, Mapping) or not raw:
        problems.append(f"{where}: expected a mapping of run-config paths to values, e.g. "
                        "{weighting.central_weight: [1, 9], lr: [1.0e-4, 2.0e-4]}")
        return default_space()
    dims = []
    for path, spec in raw.items():
        dim = _parse_dimension(str(path), spec, tasks, problems, f"{where}.{path}")
        if dim is not None:
            dims.append(dim)
    paths = [d.path for d in dims]
    for a, b in itertools.permutations(paths, 2):
        if b.startswith(a + "."):
            problems.append(f"{where}.{b}: lies inside {a}, which the space also sets; "
                            "search one of them")
    return Space(tuple(dims)) if dims else default_space()


def _parse_dimension(path: str, spec: Any, tasks: Sequence[str], problems: list[str],
                     where: str) -> Dimension | None:
    if not PATH_PATTERN.match(path):
        problems.append(f"{where}: not a run-config path; write keys joined by dots, e.g. "
                        "weighting.central_weight or sampling.weights.squad2")
        return None
    top = path.split(".", 1)[0]
    if top in SWEEP_OWNED:
        problems.append(f"{where}: {top} is set per cell by the sweep and cannot be searched")
        return None
    if path == GROUP or top == GROUP:
        return _parse_group(path, spec, tasks, problems, where)
    if isinstance(spec, list):
        return parse_values(path, spec, problems, where, categorical=False)
    if isinstance(spec, Mapping) and "choices" in spec:
        unknown_keys(spec, ["choices"], problems, f"{where}.", owner="a choice")
        choices = spec["choices"]
        if not isinstance(choices, list):
            problems.append(f"{where}.choices: expected a list of values, got {choices!r}")
            return None
        return parse_values(path, choices, problems, where, categorical=True)
    if isinstance(spec, Mapping):
        return parse_range(path, spec, problems, where)
    problems.append(f"{where}: expected a list of values, {{low, high[, step, log, int]}} or "
                    f"{{choices: [...]}}, got {spec!r}")
    return None


@dataclass(frozen=True)
class _Weight:
    """A central weight: a number in the range every study searches (kept as a float)."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        fix = f"use a weight from {S.WEIGHT_LOW:g} to {S.WEIGHT_HIGH:g}"
        if not is_finite_number(value):
            return None, f"{key}: {value!r} is not a number; {fix}"
        if not S.WEIGHT_LOW <= value <= S.WEIGHT_HIGH:
            return None, f"{key}: {value!r} is out of range; {fix}"
        return float(value), None

    def schema(self) -> dict[str, Any]:
        return {"type": "number", "minimum": S.WEIGHT_LOW, "maximum": S.WEIGHT_HIGH}


@dataclass(frozen=True)
class _Searched:
    """A listed value of any other path: a finite number, a string or true/false (the
    trainer's validation judges it at each point)."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if isinstance(value, Mapping | list) or value is None:
            return None, (f"{key}: {value!r}: a searched value must be a number, a string or "
                          "true/false")
        if isinstance(value, float) and not math.isfinite(value):
            return None, f"{key}: {value!r} is not a finite number"
        return value, None


_ANY_NUMBER = Number(integer=False, low=-math.inf)


@dataclass(frozen=True)
class RangeSettings:
    """`{low, high[, step, log, int]}`: a numeric range; a grid where it has a step (or int)."""

    low: float | None = setting(None, _ANY_NUMBER)  # required: None is refused
    high: float | None = setting(None, _ANY_NUMBER)
    step: float | None = setting(None, Number(integer=False, low=0, low_open=True,
                                              optional=True))
    log: bool = setting(False, Flag())
    int: bool = setting(False, Flag())  # the key `int:`: whole numbers only


@dataclass(frozen=True)
class WeightRangeSettings(RangeSettings):
    """The central weight's range: within the weight range, which is also its default."""

    low: float | None = setting(S.WEIGHT_LOW, _Weight())
    high: float | None = setting(S.WEIGHT_HIGH, _Weight())


def parse_values(path: str, values: list, problems: list[str], where: str,
                  categorical: bool) -> Dimension | None:
    if not values:
        problems.append(f"{where}: the list is empty; give at least one value, e.g. "
                        + ("weights: [1, 3, 6, 9, 12, 15]" if path == CENTRAL_WEIGHT
                           else "[1.0e-4, 2.0e-4]"))
        return None
    rule = _Weight() if path == CENTRAL_WEIGHT else _Searched()
    out: list[Any] = []
    before = len(problems)
    for i, given in enumerate(values):
        value, problem = rule.check(f"{where}[{i}]", given)
        if problem is None and any(value == v and type(value) is type(v) for v in out):
            problem = f"{where}[{i}]: {given!r} is listed twice"
        if problem is None:
            out.append(value)
        else:
            problems.append(problem)
    if len(problems) > before:
        return None
    return Dimension(path, values=tuple(out), categorical=categorical)


def parse_range(path: str, spec: Mapping[str, Any], problems: list[str],
                 where: str) -> Dimension | None:
    cls = WeightRangeSettings if path == CENTRAL_WEIGHT else RangeSettings
    unknown_keys(spec, [f.name for f in dataclasses.fields(cls)], problems, f"{where}.")
    before = len(problems)
    # Without low or high a range is checked as if it gave its default (None: refused).
    given = {"low": cls.low, "high": cls.high, **spec}
    values = check_fields(given, cls, problems, f"{where}.")
    if len(problems) > before:
        return None
    r = cls(**values)
    low, high = r.low, r.high
    assert low is not None and high is not None  # check_fields refused a missing one
    problem = _range_problem(r, low, high, given, path == CENTRAL_WEIGHT)
    if problem is not None:
        problems.append(f"{where}{problem}")
        return None
    if r.step is not None or r.int:
        n = step_count(low, high, r.step or 1)
        if n > MAX_DIMENSION_VALUES:
            problems.append(f"{where}: {n:,} values from low to high in steps of "
                            f"{r.step or 1:g}; at most {MAX_DIMENSION_VALUES:,} are taken: use "
                            "a larger step, or no step and strategy: guided")
            return None
    whole = int if r.int else float
    return Dimension(path, low=whole(low), high=whole(high),
                     step=None if r.step is None else whole(r.step), log=r.log, integer=r.int)


def _range_problem(r: RangeSettings, low: float, high: float, given: Mapping[str, Any],
                   central_weight: bool) -> str | None:
    """What is wrong with a range whose every setting is fine on its own (`low`, `high`: its
    bounds, both given), as a suffix of its path (`: ...` or `.<setting>: ...`); `given` holds
    low and high as written."""
    if low >= high:
        return f": low ({given['low']!r}) must be below high ({given['high']!r})"
    if r.log and (low <= 0 or r.step is not None):
        return ".log: a log range needs low > 0 and no step"
    if r.int and not all(float(v).is_integer() for v in (low, high, r.step or 1)):
        return ".int: low, high and step must be whole numbers"
    if central_weight and r.int:
        return ".int: the central weight is a real number; use a step of 1"
    return None


def _parse_group(path: str, spec: Any, tasks: Sequence[str], problems: list[str],
                 where: str) -> Dimension | None:
    if path == GROUP and isinstance(spec, Mapping) and "groups_of" in spec:
        return _parse_groups(spec, tasks, problems, where)
    if path != GROUP or not isinstance(spec, Mapping) or set(spec) != {"subsets_of"}:
        problems.append(f"{where}: the task grouping space is written tasks: {{subsets_of: "
                        "[task, ...]}} (candidate auxiliary tasks from train.tasks), or tasks: "
                        "{groups_of: [task, ...]} (every network of a budgeted grouping)")
        return None
    candidates = spec["subsets_of"]
    if not isinstance(candidates, list) or not candidates:
        problems.append(f"{where}.subsets_of: expected a non-empty list of task names from "
                        f"train.tasks, got {candidates!r}")
        return None
    out = task_names_in(candidates, tasks, f"{where}.subsets_of", "add it there or leave it out",
                        problems)
    # Candidates in train.tasks order: a group's task list keeps the template's order.
    order = {t: i for i, t in enumerate(tasks)}
    return Dimension(GROUP, candidates=tuple(sorted(out, key=lambda t: order.get(t, 0))))



def _parse_groups(spec: Mapping[str, Any], tasks: Sequence[str], problems: list[str],
                  where: str) -> Dimension | None:
    """`{groups_of: [task, ...], max_size: k}`: the budgeted grouping space. Every task of
    train.tasks must be in some group: the selection serves every task."""
    unknown_keys(spec, ["groups_of", "max_size"], problems, f"{where}.",
                 owner="a grouping space")
    listed = spec["groups_of"]
    if not isinstance(listed, list) or not listed:
        problems.append(f"{where}.groups_of: expected a non-empty list of task names from "
                        f"train.tasks, got {listed!r}")
        return None
    before = len(problems)
    out = task_names_in(listed, tasks, f"{where}.groups_of", "add it there or leave it out",
                        problems)
    left_out = [t for t in tasks if t not in out]
    if left_out:
        problems.append(f"{where}.groups_of: no group contains {', '.join(left_out)} (in "
                        "train.tasks), so no budget could serve it; list it in groups_of or "
                        "remove it from train.tasks")
    max_size = spec.get("max_size")
    if max_size is not None and (not isinstance(max_size, int) or isinstance(max_size, bool)
                                 or not 2 <= max_size <= max(2, len(out))):
        problems.append(f"{where}.max_size: expected a whole number from 2 (single-task and "
                        f"pairwise networks) to {max(2, len(out))} (every group), got "
                        f"{max_size!r}; leave it out to train every group")
    if len(problems) > before:
        # Refused already; still a grouping space, so that the checks that follow judge the
        # study as one (and not as the default weight search) and add no other message.
        max_size = None
        if not out:
            return None
    order = {t: i for i, t in enumerate(tasks)}
    return Dimension(GROUP, candidates=tuple(sorted(out, key=lambda t: order.get(t, 0))),
                     groups_of=True, max_size=None if max_size == len(out) else max_size)


def task_names_in(items: Sequence[Any], tasks: Sequence[str], where: str, fix: str,
                  problems: list[str]) -> list[str]:
    """The task names of a list, each once and each among `tasks` (when known); a problem for
    every other item, named by its index."""
    out: list[str] = []
    for i, name in enumerate(items):
        key = name.strip().lower() if isinstance(name, str) else None
        if key is None or (tasks and key not in tasks):
            known = f"is not among train.tasks ({', '.join(tasks)}); {fix}" if key is not None \
                else "is not a task name"
            problems.append(f"{where}[{i}]: {name!r} {known}")
        elif key in out:
            problems.append(f"{where}[{i}]: {name!r} is listed twice")
        else:
            out.append(key)
    return out
