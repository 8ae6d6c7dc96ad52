"""Study files: YAML -> one frozen `StudySpec`, every problem reported at once.

    study: glue-small                 # letters, digits, - _ . ; studies are named <study>/<central>
    storage: sqlite:///weightsearch.db  # default: $WEIGHTSEARCH_STORAGE or ./weightsearch.db
    train: {...}                      # the trainer's run config, shared by every trial
    central_tasks: [rte, mrpc]        # default: every task of train.tasks
    weights: [1, 3, 6, 9, 12, 15]     # a grid, or {low, high, n_trials, sampler: tpe, step}
    seeds: [1]                        # replicates of every weight
    resources: {cpu: 1, gpu: 0}       # per trial; fractional GPUs share one device
    max_concurrent: null              # default: what the cluster's CPUs/GPUs allow
    scheduler: fifo                   # or asha, or {name: asha, grace_period: 1,
                                      #                reduction_factor: 3}
    max_failures: 1                   # Ray retries per trial; a retry resumes its checkpoint
    workdir: ./weightsearch_runs      # trial outputs and checkpoints; every node must reach it
    warm_start: [9]                   # guided search only: weights tried first, or `recommend`
    objective: {stage: multitask, metric: primary}  # the score a trial is: which stage, which
                                      # metric of the central task (finetuned needs train.finetune)

Relative paths (workdir, train.data_dir, train.cache_dir, a local train.encoder) are resolved
against the working directory once, here, because Ray runs trials in other directories.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from studies.schema import DEFAULT_GRID, STAGES, WEIGHT_HIGH, WEIGHT_LOW
from studies.storage import default_storage_url
from weightsearch.errors import ConfigError
from weightsearch.yamlio import load_yaml

KEYS = (
    "study", "storage", "train", "central_tasks", "weights", "seeds", "resources",
    "max_concurrent", "scheduler", "max_failures", "workdir", "warm_start", "objective",
)
# Keys of `train` that the sweep sets per trial; a value in the study file would be ignored.
SWEEP_OWNED = {
    "central_task": "central_tasks",
    "seed": "seeds",
    "output_dir": "workdir",
}
SAMPLERS = ("tpe", "random")
SCHEDULERS = ("fifo", "asha")
DEFAULT_WORKDIR = "./weightsearch_runs"
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
_NAME_MAX = 100  # the name is a folder name (and part of every trial folder's path)


@dataclass(frozen=True)
class GridSearch:
    """Every weight of the grid, for every seed: the paper's protocol."""

    weights: tuple[float, ...]

    def to_plain(self) -> list[float]:
        return list(self.weights)


@dataclass(frozen=True)
class GuidedSearch:
    """`n_trials` weights per (central task, seed), each proposed by an Optuna sampler."""

    low: float
    high: float
    n_trials: int
    sampler: str = "tpe"
    step: float | None = None

    def to_plain(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "n_trials": self.n_trials,
                "sampler": self.sampler, "step": self.step}


@dataclass(frozen=True)
class Resources:
    cpu: float = 1.0
    gpu: float = 0.0


@dataclass(frozen=True)
class Scheduler:
    name: str = "fifo"
    # ASHA: every trial trains `grace_period` epochs before it can be stopped; at each rung
    # the best 1/reduction_factor continue.
    grace_period: int = 1
    reduction_factor: float = 3.0


@dataclass(frozen=True)
class Objective:
    """What a trial's value is: the central task's `metric` ("primary": its primary metric)
    at its best epoch of the multi-task stage, or of its fine-tuning run."""

    stage: str = "multitask"
    metric: str = "primary"


@dataclass(frozen=True)
class StudySpec:
    study: str
    storage: str
    train: Mapping[str, Any]  # the run config mapping, paths made absolute
    tasks: tuple[str, ...]  # every task of train.tasks, config order
    central_tasks: tuple[str, ...]
    search: GridSearch | GuidedSearch
    seeds: tuple[int, ...]
    resources: Resources
    max_concurrent: int | None
    scheduler: Scheduler
    max_failures: int
    workdir: str  # absolute
    warm_start: tuple[float, ...] = ()
    # Start each central task's guided search at the recommender's weight for its size.
    warm_recommend: bool = False
    objective: Objective = Objective()

    @property
    def is_grid(self) -> bool:
        return isinstance(self.search, GridSearch)

    def to_dict(self) -> dict[str, Any]:
        """The study file in canonical form; stored with the study so `resume` needs nothing else.

        `storage` is left out: the database that holds the study is given on the command line.
        """
        out = {
            "study": self.study,
            "train": json.loads(json.dumps(self.train)),
            "central_tasks": list(self.central_tasks),
            "weights": self.search.to_plain(),
            "seeds": list(self.seeds),
            "resources": {"cpu": self.resources.cpu, "gpu": self.resources.gpu},
            "max_concurrent": self.max_concurrent,
            "scheduler": {"name": self.scheduler.name,
                          "grace_period": self.scheduler.grace_period,
                          "reduction_factor": self.scheduler.reduction_factor},
            "max_failures": self.max_failures,
            "workdir": self.workdir,
            "warm_start": "recommend" if self.warm_recommend else list(self.warm_start),
        }
        if self.objective != Objective():  # studies from before `objective` keep their digest
            out["objective"] = {"stage": self.objective.stage, "metric": self.objective.metric}
        return out

    def digest(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def run_mapping(self, central: str, weight: float, seed: int, output_dir: str) -> dict:
        """The run config of one trial, for `trainer.load_config`."""
        raw = json.loads(json.dumps(self.train))
        raw["central_task"] = central
        raw["seed"] = int(seed)
        raw["output_dir"] = output_dir
        raw["weighting"] = {**(raw.get("weighting") or {"scheme": "siwlm"}),
                            "central_weight": float(weight)}
        return raw

    def trial_dir(self, central: str, weight: float, seed: int) -> str:
        return os.path.join(self.workdir, self.study, central, f"w{float(weight):g}_s{int(seed)}")


def load_study_spec(
    source: str | os.PathLike | Mapping[str, Any], overrides: Iterable[str] = ()
) -> StudySpec:
    """Read a study from a YAML path, YAML text or a mapping; apply `key=value` overrides.

    Raises ConfigError listing every problem at once (the run config's problems prefixed
    with `train.`).
    """
    from trainer.config import apply_overrides

    label, raw = _read(source)
    if not isinstance(raw, Mapping):
        raise ConfigError(["the study file must hold a mapping of settings (key: value)"], label)
    raw = apply_overrides(raw, list(overrides), label)
    return _parse(raw, label)


def _read(source: str | os.PathLike | Mapping[str, Any]) -> tuple[str | None, Any]:
    if isinstance(source, Mapping):
        return None, dict(source)
    text_given = isinstance(source, str) and (
        "\n" in source or (":" in source and not Path(source).is_file())
    )
    if text_given:
        label, text = None, str(source)
    else:
        path = Path(source)
        label = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError([f"study file {path} does not exist"], label) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError([f"cannot read study file {path}: {exc}"], label) from None
    try:
        return label, load_yaml(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError([f"not valid YAML{at}: {reason}"], label) from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _weight_problem(where: str, value: Any) -> str | None:
    fix = f"use a weight from {WEIGHT_LOW:g} to {WEIGHT_HIGH:g}"
    if not _is_real(value):
        return f"{where}: {value!r} is not a number; {fix}"
    if not WEIGHT_LOW <= value <= WEIGHT_HIGH:
        return f"{where}: {value!r} is out of range; {fix}"
    return None


def _parse(raw: Mapping[str, Any], label: str | None) -> StudySpec:
    problems: list[str] = []
    for key in sorted(set(raw) - set(KEYS)):
        problems.append(f"{key}: unknown setting; known settings: {', '.join(KEYS)}")

    study = raw.get("study")
    if study is None:
        problems.append("study: required; name the study, e.g. study: glue-small")
    elif (not isinstance(study, str) or not _NAME.match(study) or study.startswith(".")
          or len(study) > _NAME_MAX):
        problems.append(
            f"study: {str(study)[:40]!r} is not a valid name; use up to {_NAME_MAX} letters, "
            "digits, '-', '_' and '.', not starting with '.'"
        )

    storage = raw.get("storage") or default_storage_url()
    if not isinstance(storage, str):
        problems.append(f"storage: expected a SQLAlchemy URL, got {storage!r}")

    train, tasks = _parse_train(raw.get("train"), problems)
    central = _parse_central(raw.get("central_tasks"), tasks, problems)
    search = _parse_weights(raw.get("weights", list(DEFAULT_GRID)), problems)
    seeds = _parse_seeds(raw.get("seeds", [1]), problems)
    resources = _parse_resources(raw.get("resources"), problems)
    scheduler = _parse_scheduler(raw.get("scheduler", "fifo"), problems)

    max_concurrent = raw.get("max_concurrent")
    if max_concurrent is not None and (not _is_int(max_concurrent) or max_concurrent < 1):
        problems.append(
            f"max_concurrent: expected a whole number >= 1 or null, got {max_concurrent!r}"
        )
    max_failures = raw.get("max_failures", 1)
    if not _is_int(max_failures) or max_failures < 0:
        problems.append(f"max_failures: expected a whole number >= 0, got {max_failures!r}")

    workdir = raw.get("workdir", DEFAULT_WORKDIR)
    if not isinstance(workdir, str) or not workdir.strip():
        problems.append(f"workdir: expected a folder path, got {workdir!r}")
    else:
        workdir = str(Path(workdir).expanduser().resolve())

    warm = raw.get("warm_start") or []
    warm_recommend = warm == "recommend"
    if warm_recommend:
        warm = []
    elif not isinstance(warm, list):
        problems.append(f"warm_start: expected a list of weights or `recommend`, got {warm!r}")
        warm = []
    for i, value in enumerate(warm):
        problem = _weight_problem(f"warm_start[{i}]", value)
        if problem:
            problems.append(problem)
    if isinstance(search, GuidedSearch):
        for i, value in enumerate(warm):
            if _is_real(value) and not search.low <= value <= search.high:
                problems.append(f"warm_start[{i}]: {value:g} lies outside the search range "
                                f"{search.low:g}..{search.high:g}; move it inside or widen "
                                "weights.low/high")
    if (warm or warm_recommend) and isinstance(search, GridSearch):
        problems.append("warm_start: applies to a guided search (weights: {n_trials: ...}) only; "
                        "a grid tries every weight anyway")

    objective = _parse_objective(raw.get("objective"), train, central, problems)

    if problems:
        raise ConfigError(problems, label)
    return StudySpec(
        study=study, storage=storage, train=train, tasks=tasks, central_tasks=central,
        search=search, seeds=seeds, resources=resources, max_concurrent=max_concurrent,
        scheduler=scheduler, max_failures=max_failures, workdir=workdir,
        warm_start=tuple(float(w) for w in warm), warm_recommend=warm_recommend,
        objective=objective,
    )


def _parse_objective(raw: Any, train: Mapping[str, Any], central: tuple[str, ...],
                     problems: list[str]) -> Objective:
    if raw is None:
        return Objective()
    if not isinstance(raw, Mapping):
        problems.append(f"objective: expected {{stage: multitask | finetuned, metric: primary}}, "
                        f"got {raw!r}")
        return Objective()
    for key in sorted(set(raw) - {"stage", "metric"}):
        problems.append(f"objective.{key}: unknown setting; use stage and metric")
    stage, metric = raw.get("stage", "multitask"), raw.get("metric", "primary")
    if stage not in STAGES:
        problems.append(f"objective.stage: {stage!r} is not one of {', '.join(STAGES)}")
        stage = "multitask"
    if not isinstance(metric, str) or not metric:
        problems.append(f"objective.metric: expected a metric name or primary, got {metric!r}")
        metric = "primary"
    if stage == "finetuned":
        finetune = train.get("finetune")
        tasks = finetune.get("tasks", "central") if isinstance(finetune, Mapping) else None
        if not finetune or (isinstance(finetune, Mapping) and finetune.get("enabled") is False):
            problems.append("objective.stage: finetuned scores the fine-tuning stage; turn it on "
                            "with train.finetune: {tasks: central, epochs: ...}")
        elif isinstance(tasks, list) and not set(central) <= set(tasks):
            missing = ", ".join(sorted(set(central) - set(tasks)))
            problems.append(f"objective.stage: finetuned needs every central task fine-tuned; "
                            f"train.finetune.tasks leaves out {missing} (use tasks: central)")
    return Objective(stage=stage, metric=metric)


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve())


def _parse_train(raw: Any, problems: list[str]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Validate `train` through the trainer itself, with a placeholder central task and weight."""
    from trainer.config import load_config

    if raw is None:
        problems.append("train: required; give the run config every trial shares "
                        "(encoder, data_dir, tasks, epochs, ...)")
        return {}, ()
    if not isinstance(raw, Mapping):
        problems.append(f"train: expected a mapping of run settings, got {type(raw).__name__}")
        return {}, ()
    train = json.loads(json.dumps(dict(raw), default=str))
    for key, owner in SWEEP_OWNED.items():
        if key in train:
            problems.append(f"train.{key}: set per trial by the sweep; use `{owner}` instead")
            train.pop(key)
    weighting = train.get("weighting")
    if weighting is not None:
        if not isinstance(weighting, Mapping) or weighting.get("scheme", "siwlm") != "siwlm":
            problems.append("train.weighting: a weight search sweeps SIWLM's central weight; "
                            "use weighting: {scheme: siwlm, ...} or leave it out")
            train.pop("weighting")
        elif "central_weight" in weighting:
            problems.append("train.weighting.central_weight: set per trial by the sweep; "
                            "use `weights` instead")
            train["weighting"] = {k: v for k, v in weighting.items() if k != "central_weight"}
    # Ray runs trials in their own folders: pin relative paths to this working directory.
    for key in ("data_dir", "cache_dir"):
        if isinstance(train.get(key), str) and train[key].strip():
            train[key] = _absolute(train[key])
    encoder = train.get("encoder")
    # A hub id looks like "org/name"; a local folder is made absolute.
    if isinstance(encoder, str) and (
        encoder.startswith((".", "~")) or Path(encoder).expanduser().is_dir()
    ):
        train["encoder"] = _absolute(encoder)

    probe = {**train, "weighting": {**(train.get("weighting") or {}),
                                    "scheme": "siwlm", "central_weight": WEIGHT_LOW}}
    try:
        load_config(probe)
    except ConfigError as exc:
        problems.extend(f"train.{p}" for p in exc.problems)
    return train, _task_names(train.get("tasks"))


def _task_names(raw_tasks: Any) -> tuple[str, ...]:
    """Task names in config order (load_config puts the central task first)."""
    from trainer.tasks import parse_tasks

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
    out: list[str] = []
    for i, name in enumerate(raw):
        if not isinstance(name, str):
            problems.append(f"central_tasks[{i}]: expected a task name, got {name!r}")
            continue
        key = name.strip().lower()
        if tasks and key not in tasks:
            problems.append(f"central_tasks[{i}]: {name!r} is not among train.tasks "
                            f"({', '.join(tasks)}); add it there or pick one of them")
        elif key in out:
            problems.append(f"central_tasks[{i}]: {name!r} is listed twice")
        else:
            out.append(key)
    return tuple(out)


def _parse_weights(raw: Any, problems: list[str]) -> GridSearch | GuidedSearch:
    if isinstance(raw, Mapping):
        return _parse_guided(raw, problems)
    if not isinstance(raw, list):
        problems.append(f"weights: expected a list of weights or a mapping "
                        f"{{low, high, n_trials}}, got {raw!r}")
        return GridSearch(())
    if not raw:
        problems.append("weights: the grid is empty; list at least one weight, "
                        "e.g. weights: [1, 3, 6, 9, 12, 15]")
    seen: set[float] = set()
    out: list[float] = []
    for i, value in enumerate(raw):
        problem = _weight_problem(f"weights[{i}]", value)
        if problem:
            problems.append(problem)
        elif float(value) in seen:
            problems.append(f"weights[{i}]: {value!r} is listed twice")
        else:
            seen.add(float(value))
            out.append(float(value))
    return GridSearch(tuple(out))


def _parse_guided(raw: Mapping[str, Any], problems: list[str]) -> GuidedSearch:
    known = ("low", "high", "n_trials", "sampler", "step")
    for key in sorted(set(raw) - set(known)):
        problems.append(f"weights.{key}: unknown setting; known: {', '.join(known)}")
    low, high = raw.get("low", WEIGHT_LOW), raw.get("high", WEIGHT_HIGH)
    ok = True
    for key, value in (("low", low), ("high", high)):
        problem = _weight_problem(f"weights.{key}", value)
        if problem:
            problems.append(problem)
            ok = False
    if ok and low >= high:
        problems.append(f"weights: low ({low!r}) must be below high ({high!r})")
    n_trials = raw.get("n_trials")
    if not _is_int(n_trials) or n_trials < 1:
        problems.append(f"weights.n_trials: expected a whole number >= 1 (trials per central "
                        f"task and seed), got {n_trials!r}")
    sampler = raw.get("sampler", "tpe")
    if sampler not in SAMPLERS:
        problems.append(f"weights.sampler: {sampler!r} is not one of {', '.join(SAMPLERS)}")
    step = raw.get("step")
    if step is not None and (not _is_real(step) or step <= 0):
        problems.append(f"weights.step: expected a number > 0 or null, got {step!r}")
        step = None
    if ok and step is not None and low < high and _is_int(n_trials):
        # Each seed tries each weight once: more trials than grid points cannot be filled.
        points = math.floor((high - low) / step + 1e-9) + 1
        if n_trials > points:
            problems.append(
                f"weights.n_trials: {n_trials} trials per seed, but low {low:g} to high "
                f"{high:g} in steps of {step:g} holds only {points} distinct weights; lower "
                f"n_trials to at most {points}, or use a finer step"
            )
    return GuidedSearch(
        low=float(low) if _is_real(low) else WEIGHT_LOW,
        high=float(high) if _is_real(high) else WEIGHT_HIGH,
        n_trials=n_trials if _is_int(n_trials) else 1,
        sampler=sampler if isinstance(sampler, str) else "tpe",
        step=float(step) if step is not None else None,
    )


def _parse_seeds(raw: Any, problems: list[str]) -> tuple[int, ...]:
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        problems.append(f"seeds: expected a non-empty list of whole numbers, got {raw!r}")
        return ()
    out: list[int] = []
    for i, seed in enumerate(raw):
        if not _is_int(seed) or seed < 0:
            problems.append(f"seeds[{i}]: expected a whole number >= 0, got {seed!r}")
        elif seed in out:
            problems.append(f"seeds[{i}]: {seed!r} is listed twice")
        else:
            out.append(seed)
    return tuple(out)


def _parse_resources(raw: Any, problems: list[str]) -> Resources:
    if raw is None:
        return Resources()
    if not isinstance(raw, Mapping):
        problems.append(f"resources: expected a mapping such as {{cpu: 1, gpu: 0}}, got {raw!r}")
        return Resources()
    for key in sorted(set(raw) - {"cpu", "gpu"}):
        problems.append(f"resources.{key}: unknown resource; use cpu and gpu")
    cpu, gpu = raw.get("cpu", 1), raw.get("gpu", 0)
    if not _is_real(cpu) or cpu <= 0:
        problems.append(f"resources.cpu: expected a number > 0, got {cpu!r}")
        cpu = 1
    if not _is_real(gpu) or gpu < 0:
        problems.append(
            f"resources.gpu: expected a number >= 0 (fractions share a GPU), got {gpu!r}"
        )
        gpu = 0
    elif gpu > 1 and gpu != int(gpu):
        problems.append(f"resources.gpu: {gpu!r}: above 1, ask for whole GPUs")
    return Resources(cpu=float(cpu), gpu=float(gpu))


def _parse_scheduler(raw: Any, problems: list[str]) -> Scheduler:
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, Mapping):
        problems.append(
            f"scheduler: expected fifo, asha or a mapping {{name: asha, ...}}, got {raw!r}"
        )
        return Scheduler()
    for key in sorted(set(raw) - {"name", "grace_period", "reduction_factor"}):
        problems.append(f"scheduler.{key}: unknown setting; known: name, grace_period, "
                        "reduction_factor")
    name = raw.get("name", "fifo")
    if name not in SCHEDULERS:
        problems.append(f"scheduler: {name!r} is not one of {', '.join(SCHEDULERS)}")
        name = "fifo"
    grace = raw.get("grace_period", 1)
    if not _is_int(grace) or grace < 1:
        problems.append(f"scheduler.grace_period: expected a whole number of epochs >= 1, "
                        f"got {grace!r}")
        grace = 1
    factor = raw.get("reduction_factor", 3)
    if not _is_real(factor) or factor <= 1:
        problems.append(f"scheduler.reduction_factor: expected a number > 1, got {factor!r}")
        factor = 3
    return Scheduler(name=name, grace_period=grace, reduction_factor=float(factor))
