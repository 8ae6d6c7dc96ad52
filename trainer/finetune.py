"""The second stage of MT-DNN: each listed task fine-tuned alone from the multi-task encoder.

Every fine-tuned task is a run of its own: a one-task `RunConfig` derived from the multi-task
one (`stage_config`), initialised from the multi-task stage's last checkpoint (`init_from`) and
written to `<output_dir>/finetune/<task>/`, so it has its own epoch checkpoints, resumes where it
was killed, and is refused on resume like any run whose settings or data changed. The parent
run collects their scores under the `finetuned` stage.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.smart import AdversarialSettings, parse_adversarial

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from trainer.results import EpochReport, RunResult
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

    def task_list(self, cfg: RunConfig) -> tuple[str, ...]:
        if self.tasks == "all":
            return cfg.task_names
        if self.tasks == "central":
            return (cfg.central_task,)
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
        from trainer.tasks import preset_key

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
    from trainer.task_types import TASK_TYPES

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


def stage_config(cfg: RunConfig, task: str, init_from: Path) -> RunConfig:
    """The one-task run that fine-tunes `task` from the multi-task checkpoint `init_from`."""
    from trainer.task_types import TASK_TYPES
    from trainer.weighting import EqualSettings

    ft = cfg.finetune
    assert ft is not None
    spec = cfg.task(task)
    if ft.head is not None and ft.head in TASK_TYPES[spec.type].answer_modules:
        spec = dataclasses.replace(spec, head=ft.head)
    return cfg.replace(
        tasks=(spec,),
        central_task=task,
        weighting=EqualSettings(),
        epochs=ft.epochs,
        lr=ft.lr if ft.lr is not None else cfg.lr,
        batch_size=ft.batch_size or cfg.batch_size,
        optimizer=ft.optimizer or cfg.optimizer,
        warmup=ft.warmup if ft.warmup is not None else cfg.warmup,
        weight_decay=ft.weight_decay if ft.weight_decay is not None else cfg.weight_decay,
        adversarial=ft.adversarial,
        init_from=str(init_from),
        init_heads=ft.heads,
        finetune=None,
        distill=None,  # MT-DNN-KD distils in the multi-task stage
        output_dir=str(Path(cfg.output_dir) / FINETUNE_DIR / task),
    )


def run_stage(
    cfg: RunConfig,
    init_from: Path,
    report: Callable[[EpochReport], None] | None,
    quiet: bool,
) -> dict[str, RunResult]:
    """Fine-tune every listed task in turn; a task whose run finished is read back, not rerun,
    and one that was interrupted continues from its last epoch checkpoint. (A fresh parent run
    has removed every earlier `finetune/` folder before it got here.)"""
    from trainer.loop import RESULT, train

    assert cfg.finetune is not None
    results: dict[str, RunResult] = {}
    for task in cfg.finetune.task_list(cfg):
        sub = stage_config(cfg, task, init_from)
        done = Path(sub.output_dir) / RESULT
        if done.is_file():  # its folder may have moved with the run's (a study retry's copy)
            results[task] = dataclasses.replace(_read_result(done),
                                                output_dir=Path(sub.output_dir))
            continue
        if not quiet:
            from tqdm.auto import tqdm

            tqdm.write(f"fine-tuning {task} from {init_from}")
        results[task] = train(sub, report=report, resume=True, quiet=quiet, stage="finetuned")
    return results


def _read_result(path: Path) -> RunResult:
    from trainer.results import RunResult

    data = json.loads(path.read_text())
    return RunResult.from_dict(data)
