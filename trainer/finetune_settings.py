"""Settings of the fine-tuning stage (`finetune:` of a run config): what each task is
fine-tuned with after the multi-task stage. The stage itself is `trainer.finetune`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainer.smart import AdversarialSettings, parse_adversarial
from trainer.task_types import TASK_TYPES
from trainer.tasks import preset_key

if TYPE_CHECKING:
    from trainer.tasks import TaskSpec

FINETUNE_DIR = "finetune"
TASK_CHOICES = ("all", "central")
HEAD_CHOICES = ("keep", "fresh")
FINETUNE_KEYS = ("enabled", "tasks", "epochs", "lr", "batch_size", "optimizer", "warmup",
                 "weight_decay", "heads", "head", "adversarial")


@dataclass(frozen=True)
class FinetuneSettings:
    tasks: tuple[str, ...] | str = "central"  # task names, or "all" / "central"
    epochs: int = 3
    lr: float | None = None  # None: the multi-task lr
    batch_size: int | None = None  # None: the multi-task batch size
    optimizer: str | None = None  # None: the multi-task optimizer
    warmup: float | None = None
    weight_decay: float | None = None
    # keep: each task goes on with its multi-task head (MT-DNN); fresh: a new head on the
    # multi-task encoder (SIWLM's published pipeline strips the heads before fine-tuning).
    heads: str = "keep"
    # The answer module of each fine-tuned task (`head:` of a task); None: the task's own. The
    # SIWLM script fine-tunes with answer_opt 0, a linear head, after SAN in the multi-task
    # stage. Applies to the tasks whose type offers that module.
    head: str | None = None
    adversarial: AdversarialSettings = field(default_factory=AdversarialSettings)

    def task_list(self, task_names: tuple[str, ...], central_task: str) -> tuple[str, ...]:
        """The tasks to fine-tune, among the run's `task_names`."""
        if self.tasks == "all":
            return task_names
        if self.tasks == "central":
            return (central_task,)
        return tuple(self.tasks)


def parse_finetune(raw: object, specs: Sequence[TaskSpec], optimizers: tuple[str, ...],
                   problems: list[str], central: str | None = None) -> FinetuneSettings | None:
    """`finetune: {tasks, epochs, lr, ...}`; absent, null, false or `enabled: false` = off.
    `specs` are the run's tasks and `central` its central task."""
    task_names = [t.name for t in specs]
    if raw is None or raw is False:
        return None
    if raw is True:
        raw = {}
    if not isinstance(raw, Mapping):
        problems.append(f"finetune: expected a mapping of {', '.join(FINETUNE_KEYS)}, got {raw!r}")
        return None
    for key in raw:
        if key not in FINETUNE_KEYS:
            problems.append(f"finetune.{key}: unknown setting; use {', '.join(FINETUNE_KEYS)}")
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        problems.append(f"finetune.enabled: expected true or false, got {enabled!r}")
    values: dict[str, Any] = {}
    tasks = raw.get("tasks", "central")
    if isinstance(tasks, str) and tasks.lower() in TASK_CHOICES:
        values["tasks"] = tasks.lower()
    elif isinstance(tasks, (list, tuple)) and tasks and all(isinstance(t, str) for t in tasks):
        picked = [t if t in task_names else preset_key(t) for t in tasks]
        unknown = [t for t, p in zip(tasks, picked, strict=True) if p not in task_names]
        if unknown and task_names:
            problems.append(f"finetune.tasks: {', '.join(map(repr, unknown))} not among the run's "
                            f"tasks ({', '.join(task_names)}); fine-tune tasks the run trains")
        values["tasks"] = tuple(dict.fromkeys(picked))
    else:
        problems.append(f"finetune.tasks: expected all, central or a list of task names, "
                        f"got {tasks!r}")
    for key, integer, low in (("epochs", True, 1), ("batch_size", True, 1), ("lr", False, 0),
                              ("warmup", False, 0), ("weight_decay", False, 0)):
        if raw.get(key) is None:
            continue
        value = raw[key]
        ok = (isinstance(value, int) if integer else isinstance(value, (int, float)))
        if isinstance(value, bool) or not ok or not math.isfinite(value) or value < low or (
                key == "lr" and value == 0) or (key == "warmup" and value > 1):
            rule = {"lr": "a number > 0", "warmup": "a number in [0, 1]"}.get(
                key, "an integer >= 1" if integer else "a number >= 0")
            problems.append(f"finetune.{key}: expected {rule}, got {value!r}")
        else:
            values[key] = int(value) if integer else float(value)
    for key, options in (("optimizer", optimizers), ("heads", HEAD_CHOICES)):
        value = raw.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or value.lower() not in options:
            problems.append(f"finetune.{key}: {value!r} is not one of {', '.join(options)}")
        else:
            values[key] = value.lower()
    _check_head(raw.get("head"), values, specs, central, problems)
    values["adversarial"] = parse_adversarial(raw.get("adversarial"), "finetune.adversarial",
                                              problems)
    return FinetuneSettings(**values) if enabled is True else None


def _check_head(head: object, values: dict[str, Any], tasks: Sequence[TaskSpec],
                central: str | None, problems: list[str]) -> None:
    """`finetune.head`: an answer module some task type offers; a kept multi-task head must be
    of the module the task trained with."""
    if head is None:
        return
    modules = tuple(dict.fromkeys(m for t in TASK_TYPES.values() for m in t.answer_modules))
    if not isinstance(head, str) or head.lower() not in modules:
        problems.append(f"finetune.head: {head!r} is not one of {', '.join(modules)} (or null "
                        "for each task's own)")
        return
    values["head"] = head = head.lower()
    if values.get("heads", "keep") != "keep":
        return
    listed = values.get("tasks", "central")
    names = ({central} if listed == "central" else None if listed == "all" else set(listed))
    changed = [t.name for t in tasks if (names is None or t.name in names)
               and head in TASK_TYPES[t.type].answer_modules and t.head != head]
    if changed:
        problems.append(f"finetune.head: {head} differs from the multi-task head of "
                        f"{', '.join(changed)}, which heads: keep would carry over; set "
                        "finetune.heads: fresh for a new head")
