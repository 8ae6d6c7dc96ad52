"""The MT-DNN trainer with SIWLM loss weighting. Imports neither ray nor optuna.

Public API (loaded lazily so that `import trainer.cli` stays cheap):
`train`, `load_config`, `task_sizes`, `RunConfig`, `EpochReport`, `RunResult`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.config import RunConfig, load_config
    from trainer.pipeline import train
    from trainer.results import EpochReport, RunResult
    from trainer.task_rows import task_sizes

_EXPORTS = {
    "train": "trainer.pipeline",
    "task_sizes": "trainer.task_rows",
    "load_config": "trainer.config",
    "RunConfig": "trainer.config",
    "EpochReport": "trainer.results",
    "RunResult": "trainer.results",
}

__all__ = ["EpochReport", "RunConfig", "RunResult", "load_config", "task_sizes", "train"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
