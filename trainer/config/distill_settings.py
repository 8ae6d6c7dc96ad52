"""Settings of knowledge distillation (`distill:` of a run config): each task's teachers. The
soft targets themselves are built by `weightsearch.trainer.distill`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from weightsearch.core.fields import setting, unknown_keys
from weightsearch.trainer.task_types import TASK_TYPES

# The task types whose heads learn from teachers' soft targets (`TaskType.distillable`).
DISTILLABLE = tuple(name for name, t in TASK_TYPES.items() if t.distillable)


@dataclass(frozen=True)
class DistillSettings:
    # task -> teacher run folders (an ensemble), or a single soft-target file
    teachers: tuple[tuple[str, tuple[str, ...]], ...] = setting(
        doc="per task, its teachers' run folders (an ensemble) or one soft-target file")

    def sources(self) -> dict[str, tuple[str, ...]]:
        return dict(self.teachers)


def parse_distill(raw: object, tasks: Mapping[str, str], problems: list[str]
                  ) -> DistillSettings | None:
    """`distill: {teachers: {task: [RUN_DIR, ...] | SOFT_TARGETS.safetensors}}`;
    `tasks` maps each task of the run to its type."""
    if raw is None:
        return None
    teachers = raw.get("teachers") if isinstance(raw, Mapping) else None
    if not isinstance(raw, Mapping) or not isinstance(teachers, Mapping) or not teachers:
        problems.append("distill: expected {teachers: {task: [teacher run folders] or a soft-"
                        f"target file}}, got {raw!r}")
        return None
    unknown_keys(raw, ["teachers"], problems, "distill.")
    out = []
    for task, value in teachers.items():
        where = f"distill.teachers.{task}"
        if task not in tasks:
            problems.append(f"{where}: {task!r} is not among the run's tasks "
                            f"({', '.join(tasks)}); give teachers for tasks the run trains")
            continue
        if not TASK_TYPES[tasks[task]].distillable:
            problems.append(f"{where}: {tasks[task]} tasks cannot be distilled; teachers work "
                            f"for {' and '.join(DISTILLABLE)} tasks")
            continue
        paths = [value] if isinstance(value, str) else value
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
            problems.append(f"{where}: expected a list of teacher run folders or one soft-target "
                            f"file, got {value!r}")
            continue
        missing = [p for p in paths if not Path(p).expanduser().exists()]
        if missing:
            problems.append(f"{where}: {', '.join(missing)} does not exist; give finished "
                            "teacher runs' output folders or a file from `weightsearch "
                            "soft-targets`")
            continue
        files = [p for p in paths if Path(p).expanduser().is_file()]
        if files and len(paths) > 1:
            problems.append(f"{where}: give either one soft-target file or teacher run "
                            "folders, not both")
            continue
        out.append((task, tuple(os.path.expanduser(p) for p in paths)))
    return DistillSettings(teachers=tuple(out))
