"""What a run hands back: per-epoch reports (to a callback) and the final result."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Metrics = dict[str, dict[str, float]]  # task -> metric -> value


@dataclass(frozen=True)
class EpochReport:
    epoch: int
    metrics: Metrics
    primary: dict[str, float]  # each task's primary metric
    checkpoint: Path
    train_loss: float  # mean unweighted batch loss over the epoch
    examples_seen: int  # training examples so far, all epochs
    elapsed_s: float  # wall time so far, resumed segments included


@dataclass(frozen=True)
class RunResult:
    best: Metrics  # per task: its metrics at the epoch where its primary metric peaked
    best_epoch: dict[str, int]
    final: Metrics
    history: list[dict[str, Any]]
    wall_time_s: float
    train_time_s: float
    train_examples_per_s: float
    train_sizes: dict[str, int]
    truncated: dict[str, dict[str, int]]
    output_dir: Path
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "best": self.best,
            "best_epoch": self.best_epoch,
            "final": self.final,
            "history": self.history,
            "wall_time_s": self.wall_time_s,
            "train_time_s": self.train_time_s,
            "train_examples_per_s": self.train_examples_per_s,
            "train_sizes": self.train_sizes,
            "truncated": self.truncated,
            "output_dir": str(self.output_dir),
            **self.extra,
        }
