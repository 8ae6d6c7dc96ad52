"""The study file's declaration: its keys and the rule of each plain one (`StudyFile`), the
values a parsed file holds (`Search`, `Resources`, `Scheduler`, `Objective`) and the
`StudySpec` they make. Parsing and the checks across keys: `sweep/study_checks.py`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from weightsearch.core.errors import ConfigError
from weightsearch.core.fields import (
    MAX_SEED,
    Choice,
    Flag,
    Number,
    Text,
    is_number,
    json_schema,
    setting,
)
from weightsearch.studies.schema import (
    STAGES,
    STUDY_NAME_FIX,
    STUDY_NAME_PATTERN,
)
from weightsearch.sweep.space import (
    CENTRAL_WEIGHT,
    Point,
    Space,
    drop_other_tasks,
)
from weightsearch.sweep.strategies import (
    STRATEGIES,
    Strategy,
)
from weightsearch.sweep.weight_action import LOSS, SAMPLING, WEIGHT_ACTS_ON, as_sampling_rate
from weightsearch.trainer.fusable import SAME_TREATMENT

MAX_FUSED = 64  # cells one trial may train together (`fuse_cells`)
AUTO_FUSE = "auto"  # fuse_cells: as many as the trial's GPU memory holds, measured (`fuse_auto`)
MAX_CELLS = 50_000  # per study: every cell is a trial the drivers and readers go through
TRIAL_CHECKPOINTS = "none"  # a trial's checkpoint policy unless train.checkpoints says otherwise

# The study file's format. A study's stored spec and digest are in the format of the release
# that launched it; a spec of an older format is compared by content (`same_study`), so a
# change of canonical form needs a new version, never a branch that keeps an old digest.
# 1: up to 0.1.0, which left out a default `objective` and halving's default `start`.
# 2: up to 0.2.x, before `aux_tasks`.
# 3: before the trainer dropped over-long training examples by default (`overlong: drop`).
# 4: before a config without `lr` trained the default encoder at its own 2e-4 (MT-DNN's 5e-5
#    for every encoder before).
# 5: before the default encoder named by its folder (the path a launch records for it) trained
#    at the default encoder's lr too (MT-DNN's 5e-5 before, as for any other folder).
# 6: before `preset: siwlm-paper` set `idle_params: step`.
# 7: before a search whose every weight is one treatment was refused unless `allow_inert: true`
#    (it trained with a note before).
SPEC_VERSION = 8

SCHEDULERS = ("fifo", "asha")
DEFAULT_WORKDIR = "./weightsearch_runs"


@dataclass(frozen=True)
class Search:
    """What a study varies (`space`) and how it chooses points (`strategy` + its settings)."""

    strategy: str
    settings: Any
    space: Space
    shorthand: bool = False  # written as `weights:`; the canonical form keeps that spelling

    def build(self, central: str, seeds: Sequence[int], epochs: int,
              first: Sequence[Point] = ()) -> Strategy:
        return STRATEGIES[self.strategy](self.settings, self.space, central, seeds, epochs,
                                         first)

    def to_plain(self) -> dict[str, Any]:
        return {"strategy": self.strategy, **self.settings.to_plain(),
                "space": self.space.to_plain()}

    def weights_plain(self) -> Any:
        """The `weights:` spelling of a central-weight-only grid or guided search."""
        return STRATEGIES[self.strategy].weights_plain(self.settings, self.space.dims[0])


AUTO_GPU = "auto"  # resources.gpu: each trial's share from the GPU memory trials measured
_GPUS = Number(integer=False, low=0)


@dataclass(frozen=True)
class GpuRule:
    """`resources.gpu`: `auto`, or a number of GPUs (0: CPUs only)."""

    number: Number = _GPUS

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if isinstance(value, str) and value.strip().lower() == AUTO_GPU:
            return AUTO_GPU, None
        if not is_number(value):
            return None, (f"{key}: {value!r} is not a number of GPUs; write auto (each trial's "
                          "share of a GPU sized by the memory the study's trials measured), a "
                          "number (0.5: two trials share a GPU; 2: two whole GPUs per trial) "
                          "or 0 (CPUs only)")
        return self.number.check(key, value)

    def schema(self) -> dict[str, Any]:
        return {"anyOf": [self.number.schema(), {"type": "string", "enum": [AUTO_GPU]}]}

    def describe(self) -> str:
        return f"{AUTO_GPU}, or a {self.number.describe()}"


@dataclass(frozen=True)
class Resources:
    cpu: float = setting(1.0, Number(integer=False, low=0, low_open=True),
                         doc="CPUs per trial; with gpu: auto they also cap the trials that "
                             "share a GPU")
    gpu: float | str = setting(0.0, GpuRule(),
                               doc="GPUs per trial: auto (a share sized by the GPU memory the "
                                   "study's trials measured), fractions share a GPU, above 1 "
                                   "whole GPUs, 0 CPUs only")

    @property
    def auto_gpu(self) -> bool:
        return self.gpu == AUTO_GPU


@dataclass(frozen=True)
class Scheduler:
    name: str = setting("fifo", Choice(SCHEDULERS))
    # ASHA: every trial trains `grace_period` epochs before it can be stopped; at each rung
    # the best 1/reduction_factor continue.
    grace_period: int = setting(1, Number(integer=True, low=1))
    reduction_factor: float = setting(3.0, Number(integer=False, low=1, low_open=True))


@dataclass(frozen=True)
class Objective:
    """What a trial's value is: the central task's `metric` ("primary": its primary metric)
    at its best epoch of the multi-task stage, or of its fine-tuning run."""

    stage: str = setting("multitask", Choice(STAGES),
                         doc="multitask, or finetuned (needs train.finetune)")
    metric: str = setting("primary", Text("a metric name or primary"),
                          doc="a metric of the central task, or primary")


@dataclass(frozen=True)
class StudyFile:
    """The keys of a study file. The plain ones carry their rules; the structured ones are
    read by the parsers below. Also the JSON Schema of the service's POST /studies body."""

    version: int = setting(SPEC_VERSION, Number(integer=True, low=1, high=SPEC_VERSION),
                           doc="the file's format; leave it out for the current one")
    study: str = setting("", Text(
        "a study name", pattern=STUDY_NAME_PATTERN, fix=STUDY_NAME_FIX, noun="name",
        strip=False),
        doc="the study's name; each central task's study is <study>/<central task>")
    storage: str | None = setting(None, doc="SQLAlchemy URL of the study database")
    train: Any = setting(None, doc="the run config every trial starts from")
    central_tasks: Any = setting(None, doc="the tasks whose weight is searched (default all)")
    aux_tasks: Any = setting(None, doc="the tasks trained beside each central task (default: "
                             "every other task of train.tasks)")
    search: Any = setting(None, doc="{strategy, space, ...}: what is searched and how")
    weights: Any = setting(None, doc="short form of a search of the central weight alone")
    seeds: Any = setting(None, doc="the seeds every point is trained with")
    resources: Any = setting(None, doc="{cpu, gpu} per trial")
    max_concurrent: int | None = setting(None, Number(integer=True, low=1, optional=True),
                                         doc="trials at once (default: as resources allow)")
    scheduler: Any = setting(None, doc="fifo, asha or {name, grace_period, reduction_factor}")
    max_failures: int = setting(1, Number(integer=True, low=0),
                                doc="retries of a failed trial")
    fuse_cells: Any = setting(
        None, doc="cells one trial trains together as one stacked model: cells of the same "
                  "central task, seed and stint that differ only in the loss weighting; a "
                  "number from 1 to 64, auto (as many as the trial's GPU memory holds, "
                  "measured on its card; 1 on CPUs), or false (one cell per trial, the "
                  "default)")
    reuse_workers: bool = setting(True, Flag(),
                                  doc="a Ray worker trains one trial after another (imports "
                                      "once); false: a fresh process per trial")
    allow_inert: bool = setting(
        False, Flag(),
        doc="true: train a search whose every central weight is one treatment (a task without "
            "auxiliaries; global clipping that clips every update at every weight, found by a "
            "probe before the first cell or by the first finished cell) with a note; false "
            "(the default): refuse it, exit 2, nothing written")
    same_treatment: str = setting(
        "once", Choice(SAME_TREATMENT),
        doc="fused cells that would train the same updates (global clipping above the "
            "weight's live range, found in their first epoch): once (the default) trains one "
            "of them for all, each cell still reporting its own run; all: train every cell")
    weight_acts_on: str = setting(
        LOSS, Choice(WEIGHT_ACTS_ON),
        doc="what the searched central weight sets: loss (SIWLM's loss weight, the paper's) or "
            "sampling (the central task's sampling rate, each auxiliary at 1; a clip does not "
            "cut it)")
    workdir: str = setting(DEFAULT_WORKDIR, Text("a folder path"),
                           doc="where trials write their run folders")
    warm_start: Any = setting(None, doc="points to try first, or recommend")
    objective: Any = setting(None, doc="{stage, metric}: what a trial's value is")


KEYS = tuple(f.name for f in dataclasses.fields(StudyFile))


def study_file_schema() -> dict[str, Any]:
    """The JSON Schema of a study file, from the declarations of its keys and of the run
    config its `train` holds (structured settings: their JSON type)."""
    from weightsearch.trainer.config import RunConfig
    from weightsearch.trainer.task_parsing import tasks_schema

    train = json_schema(RunConfig, keys=[*(f.name for f in dataclasses.fields(RunConfig)),
                                         "preset"],
                        parts={"tasks": tasks_schema(), "preset": {"type": "string"}})
    whole = {"type": "integer", "minimum": 0, "maximum": MAX_SEED}
    return json_schema(StudyFile, required=["study"], parts={
        "train": train,
        "central_tasks": {"anyOf": [{"type": "string"},
                                    {"type": "array", "items": {"type": "string"}}]},
        "aux_tasks": {"anyOf": [{"type": "null"},
                                {"type": "array", "items": {"type": "string"}}]},
        "search": {"type": "object"},
        "weights": {"anyOf": [{"type": "array", "items": {"type": "number"}},
                              {"type": "object"}]},
        "seeds": {"anyOf": [whole, {"type": "array", "items": whole, "minItems": 1}]},
        "resources": json_schema(Resources),
        "scheduler": {"anyOf": [{"type": "string", "enum": list(SCHEDULERS)},
                                json_schema(Scheduler)]},
        "storage": {"type": "string"},
        "warm_start": {"anyOf": [{"type": "string", "enum": ["recommend"]},
                                 {"type": "array"}]},
        "objective": json_schema(Objective),
        "fuse_cells": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_FUSED},
                                 {"type": "string", "enum": [AUTO_FUSE]},
                                 {"type": "boolean", "enum": [False]}, {"type": "null"}]},
    })


@dataclass(frozen=True)
class StudySpec:
    study: str
    storage: str
    train: Mapping[str, Any]  # the run-config template, paths made absolute, validated
    tasks: tuple[str, ...]  # every task of train.tasks, config order
    central_tasks: tuple[str, ...]
    search: Search
    seeds: tuple[int, ...]
    resources: Resources
    max_concurrent: int | None
    scheduler: Scheduler
    max_failures: int
    workdir: str  # absolute
    epochs: int = 5  # train.epochs as the trainer reads it
    warm_start: tuple[Point, ...] = ()
    # Start each central task's search at the recommender's weight for its size.
    warm_recommend: bool = False
    objective: Objective = Objective()
    aux_tasks: tuple[str, ...] | None = None  # None: every task but the central one
    reuse_workers: bool = True  # Ray workers train trial after trial (results are the same)
    # cells per trial, trained as one stacked model (results are the same), or AUTO_FUSE
    fuse_cells: int | str = 1
    allow_inert: bool = False  # true: train a grid whose every weight is one treatment
    same_treatment: str = "once"  # all: fused cells of one treatment are each trained
    weight_acts_on: str = LOSS  # sampling: the weight is the central task's sampling rate
    _strategies: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def space(self) -> Space:
        return self.search.space

    @property
    def fuse_auto(self) -> bool:
        return self.fuse_cells == AUTO_FUSE

    @property
    def fuse_cap(self) -> int:
        """The most cells one trial may train: `fuse_cells`, or MAX_FUSED for `auto` (the
        driver sizes each unit, `sweep/fuse_auto.py`)."""
        return MAX_FUSED if isinstance(self.fuse_cells, str) else self.fuse_cells

    def to_dict(self) -> dict[str, Any]:
        """The study file in canonical form (format `SPEC_VERSION`); stored with the study so
        `resume` needs nothing else. `storage` is left out: the database that holds the study
        is given on the command line. A search of the central weight alone is spelt `weights:`,
        the short form a study file may use for it.
        """
        out: dict[str, Any] = {
            "version": SPEC_VERSION,
            "study": self.study,
            "train": json.loads(json.dumps(self.train)),
            # a grouping study has none (its one study is named GROUPS_STUDY)
            "central_tasks": None if self.space.groups else list(self.central_tasks),
            "aux_tasks": None if self.aux_tasks is None else list(self.aux_tasks),
        }
        if self.search.shorthand:
            out["weights"] = self.search.weights_plain()
        else:
            out["search"] = self.search.to_plain()
        out.update({
            "seeds": list(self.seeds),
            "resources": {"cpu": self.resources.cpu, "gpu": self.resources.gpu},
            "max_concurrent": self.max_concurrent,
            "scheduler": {"name": self.scheduler.name,
                          "grace_period": self.scheduler.grace_period,
                          "reduction_factor": self.scheduler.reduction_factor},
            "max_failures": self.max_failures,
            "workdir": self.workdir,
            "warm_start": "recommend" if self.warm_recommend else self._warm_plain(),
            "objective": {"stage": self.objective.stage, "metric": self.objective.metric},
        })
        if not self.reuse_workers:  # written only when off: stored studies keep their digest
            out["reuse_workers"] = False
        if self.fuse_auto or self.fuse_cap > 1:  # likewise; how cells train, not what they learn
            out["fuse_cells"] = self.fuse_cells
        if self.allow_inert:  # likewise: whether to go on, not what a cell learns
            out["allow_inert"] = True
        if self.same_treatment != "once":  # likewise: how often a treatment trains
            out["same_treatment"] = self.same_treatment
        if self.weight_acts_on != LOSS:  # what a cell learns: written where it is not the default
            out["weight_acts_on"] = self.weight_acts_on
        return out

    def _warm_plain(self) -> list[Any]:
        if self.search.shorthand:
            return [p[CENTRAL_WEIGHT] for p in self.warm_start]
        return [{k: list(v) if isinstance(v, tuple) else v for k, v in p.items()}
                for p in self.warm_start]

    def digest(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    # --- cells ------------------------------------------------------------------------------
    def aux_of(self, central: str) -> list[str]:
        """The tasks a central task's cells train beside it, in config order."""
        chosen = self.tasks if self.aux_tasks is None else self.aux_tasks
        return [t for t in self.tasks if t in chosen and t != central]

    def strategy(self, central: str, first: Sequence[Point] = ()) -> Strategy:
        return self.search.build(central, self.seeds, self.epochs, first)

    def cell_mapping(self, central: str, point: Mapping[str, Any], seed: int,
                     output_dir: str) -> dict[str, Any]:
        """The run-config mapping of one cell: the template with the point's paths set."""
        raw = self.space.apply(self.train, point, central, self.tasks)
        if self.aux_tasks is not None:
            drop_other_tasks(raw, {central, *self.aux_tasks}, self.tasks)
        if self.weight_acts_on == SAMPLING:
            raw = as_sampling_rate(raw, central)
        raw["central_task"] = self.space.run_central(point, central)
        raw["seed"] = int(seed)
        raw["output_dir"] = output_dir
        # A cell's score lands in the study; its model is kept only when the study asks.
        raw.setdefault("checkpoints", TRIAL_CHECKPOINTS)
        tracking = raw.get("tracking")
        if isinstance(tracking, dict) and tracking.get("mlflow"):  # trials nest under the study
            raw["tracking"] = {"mlflow_parent": self.study, **tracking}
        return raw

    def for_cell(self, central: str, point: Mapping[str, Any], seed: int,
                 output_dir: str) -> Any:
        """The validated trainer RunConfig of one cell, built once (by the driver)."""
        from weightsearch.trainer.config import load_config

        try:
            return load_config(self.cell_mapping(central, point, seed, output_dir))
        except ConfigError as exc:
            label = self.space.label(point)
            raise ConfigError([f"train.{p} (search point {label})" for p in exc.problems]
                              ) from None

    def trial_dir(self, central: str, point: Mapping[str, Any], seed: int) -> str:
        return os.path.join(self.workdir, self.study, central, self.space.folder(point, seed))
