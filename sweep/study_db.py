"""The study database side of a sweep: describe each central task, find or create its Optuna
study (refusing one launched with another configuration), and read its trials back as the
`Record`s a strategy decides from. Through Optuna's public API only, never its tables."""

from __future__ import annotations

import datetime as dt
import math
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from weightsearch.core.errors import ConfigError, StorageError
from weightsearch.recommender.regime import encoder_size
from weightsearch.studies import schema as S
from weightsearch.studies.urls import shown_url
from weightsearch.sweep.extension import extension_problem
from weightsearch.sweep.space import CENTRAL_WEIGHT, Space
from weightsearch.sweep.spec import SPEC_VERSION, StudySpec, as_launched, load_study_spec
from weightsearch.sweep.strategies import Record
from weightsearch.trainer.tasks import dataset_name


@dataclass
class Central:
    """Everything the driver knows about one central task before touching the database."""

    name: str
    cfg: Any  # the trainer RunConfig of the task's first point (sizes, metric, encoder)
    sizes: dict[str, int]
    attrs: dict[str, Any]  # the study's attributes (written by `schema.set_study_attr`)


def describe(spec: StudySpec, central: str) -> Central:
    """The central task's run config and sizes (reads the train files: DataError surfaces here)."""
    from weightsearch import trainer

    if spec.space.groups is not None:
        return _describe_groups(spec)
    cfg = spec.for_cell(central, _widest(spec, central), spec.seeds[0], spec.workdir)
    sizes = trainer.task_sizes(cfg)
    aux = spec.aux_of(central)
    task = cfg.task(central)
    metric = spec.objective.metric
    metric = task.primary_metric if metric == "primary" else metric
    if metric not in task.metrics:
        raise ConfigError([f"objective.metric: {central} has no metric {metric!r}; use primary "
                           f"or one of {', '.join(task.metrics)}"])
    attrs = {
        S.A_STUDY: spec.study,
        S.A_CENTRAL: central,
        S.A_TASK_TYPE: task.type,
        S.A_TRAIN_SIZE: sizes[central],
        S.A_DATASET: dataset_name(task),
        S.A_AUX_TASKS: aux,
        S.A_AUX_SIZES: {t: sizes[t] for t in aux if t in sizes},
        S.A_PRIMARY: metric,
        S.A_STAGE: spec.objective.stage,
        S.A_ENCODER: cfg.encoder,
        S.A_VARIANT: getattr(cfg.weighting, "variant", None),
        S.A_ENCODER_SIZE: encoder_size(cfg.encoder),  # the recommender's regime
        S.A_DIGEST: spec.digest(),
        S.A_SPEC: spec.to_dict(),
        S.A_SOURCE: S.SOURCE_SWEEP,
    }
    if not spec.space.central_weight_only:
        attrs[S.A_SPACE] = list(spec.space.paths)
        attrs[S.A_STRATEGY] = spec.search.strategy
    attrs.update(_grid_cells(spec, central))
    return Central(central, cfg, sizes, attrs)


def _grid_cells(spec: StudySpec, central: str) -> dict[str, int]:
    """{A_GRID_CELLS: points x seeds} for a grid, whose cells are known before any trial (so
    that an interrupted study's unstarted cells are counted); {} for adaptive searches."""
    if spec.search.strategy != "grid":
        return {}
    points = spec.space.size(central)
    return {S.A_GRID_CELLS: int(points) * len(spec.seeds)} if math.isfinite(points) else {}


def _describe_groups(spec: StudySpec) -> Central:
    """A budgeted grouping study (no central task): every task's primary metric and size, from
    the run that trains every task together (the widest group, trained or not)."""
    from weightsearch import trainer

    groups = spec.space.groups
    assert groups is not None  # the caller checked
    point = {groups.path: groups.candidates}
    cfg = spec.for_cell(S.GROUPS_STUDY, point, spec.seeds[0], spec.workdir)
    sizes = trainer.task_sizes(cfg)
    attrs = {
        S.A_STUDY: spec.study,
        S.A_CENTRAL: S.GROUPS_STUDY,
        S.A_GROUP_TASKS: list(groups.candidates),
        S.A_GROUP_METRICS: {t: cfg.task(t).primary_metric for t in groups.candidates},
        S.A_GROUP_SIZES: {t: sizes[t] for t in groups.candidates if t in sizes},
        S.A_PRIMARY: S.GROUP_MEAN,
        S.A_STAGE: "multitask",
        S.A_ENCODER: cfg.encoder,
        S.A_ENCODER_SIZE: encoder_size(cfg.encoder),
        S.A_DIGEST: spec.digest(),
        S.A_SPEC: spec.to_dict(),
        S.A_SOURCE: S.SOURCE_SWEEP,
        S.A_SPACE: list(spec.space.paths),
        S.A_STRATEGY: spec.search.strategy,
    }
    if groups.max_size is not None:
        attrs[S.A_GROUP_MAX_SIZE] = groups.max_size
    attrs.update(_grid_cells(spec, S.GROUPS_STUDY))
    return Central(S.GROUPS_STUDY, cfg, sizes, attrs)


def _widest(spec: StudySpec, central: str) -> dict[str, Any]:
    """A point whose run trains every task (the largest group), to size every task once."""
    point = {d.path: d.first(central) for d in spec.space.dims}
    group = spec.space.group
    if group is not None:
        point[group.path] = group.group_candidates(central)
    return point


def stored_spec(study_name: str, storage: Any, url: str) -> dict[str, Any]:
    import optuna

    names = [n for n in optuna.get_all_study_names(storage)
             if S.split_study_name(n)[0] == study_name]
    if not names:
        raise StorageError(
            f"no study named {study_name!r} in {shown_url(url)}; `weightsearch inspect "
            f"--storage {shown_url(url)}` "
            "lists the studies"
        )
    for name in sorted(names):
        attrs = S.study_attrs(optuna.load_study(study_name=name, storage=storage))
        if isinstance(attrs.get(S.A_SPEC), dict):
            return as_launched(attrs[S.A_SPEC])
    raise StorageError(
        f"study {study_name!r} in {shown_url(url)} holds no study file (it was imported, not "
        f"launched), "
        "so there is nothing to resume; launch a study file instead"
    )


def existing_studies(spec: StudySpec, storage: Any, url: str,
                     centrals: list[Central]) -> dict[str, Any]:
    """The studies that already exist; one launched with another configuration is an error."""
    import optuna

    names = set(optuna.get_all_study_names(storage))
    found, problems = {}, []
    for c in centrals:
        name = S.study_name(spec.study, c.name)
        if name not in names:
            continue
        study = optuna.load_study(study_name=name, storage=storage)
        problem = _mismatch(spec, study, url)
        if problem:
            problems.append(problem)
        else:
            found[c.name] = study
    # A study is one configuration, whichever central tasks a launch names: the studies of the
    # other central tasks under this name must have been launched with this file too (or one
    # it only grows).
    ours = {S.study_name(spec.study, c.name) for c in centrals}
    for name in sorted(names - ours):
        if S.split_study_name(name)[0] == spec.study:
            problem = _mismatch(spec, optuna.load_study(study_name=name, storage=storage), url)
            if problem:
                problems.append(problem)
    if problems:
        raise ConfigError(problems)
    return found


def _mismatch(spec: StudySpec, study: Any, url: str) -> str | None:
    """Why `study` is not this spec's study (None when it is)."""
    name = study.study_name
    attrs = _settled_attrs(study)
    if attrs is None:
        return (f"study {name!r} in {shown_url(url)} holds no weightsearch settings: another "
                f"launch is "
                "still creating it (run the command again in a moment to join it), or another "
                "tool made it (choose another study name)")
    if attrs.get(S.A_SOURCE) != S.SOURCE_SWEEP:
        return (f"study {name!r} in {shown_url(url)} was imported, not launched; choose "
                "another study name")
    old, new = _stored_and_new(spec, attrs)
    old, new = _what_it_learns(old), _what_it_learns(new)
    if old == new:
        return None
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    why = _why_not_extended(old, spec, attrs.get(S.A_CENTRAL) or S.split_study_name(name)[1])
    if why is None:
        return None
    return (f"study {name!r} in {shown_url(url)} was launched with a different configuration "
            f"(changed: {', '.join(changed) or 'unknown'}) that does not extend it: {why}; "
            f"choose another study name, or `weightsearch resume {spec.study} --storage "
            f"{shown_url(url)}` to continue it as it was")


# Study-file keys that decide how cells train, not what they learn: any launch or driver of a
# study may set them its own way.
HOW_KEYS = ("fuse_cells", "allow_inert", "same_treatment")


def _what_it_learns(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k not in HOW_KEYS}


def _stored_and_new(spec: StudySpec, attrs: dict[str, Any]) -> tuple[dict, dict]:
    """The stored spec in today's format, and `spec`'s (the same object when digests agree)."""
    stored = attrs.get(S.A_SPEC)
    old: dict[str, Any] = stored if isinstance(stored, dict) else {}
    if old.get("version") != SPEC_VERSION:  # an older release's format: compare by content
        old = _in_current_format(as_launched(old), spec.storage)
    elif attrs.get(S.A_DIGEST) == spec.digest():
        return old, old
    return old, spec.to_dict()


def _why_not_extended(old: dict[str, Any], spec: StudySpec, central: str) -> str | None:
    try:
        stored = load_study_spec({**old, "storage": spec.storage})
    except ConfigError as exc:
        return f"its stored configuration no longer loads ({exc.problems[0]})"
    return extension_problem(stored, spec, central)


def _record_extension(spec: StudySpec, study: Any) -> None:
    """An existing study this launch extends stores the grown configuration, so that resume
    and inspect see every cell."""
    old, new = _stored_and_new(spec, S.study_attrs(study))
    if _what_it_learns(old) == _what_it_learns(new):
        return
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    S.set_study_attr(study, S.A_SPEC, new)  # a study launched before: now read from here
    study.set_user_attr(S.A_DIGEST, spec.digest())
    central = study.user_attrs.get(S.A_CENTRAL)
    for key, value in _grid_cells(spec, central).items():  # the grown grid's cells
        study.set_user_attr(key, value)
    print(f"note: study {study.study_name} extended (changed: {', '.join(changed)}); the "
          "cells it holds are kept", file=sys.stderr)


def _in_current_format(stored: dict[str, Any], storage: str) -> dict[str, Any]:
    """A spec stored by an older release, in today's canonical form (as stored when it no
    longer reads: every key then differs from the spec it is compared with)."""
    try:
        return load_study_spec({**stored, "storage": storage}).to_dict()
    except ConfigError:
        return stored


def _settled_attrs(study: Any, wait_s: float = 15.0) -> dict[str, Any] | None:
    """The study's attributes once its creator has written them; a launch that created the
    study a moment ago writes them one by one (the creation time last)."""
    deadline = time.monotonic() + wait_s
    while True:
        attrs = S.study_attrs(study)
        if S.A_CREATED in attrs or attrs.get(S.A_SOURCE) not in (None, S.SOURCE_SWEEP):
            return attrs
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


def create_studies(spec: StudySpec, storage: Any, url: str, centrals: list[Central],
                   existing: dict[str, Any]) -> dict[str, Any]:
    """Every central task's study: the existing ones, the others created now. A study that
    another driver created meanwhile is checked like an existing one (same configuration)."""
    import optuna

    out, problems, created = dict(existing), [], []
    for c in centrals:
        if c.name in out:
            continue
        name = S.study_name(spec.study, c.name)
        try:
            study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
        except optuna.exceptions.DuplicatedStudyError:
            study = optuna.load_study(study_name=name, storage=storage)
            problem = _mismatch(spec, study, url)
            if problem:
                problems.append(problem)
                break
            out[c.name] = study
            continue
        created.append(name)
        for key, value in c.attrs.items():
            S.set_study_attr(study, key, value)
        with warnings.catch_warnings():  # "experimental" in Optuna
            warnings.simplefilter("ignore")
            study.set_metric_names([c.attrs[S.A_PRIMARY]])  # the dashboard's objective label
        # Last: its presence tells a concurrent launch that the study's settings are complete.
        study.set_user_attr(S.A_CREATED, dt.datetime.now(dt.timezone.utc).isoformat())
        out[c.name] = study
    # Grown studies store the grown file only now that every study is accepted, each checked
    # once more against what is stored at this moment (another driver may have grown it since).
    grown = [s for s in out.values() if s.study_name not in created]
    problems += [p for p in (_mismatch(spec, s, url) for s in grown) if p]
    if problems:
        for name in created:  # empty studies of this refused launch: leave nothing behind
            optuna.delete_study(study_name=name, storage=storage)
        raise ConfigError(problems)
    for study in grown:
        _record_extension(spec, study)
    return out


def has_finished_cell(study: Any) -> bool:
    """Whether `study` (None: not created yet) holds a finished cell, whose clipping record
    judges its grid (`LiveRangeJudge.judge_stored`)."""
    if study is None:
        return False
    from optuna.trial import TrialState

    return bool(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def records(study: Any, space: Space, central: str) -> list[Record]:
    """The study's trials as a strategy sees them."""
    return [to_record(t, space) for t in study.get_trials(deepcopy=False)]


def to_record(trial: Any, space: Space) -> Record:
    ua = trial.user_attrs
    point = ua.get(S.T_POINT)
    if isinstance(point, dict):
        point = space.normalise(point)
    elif space.central_weight_only and S.PARAM in trial.params:
        point = {CENTRAL_WEIGHT: float(trial.params[S.PARAM])}  # trials from before `point`
    else:
        point = None
    state = trial.state.name.lower()
    values: Sequence[float] = trial.values if trial.values is not None else ()
    value = values[0] if len(values) == 1 and state in ("complete", "pruned") else None
    seed = ua.get(S.T_SEED)
    return Record(
        number=trial.number, unit=ua.get(S.T_UNIT) or ua.get(S.T_SLOT) or ua.get(S.T_CELL),
        cell=ua.get(S.T_CELL), seed=seed if isinstance(seed, int) else None, point=point,
        state=state, value=value, values=dict(trial.intermediate_values),
    )
