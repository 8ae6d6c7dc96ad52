"""Task heads, one module per task type; `weightsearch.trainer.task_types` says which module serves
which type.

Every head class implements the protocol of `weightsearch.trainer.heads.base.Head`. The loop, the
data layer and the model look a head class up here by the task's type and never branch on the type.
A task type registered later (`weightsearch.trainer.task_types.register_task_type`) is served the
same way: its entry names the module whose `HEAD` is its head class.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from weightsearch.core.errors import ConfigError
from weightsearch.trainer.heads.base import Encoded, EvalSplit, Head
from weightsearch.trainer.heads.featurize import Features
from weightsearch.trainer.task_types import TASK_TYPES
from weightsearch.trainer.tasks import TaskSpec


def head_class(task_type: str) -> type[Head]:
    """The head class serving `task_type` (its module's `HEAD`)."""
    kind = TASK_TYPES.get(task_type)
    if kind is None:
        raise ConfigError([f"tasks: unknown task type {task_type!r}; choose one of "
                           f"{', '.join(TASK_TYPES)}"])
    return importlib.import_module(kind.head_module).HEAD


def build_head(spec: TaskSpec, hidden_size: int) -> Head:
    """The head for `spec`, on an encoder whose token states have `hidden_size` features."""
    return head_class(spec.type)(hidden_size, spec)


class _Heads(Mapping[str, type[Head]]):
    """Task type name -> head class, for every registered type (a live view)."""

    def __getitem__(self, name: str) -> type[Head]:
        if name not in TASK_TYPES:
            raise KeyError(name)
        return head_class(name)

    def __iter__(self) -> Iterator[str]:
        return iter(TASK_TYPES)

    def __len__(self) -> int:
        return len(TASK_TYPES)


HEADS: Mapping[str, type[Head]] = _Heads()
ClassificationHead = HEADS["classification"]
RegressionHead = HEADS["regression"]
RankingHead = HEADS["ranking"]

__all__ = ["HEADS", "ClassificationHead", "Encoded", "EvalSplit", "Features", "Head",
           "RankingHead", "RegressionHead", "build_head", "head_class"]
