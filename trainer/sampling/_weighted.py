"""Weighted stochastic batch selection (He 2019, Algorithm 1): each next batch's task is drawn
with probability proportional to its weight, among the tasks that still have batches; the epoch
ends when the `epoch_ends_with` task's batches are used up (He: the QA task), or, without it,
when every task with a positive weight has used its batches.

`weights` maps tasks to weights. Tasks it does not list get `others`: a number, or `share`
(the default), an equal share of what the listed weights leave of 1, so that
`weights: {squad2: 0.8}` draws SQuAD batches 80% of the time and splits the other 20% evenly,
as in the paper. Batches of a task come in a random order of their own (length bucketing
groups similar lengths inside a task's batches, which must not become a curriculum).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from weightsearch.core.fields import setting
from weightsearch.core.registry import check_settings
from weightsearch.trainer.sampling.base import (
    PREFIX,
    Batches,
    Plan,
    Real,
    Sampler,
    SamplerContext,
    SamplerSettings,
    pick,
    rng,
)

SHARE = "share"


@dataclass(frozen=True)
class WeightedSettings(SamplerSettings):
    weights: tuple[tuple[str, float], ...] = setting((), doc=(
        "Task -> sampling weight (a mapping in the YAML); at least one task."))
    others: float | str = setting(SHARE, Real("share or a finite number >= 0", 0, also=(SHARE,)),
                                  doc=("The weight of every task weights does not list: a "
                                       "number, or share (an equal share of what is left of 1)."))
    epoch_ends_with: str | None = setting(None, doc=(
        "The task whose last batch ends an epoch (He: the QA task); null: every task's."))
    scheme: str = field(default="weighted", init=False)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], context: SamplerContext,
                     problems: list[str]) -> WeightedSettings | None:
        """`weights` and `epoch_ends_with` name the run's tasks: each is checked against them,
        in declaration order with the rule of `others`."""
        before = len(problems)
        pairs = _task_weights(raw.get("weights", {}), context.tasks, problems)
        values = check_settings(raw, cls, problems, f"{PREFIX}.")
        ends = raw.get("epoch_ends_with")
        if ends is not None and ends not in context.tasks:
            problems.append(f"{PREFIX}.epoch_ends_with: {ends!r} is not one of the run's tasks "
                            f"({', '.join(context.tasks)}); name the task whose batches end an "
                            "epoch")
        if len(problems) > before:
            return None
        settings = cls(pairs, values.get("others", SHARE), ends)
        problems.extend(settings.task_problems(context))
        return settings if len(problems) == before else None

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["weights"] = dict(out["weights"])  # as the mapping the YAML gives
        return out

    @classmethod
    def keep_tasks(cls, raw: Mapping[str, Any], keep: set[str]) -> dict[str, Any]:
        """`weights` loses the tasks outside `keep`. `epoch_ends_with` stays: an epoch that
        ends with a task the run leaves out is the user's to fix, and the run config says so."""
        out = dict(raw)
        if isinstance(out.get("weights"), dict):
            out["weights"] = {t: v for t, v in out["weights"].items() if t in keep}
        return out

    def resolved(self, tasks: Sequence[str]) -> dict[str, float]:
        """Every task's weight, the unlisted ones given `others`."""
        listed = dict(self.weights)
        rest = [t for t in tasks if t not in listed]
        if self.others == SHARE:
            left = max(0.0, 1.0 - sum(listed.values()))
            other = left / len(rest) if rest else 0.0
        else:
            other = float(self.others)
        return {t: listed.get(t, other) for t in tasks}

    def task_problems(self, context: SamplerContext) -> list[str]:
        """The weights together: something left to share, some task drawn, and the task that
        ends an epoch drawn."""
        tasks = context.tasks
        found = []
        listed = dict(self.weights)
        rest = [t for t in tasks if t not in listed]
        if self.others == SHARE and rest and sum(listed.values()) > 1 + 1e-9:
            found.append(f"{PREFIX}.weights: the listed weights sum to "
                         f"{sum(listed.values()):g} > 1, which leaves nothing for "
                         f"{', '.join(rest)} to share; list every task or set others to a number")
        resolved = self.resolved(tasks)
        if not any(w > 0 for w in resolved.values()):
            found.append(f"{PREFIX}.weights: every task's weight is 0, so no batch would ever be "
                         "drawn; give at least one task a positive weight")
        elif self.epoch_ends_with is not None and resolved[self.epoch_ends_with] == 0:
            found.append(f"{PREFIX}.epoch_ends_with: {self.epoch_ends_with} has sampling weight "
                         "0, so its batches never run out; give it a positive weight or end "
                         "epochs with another task")
        return found


def _task_weights(weights: Any, tasks: Sequence[str],
                  problems: list[str]) -> tuple[tuple[str, float], ...]:
    """The (task, weight) pairs of the YAML `weights` mapping that name a run's task with a
    finite weight >= 0; one problem per other entry."""
    pairs: list[tuple[str, float]] = []
    if not isinstance(weights, Mapping) or not weights:
        problems.append(f"{PREFIX}.weights: a mapping of task to sampling weight is needed, "
                        "e.g. {squad2: 0.8}")
        return ()
    for task, value in weights.items():
        if task not in tasks:
            problems.append(f"{PREFIX}.weights.{task}: not one of the run's tasks "
                            f"({', '.join(tasks)}); name tasks the run trains")
        elif not _weight(value):
            problems.append(f"{PREFIX}.weights.{task}: must be a finite number >= 0, "
                            f"got {value!r}")
        else:
            pairs.append((task, float(value)))
    return tuple(pairs)


def _weight(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0)


class WeightedSampler(Sampler):
    name = "weighted"
    settings_type = WeightedSettings

    def __init__(self, settings: WeightedSettings, tasks: Sequence[str]) -> None:
        super().__init__(settings, tasks)
        self.weights = settings.resolved(tasks)

    def batches_used(self, sizes: Mapping[str, int]) -> dict[str, int | None]:
        """Weight 0: none. Otherwise every batch, unless the epoch ends with another task's
        last batch: then the draws decide."""
        ends = self.settings.epoch_ends_with
        return {task: 0 if self.weights[task] <= 0 else
                (int(n) if ends is None or task == ends else None)
                for task, n in sizes.items()}

    def order(self, batches: Batches, seed: int, epoch: int, keep_order: bool = False) -> Plan:
        queues = {}
        for t, (task, task_batches) in enumerate(batches.items()):
            if keep_order:
                queues[task] = list(task_batches)
                continue
            order = rng(seed, epoch, 3, t).permutation(len(task_batches))
            queues[task] = [task_batches[i] for i in order]
        used = dict.fromkeys(queues, 0)
        draw = rng(seed, epoch, 2)
        ends = self.settings.epoch_ends_with
        plan: Plan = []
        while True:
            if ends is not None and used[ends] == len(queues[ends]):
                return plan
            live = [t for t in queues if used[t] < len(queues[t]) and self.weights[t] > 0]
            if not live:
                return plan
            w = np.array([self.weights[t] for t in live])
            task = live[int(pick(w, draw.random()))]
            plan.append((task, queues[task][used[task]]))
            used[task] += 1
