"""A task's rows as the trainer trains on them, read without torch: its file's table, checked
by the task type's parser, and the subset a run keeps; and the training rows per task, which a
study's driver records and the recommender takes as the training-set size."""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weightsearch.trainer.config import RunConfig, load_config
from weightsearch.trainer.data.readers import Table, TaskRows, read_task_table, resolve_path
from weightsearch.trainer.task_types import task_type
from weightsearch.trainer.tasks import TaskSpec


@dataclass(frozen=True)
class Subset:
    """Which rows of a split to keep: all of them, the first n, or n (or a fraction) drawn at
    random with a seed of its own, so that every seed of a study trains on the same rows."""

    n: int | None = None
    fraction: float | None = None
    random: bool = False
    seed: int = 0
    nested: bool = False  # random rows as a prefix of one permutation (TaskRows.sample)

    def apply(self, rows: TaskRows) -> TaskRows:
        n = self.n
        if self.fraction is not None:
            n = max(1, math.ceil(self.fraction * len(rows)))
        if n is None:
            return rows
        if not self.random:
            return rows.head(n)
        return rows.sample(n, self.seed, nested=self.nested)

    def key(self) -> Any:
        if not self.random and self.fraction is None:
            return self.n  # the cache key of the first-n limit from before random subsets
        key = {"n": self.n, "fraction": self.fraction, "random": self.random, "seed": self.seed}
        return {**key, "nested": True} if self.nested else key


def parser(type_name: str) -> Callable[[TaskSpec, Table], Any]:
    """The function that checks a table of `type_name` into rows: the type's torch-free
    `parser` where it names one, else its head class's `parse`."""
    path = task_type(type_name).parser
    if path is None:
        from weightsearch.trainer.heads import head_class

        return head_class(type_name).parse
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def read_task_file(spec: TaskSpec, path: Path) -> Any:
    """Read one of the task's files and check it as its task type does (the type's parser
    checks the labels)."""
    return parser(spec.type)(spec, read_task_table(spec, path))


def train_subset(cfg: RunConfig, spec: TaskSpec) -> Subset:
    """The training rows of one task: its own cap, else the run's cap or fraction."""
    n, fraction = cfg.max_train_examples, cfg.train_fraction
    if spec.max_train_examples is not None:
        n, fraction = spec.max_train_examples, None
    return Subset(n=n, fraction=fraction, random=cfg.subsample != "head",
                  seed=cfg.subsample_seed, nested=cfg.subsample == "nested")


def task_sizes(config: RunConfig | str | os.PathLike | dict) -> dict[str, int]:
    """Training examples per task after subsampling (before any overlong drops, which need the
    tokenizer), without loading torch, a tokenizer or a model."""
    cfg = config if isinstance(config, RunConfig) else load_config(config)
    return {spec.name: len(train_subset(cfg, spec).apply(
                read_task_file(spec, resolve_path(cfg.data_dir, spec.train_file))))
            for spec in cfg.tasks}
