"""The search-strategy protocol: which units of work a study needs, decided from its trials.

A *unit* is what a driver claims in the study database and trains as one Optuna trial: a grid
cell (point, seed), a guided-search slot whose point the sampler picks once the slot is
claimed, or a successive-halving stint (a cell trained up to a rung's epoch budget). A
strategy never touches the database, Ray or the trainer: it sees the study's trials as plain
`Record`s, so its decisions are pure functions that tests and benchmarks run on synthetic
results.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from weightsearch.core.registry import DeclaredKeys, check_settings
from weightsearch.sweep.space import CENTRAL_WEIGHT, Dimension, Point, Space

DONE = ("complete", "pruned")


@dataclass(frozen=True)
class Unit:
    key: str  # the claim key, unique within the study
    seed: int
    point: Point | None  # None: `Strategy.propose` chooses it once the unit is claimed
    budget: int | None = None  # train up to this epoch and stop there; None: every epoch
    rung: int = 0  # successive halving's rung (0 elsewhere)


@dataclass(frozen=True)
class Record:
    """One trial of the study as a strategy sees it."""

    number: int
    unit: str | None  # the unit it filled (its claim key)
    cell: str | None
    seed: int | None
    point: Point | None
    state: str  # complete | pruned | fail | running | waiting
    value: float | None  # the trial's value (a pruned stint: its last epoch's)
    values: Mapping[int, float] = field(default_factory=dict)  # epoch -> objective


@dataclass(frozen=True)
class StrategyContext:
    """What parsing a strategy's settings may consult besides the mapping: the study's search
    space, and where the settings sit in the study file (`search`, or `weights` for the
    shorthand), which every message starts with."""

    space: Space
    where: str = "search"


# The strategies' rules (`weightsearch.core.fields.setting`): `<where>.<key>: expected <says>,
# got <value>`. A value that fails leaves the setting at its default, so that the study file's
# later checks still see settings.
@dataclass(frozen=True)
class Whole:
    """A whole number >= 1; a `required` setting is checked when absent too (as null)."""

    says: str
    required: bool = False

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return None, f"{key}: expected {self.says}, got {value!r}"
        return value, None


@dataclass(frozen=True)
class Above:
    """A finite number > `low`, kept as a float."""

    low: float
    says: str

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value) or value <= self.low:
            return None, f"{key}: expected {self.says}, got {value!r}"
        return float(value), None


@dataclass(frozen=True)
class Named:
    """One of `options`, spelled exactly; `says` words what is expected (without it: `<value>
    is not one of <options>`)."""

    options: tuple[str, ...]
    says: str | None = None

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if value in self.options:
            return value, None
        if self.says is None:
            return None, f"{key}: {value!r} is not one of {', '.join(self.options)}"
        return None, f"{key}: expected {self.says}, got {value!r}"


class StrategySettings:
    """Base of a strategy's settings: a frozen dataclass whose settings are fields
    `x: T = setting(default, Rule, doc=...)` (`weightsearch.core.fields`), whose names are the
    keys it reads under `search:` (`KEYS`).

    - `from_mapping(raw, context, problems)`: the settings from the mapping, one message per
      problem appended to `problems`; never None (a bad value leaves its default). By default:
      each setting checked with its rule, then `settled`.
    - `settled(context, problems)`: the settings against the search space (the explicit rules
      that no single setting's rule can say): a value the space rules out is reported and
      falls back to its default.
    - `to_plain()`: the mapping that parses back to the same settings (the study's canonical
      form and digest).
    """

    KEYS: ClassVar[tuple[str, ...]] = DeclaredKeys()  # type: ignore[assignment]

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], context: StrategyContext,
                     problems: list[str]) -> Any:
        values = check_settings(raw, cls, problems, f"{context.where}.")
        return cls(**values).settled(context, problems)

    def settled(self, context: StrategyContext, problems: list[str]) -> Any:
        return self

    def to_plain(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


class Strategy(ABC):
    """How one central task's study chooses its units. One instance per central task and
    driver; the driver calls, in this order:

    - `units(records)`: at the start of every planning round, and again whenever this driver
      has handed out every unit it knew of. Returns every unit the study needs *now* and has
      not finished, in the order to train them. It must be a pure function of `records`
      (every driver's trials): all drivers compute the same list, and claims in the database
      decide who trains which. An adaptive strategy returns its next round's units only once
      the round before is finished.
    - `propose(unit, records, taken)`: only for a unit whose `point` is None, right after this
      driver claimed it: the point to train, outside `taken` (the cells finished, training or
      claimed by any driver); None when no point is left. The driver claims the proposed cell
      too and, if another driver won it, asks again with it added to `taken`.
    - `progress(records)`: (units done, units the study has) for progress and summary lines;
      an adaptive strategy counts the units it knows of so far.
    - `max_units()`: an upper bound on the units of the whole study (Tune's trial budget).

    A strategy's settings are a frozen `StrategySettings` dataclass (`settings_type`), parsed
    by `from_mapping(raw, context, problems)`; `check(settings, space, central_tasks, problems,
    where, epochs)` judges the settings against the space and the run's epochs once the study
    is parsed.

    What the study file and the launch need to know about a strategy, it says itself (class
    attributes and classmethods, read through `STRATEGIES`), so adding one is its module plus
    one `register_strategy` call:

    - `accepts_warm_start`: whether `warm_start:` (points to try first, or `recommend`) applies.
    - `stops_early`: whether its units stop trials before their last epoch on the multi-task
      epoch scores, as ASHA does (it cannot share a study with ASHA or a fine-tuned objective).
    - `wants_recommendation(settings)`: whether the launch asks the recommender for each
      central task even without `warm_start: recommend`.
    - `recommended_first(settings, space, central, weight, interval)`: the points to try first
      given the recommender's central weight (called once per central task by the launch).
    - `weights_plain(settings, dim)`: the `weights:` spelling of a search over the central
      weight alone, for the strategies that spelling names (a list: grid; a range: guided).
    """

    name: ClassVar[str]
    settings_type: ClassVar[type]
    unit_word: ClassVar[str] = "cells"  # what its units are called in summaries
    accepts_warm_start: ClassVar[bool] = False
    stops_early: ClassVar[bool] = False

    def __init__(self, settings: Any, space: Space, central: str, seeds: Sequence[int],
                 epochs: int, first: Sequence[Point] = ()) -> None:
        self.settings = settings
        self.space = space
        self.central = central
        self.seeds = tuple(seeds)
        self.epochs = epochs
        self.first = tuple(first)  # points to try first (warm start, the recommender's answer)

    @classmethod
    def check(cls, settings: Any, space: Space, central_tasks: Sequence[str],
              problems: list[str], where: str = "search", epochs: int | None = None) -> None:
        """Problems of `settings` with this space (e.g. a grid needs finitely many points)."""
        return None

    @classmethod
    def wants_recommendation(cls, settings: Any) -> bool:
        """Whether the launch asks the recommender for every central task's weight even when
        the study has no `warm_start: recommend` (its settings start from the answer)."""
        return False

    @classmethod
    def recommended_first(cls, settings: Any, space: Space, central: str, weight: float,
                          interval: Sequence[float]) -> list[Point]:
        """The points to try first, given the recommender's central weight for `central` and
        its 80% interval: by default one point, the other paths at their first value and the
        weight on the searched grid (nearest; so a sampler can propose it too) or clipped
        into the searched range. Only called for a space that searches the central weight."""
        dim = space.dim(CENTRAL_WEIGHT)
        assert dim is not None  # checked by the spec
        base = {d.path: d.first(central) for d in space.dims}
        options = dim.options(central)
        if options is not None:
            weight = min(options, key=lambda w: abs(w - weight))
        else:  # a range: its two ends are set
            assert dim.low is not None and dim.high is not None
            weight = min(dim.high, max(dim.low, weight))
        return [{**base, CENTRAL_WEIGHT: float(weight)}]

    @classmethod
    def weights_plain(cls, settings: Any, dim: Dimension) -> Any:
        """The `weights:` spelling of this search over the central weight alone (`dim`)."""
        raise NotImplementedError(f"strategy {cls.name} has no weights: spelling; "
                                  "write it as search: {strategy: ...}")

    @abstractmethod
    def units(self, records: Sequence[Record]) -> list[Unit]: ...

    def propose(self, unit: Unit, records: Sequence[Record], taken: set[str]) -> Point | None:
        raise NotImplementedError(f"{self.name} units carry their points")

    def progress(self, records: Sequence[Record]) -> tuple[int, int]:
        done = done_units(records)
        return len(done), len(done) + len([u for u in self.units(records)
                                           if u.key not in done])

    @abstractmethod
    def max_units(self) -> int: ...

    # --- helpers for strategies -----------------------------------------------------------
    def ordered(self, points: list[Point]) -> list[Point]:
        """`points` with the preferred ones (`first`) in front, in their order."""
        keys = [self.space.point_key(p) for p in self.first]
        rank = {k: i for i, k in enumerate(keys)}
        return sorted(points, key=lambda p: rank.get(self.space.point_key(p), len(rank)))

    def cell(self, point: Point, seed: int) -> str:
        return self.space.cell_key(point, seed)


def done_units(records: Sequence[Record]) -> set[str]:
    return {r.unit for r in records if r.state in DONE and r.unit is not None}


def taken_cells(records: Sequence[Record]) -> set[str]:
    """Cells finished or in training, by any driver."""
    return {r.cell for r in records if r.cell is not None
            and r.state in (*DONE, "running", "waiting")}


def mean_score(records: Sequence[Record], units: set[str]) -> float:
    """The mean value of the finished trials that filled `units` (-inf without any)."""
    values = [r.value for r in records if r.unit in units and r.state in DONE
              and r.value is not None and math.isfinite(r.value)]
    return sum(values) / len(values) if values else -math.inf


def grid_or_problem(space: Space, central_tasks: Sequence[str], name: str,
                    problems: list[str]) -> None:
    """A strategy that enumerates points needs every dimension finite."""
    for d in space.dims:
        if d.options(central_tasks[0] if central_tasks else "") is None:
            problems.append(f"search.space.{d.path}: strategy {name} enumerates the space, but "
                            "this range is continuous; give a step, a list of values, or use "
                            "strategy: guided")
