"""Parsing a study file's sections one at a time: the `train:` template (its own problems;
every point is judged by the trainer in `sweep/study_checks.py`), `central_tasks:`,
`aux_tasks:`, `objective:`, `seeds:`, `resources:`, `fuse_cells:` and `scheduler:`."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from weightsearch.core.fields import MAX_SEED, Choice, check_section, is_int
from weightsearch.sweep.space import (
    CENTRAL_WEIGHT,
    SCHEME_KEYS,
    SEARCHED_SCHEME,
    SWEEP_OWNED,
    WEIGHTING_SCHEME,
    Space,
)
from weightsearch.sweep.space_parsing import task_names_in
from weightsearch.sweep.study_file import (
    AUTO_FUSE,
    AUTO_GPU,
    MAX_FUSED,
    SCHEDULERS,
    Objective,
    Resources,
    Scheduler,
    Search,
)
from weightsearch.trainer.config.paths import anchor_paths
from weightsearch.trainer.weighting import has_central_weight


def absolute_path(path: str, base: Path) -> str:
    return os.path.realpath(base / Path(path).expanduser())  # a symlink loop stays a path


def parse_train(raw: Any, space: Space, problems: list[str], where: Any) -> dict[str, Any]:
    """The template's own problems; every point is judged by the trainer (`study_checks`)."""
    if raw is None:
        problems.append("train: required; give the run config every trial shares "
                        "(encoder, data_dir, tasks, epochs, ...)")
        return {}
    if not isinstance(raw, Mapping):
        problems.append(f"train: expected a mapping of run settings, got {type(raw).__name__}")
        return {}
    train = json.loads(json.dumps(dict(raw), default=str))
    owners = {"central_task": "central_tasks", "seed": "seeds", "output_dir": "workdir"}
    for key in SWEEP_OWNED:
        if key in train:
            problems.append(f"train.{key}: set per trial by the sweep; use `{owners[key]}` "
                            "instead")
            train.pop(key)
    weighting = train.get("weighting")
    _scheme_sections(train, space, problems)
    if space.dim(WEIGHTING_SCHEME) is not None and space.dim(CENTRAL_WEIGHT) is not None:
        if isinstance(weighting, Mapping) and "central_weight" in weighting:
            problems.append("train.weighting.central_weight: set per trial by the sweep; "
                            "remove it here")
            train["weighting"] = {k: v for k, v in weighting.items() if k != "central_weight"}
    elif space.dim(CENTRAL_WEIGHT) is not None and weighting is not None:
        if not isinstance(weighting, Mapping) or not has_central_weight(
                weighting.get("scheme", SEARCHED_SCHEME)):
            problems.append("train.weighting: a weight search sweeps SIWLM's central weight; "
                            "use weighting: {scheme: siwlm, ...} or leave it out")
            train.pop("weighting")
        elif "central_weight" in weighting:
            problems.append("train.weighting.central_weight: set per trial by the sweep; "
                            "use `weights` (or search.space) instead")
            train["weighting"] = {k: v for k, v in weighting.items() if k != "central_weight"}
    # Ray runs trials in their own folders: pin relative paths now.
    return anchor_paths(train, lambda key: where(f"train.{key}"), absolute_path)


def _scheme_sections(train: Mapping[str, Any], space: Space, problems: list[str]) -> None:
    """Where the space searches a section's scheme, each point keeps only the template
    settings its scheme takes (`Space.apply`): a setting that no searched scheme takes would be
    dropped everywhere unseen, so it is refused."""
    for section, keys_of in SCHEME_KEYS.items():
        dim, given = space.dim(f"{section}.scheme"), train.get(section)
        if dim is None:
            continue
        schemes = [s for s in dim.options("") or [] if keys_of(s) is not None]
        taken = {k for s in schemes for k in keys_of(s) or ()}
        names = ", ".join(map(str, schemes))
        for path in space.paths:  # a searched setting that no searched scheme takes
            key = path.split(".")[1] if path.startswith(f"{section}.") else "scheme"
            if key == "scheme" or key in taken or not schemes:
                continue
            weight = key == "central_weight"
            what, fix = ("a central weight", "add siwlm to its choices or remove the central "
                         "weight") if weight else (key, "add a scheme that takes it, or remove "
                                                   f"search.space.{path}")
            problems.append(f"search.space.{path}: no scheme of search.space.{section}.scheme "
                            f"({names}) takes {what}; {fix}")
        if not isinstance(given, Mapping):
            continue
        for key in given:
            if key != "scheme" and key not in taken and schemes:
                problems.append(f"train.{section}.{key}: no scheme of search.space.{section}"
                                f".scheme ({names}) takes this setting; correct its name or "
                                "remove it")


def task_names(raw_tasks: Any) -> tuple[str, ...]:
    """Task names in config order (load_config puts the central task first)."""
    from weightsearch.trainer.task_parsing import parse_tasks

    found: list[str] = []
    parsed = parse_tasks(raw_tasks, found) if raw_tasks is not None else ()
    return () if found else tuple(t.name for t in parsed)


def parse_central(raw: Any, tasks: tuple[str, ...], problems: list[str]) -> tuple[str, ...]:
    if raw is None:
        return tasks
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        problems.append(f"central_tasks: expected a non-empty list of task names, got {raw!r}")
        return ()
    return tuple(task_names_in(raw, tasks, "central_tasks", "add it there or pick one of them",
                               problems))


def parse_aux(raw: Any, tasks: tuple[str, ...], search: Search,
               problems: list[str]) -> tuple[str, ...] | None:
    """`aux_tasks`: the tasks every cell trains beside its central task (a central task listed
    here is left out of its own cells' auxiliaries)."""
    if raw is None:
        return None
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
        problems.append(f"aux_tasks: expected a list of task names, got {raw!r}; leave it out "
                        "to train every task of train.tasks together")
        return None
    if search.space.groups is not None:
        problems.append("aux_tasks: a grouping study's space (tasks: {groups_of: [...]}) "
                        "chooses every network's tasks; remove aux_tasks")
    elif search.space.group is not None:
        problems.append("aux_tasks: the search space's `tasks: {subsets_of: [...]}` already "
                        "chooses the auxiliary tasks; remove one of the two")
    return tuple(task_names_in(raw, tasks, "aux_tasks", "add it there or remove it here",
                               problems))


def parse_objective(raw: Any, train: Mapping[str, Any], central: tuple[str, ...],
                     problems: list[str]) -> Objective:
    if raw is None:
        return Objective()
    values = check_section(raw, Objective, "objective", problems,
                           "{stage: finetuned, metric: primary}") or {}
    stage = values.setdefault("stage", "multitask")
    if stage == "finetuned":
        from weightsearch.trainer.config.presets import expand_preset

        finetune = expand_preset(train, []).get("finetune")  # a preset may turn it on
        tasks = finetune.get("tasks", "central") if isinstance(finetune, Mapping) else None
        if not finetune or (isinstance(finetune, Mapping) and finetune.get("enabled") is False):
            problems.append("objective.stage: finetuned scores the fine-tuning stage; turn it on "
                            "with train.finetune: {tasks: central, epochs: ...}")
        elif isinstance(tasks, list) and not set(central) <= set(tasks):
            missing = ", ".join(sorted(set(central) - set(tasks)))
            problems.append(f"objective.stage: finetuned needs every central task fine-tuned; "
                            f"train.finetune.tasks leaves out {missing} (use tasks: central)")
    return Objective(**values)


def parse_seeds(raw: Any, problems: list[str]) -> tuple[int, ...]:
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        problems.append(f"seeds: expected a non-empty list of whole numbers, got {raw!r}")
        return ()
    out: list[int] = []
    for i, seed in enumerate(raw):
        if not is_int(seed) or not 0 <= seed <= MAX_SEED:
            problems.append(f"seeds[{i}]: expected a whole number from 0 to {MAX_SEED}, "
                            f"got {seed!r}")
        elif seed in out:
            problems.append(f"seeds[{i}]: {seed!r} is listed twice")
        else:
            out.append(seed)
    return tuple(out)


def parse_resources(raw: Any, problems: list[str]) -> Resources:
    if raw is None:
        return Resources()
    values = check_section(raw, Resources, "resources", problems, "{cpu: 1, gpu: auto}",
                           noun="resource") or {}
    gpu = values.get("gpu", 0.0)
    if gpu != AUTO_GPU and gpu > 1 and gpu != int(gpu):
        problems.append(f"resources.gpu: {gpu!r}: above 1, ask for whole GPUs (or auto)")
    return Resources(**values)


def parse_fuse_cells(raw: Any, scheduler: Scheduler, problems: list[str]) -> int | str:
    """`fuse_cells`: cells per trial, trained together (1 for false or absent), or `auto`."""
    if raw is None or raw is False:
        return 1
    if isinstance(raw, str) and raw.strip().lower() == AUTO_FUSE:
        raw = AUTO_FUSE
    elif isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_FUSED:
        problems.append(f"fuse_cells: {raw!r}: give how many cells one trial trains together, "
                        f"a number from 1 to {MAX_FUSED} (e.g. 6 on one GPU), auto (as many as "
                        "the trial's GPU memory holds, measured), or false")
        return 1
    if (raw == AUTO_FUSE or raw > 1) and scheduler.name == "asha":
        problems.append("fuse_cells: ASHA stops whole trials, and a fused trial trains several "
                        "cells; use scheduler: fifo (successive halving fuses the cells of a "
                        "rung), or leave fuse_cells out")
    return raw


def parse_scheduler(raw: Any, problems: list[str]) -> Scheduler:
    """`fifo`, `asha`, or `{name: asha, grace_period: 1, reduction_factor: 3}`."""
    if isinstance(raw, str):  # the short form: the scheduler's name alone
        name, problem = Choice(SCHEDULERS).check("scheduler", raw)
        problems.extend([problem] if problem else [])
        return Scheduler(name=name or "fifo")
    values = check_section(raw, Scheduler, "scheduler", problems,
                           "{name: asha, grace_period: 1}")
    return Scheduler(**(values or {}))
