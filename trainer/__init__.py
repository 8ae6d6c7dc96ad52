"""The MT-DNN trainer with SIWLM loss weighting. Imports neither ray nor optuna.

Public API (loaded lazily so that `import weightsearch.trainer.cli` stays cheap):
`train`, `train_fused`, `load_config`, `task_sizes`, `RunConfig`, `EpochReport`, `RunResult`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from weightsearch.trainer.config import RunConfig, load_config
    from weightsearch.trainer.pipeline import train, train_fused
    from weightsearch.trainer.results import EpochReport, RunResult
    from weightsearch.trainer.task_rows import task_sizes

_EXPORTS = {
    "train": "weightsearch.trainer.pipeline",
    "train_fused": "weightsearch.trainer.pipeline",
    "task_sizes": "weightsearch.trainer.task_rows",
    "load_config": "weightsearch.trainer.config",
    "RunConfig": "weightsearch.trainer.config",
    "EpochReport": "weightsearch.trainer.results",
    "RunResult": "weightsearch.trainer.results",
}

__all__ = ["EpochReport", "RunConfig", "RunResult", "load_config", "task_sizes", "train",
           "train_fused"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'weightsearch.trainer' has no attribute {name!r}")
