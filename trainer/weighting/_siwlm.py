"""SIWLM (Son et al. 2021): sequential weighted learning on odd epochs, intensive on even ones."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from weightsearch.core.fields import setting
from weightsearch.trainer.weighting._checks import (
    PREFIX,
    OneOf,
    Updates,
    Weight,
    WeightMap,
    check_unknown_tasks,
)
from weightsearch.trainer.weighting.base import Scheme, Settings

VARIANTS = ("reference", "paper")


@dataclass(frozen=True)
class SiwlmSettings(Settings):
    """Settings of the SIWLM scheme (see each setting's doc). `variant` "reference" is the
    authors' published code, which produced the paper's tables (the favoured batch keeps its
    initial weight); "paper" is the paper's Algorithm 1 (the favoured batch gets 1.0)."""

    central_weight: float = setting(
        rule=Weight(), doc="Initial weight of the central task (the value a weight search sweeps).")
    variant: str = setting("reference", OneOf(VARIANTS), doc=(
        "reference (the authors' code: the favoured batch keeps its initial weight) or paper "
        "(Algorithm 1: it gets 1.0)."))
    aux_weight: float = setting(
        1.0, Weight(), doc="Initial weight of every auxiliary task (the paper: 1).")
    aux_weights: dict[str, float] | None = setting(
        None, WeightMap(optional=True), doc="Per-task initial weights that override aux_weight.")
    focus_span: int = setting(
        20, Updates(), doc="Updates per focus task in SWL epochs (the paper: 20).")
    off_focus: float = setting(0.1, Weight(), doc=(
        "Factor on the initial weight of every batch that is not favoured (the paper: 0.1)."))
    scheme: str = field(default="siwlm", init=False)

    has_central_weight: ClassVar[bool] = True

    def task_problems(self, tasks: Sequence[str], central_task: str | None) -> list[str]:
        found: list[str] = []
        if central_task is None:
            found.append(
                "central_task: required by weighting scheme 'siwlm'; "
                f"set it to one of the tasks ({', '.join(tasks)})"
            )
        elif central_task not in tasks:
            found.append(
                f"central_task: {central_task!r} is not one of the tasks ({', '.join(tasks)})"
            )
        if isinstance(self.aux_weights, Mapping):
            check_unknown_tasks(self.aux_weights, "aux_weights", tasks, found)
            if central_task in self.aux_weights:
                found.append(
                    f"{PREFIX}.aux_weights.{central_task}: {central_task} is the central task; "
                    f"set its weight with {PREFIX}.central_weight"
                )
        return found


class SiwlmScheme(Scheme):
    """Odd epochs (SWL): the focus moves through the tasks, central task first, every
    `focus_span` updates; a batch of the focus task gets its initial weight (variant
    "paper": 1.0), any other batch its initial weight times `off_focus`.
    Even epochs (IWL): the same with the central task as the permanent focus.
    """

    name = "siwlm"
    settings_type = SiwlmSettings

    def __init__(
        self, settings: SiwlmSettings, tasks: Sequence[str], central_task: str | None
    ) -> None:
        if central_task is None:
            raise ValueError("SIWLM needs a central task")
        # Central first whatever order the caller used: the focus cycle starts with it.
        ordered = (central_task, *(t for t in tasks if t != central_task))
        super().__init__(settings, ordered, central_task)
        aux = settings.aux_weights or {}
        self.initial = {
            task: float(settings.central_weight if task == central_task
                        else aux.get(task, settings.aux_weight))
            for task in ordered
        }

    def stage(self, epoch: int) -> str:
        self._check_position(epoch, 0)
        return "swl" if epoch % 2 == 1 else "iwl"

    def focus(self, epoch: int, step: int) -> str:
        self._check_position(epoch, step)
        if self.stage(epoch) == "iwl":
            return self.central_task  # type: ignore[return-value]
        return self.tasks[(step // self.settings.focus_span) % len(self.tasks)]

    def weight(self, task: str, epoch: int, step: int) -> float:
        self._check_position(epoch, step, task)
        initial = self.initial[task]
        if task == self.focus(epoch, step):
            return 1.0 if self.settings.variant == "paper" else initial
        return initial * float(self.settings.off_focus)
