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
import hashlib
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from weightsearch.studies import schema as S
from weightsearch.studies.grouping import all_groups
from weightsearch.trainer.sampling import keep_tasks as keep_sampling_tasks
from weightsearch.trainer.sampling import scheme_keys as sampling_keys
from weightsearch.trainer.weighting import scheme_keys as weighting_keys

CENTRAL_WEIGHT = S.T_CENTRAL_WEIGHT_PATH
WEIGHTING_SCHEME = "weighting.scheme"
SEARCHED_SCHEME = "siwlm"  # a weighting whose central weight is searched, unless it names one
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
# A run-config path: keys joined by dots (`weighting.central_weight`, `sampling.weights.squad2`).
PATH_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_][A-Za-z0-9_-]*)*$")
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
        low, high = self._bounds()
        step = self.step or 1
        n = step_count(low, high, step)
        if n > MAX_DIMENSION_VALUES:  # parse_space refuses these; never enumerate one
            raise ValueError(f"{self.path}: {n} values exceed {MAX_DIMENSION_VALUES}")
        out = [low + i * step for i in range(n)]
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
        return step_count(*self._bounds(), self.step or 1)

    def contains(self, value: Any, central: str) -> bool:
        if self.kind == "range":
            low, high = self._bounds()
            if not is_finite_number(value) or not (low - 1e-12 <= value <= high + 1e-12):
                return False
            found = self.options(central)
            return found is None or any(abs(value - v) < 1e-9 for v in found)
        found = self.options(central)
        return found is not None and value in found

    def _bounds(self) -> tuple[float, float]:
        """A range's low and high, which parse_range sets together."""
        assert self.low is not None and self.high is not None, f"{self.path}: not a range"
        return self.low, self.high

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
            low, high = self._bounds()
            if self.integer:
                dist: Any = IntDistribution(int(low), int(high), log=self.log,
                                            step=int(self.step or 1))
            else:
                dist = FloatDistribution(low, high, log=self.log, step=self.step)
            return {names[0]: dist}
        numeric = all(is_finite_number(v) for v in self.values)
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
    return Space((Dimension(CENTRAL_WEIGHT, values=S.SEARCH_GRID),))


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


def step_count(low: float, high: float, step: float) -> int:
    """How many values `low, low + step, ...` takes up to `high` (a float's last bit spared)."""
    return math.floor((high - low) / step + 1e-9) + 1


def _tidy(value: float) -> float:
    """0.30000000000000004 -> 0.3: grid values built by steps, as the user would write them."""
    return float(f"{value:.12g}")


def is_finite_number(value: Any) -> bool:
    """A finite int or float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def set_path(raw: dict[str, Any], path: str, value: Any) -> None:
    """Set `a.b.c` in nested mappings, making the missing levels (a weighting: SEARCHED_SCHEME)."""
    parts = path.split(".")
    node = raw
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if not isinstance(child, dict):
            child = {"scheme": SEARCHED_SCHEME} if i == 0 and part == "weighting" else {}
            node[part] = child
        node = child
    node[parts[-1]] = value


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
