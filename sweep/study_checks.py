"""Parsing a study file into a `StudySpec`: each section read (`sweep/study_sections.py`, the
search in `sweep/study_search.py`), then the checks across keys (what a strategy, a scheduler
and an objective cannot be combined with; a grouping study's rules; the study's size; every
search point through the trainer's own checks), every problem reported at once."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from weightsearch.core.errors import ConfigError
from weightsearch.core.fields import check_fields, unknown_keys
from weightsearch.core.yamlio import load_yaml, read_yaml_file, yaml_problem
from weightsearch.studies.schema import GROUPS_STUDY
from weightsearch.studies.schema import T_GROUP_PATH as GROUP_PATH
from weightsearch.studies.urls import default_storage_url
from weightsearch.sweep.inert_grid import settings_problems
from weightsearch.sweep.space import SCHEME_PATHS, SEARCHED_SCHEME
from weightsearch.sweep.strategies import STRATEGIES
from weightsearch.sweep.study_file import (
    DEFAULT_WORKDIR,
    KEYS,
    MAX_CELLS,
    Objective,
    Scheduler,
    Search,
    StudyFile,
    StudySpec,
)
from weightsearch.sweep.study_search import parse_search, parse_warm
from weightsearch.sweep.study_sections import (
    absolute_path,
    parse_aux,
    parse_central,
    parse_fuse_cells,
    parse_objective,
    parse_resources,
    parse_scheduler,
    parse_seeds,
    parse_train,
    task_names,
)
from weightsearch.sweep.weight_action import LOSS, SAMPLING, as_sampling_rate, sampling_problems
from weightsearch.trainer.config.paths import (
    path_problem,
    unusable_paths,
    writable_folder_problem,
)
from weightsearch.trainer.weighting import has_central_weight


def read_study_source(source: str | os.PathLike | Mapping[str, Any]
                      ) -> tuple[str | None, Any, Path]:
    """(the file's path for messages, its parsed content, the folder relative paths start from)."""
    if isinstance(source, Mapping):
        return None, dict(source), Path.cwd()
    text_given = isinstance(source, str) and (
        "\n" in source or (":" in source and not Path(source).is_file())
    )
    if not text_given:
        path = Path(source)
        base = Path(os.path.realpath(path.expanduser())).parent  # no RuntimeError on a loop
        return str(path), read_yaml_file(path, noun="study file"), base
    try:
        return None, load_yaml(str(source)) or {}, Path.cwd()
    except yaml.YAMLError as exc:
        raise ConfigError([yaml_problem(exc)], None) from None


def _or(names: Sequence[str]) -> str:
    """`a, b or c`."""
    return names[0] if len(names) < 2 else f"{', '.join(names[:-1])} or {names[-1]}"


def parse_study(raw: Mapping[str, Any], label: str | None, base: Path,
           from_cli: set[str]) -> StudySpec:
    if "tasks" in raw and "study" not in raw and "train" not in raw:
        raise ConfigError(["this is a run config (it has tasks: and no study: or train:), not a "
                           "study file; train it with `weightsearch train --config FILE`, or "
                           "put its settings under train: in a study file (examples/"
                           "study-sample.yaml)"], label)
    # Paths no file system takes (a NUL byte, an over-long name): one message each, before
    # any of them is resolved.
    train_raw = raw.get("train")
    problems: list[str] = [*(p for p in [path_problem(raw.get("workdir"), "workdir")] if p),
                           *(unusable_paths(train_raw, "train.")
                             if isinstance(train_raw, Mapping) else [])]
    if problems:
        raise ConfigError(problems, label)
    unknown_keys(raw, KEYS, problems)
    plain = check_fields(raw, StudyFile, problems)  # version and the plain settings
    study = plain.get("study", "")
    if "study" not in raw:
        problems.append("study: required; name the study, e.g. study: glue-small")
    storage = raw.get("storage") or default_storage_url()
    if not isinstance(storage, str):
        problems.append(f"storage: expected a SQLAlchemy URL, got {storage!r}")

    def where(key: str) -> Path:
        # A path given with --set (the key itself or a mapping holding it) is the user's own.
        given = any(key == k or key.startswith(k + ".") for k in from_cli)
        return Path.cwd() if given else base

    tasks = task_names(train_raw.get("tasks")) if isinstance(train_raw, Mapping) else ()
    search = parse_search(raw, tasks, problems)
    train = parse_train(train_raw, search.space, problems, where)
    if search.space.groups is not None:
        central = _grouping_checks(raw, train, search, problems)
    else:
        central = parse_central(raw.get("central_tasks"), tasks, problems)
    aux = parse_aux(raw.get("aux_tasks"), tasks, search, problems)
    seeds = parse_seeds(raw.get("seeds", [1]), problems)
    resources = parse_resources(raw.get("resources"), problems)
    scheduler = parse_scheduler(raw.get("scheduler", "fifo"), problems)
    _stopping_checks(search, scheduler, problems)

    max_concurrent = plain.get("max_concurrent")
    max_failures = plain.get("max_failures", 1)
    reuse_workers = plain.get("reuse_workers", True)
    allow_inert = plain.get("allow_inert", False)
    same_treatment = plain.get("same_treatment", "once")
    weight_acts_on = plain.get("weight_acts_on", LOSS)
    fuse_cells = parse_fuse_cells(raw.get("fuse_cells"), scheduler, problems)
    if weight_acts_on == SAMPLING and isinstance(train_raw, Mapping):
        problems.extend(sampling_problems(train_raw, search.space.central_weight_only,
                                          fuse_cells))
    workdir = absolute_path(plain.get("workdir", DEFAULT_WORKDIR), where("workdir"))
    if (problem := writable_folder_problem(workdir, "workdir")) is not None:
        problems.append(problem)

    warm, warm_recommend = parse_warm(raw.get("warm_start"), search, central, problems)
    objective = parse_objective(raw.get("objective"), train, central, problems)
    _finetuned_objective_checks(objective, search, scheduler, problems)
    epochs = _check_cells(train, tasks, central, search, seeds, workdir, problems,
                          weight_acts_on)
    if not allow_inert and isinstance(train_raw, Mapping):
        problems.extend(_inert_by_settings(train_raw, tasks, aux, central, search,
                                           weight_acts_on))

    if problems:
        raise ConfigError(problems, label)
    return StudySpec(
        study=study, storage=storage, train=train, tasks=tasks, central_tasks=central,
        search=search, seeds=seeds, resources=resources, max_concurrent=max_concurrent,
        scheduler=scheduler, max_failures=max_failures, workdir=workdir, epochs=epochs,
        warm_start=warm, warm_recommend=warm_recommend, objective=objective, aux_tasks=aux,
        reuse_workers=reuse_workers, fuse_cells=fuse_cells, allow_inert=allow_inert,
        weight_acts_on=weight_acts_on, same_treatment=same_treatment,
    )


def _inert_by_settings(train_raw: Mapping[str, Any], tasks: tuple[str, ...],
                       aux: tuple[str, ...] | None, central: tuple[str, ...], search: Search,
                       weight_acts_on: str) -> list[str]:
    """`inert_grid.settings_problems` with each central task's auxiliaries, from the tasks a
    cell trains: a preset may list them (`siwlm-paper`'s eight GLUE tasks)."""
    from weightsearch.trainer.config.presets import expand_preset

    trained = tasks or task_names(expand_preset(train_raw, []).get("tasks"))
    chosen = trained if aux is None else aux
    aux_of = {c: [t for t in trained if t in chosen and t != c] for c in central}
    return settings_problems(train_raw, search, central, aux_of, weight_acts_on)


def _stopping_checks(search: Search, scheduler: Scheduler, problems: list[str]) -> None:
    """What early stopping cannot be combined with: a space whose settings apply to some
    schemes only, a comparison of methods (scored on finished runs), a second stopper."""
    stops_early = STRATEGIES[search.strategy].stops_early
    if search.space.conditional and search.strategy != "grid":
        problems.append(f"search.strategy: {search.strategy} cannot search a setting that "
                        "applies only to some of the searched schemes (such as SIWLM's central "
                        "weight beside weighting.scheme); use strategy: grid")
    compares = [p for p in search.space.paths if p in SCHEME_PATHS]
    stoppers = [("scheduler", scheduler.name)] if scheduler.name == "asha" else []
    if stops_early and not search.space.conditional:  # a conditional space's is refused above
        stoppers.append(("search.strategy", search.strategy))
    for field_, value in stoppers if compares else []:
        problems.append(f"{field_}: a study that compares methods ({', '.join(compares)}) "
                        f"scores every method on its finished runs, and {value} stops some "
                        "early; use scheduler: fifo with strategy: grid")
    if scheduler.name == "asha" and stops_early:
        problems.append(f"scheduler: asha and strategy {search.strategy} both stop trials "
                        f"early; use scheduler: fifo with {search.strategy}")


def _finetuned_objective_checks(objective: Objective, search: Search, scheduler: Scheduler,
                                problems: list[str]) -> None:
    # Early stopping ranks trials by their multi-task epoch scores; a fine-tuned score exists
    # only once a trial has finished, so the two would rank different things.
    stops_early = STRATEGIES[search.strategy].stops_early
    if objective.stage == "finetuned" and (scheduler.name == "asha" or stops_early):
        stopper = ("scheduler: asha" if scheduler.name == "asha"
                   else f"strategy: {search.strategy}")
        whole = [n for n, s in STRATEGIES.items() if not s.stops_early]
        problems.append(f"objective.stage: finetuned cannot be combined with {stopper}, which "
                        "stops trials on their multi-task epoch scores before any fine-tuned "
                        f"score exists; use scheduler: fifo and the {_or(whole)} strategy")


def _check_cells(train: dict[str, Any], tasks: tuple[str, ...], central: tuple[str, ...],
                 search: Search, seeds: tuple[int, ...], workdir: str,
                 problems: list[str], weight_acts_on: str = LOSS) -> int:
    """The study's size against the cap, every point's run config, and the strategy's own
    checks; returns the epochs a trial trains (5 when the run config could not be read)."""
    epochs = 5
    cells = sum(search.space.size(c) for c in central or tasks[:1]) * max(1, len(seeds))
    if math.isfinite(cells) and cells > MAX_CELLS:
        problems.append(f"search: {cells:,.0f} cells (points x seeds x central tasks) exceed "
                        f"the cap of {MAX_CELLS:,} per study; use fewer values, or no step and "
                        "strategy: guided")
    elif train:
        epochs = _check_points(train, tasks, central or tasks[:1], search,
                               seeds, workdir, problems, weight_acts_on)
    STRATEGIES[search.strategy].check(search.settings, search.space, central, problems,
                                      where="weights" if search.shorthand else "search",
                                      epochs=epochs if train else None)
    return epochs


def _check_points(train: Mapping[str, Any], tasks: tuple[str, ...], central: tuple[str, ...],
                  search: Search, seeds: tuple[int, ...], workdir: str,
                  problems: list[str], weight_acts_on: str = LOSS) -> int:
    """Validate the template through the trainer at every value of every dimension (the
    others at their first value), for each central task; returns train.epochs."""
    from weightsearch.trainer.config import load_config
    from weightsearch.trainer.encoders import encoder_problem

    space = search.space
    seen: set[str] = set()
    encoders: set[str] = set()
    epochs = 5
    for c in central or (None,):
        base = {d.path: d.first(c or "") for d in space.dims}
        probes = [base]
        for d in space.dims:
            found = d.options(c or "")
            values = found if found is not None else [d.low, d.high]
            probes += [{**base, d.path: v} for v in values if v != base[d.path]]
        for i, point in enumerate(probes):
            raw = space.apply(train, point, c or "", tasks)
            if weight_acts_on == SAMPLING and c is not None:
                raw = as_sampling_rate(raw, c)
            raw.update(seed=seeds[0] if seeds else 1, output_dir=workdir)
            if c is not None:
                raw["central_task"] = space.run_central(point, c)
            try:
                cfg = load_config(raw)
                epochs = cfg.epochs
                encoders.add(cfg.encoder)
            except ConfigError as exc:
                for p in exc.problems:
                    if p in seen:
                        continue
                    seen.add(p)
                    at = "" if i == 0 else f" (at search point {space.label(space.settle(point))})"
                    problems.append(f"train.{p}{at}")
    # Found here, not as a failed trial inside Ray.
    problems.extend(f"train.{p}" for p in map(encoder_problem, sorted(encoders)) if p)
    return epochs


def _grouping_checks(raw: Mapping[str, Any], train: dict[str, Any], search: Search,
                     problems: list[str]) -> tuple[str, ...]:
    """A budgeted grouping study (`tasks: {groups_of: [...]}`) has no central task: every
    task of a network is scored alike, each network trains its group with a weighting that
    favours none of them, and the study is the one `<study>/groups`."""
    fix = "a grouping study (search.space.tasks: {groups_of: [...]})"
    if raw.get("central_tasks") is not None:
        problems.append(f"central_tasks: {fix} has no central task: every task of a network "
                        "is scored; remove central_tasks")
    others = [p for p in search.space.paths if p != GROUP_PATH]
    if others:
        problems.append(f"search.space: {fix} searches the groups alone; remove "
                        f"{', '.join(others)} (set them in train: instead)")
    if search.strategy != "grid":
        problems.append(f"search.strategy: {fix} trains every group once per seed; use "
                        "strategy: grid or leave it out")
    weighting = train.get("weighting")
    if isinstance(weighting, Mapping) and has_central_weight(
            weighting.get("scheme", SEARCHED_SCHEME)):
        problems.append(f"train.weighting: {fix} weighs every task of a network alike; use "
                        "weighting: {scheme: equal} (the default) or leave it out")
    objective = raw.get("objective")
    if objective is not None and objective != {"stage": "multitask", "metric": "primary"}:
        problems.append(f"objective: {fix} scores each task by its primary metric in the "
                        "multi-task stage; remove objective")
    scheduler = raw.get("scheduler", "fifo")
    if scheduler not in ("fifo", {"name": "fifo"}) and not (
            isinstance(scheduler, Mapping) and scheduler.get("name") == "fifo"):
        problems.append(f"scheduler: {fix} trains every network to its last epoch; use "
                        "scheduler: fifo")
    return (GROUPS_STUDY,)
