"""Conformance suites for plug-ins: the contract every weighting scheme, batch sampler, search
strategy, head and task type must keep, ready to run in a plug-in's own tests.

Register the plug-in, then either subclass the suite (pytest collects a class named `Test...`
as it stands; each check is one test) or call its `check_*` function (every check, any test
runner; a broken contract raises `ConformanceError`, an AssertionError naming each check that
failed):

    from weightsearch.testing import SchemeConformance, check_sampler

    class TestMyScheme(SchemeConformance):
        scheme = "my-scheme"
        settings = {"factor": 2}

    def test_my_sampler():
        check_sampler("my-sampler", {"first": "qa"})

| suite | check | what it is given |
|---|---|---|
| `SchemeConformance` | `check_scheme` | `scheme`, `settings` (the `weighting:` mapping) |
| `SamplerConformance` | `check_sampler` | `sampler`, `settings` (the `sampling:` mapping) |
| `StrategyConformance` | `check_strategy` | `strategy`, `search` (the study's `search:`) |
| `HeadConformance` | `check_head` | `task` (with its `head:`), `data_dir` |
| `TaskTypeConformance` | `check_task_type` | `task` (of the type), `data_dir` |

The suites need neither pytest nor a model (heads see a stand-in encoder's token states); the
names load when first used, so importing this package costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from weightsearch.testing.heads import HeadConformance, check_head
    from weightsearch.testing.samplers import SamplerConformance, check_sampler
    from weightsearch.testing.schemes import SchemeConformance, check_scheme
    from weightsearch.testing.strategies import StrategyConformance, check_strategy
    from weightsearch.testing.suite import ConformanceError
    from weightsearch.testing.task_types import TaskTypeConformance, check_task_type

_EXPORTS = {
    "ConformanceError": "suite",
    "SchemeConformance": "schemes", "check_scheme": "schemes",
    "SamplerConformance": "samplers", "check_sampler": "samplers",
    "StrategyConformance": "strategies", "check_strategy": "strategies",
    "HeadConformance": "heads", "check_head": "heads",
    "TaskTypeConformance": "task_types", "check_task_type": "task_types",
}

__all__ = ["ConformanceError", "HeadConformance", "SamplerConformance", "SchemeConformance",
           "StrategyConformance", "TaskTypeConformance", "check_head", "check_sampler",
           "check_scheme", "check_strategy", "check_task_type"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"weightsearch.testing.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'weightsearch.testing' has no attribute {name!r}")
