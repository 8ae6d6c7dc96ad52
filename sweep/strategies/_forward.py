"""Greedy forward selection of auxiliary tasks, for task-grouping spaces too large to train
every subset (more than five candidates: 2^6 = 64 groups and up).

Round 1 trains the central task alone and with each candidate on its own; every later round
adds each remaining candidate to the best group so far. It stops when a round's best group is
no better than the best group before it, or when every candidate is in. With n candidates it
trains at most 1 + n + (n-1) + ... + 1 groups (per seed) instead of 2^n.

The decision is a pure function of the scores so far (`forward_next`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from weightsearch.sweep.space import Point, Space
from weightsearch.sweep.strategies.base import (
    Record,
    Strategy,
    StrategySettings,
    Unit,
    done_units,
    mean_score,
)

Group = tuple[str, ...]


def forward_next(candidates: Sequence[str], scores: Mapping[Group, float]) -> list[Group]:
    """The groups to train next, given the mean score of every finished group (higher is
    better); [] when the selection has ended. Groups keep the candidates' order."""
    def grown(group: Group, task: str) -> Group:
        return tuple(c for c in candidates if c in group or c == task)

    best_group: Group = ()
    best = -math.inf
    round_groups: list[Group] = [(), *[(c,) for c in candidates]]
    while True:
        missing = [g for g in round_groups if g not in scores]
        if missing:
            return missing
        top = max(round_groups, key=lambda g: (scores[g], -round_groups.index(g)))
        if scores[top] <= best or top == best_group:
            return []
        best_group, best = top, scores[top]
        rest = [c for c in candidates if c not in best_group]
        if not rest:
            return []
        round_groups = [grown(best_group, c) for c in rest]


@dataclass(frozen=True)
class ForwardSettings(StrategySettings):
    """No settings."""


class ForwardStrategy(Strategy):
    name = "forward"
    settings_type = ForwardSettings

    @classmethod
    def check(cls, settings: Any, space: Space, central_tasks: Sequence[str],
              problems: list[str], where: str = "search", epochs: int | None = None) -> None:
        if space.group is None:
            problems.append(f"{where}.strategy: forward selects auxiliary tasks; give the space "
                            "tasks: {subsets_of: [task, ...]}")
        for d in space.dims:
            if d.kind != "group" and d.size("") != 1:
                problems.append(f"search.space.{d.path}: forward selection varies the task "
                                "group only; give this path one value (or use strategy: grid)")

    def _point(self, group: Group) -> Point:
        return {d.path: group if d.kind == "group" else d.first(self.central)
                for d in self.space.dims}

    def _scores(self, records: Sequence[Record]) -> dict[Group, float]:
        """Mean score of every group whose every seed has finished."""
        done = done_units(records)
        found: dict[Group, float] = {}
        for group in self.space.group.options(self.central) or []:  # type: ignore[union-attr]
            keys = {self.cell(self._point(group), s) for s in self.seeds}
            if keys <= done:
                found[group] = mean_score(records, keys)
        return found

    def units(self, records: Sequence[Record]) -> list[Unit]:
        done = done_units(records)
        cands = self.space.group.group_candidates(self.central)  # type: ignore[union-attr]
        out = []
        for group in forward_next(cands, self._scores(records)):
            point = self._point(group)
            out += [Unit(self.cell(point, s), s, point) for s in self.seeds]
        return [u for u in out if u.key not in done]

    def max_units(self) -> int:
        n = len(self.space.group.group_candidates(self.central))  # type: ignore[union-attr]
        return (1 + n * (n + 1) // 2) * len(self.seeds)
