"""Parsing a study file into a `StudySpec`: each section read, then the checks across keys
(what a strategy, a scheduler and an objective cannot be combined with; the study's size; every
search point through the trainer's own checks), every problem reported at once."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from weightsearch.core.errors import ConfigError
from weightsearch.core.fields import (
    MAX_SEED,
    Choice,
    check_fields,
    check_section,
    is_int,
    is_real,
    unknown_keys,
)
from weightsearch.core.yamlio import load_yaml, read_yaml_file, yaml_problem
from weightsearch.studies.schema import (
    GROUPS_STUDY,
    SEARCH_GRID,
)
from weightsearch.studies.schema import T_GROUP_PATH as GROUP_PATH
from weightsearch.studies.urls import default_storage_url
from weightsearch.sweep.inert_grid import settings_problems
from weightsearch.sweep.space import (
    CENTRAL_WEIGHT,
    EXHAUSTIVE_GROUP_MAX,
    SCHEME_KEYS,
    SCHEME_PATHS,
    SWEEP_OWNED,
    WEIGHTING_SCHEME,
    Dimension,
    Point,
    Space,
    task_names_in,
)
from weightsearch.sweep.space_parsing import parse_space
from weightsearch.sweep.strategies import (
    STRATEGIES,
    StrategyContext,
    parse_settings,
)
from weightsearch.sweep.study_file import (
    AUTO_GPU,
    DEFAULT_WORKDIR,
    KEYS,
    MAX_CELLS,
    MAX_FUSED,
    SCHEDULERS,
    Objective,
    Resources,
    Scheduler,
    Search,
    StudyFile,
    StudySpec,
)
from weightsearch.sweep.weight_action import LOSS, SAMPLING, as_sampling_rate, sampling_problems
from weightsearch.trainer.config.paths import (
    anchor_paths,
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

    tasks = _task_names(train_raw.get("tasks")) if isinstance(train_raw, Mapping) else ()
    search = _parse_search(raw, tasks, problems)
    train = _parse_train(train_raw, search.space, problems, where)
    if search.space.groups is not None:
        central = _grouping_checks(raw, train, search, problems)
    else:
        central = _parse_central(raw.get("central_tasks"), tasks, problems)
    aux = _parse_aux(raw.get("aux_tasks"), tasks, search, problems)
    seeds = _parse_seeds(raw.get("seeds", [1]), problems)
    resources = _parse_resources(raw.get("resources"), problems)
    scheduler = _parse_scheduler(raw.get("scheduler", "fifo"), problems)
    _stopping_checks(search, scheduler, problems)

    max_concurrent = plain.get("max_concurrent")
    max_failures = plain.get("max_failures", 1)
    reuse_workers = plain.get("reuse_workers", True)
    allow_inert = plain.get("allow_inert", False)
    weight_acts_on = plain.get("weight_acts_on", LOSS)
    fuse_cells = _parse_fuse_cells(raw.get("fuse_cells"), scheduler, problems)
    if weight_acts_on == SAMPLING and isinstance(train_raw, Mapping):
        problems.extend(sampling_problems(train_raw, search.space.central_weight_only,
                                          fuse_cells))
    if fuse_cells > 1 and isinstance(train, Mapping) and _precision(train) != "fp32":
        problems.append(FP32_NEEDED)
    workdir = _absolute(plain.get("workdir", DEFAULT_WORKDIR), where("workdir"))
    if (problem := writable_folder_problem(workdir, "workdir")) is not None:
        problems.append(problem)

    warm, warm_recommend = _parse_warm(raw.get("warm_start"), search, central, problems)
    objective = _parse_objective(raw.get("objective"), train, central, problems)
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
        weight_acts_on=weight_acts_on,
    )


def _inert_by_settings(train_raw: Mapping[str, Any], tasks: tuple[str, ...],
                       aux: tuple[str, ...] | None, central: tuple[str, ...], search: Search,
                       weight_acts_on: str) -> list[str]:
    """`inert_grid.settings_problems` with each central task's auxiliaries, from the tasks a
    cell trains: a preset may list them (`siwlm-paper`'s eight GLUE tasks)."""
    from weightsearch.trainer.config.presets import expand_preset

    trained = tasks or _task_names(expand_preset(train_raw, []).get("tasks"))
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


# --- search ------------------------------------------------------------------------------
def _parse_search(raw: Mapping[str, Any], tasks: tuple[str, ...],
                  problems: list[str]) -> Search:
    if "weights" in raw and "search" in raw:
        problems.append("weights: give either weights (the central weight alone) or search, "
                        "not both")
    if "search" in raw:
        return _parse_search_mapping(raw["search"], tasks, problems)
    return _parse_weights(raw.get("weights", list(SEARCH_GRID)), problems)


def _parse_weights(raw: Any, problems: list[str]) -> Search:
    """The shorthand `weights:` for a search over the central weight alone."""
    from weightsearch.sweep.space_parsing import (  # the same checks as search.space
        parse_range,
        parse_values,
    )

    grid = STRATEGIES["grid"]
    if isinstance(raw, Mapping):
        known = ("low", "high", "n_trials", "sampler", "step")
        unknown_keys(raw, known, problems, "weights.")
        dim = parse_range(CENTRAL_WEIGHT, {k: v for k, v in raw.items()
                                            if k in ("low", "high", "step")},
                           problems, "weights")
        settings = parse_settings("guided", raw, StrategyContext(Space(()), "weights"), problems)
        dim = dim or Dimension(CENTRAL_WEIGHT, low=1.0, high=15.0)
        return Search("guided", settings, Space((dim,)), shorthand=True)
    if not isinstance(raw, list):
        problems.append(f"weights: expected a list of weights or a mapping "
                        f"{{low, high, n_trials}}, got {raw!r}")
        raw = list(SEARCH_GRID)
    if not raw:
        problems.append("weights: the grid is empty; list at least one weight, "
                        "e.g. weights: [1, 2, 4, 8, 15]")
        raw = list(SEARCH_GRID)
    dim = parse_values(CENTRAL_WEIGHT, raw, problems, "weights", categorical=False)
    dim = dim or Dimension(CENTRAL_WEIGHT, values=SEARCH_GRID)
    return Search("grid", grid.settings_type(), Space((dim,)), shorthand=True)


def _parse_search_mapping(raw: Any, tasks: tuple[str, ...], problems: list[str]) -> Search:
    if not isinstance(raw, Mapping):
        problems.append("search: expected a mapping such as {strategy: grid, space: "
                        "{weighting.central_weight: [1, 9]}}")
        raw = {}
    space = parse_space(raw.get("space"), tasks, problems)
    default = "grid"
    group = space.group
    if group is not None and len(group.candidates) > EXHAUSTIVE_GROUP_MAX:
        default = "forward"  # 2^6 = 64 groups and up: greedy forward selection
    name = raw.get("strategy", default)
    if name not in STRATEGIES:
        problems.append(f"search.strategy: {name!r} is not one of {', '.join(STRATEGIES)}")
        name = "grid"
    settings_type = STRATEGIES[name].settings_type
    known = ("strategy", "space", *settings_type.KEYS)
    unknown_keys(raw, known, problems, "search.", owner=f"strategy {name}")
    settings = parse_settings(name, raw, StrategyContext(space, "search"), problems)
    return Search(name, settings, space)


def _parse_warm(raw: Any, search: Search, central: tuple[str, ...],
                problems: list[str]) -> tuple[tuple[Point, ...], bool]:
    if raw is None or raw == []:
        return (), False
    if not STRATEGIES[search.strategy].accepts_warm_start:
        problems.append("warm_start: applies to a guided search (weights: {n_trials: ...}) or "
                        "halving only; a grid tries every point anyway")
        return (), False
    if raw == "recommend":
        if search.space.dim(CENTRAL_WEIGHT) is None:
            problems.append("warm_start: recommend proposes a central weight, and this space "
                            "does not search weighting.central_weight; list points instead")
        return (), True
    if not isinstance(raw, list):
        problems.append(f"warm_start: expected a list of points or `recommend`, got {raw!r}")
        return (), False
    space = search.space
    out: list[Point] = []
    for i, item in enumerate(raw):
        point = {CENTRAL_WEIGHT: item} if space.central_weight_only and \
            not isinstance(item, Mapping) else item
        if not isinstance(point, Mapping) or set(point) != set(space.paths):
            problems.append(f"warm_start[{i}]: give a value for every searched path "
                            f"({', '.join(space.paths)}), e.g. {{{space.paths[0]}: ...}}")
            continue
        point = space.normalise(point)
        ok = True
        for d in space.dims:
            value = point[d.path]
            if d.path == CENTRAL_WEIGHT and not is_real(value):
                problems.append(f"warm_start[{i}]: {value!r} is not a number; use a weight "
                                "inside the search range")
                ok = False
            elif not d.contains(value, central[0] if central else ""):
                bounds = (f"the search range {d.low:g}..{d.high:g}; move it inside or widen "
                          f"{'weights' if search.shorthand else 'search.space.' + d.path}"
                          ".low/high") if d.kind == "range" else "the searched values"
                problems.append(f"warm_start[{i}]: {value!r} lies outside {bounds}")
                ok = False
        if ok:
            out.append({p: float(v) if p == CENTRAL_WEIGHT else v for p, v in point.items()})
    return tuple(out), False


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


# --- train -------------------------------------------------------------------------------
def _absolute(path: str, base: Path) -> str:
    return os.path.realpath(base / Path(path).expanduser())  # a symlink loop stays a path


def _parse_train(raw: Any, space: Space, problems: list[str], where: Any) -> dict[str, Any]:
    """The template's own problems; every point is judged by the trainer in _check_points."""
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
                weighting.get("scheme", "siwlm")):
            problems.append("train.weighting: a weight search sweeps SIWLM's central weight; "
                            "use weighting: {scheme: siwlm, ...} or leave it out")
            train.pop("weighting")
        elif "central_weight" in weighting:
            problems.append("train.weighting.central_weight: set per trial by the sweep; "
                            "use `weights` (or search.space) instead")
            train["weighting"] = {k: v for k, v in weighting.items() if k != "central_weight"}
    # Ray runs trials in their own folders: pin relative paths now.
    return anchor_paths(train, lambda key: where(f"train.{key}"), _absolute)


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


def _task_names(raw_tasks: Any) -> tuple[str, ...]:
    """Task names in config order (load_config puts the central task first)."""
    from weightsearch.trainer.tasks import parse_tasks

    found: list[str] = []
    parsed = parse_tasks(raw_tasks, found) if raw_tasks is not None else ()
    return () if found else tuple(t.name for t in parsed)


def _parse_central(raw: Any, tasks: tuple[str, ...], problems: list[str]) -> tuple[str, ...]:
    if raw is None:
        return tasks
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        problems.append(f"central_tasks: expected a non-empty list of task names, got {raw!r}")
        return ()
    return tuple(task_names_in(raw, tasks, "central_tasks", "add it there or pick one of them",
                               problems))


def _parse_aux(raw: Any, tasks: tuple[str, ...], search: Search,
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
    if isinstance(weighting, Mapping) and has_central_weight(weighting.get("scheme", "siwlm")):
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


def _parse_objective(raw: Any, train: Mapping[str, Any], central: tuple[str, ...],
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


def _parse_seeds(raw: Any, problems: list[str]) -> tuple[int, ...]:
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


def _parse_resources(raw: Any, problems: list[str]) -> Resources:
    if raw is None:
        return Resources()
    values = check_section(raw, Resources, "resources", problems, "{cpu: 1, gpu: auto}",
                           noun="resource") or {}
    gpu = values.get("gpu", 0.0)
    if gpu != AUTO_GPU and gpu > 1 and gpu != int(gpu):
        problems.append(f"resources.gpu: {gpu!r}: above 1, ask for whole GPUs (or auto)")
    return Resources(**values)


# `auto` resolves where a trial runs (bf16 on GPUs and on CPUs with native bf16), which the
# driver cannot know: a fused study says fp32 itself, rather than finding its cells trained
# one after another on the workers.
FP32_NEEDED = ("fuse_cells: fused cells train in fp32 (bf16 autocast does not carry through the "
               "stacked models, and precision: auto picks bf16 on GPUs and on some CPUs); set "
               "train.precision: fp32 (TF32 matmuls on a GPU), or leave fuse_cells out")


def _precision(train: Mapping[str, Any]) -> Any:
    """The template's precision, its preset's where the preset sets it."""
    from weightsearch.trainer.config.presets import expand_preset

    return expand_preset(train, []).get("precision", "auto")  # a bad preset: reported elsewhere


def _parse_fuse_cells(raw: Any, scheduler: Scheduler, problems: list[str]) -> int:
    """`fuse_cells`: cells per trial, trained together (1 for false or absent)."""
    if raw is None or raw is False:
        return 1
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_FUSED:
        problems.append(f"fuse_cells: {raw!r}: give how many cells one trial trains together, "
                        f"a number from 1 to {MAX_FUSED} (e.g. 6 on one GPU), or false")
        return 1
    if raw > 1 and scheduler.name == "asha":
        problems.append("fuse_cells: ASHA stops whole trials, and a fused trial trains several "
                        "cells; use scheduler: fifo (successive halving fuses the cells of a "
                        "rung), or leave fuse_cells out")
    return raw


def _parse_scheduler(raw: Any, problems: list[str]) -> Scheduler:
    """`fifo`, `asha`, or `{name: asha, grace_period: 1, reduction_factor: 3}`."""
    if isinstance(raw, str):  # the short form: the scheduler's name alone
        name, problem = Choice(SCHEDULERS).check("scheduler", raw)
        problems.extend([problem] if problem else [])
        return Scheduler(name=name or "fifo")
    values = check_section(raw, Scheduler, "scheduler", problems,
                           "{name: asha, grace_period: 1}")
    return Scheduler(**(values or {}))
