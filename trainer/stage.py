"""What one stage of a run carries while it trains: `StageRun`, its checked inputs, loaded data
and model, and `Progress`, how far it has got.

`weightsearch.trainer.loop.set_up` builds a `StageRun`; the training step
(`weightsearch.trainer.step`), the stage's output (`weightsearch.trainer.stage_output`) and the
fused runs (`weightsearch.trainer.fused`) work on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from weightsearch.trainer.checkpoint import Checkpoint
from weightsearch.trainer.config import RunConfig
from weightsearch.trainer.device import Runtime
from weightsearch.trainer.graphs import GraphedSteps, GraphPlan
from weightsearch.trainer.model import MTDNN
from weightsearch.trainer.results import EpochReport
from weightsearch.trainer.task_data import TaskData
from weightsearch.trainer.weighting import Scheme

Report = Callable[[EpochReport], None]


@dataclass
class Progress:
    """What a stage has done so far; a checkpoint restores it."""

    history: list[dict[str, Any]] = field(default_factory=list)
    global_step: int = 0
    examples_seen: int = 0
    elapsed_before: float = 0.0  # wall time of earlier attempts of this run
    train_time: float = 0.0


@dataclass
class StageRun:
    """A stage whose inputs are checked and whose data and model are loaded; nothing written."""

    cfg: RunConfig
    stage: str
    out: Path
    started: float  # wall time covers loading data and model too
    runtime: Runtime
    ckpt: Checkpoint | None
    held: bool  # `out` held a run before this one started
    pad_id: int
    data: dict[str, TaskData]
    soft: dict[str, torch.Tensor]
    sources: dict[str, str]
    scheme: Scheme
    model: MTDNN
    optimizer: torch.optim.Optimizer
    scheduler: Any
    plans: dict[int, list[tuple[str, np.ndarray]]]
    graph_plan: GraphPlan = field(default_factory=lambda: GraphPlan(False))
    graphs: GraphedSteps | None = None  # the CUDA graphs of the steps, when they are on

    @property
    def total_steps(self) -> int:
        return sum(len(p) for p in self.plans.values())


__all__ = ["Progress", "Report", "StageRun"]
