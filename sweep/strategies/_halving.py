"""Successive halving over a grid, with the epoch as the budget (Jamieson and Talwalkar 2016).

Every point trains `min_epochs` epochs (rung 0); the best 1/`reduction_factor` of them, by their
mean over seeds at that epoch, continue from their checkpoints to the next rung's budget, and
so on until the last rung trains to `train.epochs`. Seeds are replicates: a point continues
with all its seeds. Each stint is its own Optuna trial (PRUNED when it stops at a rung's budget,
COMPLETE at the last rung), in its own attempt folder that starts as a copy of the stint
before. The learning-rate schedule is the full run's in every stint, so the last rung's trials
match an uninterrupted run of the same cell.

The decisions are pure functions of the scores (`rung_budgets`, `keep_count`, `promote`,
`successive_halving`), for benchmarks on synthetic learning curves.

`start: recommend` narrows the first rung to the points the launch passes as `first`: the grid
weights around the recommender's answer for the task
(`weightsearch.recommender.recommend.start_weights`, measured by benchmarks/bench_search.py).
Without them (no recommendation) it is the whole grid.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from weightsearch.core.fields import setting
from weightsearch.sweep.space import CENTRAL_WEIGHT, Point, Space
from weightsearch.sweep.strategies.base import (
    DONE,
    Above,
    Named,
    Record,
    Strategy,
    StrategyContext,
    StrategySettings,
    Unit,
    Whole,
    done_units,
    grid_or_problem,
)


def rung_budgets(epochs: int, min_epochs: int, factor: float) -> list[int]:
    """The epoch each rung trains up to: min_epochs, then times `factor`, the last `epochs`."""
    budgets, budget = [], min(min_epochs, epochs)
    while budget < epochs:
        budgets.append(budget)
        budget = max(budget + 1, math.ceil(budget * factor))
    budgets.append(epochs)
    return budgets


def keep_count(n: int, factor: float) -> int:
    """How many of a rung's `n` points continue: 1/factor of them, at least one."""
    return max(1, math.floor(n / factor + 1e-9))


def promote(scores: Mapping[str, float], keep: int, order: Sequence[str]) -> list[str]:
    """The `keep` best points by score (higher is better), in `order`; a tie goes to the
    point earlier in `order` (the grid's order, or the recommender's preference)."""
    rank = {k: i for i, k in enumerate(order)}
    best = sorted(scores, key=lambda k: (-scores[k], rank.get(k, len(rank))))[:keep]
    return sorted(best, key=lambda k: rank.get(k, len(rank)))


def successive_halving(points: Sequence[str], budgets: Sequence[int], factor: float,
                       score: Callable[[str, int], float]) -> tuple[str, int]:
    """Run the schedule on a score function of (point, epoch): the winner and the
    trial-epochs it cost (each stint trains from the previous rung's budget on)."""
    alive, cost, before = list(points), 0, 0
    for k, budget in enumerate(budgets):
        cost += len(alive) * (budget - before)
        before = budget
        scores = {p: score(p, budget) for p in alive}
        if k == len(budgets) - 1:
            return promote(scores, 1, list(points))[0], cost
        alive = promote(scores, keep_count(len(alive), factor), alive)
    raise AssertionError("unreachable: the last rung returns")


@dataclass(frozen=True)
class HalvingSettings(StrategySettings):
    min_epochs: int = setting(1, Whole(
        "a whole number of epochs >= 1 (what every point trains before the first cut)"),
        doc="The epochs every point trains before the first cut (rung 0's budget).")
    reduction_factor: float = setting(2.0, Above(
        1, "a number > 1 (2 keeps the better half at each rung)"),
        doc="1/reduction_factor of a rung's points continue to the next (> 1).")
    start: str = setting("grid", Named(("grid", "recommend"), "grid (every point) or recommend "
                                       "(the weights around the recommender's answer)"),
                         doc="The first rung's points: grid, or recommend (the grid weights "
                             "around the recommender's answer).")

    def settled(self, context: StrategyContext, problems: list[str]) -> HalvingSettings:
        """`start: recommend` narrows the central weight, so the space must search it."""
        if self.start == "recommend" and context.space.dim(CENTRAL_WEIGHT) is None:
            problems.append(f"{context.where}.start: recommend narrows the central weight, and "
                            "this space does not search weighting.central_weight; use start: "
                            "grid")
            return dataclasses.replace(self, start="grid")
        return self


class HalvingStrategy(Strategy):
    name = "halving"
    settings_type = HalvingSettings
    unit_word = "stints"
    accepts_warm_start = True  # the preferred points go first, and win ties at a rung
    stops_early = True  # a stint stops at its rung's epoch budget

    @classmethod
    def wants_recommendation(cls, settings: HalvingSettings) -> bool:
        return settings.start == "recommend"

    @classmethod
    def recommended_first(cls, settings: HalvingSettings, space: Space, central: str,
                          weight: float, interval: Sequence[float]) -> list[Point]:
        """The grid by distance from the recommended weight (ties at a rung go to the nearer
        weight); with `start: recommend`, only the grid weights around it."""
        grid = space.grid(central) or []
        if settings.start == "recommend":
            from weightsearch.recommender.recommend import start_weights

            keep = start_weights([p[CENTRAL_WEIGHT] for p in grid], weight, interval)
            grid = [p for p in grid if p[CENTRAL_WEIGHT] in keep]
        return sorted(grid, key=lambda p: abs(p[CENTRAL_WEIGHT] - weight))

    @classmethod
    def check(cls, settings: HalvingSettings, space: Space, central_tasks: Sequence[str],
              problems: list[str], where: str = "search", epochs: int | None = None) -> None:
        grid_or_problem(space, central_tasks, cls.name, problems)
        if epochs is not None and settings.min_epochs >= epochs:
            problems.append(f"{where}.min_epochs: {settings.min_epochs} leaves no epoch to "
                            f"halve over (train.epochs is {epochs}); lower it below train.epochs")

    @property
    def budgets(self) -> list[int]:
        return rung_budgets(self.epochs, self.settings.min_epochs, self.settings.reduction_factor)

    def _unit(self, rung: int, point: dict, seed: int) -> Unit:
        budget = self.budgets[rung]
        return Unit(f"r{rung}:{self.cell(point, seed)}", seed, point,
                    budget=None if budget >= self.epochs else budget, rung=rung)

    def _start(self) -> list:
        points = self.ordered(self.space.grid(self.central) or [])
        if self.settings.start == "recommend" and self.first:
            chosen = {self.space.point_key(p) for p in self.first}
            points = [p for p in points if self.space.point_key(p) in chosen] or points
        return points

    def _rungs(self, records: Sequence[Record]) -> tuple[list[list[Unit]], int]:
        """Every rung's units as far as the results decide them, and the rung under way."""
        points = self._start()
        by_key = {self.space.point_key(p): p for p in points}
        alive = list(by_key)
        done = done_units(records)
        rungs: list[list[Unit]] = []
        for k, budget in enumerate(self.budgets):
            units = [self._unit(k, by_key[key], s) for key in alive for s in self.seeds]
            rungs.append(units)
            if any(u.key not in done for u in units) or k == len(self.budgets) - 1:
                return rungs, k
            scores = {key: _mean_at(records, {self._unit(k, by_key[key], s).key
                                              for s in self.seeds}, budget)
                      for key in alive}
            alive = promote(scores, keep_count(len(alive), self.settings.reduction_factor),
                            alive)
        return rungs, len(rungs) - 1

    def units(self, records: Sequence[Record]) -> list[Unit]:
        rungs, current = self._rungs(records)
        done = done_units(records)
        return [u for u in rungs[current] if u.key not in done]

    def progress(self, records: Sequence[Record]) -> tuple[int, int]:
        done = done_units(records)
        rungs, _ = self._rungs(records)
        known = {u.key for rung in rungs for u in rung}
        return len(known & done), self.max_units()

    def max_units(self) -> int:
        n = len(self._start())
        total = 0
        for _ in self.budgets:
            total += n
            n = keep_count(n, self.settings.reduction_factor)
        return total * len(self.seeds)


def _mean_at(records: Sequence[Record], units: set[str], epoch: int) -> float:
    values = []
    for r in records:
        if r.unit in units and r.state in DONE:
            value = r.values.get(epoch, r.value)
            if value is not None and math.isfinite(value):
                values.append(value)
    return sum(values) / len(values) if values else -math.inf
