"""Settings of the fine-tuning stage (`finetune:` of a run config): what each task is
fine-tuned with after the multi-task stage. The stage itself is `weightsearch.trainer.finetune`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from weightsearch.core.fields import Choice, Number, check_section, setting
from weightsearch.trainer.config.optim_settings import OPTIMIZERS
from weightsearch.trainer.smart import AdversarialSettings, parse_adversarial
from weightsearch.trainer.task_types import TASK_TYPES
from weightsearch.trainer.tasks import preset_key

if TYPE_CHECKING:
    from weightsearch.trainer.tasks import TaskSpec

FINETUNE_DIR = "finetune"
TASK_CHOICES = ("all", "central")
HEAD_CHOICES = ("keep", "fresh")
FINETUNE_KEYS = ("enabled", "tasks", "epochs", "lr", "batch_size", "optimizer", "warmup",
                 "weight_decay", "heads", "head", "adversarial")


@dataclass(frozen=True)
class FinetuneSettings:
    # Task names, or "all" / "central" (checked by `_tasks`).
    tasks: tuple[str, ...] | str = setting(
        "central", doc="the tasks to fine-tune: central, all, or a list of the run's tasks")
    epochs: int = setting(3, Number(integer=True, low=1, optional=True),
                          doc="epochs of each task's fine-tuning")
    # None: the multi-task lr, batch size, optimizer, warm-up and weight decay
    lr: float | None = setting(None, Number(integer=False, low=0, low_open=True, optional=True),
                               doc="the peak learning rate; null: the multi-task lr")
    batch_size: int | None = setting(None, Number(integer=True, low=1, optional=True),
                                     doc="examples per batch; null: the multi-task batch_size")
    optimizer: str | None = setting(None, Choice(OPTIMIZERS, optional=True),
                                    doc="null: the multi-task optimizer")
    warmup: float | None = setting(
        None, Number(integer=False, low=0, high=1, optional=True),
        doc="the fraction of updates with a linear warm-up; null: the multi-task warmup")
    weight_decay: float | None = setting(None, Number(integer=False, low=0, optional=True),
                                         doc="null: the multi-task weight_decay")
    # SIWLM's published pipeline strips the heads before fine-tuning.
    heads: str = setting(
        "keep", Choice(HEAD_CHOICES, optional=True),
        doc="keep: each task goes on with its multi-task head (MT-DNN); fresh: a new head on "
            "the multi-task encoder (SIWLM)")
    # The SIWLM script fine-tunes with answer_opt 0, a linear head, after SAN in the
    # multi-task stage (checked by `_check_head`).
    head: str | None = setting(
        None, doc="the answer module of each fine-tuned task whose type offers it (linear, "
                  "san); null: the task's own head")
    adversarial: AdversarialSettings = setting(
        factory=AdversarialSettings,
        doc="SMART during fine-tuning, as `adversarial` (`finetune.adversarial`)")

    def task_list(self, task_names: tuple[str, ...], central_task: str) -> tuple[str, ...]:
        """The tasks to fine-tune, among the run's `task_names`."""
        if self.tasks == "all":
            return task_names
        if self.tasks == "central":
            return (central_task,)
        return tuple(self.tasks)


def parse_finetune(raw: object, specs: Sequence[TaskSpec], problems: list[str],
                   central: str | None = None) -> FinetuneSettings | None:
    """`finetune: {tasks, epochs, lr, ...}`; absent, null, false or `enabled: false` = off.
    `specs` are the run's tasks and `central` its central task."""
    if raw is None or raw is False:
        return None
    raw = {} if raw is True else raw
    values = check_section(raw, FinetuneSettings, "finetune", problems,
                           "{tasks: all, epochs: 3, lr: 2e-5}", known=FINETUNE_KEYS)
    if values is None:
        return None
    assert isinstance(raw, Mapping)  # check_section said so
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        problems.append(f"finetune.enabled: expected true or false, got {enabled!r}")
    values["tasks"] = _tasks(raw.get("tasks", "central"), [t.name for t in specs], problems)
    _check_head(raw.get("head"), values, specs, central, problems)
    values["adversarial"] = parse_adversarial(raw.get("adversarial"), "finetune.adversarial",
                                              problems)
    return FinetuneSettings(**values) if enabled is True else None


def _tasks(tasks: object, task_names: list[str], problems: list[str]) -> tuple[str, ...] | str:
    """`finetune.tasks`: all, central, or task names (preset spellings accepted)."""
    if isinstance(tasks, str) and tasks.lower() in TASK_CHOICES:
        return tasks.lower()
    if isinstance(tasks, (list, tuple)) and tasks and all(isinstance(t, str) for t in tasks):
        picked = [t if t in task_names else preset_key(t) for t in tasks]
        unknown = [t for t, p in zip(tasks, picked, strict=True) if p not in task_names]
        if unknown and task_names:
            problems.append(f"finetune.tasks: {', '.join(map(repr, unknown))} not among the run's "
                            f"tasks ({', '.join(task_names)}); fine-tune tasks the run trains")
        return tuple(dict.fromkeys(picked))
    problems.append(f"finetune.tasks: expected all, central or a list of task names, "
                    f"got {tasks!r}")
    return "central"


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
