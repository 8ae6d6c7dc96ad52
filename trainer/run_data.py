"""The data a run config names: each task's rows, read, subsampled and tokenized."""

from __future__ import annotations

import os
from typing import Any

from trainer.config import RunConfig, load_config
from trainer.data import Subset, TaskData, load_task_data, read_task_file
from trainer.readers import resolve_path
from trainer.tasks import TaskSpec


def train_subset(cfg: RunConfig, spec: TaskSpec) -> Subset:
    """The training rows of one task: its own cap, else the run's cap or fraction."""
    n, fraction = cfg.max_train_examples, cfg.train_fraction
    if spec.max_train_examples is not None:
        n, fraction = spec.max_train_examples, None
    return Subset(n=n, fraction=fraction, random=cfg.subsample != "head",
                  seed=cfg.subsample_seed, nested=cfg.subsample == "nested")


def load_data(cfg: RunConfig, tokenizer: Any) -> dict[str, TaskData]:
    return {
        t.name: load_task_data(
            t,
            cfg.data_dir,
            tokenizer,
            cfg.max_seq_len,
            cfg.cache_dir,
            cfg.max_train_examples,
            t.max_eval_examples or cfg.max_eval_examples,
            cfg.overlong_policy,
            cfg.eval_max_seq_len,
            train_subset(cfg, t),
        )
        for t in cfg.tasks
    }


def task_sizes(config: RunConfig | str | os.PathLike | dict) -> dict[str, int]:
    """Training examples per task after subsampling (before any overlong drops), without
    loading a tokenizer or model."""
    cfg = config if isinstance(config, RunConfig) else load_config(config)
    return {spec.name: len(train_subset(cfg, spec).apply(
                read_task_file(spec, resolve_path(cfg.data_dir, spec.train_file))))
            for spec in cfg.tasks}
