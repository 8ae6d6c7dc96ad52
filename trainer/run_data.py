"""The data a run config names: each task's rows, read, subsampled and tokenized."""

from __future__ import annotations

from typing import Any

from weightsearch.trainer.config import RunConfig
from weightsearch.trainer.task_data import TaskData, load_task_data
from weightsearch.trainer.task_rows import train_subset


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
