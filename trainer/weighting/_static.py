"""Static weighting: a fixed weight per task for the whole run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from weightsearch.core.fields import setting
from weightsearch.trainer.weighting._checks import WeightMap, check_unknown_tasks
from weightsearch.trainer.weighting.base import Scheme, Settings


@dataclass(frozen=True)
class StaticSettings(Settings):
    """weights: task name -> loss weight; tasks not listed get 1.0. A weight of 0 is honoured."""

    weights: dict[str, float] = setting(
        rule=WeightMap(), doc="Task name -> loss weight; tasks not listed get 1.0.")
    scheme: str = field(default="static", init=False)

    def task_problems(self, tasks: Sequence[str], central_task: str | None) -> list[str]:
        found: list[str] = []
        if isinstance(self.weights, Mapping):
            check_unknown_tasks(self.weights, "weights", tasks, found)
        return found


class StaticScheme(Scheme):
    name = "static"
    settings_type = StaticSettings

    def weight(self, task: str, epoch: int, step: int) -> float:
        self._check_position(epoch, step, task)
        # `.get` with a default, never `or`: a configured 0 must stay 0.
        return float(self.settings.weights.get(task, 1.0))
