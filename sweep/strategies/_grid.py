"""Every point of the space for every seed: the paper's protocol (and, for a task-grouping
space of up to five candidates, every group)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from weightsearch.sweep.space import Dimension, Space
from weightsearch.sweep.strategies.base import (
    Record,
    Strategy,
    StrategySettings,
    Unit,
    done_units,
    grid_or_problem,
)


@dataclass(frozen=True)
class GridSettings(StrategySettings):
    """No settings."""


class GridStrategy(Strategy):
    name = "grid"
    settings_type = GridSettings

    @classmethod
    def check(cls, settings: Any, space: Space, central_tasks: Sequence[str],
              problems: list[str], where: str = "search", epochs: int | None = None) -> None:
        grid_or_problem(space, central_tasks, cls.name, problems)

    @classmethod
    def weights_plain(cls, settings: Any, dim: Dimension) -> Any:
        return list(dim.values)

    def _all(self) -> list[Unit]:
        points = self.space.grid(self.central) or []
        return [Unit(self.cell(p, s), s, p) for s in self.seeds for p in self.ordered(points)]

    def units(self, records: Sequence[Record]) -> list[Unit]:
        done = done_units(records)
        return [u for u in self._all() if u.key not in done]

    def progress(self, records: Sequence[Record]) -> tuple[int, int]:
        keys = {u.key for u in self._all()}
        return len(keys & done_units(records)), len(keys)

    def max_units(self) -> int:
        return len(self._all())
