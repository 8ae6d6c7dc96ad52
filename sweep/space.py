"""Search spaces: the run-config paths a study varies, and the values each may take.

    search:
      space:
        weighting.central_weight: [1, 3, 6, 9, 12, 15]     # a list: these values (a grid)
        sampling.weights.squad2: {low: 0.2, high: 0.9, step: 0.1}   # a range (step: a grid)
        lr: {low: 1.0e-5, high: 1.0e-3, log: true}          # continuous: guided search only
        pooling: {choices: [mean, cls]}                     # categorical
        tasks: {subsets_of: [mrpc, stsb, qnli]}             # task grouping (below)
        tasks: {groups_of: [rte, mrpc, stsb, cola]}         # networks to deploy (below)

A path names a key of the trainer's run config (`train:`), nested keys joined by dots; each
point of the space sets those keys in the study's run-config template, and the trainer's own
validation judges every value. `tasks: {subsets_of: [...]}` is the task-grouping space: for
each central task, the central task trained with every subset of the candidate auxiliary tasks
(the empty set included: the central task alone); tasks outside the chosen subset are dropped
from the run, and from the settings that name them (aux weights, sampling weights).

`tasks: {groups_of: [...]}` is the budgeted grouping space (Standley et al. 2020): a study with
no central task, where each point is one network that trains the tasks of one group (every
non-empty group of the listed tasks; `max_size: 2`: only the single-task and pairwise networks,
the larger groups then estimated from the pairs, `weightsearch.studies.grouping`). Every task of the
group is scored in that network; the study is the one Optuna study `<study>/groups` (GROUPS_STUDY),
and each cell's run names the group's first task as its central task, which equal weighting ignores.

A space that searches `weighting.scheme` beside the central weight compares SIWLM with schemes
that take no central weight: the central weight applies only at points whose scheme takes one
(`weightsearch.trainer.weighting.has_central_weight`), so `{weighting.scheme: {choices: [siwlm,
dwa]}, weighting.central_weight: [1, 9]}` is three points (siwlm at 1 and 9, dwa once), and a point
without it has no `central_weight` param. The same holds for any searched setting of a section
whose scheme the space searches (`weighting.temperature`: dwa's only). Where a point sets a
scheme (`weighting.scheme`, `sampling.scheme`), that section of the template keeps only the
settings its scheme takes.

Optuna params are the space's values under the path's name, except two: the central weight
keeps the name `central_weight` that every study, the recommender and the dashboard read, and a
task group becomes one 0/1 param per candidate (`tasks.<task>`), which samplers handle and the
dashboard plots.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from weightsearch.core.fields import Flag, Number, check_fields, setting, unknown_keys
from weightsearch.studies import schema as S
from weightsearch.studies.grouping import all_groups
from weightsearch.trainer.sampling import keep_tasks as keep_sampling_tasks
from weightsearch.trainer.sampling import scheme_keys as sampling_keys
from weightsearch.trainer.weighting import scheme_keys as weighting_keys

CENTRAL_WEIGHT = S.T_CENTRAL_WEIGHT_PATH
WEIGHTING_SCHEME = "weighting.scheme"
# The sections whose scheme a point may set: {section: the keys its scheme `name` takes}.
SCHEME_KEYS = {"weighting": weighting_keys, "sampling": sampling_keys}
SCHEME_PATHS = S.T_SCHEME_PATHS  # the methods a study compares: each section's scheme
# A listed dimension's cap, checked before anything lists it (a step of 1e-9 over 1-15 would
# be 1.4e10 values); a whole search's cap is sweep.spec's MAX_CELLS.
MAX_DIMENSION_VALUES = 10_000
GROUP = S.T_GROUP_PATH  # "tasks": the run-config key a task group sets
EXHAUSTIVE_GROUP_MAX = 5  # candidates up to which every subset is trained (2^5 = 32 groups)
# Keys of the run config that the sweep sets per cell; a space may not vary them.
SWEEP_OWNED = ("central_task", "seed", "output_dir")
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_][A-Za-z0-9_-]*)*$")
_COUNT_MAX = 1_000_000  # a conditional space's points are counted by listing up to this many
_KEY_MAX = 100  # a cell key is a claim's unit (128 characters with its prefix)
_FOLDER_MAX = 120

Point = dict[str, Any]  # run-config path -> value; a group value is a tuple of task names


@dataclass(frozen=True)
class Dimension:
    """One searched path: listed values, a numeric range, or the task-grouping subsets."""

    path: str
    values: tuple[Any, ...] = ()  # listed values (also `choices`)
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    integer: bool = False
    candidates: tuple[str, ...] = ()  # task grouping: candidate auxiliary tasks (or the tasks)
    categorical: bool = False  # given as {choices: [...]}
    groups_of: bool = False  # budgeted grouping: each point is a network's group of tasks
    max_size: int | None = None  # budgeted grouping: the largest group trained (None: all)

    @property
    def kind(self) -> str:
        if self.path == GROUP:
            return "groups" if self.groups_of else "group"
        return "range" if self.low is not None else "values"

    # --- the values ---------------------------------------------------------------------
    def group_candidates(self, central: str) -> tuple[str, ...]:
        return tuple(c for c in self.candidates if c != central)

    def options(self, central: str) -> list[Any] | None:
        """Every value the dimension takes (for a central task); None for a continuous range."""
        if self.kind == "group":
            cands = self.group_candidates(central)
            # Smallest groups first (the central task alone leads), candidates in order.
            return [combo for size in range(len(cands) + 1)
                    for combo in itertools.combinations(cands, size)]
        if self.kind == "groups":
            return all_groups(self.candidates, self.max_size)
        if self.kind == "values":
            return list(self.values)
        if self.step is None and not self.integer:
            return None
        step = self.step or 1
        n = _steps(self.low, self.high, step)
        if n > MAX_DIMENSION_VALUES:  # parse_space refuses these; never enumerate one
            raise ValueError(f"{self.path}: {n} values exceed {MAX_DIMENSION_VALUES}")
        out = [self.low + i * step for i in range(n)]
        return [round(v) for v in out] if self.integer else [_tidy(v) for v in out]

    def size(self, central: str) -> float:
        """How many values the dimension takes, counted without listing them."""
        if self.kind == "group":
            return 2.0 ** len(self.group_candidates(central))
        if self.kind == "groups":
            return float(len(all_groups(self.candidates, self.max_size)))
        if self.kind == "values":
            return len(self.values)
        if self.step is None and not self.integer:
            return math.inf
        return _steps(self.low, self.high, self.step or 1)

    def contains(self, value: Any, central: str) -> bool:
        if self.kind == "range":
            if not _real(value) or not self.low - 1e-12 <= value <= self.high + 1e-12:
                return False
            found = self.options(central)
            return found is None or any(abs(value - v) < 1e-9 for v in found)
        found = self.options(central)
        return found is not None and value in found

    def first(self, central: str) -> Any:
        found = self.options(central)
        return found[0] if found else self.low

    # --- Optuna ---------------------------------------------------------------------------
    def param_names(self, central: str) -> list[str]:
        if self.kind == "group":
            return [f"{GROUP}.{c}" for c in self.group_candidates(central)]
        if self.kind == "groups":
            return [f"{GROUP}.{c}" for c in self.candidates]
        return [S.PARAM if self.path == CENTRAL_WEIGHT else self.path]

    def distributions(self, central: str, guided: bool) -> dict[str, Any]:
        """The Optuna distributions of this dimension's params. A grid's numeric list is
        recorded as a numeric range (the dashboard plots it as numbers); a guided search
        samples listed values as categories."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        names = self.param_names(central)
        if self.kind in ("group", "groups"):
            return {n: IntDistribution(0, 1) for n in names}
        if self.kind == "range":
            if self.integer:
                dist: Any = IntDistribution(int(self.low), int(self.high), log=self.log,
                                            step=int(self.step or 1))
            else:
                dist = FloatDistribution(self.low, self.high, log=self.log, step=self.step)
            return {names[0]: dist}
        numeric = all(_real(v) for v in self.values)
        if self.path == CENTRAL_WEIGHT and not guided:
            return {names[0]: FloatDistribution(S.WEIGHT_LOW, S.WEIGHT_HIGH)}
        if numeric and not guided and not self.categorical:
            if all(isinstance(v, int) for v in self.values):
                return {names[0]: IntDistribution(min(self.values), max(self.values))}
            return {names[0]: FloatDistribution(float(min(self.values)),
                                                float(max(self.values)))}
        return {names[0]: CategoricalDistribution(list(self.values))}

    def to_params(self, value: Any, central: str) -> dict[str, Any]:
        if self.kind == "group":
            return {f"{GROUP}.{c}": int(c in value) for c in self.group_candidates(central)}
        if self.kind == "groups":
            return {f"{GROUP}.{c}": int(c in value) for c in self.candidates}
        return {self.param_names(central)[0]: value}

    def from_params(self, params: Mapping[str, Any], central: str) -> Any:
        if self.kind == "group":
            return tuple(c for c in self.group_candidates(central)
                         if params.get(f"{GROUP}.{c}") == 1)
        if self.kind == "groups":
            return tuple(c for c in self.candidates if params.get(f"{GROUP}.{c}") == 1) or None
        value = params.get(self.param_names(central)[0])
        if self.kind == "range" and self.integer and value is not None:
            return int(value)
        if self.kind == "range" and value is not None:
            return _tidy(float(value))
        return value

    def normalise(self, value: Any) -> Any:
        """A value read back from JSON (lists for tuples) as the dimension holds it."""
        if self.kind in ("group", "groups") and isinstance(value, list | tuple):
            return tuple(value)
        return value

    def to_plain(self) -> Any:
        if self.kind == "group":
            return {"subsets_of": list(self.candidates)}
        if self.kind == "groups":
            return {"groups_of": list(self.candidates),
                    **({} if self.max_size is None else {"max_size": self.max_size})}
        if self.kind == "values":
            return {"choices": list(self.values)} if self.categorical else list(self.values)
        out: dict[str, Any] = {"low": self.low, "high": self.high}
        if self.step is not None:
            out["step"] = self.step
        if self.log:
            out["log"] = True
        if self.integer:
            out["int"] = True
        return out


@dataclass(frozen=True)
class Space:
    dims: tuple[Dimension, ...]

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(d.path for d in self.dims)

    @property
    def central_weight_only(self) -> bool:
        """The classic weight search (keys, folders and the canonical form stay as they were)."""
        return self.paths == (CENTRAL_WEIGHT,)

    @property
    def group(self) -> Dimension | None:
        return next((d for d in self.dims if d.kind == "group"), None)

    @property
    def groups(self) -> Dimension | None:
        """The budgeted grouping dimension (`tasks: {groups_of: [...]}`), if searched."""
        return next((d for d in self.dims if d.kind == "groups"), None)

    def run_central(self, point: Mapping[str, Any], central: str) -> str:
        """The central task a cell's run names: `central`, or in a budgeted grouping study
        (no central task) the first task of the point's group."""
        groups = self.groups
        return central if groups is None else point[groups.path][0]

    def dim(self, path: str) -> Dimension | None:
        return next((d for d in self.dims if d.path == path), None)

    # --- points ---------------------------------------------------------------------------
    @property
    def conditional(self) -> bool:
        """Whether some path applies only at some points: a setting of a section whose scheme
        the space also searches (SIWLM's central weight beside `weighting.scheme`)."""
        sections = {found[0] for d in self.dims if (found := _scheme_setting(d.path))}
        return any(self.dim(f"{section}.scheme") is not None for section in sections)

    def applies(self, path: str, point: Mapping[str, Any]) -> bool:
        """Whether `path` is set at `point`: a setting of a section whose scheme the point
        sets applies only where that scheme takes it (`weighting.central_weight`: siwlm)."""
        found = _scheme_setting(path)
        if found is None:
            return True
        section, key = found
        scheme = f"{section}.scheme"
        if self.dim(scheme) is None or scheme not in point:
            return True
        keys = SCHEME_KEYS[section](point[scheme])
        return keys is None or key in keys

    def settle(self, point: Mapping[str, Any]) -> Point:
        """`point` without the paths that do not apply at it."""
        return {p: v for p, v in point.items() if self.applies(p, point)}

    def grid(self, central: str) -> list[Point] | None:
        """Every point (first dimension slowest), or None when a dimension is continuous."""
        options = [d.options(central) for d in self.dims]
        if any(o is None for o in options):
            return None
        points = (self.settle(dict(zip(self.paths, combo, strict=True)))
                  for combo in itertools.product(*options))  # type: ignore[arg-type]
        if not self.conditional:
            return list(points)
        seen: dict[str, Point] = {}
        for p in points:  # a scheme without a setting: once, not once per value of it
            seen.setdefault(self.point_key(p), p)
        return list(seen.values())

    def size(self, central: str) -> float:
        product = math.prod(d.size(central) for d in self.dims)
        if not self.conditional or not math.isfinite(product) or product > _COUNT_MAX:
            return product  # an upper bound, where too many to list
        return len(self.grid(central) or ())

    def contains(self, point: Mapping[str, Any], central: str) -> bool:
        paths = {p for p in self.paths if self.applies(p, point)}
        return set(point) == paths and all(
            d.contains(point[d.path], central) for d in self.dims if d.path in paths)

    def normalise(self, point: Mapping[str, Any]) -> Point:
        return {d.path: d.normalise(point[d.path]) for d in self.dims if d.path in point}

    def distributions(self, central: str, guided: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for d in self.dims:
            out.update(d.distributions(central, guided))
        return out

    def params(self, point: Mapping[str, Any], central: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for d in self.dims:
            if d.path in point:  # a conditional central weight may be absent
                out.update(d.to_params(point[d.path], central))
        return out

    def point_from_params(self, params: Mapping[str, Any], central: str) -> Point | None:
        point = self.settle({d.path: d.from_params(params, central) for d in self.dims})
        return None if any(v is None for v in point.values()) else point

    # --- names ----------------------------------------------------------------------------
    def point_key(self, point: Mapping[str, Any]) -> str:
        """The point as text, the same in every driver (the cell key without the seed)."""
        if self.central_weight_only:
            return f"{float(point[CENTRAL_WEIGHT]):g}"
        body = ",".join(f"{d.path}={fmt(point[d.path])}" for d in self.dims if d.path in point)
        if len(body) > _KEY_MAX:
            body = "h" + hashlib.sha1(body.encode()).hexdigest()[:20]
        return body

    def cell_key(self, point: Mapping[str, Any], seed: int) -> str:
        if self.central_weight_only:
            return S.cell_key(point[CENTRAL_WEIGHT], seed)
        return f"{self.point_key(point)}|{int(seed)}"

    def label(self, point: Mapping[str, Any]) -> str:
        """Short and readable, for progress lines and summaries."""
        return " ".join("alone" if d.kind == "group" and not point[d.path]
                        else f"{_short(d.path)}={fmt(point[d.path])}"
                        for d in self.dims if d.path in point)

    def folder(self, point: Mapping[str, Any], seed: int) -> str:
        """A cell's folder name: `w9_s1` for the classic search, readable otherwise."""
        if self.central_weight_only:
            return f"w{float(point[CENTRAL_WEIGHT]):g}_s{int(seed)}"
        dims = [d for d in self.dims if d.path in point]
        lasts = [d.path.rsplit(".", 1)[-1] for d in dims]
        parts = []
        for d, last in zip(dims, lasts, strict=True):
            name = last if lasts.count(last) == 1 else d.path.replace(".", "-")
            if d.path == CENTRAL_WEIGHT:
                name = "w"
            value = point[d.path]
            if d.kind == "group":
                parts.append("with-" + "+".join(value) if value else "alone")
            elif d.kind == "groups":
                parts.append("+".join(value))
            else:
                parts.append(f"{name}{fmt(value)}")
        text = re.sub(r"[^A-Za-z0-9._+=-]", "-", "_".join(parts))
        if len(text) > _FOLDER_MAX:
            text = "p" + hashlib.sha1(text.encode()).hexdigest()[:20]
        return f"{text}_s{int(seed)}"

    # --- run configs ------------------------------------------------------------------------
    def apply(self, train: Mapping[str, Any], point: Mapping[str, Any], central: str,
              task_names: Sequence[str]) -> dict[str, Any]:
        """The run-config mapping of `point`: `train` with every path of the point set."""
        raw = copy.deepcopy(dict(train))
        point = self.settle(point)
        for d in self.dims:
            if d.path not in point:  # a scheme's setting that does not apply at this point
                continue
            if d.kind == "group":
                drop_other_tasks(raw, {central, *point[d.path]}, task_names)
            elif d.kind == "groups":
                drop_other_tasks(raw, set(point[d.path]), task_names)
            else:
                set_path(raw, d.path, point[d.path])
        for section, keys_of in SCHEME_KEYS.items():
            if f"{section}.scheme" in point and isinstance(raw.get(section), dict):
                keys = keys_of(raw[section]["scheme"])
                if keys is not None:  # an unknown scheme: the trainer names it
                    raw[section] = {k: v for k, v in raw[section].items()
                                    if k == "scheme" or k in keys}
        return raw

    def to_plain(self) -> dict[str, Any]:
        return {d.path: d.to_plain() for d in self.dims}


def default_space() -> Space:
    return Space((Dimension(CENTRAL_WEIGHT, values=S.DEFAULT_GRID),))


def fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple | list):
        return "+".join(map(str, value)) or "none"
    return str(value)


def _scheme_setting(path: str) -> tuple[str, str] | None:
    """(section, key) of a path that sets one of a scheme's settings (`weighting.central_weight`
    -> ("weighting", "central_weight")); None for a scheme itself or any other path."""
    parts = path.split(".")
    if len(parts) >= 2 and parts[0] in SCHEME_KEYS and parts[1] != "scheme":
        return parts[0], parts[1]
    return None


def _short(path: str) -> str:
    if path == CENTRAL_WEIGHT:
        return "w"
    if path == GROUP:
        return "group"
    return path


def _steps(low: float, high: float, step: float) -> int:
    return math.floor((high - low) / step + 1e-9) + 1


def _tidy(value: float) -> float:
    """0.30000000000000004 -> 0.3: grid values built by steps, as the user would write them."""
    return float(f"{value:.12g}")


def _real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def set_path(raw: dict[str, Any], path: str, value: Any) -> None:
    """Set `a.b.c` in nested mappings, making the missing levels. A weighting made here is
    SIWLM's (the scheme whose central weight a study searches)."""
    parts = path.split(".")
    node = raw
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if not isinstance(child, dict):
            child = {"scheme": "siwlm"} if i == 0 and part == "weighting" else {}
            node[part] = child
        node = child
    node[parts[-1]] = value


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


def drop_other_tasks(raw: dict[str, Any], keep: set[str],
                     task_names: Sequence[str]) -> None:
    """Drop the tasks outside `keep` from the run and from every setting that names them."""
    tasks = raw.get("tasks")
    if isinstance(tasks, str):
        tasks = [tasks]
    if isinstance(tasks, list) and len(tasks) == len(task_names):
        raw["tasks"] = [t for t, name in zip(tasks, task_names, strict=True) if name in keep]
    for section, key in (("weighting", "aux_weights"), ("weighting", "weights"),
                         ("distill", "teachers")):
        node = raw.get(section)
        if isinstance(node, dict) and isinstance(node.get(key), dict):
            node[key] = {t: v for t, v in node[key].items() if t in keep}
    if "sampling" in raw:  # the batch sampler's settings say what names a task
        raw["sampling"] = keep_sampling_tasks(raw["sampling"], keep)
    finetune = raw.get("finetune")
    if isinstance(finetune, dict) and isinstance(finetune.get("tasks"), list):
        finetune["tasks"] = [t for t in finetune["tasks"] if t in keep]


# --- parsing ------------------------------------------------------------------------------
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
    if not _PATH.match(path):
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
        return _parse_values(path, spec, problems, where, categorical=False)
    if isinstance(spec, Mapping) and "choices" in spec:
        unknown_keys(spec, ["choices"], problems, f"{where}.", owner="a choice")
        choices = spec["choices"]
        if not isinstance(choices, list):
            problems.append(f"{where}.choices: expected a list of values, got {choices!r}")
            return None
        return _parse_values(path, choices, problems, where, categorical=True)
    if isinstance(spec, Mapping):
        return _parse_range(path, spec, problems, where)
    problems.append(f"{where}: expected a list of values, {{low, high[, step, log, int]}} or "
                    f"{{choices: [...]}}, got {spec!r}")
    return None


@dataclass(frozen=True)
class _Weight:
    """A central weight: a number in the range every study searches (kept as a float)."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        fix = f"use a weight from {S.WEIGHT_LOW:g} to {S.WEIGHT_HIGH:g}"
        if not _real(value):
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


def _parse_values(path: str, values: list, problems: list[str], where: str,
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


def _parse_range(path: str, spec: Mapping[str, Any], problems: list[str],
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
    problem = _range_problem(r, given, path == CENTRAL_WEIGHT)
    if problem is not None:
        problems.append(f"{where}{problem}")
        return None
    if r.step is not None or r.int:
        n = _steps(r.low, r.high, r.step or 1)
        if n > MAX_DIMENSION_VALUES:
            problems.append(f"{where}: {n:,} values from low to high in steps of "
                            f"{r.step or 1:g}; at most {MAX_DIMENSION_VALUES:,} are taken: use "
                            "a larger step, or no step and strategy: guided")
            return None
    whole = int if r.int else float
    return Dimension(path, low=whole(r.low), high=whole(r.high),
                     step=None if r.step is None else whole(r.step), log=r.log, integer=r.int)


def _range_problem(r: RangeSettings, given: Mapping[str, Any],
                   central_weight: bool) -> str | None:
    """What is wrong with a range whose every setting is fine on its own, as a suffix of its
    path (`: ...` or `.<setting>: ...`); `given` holds low and high as written."""
    if r.low >= r.high:
        return f": low ({given['low']!r}) must be below high ({given['high']!r})"
    if r.log and (r.low <= 0 or r.step is not None):
        return ".log: a log range needs low > 0 and no step"
    if r.int and not all(float(v).is_integer() for v in (r.low, r.high, r.step or 1)):
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
