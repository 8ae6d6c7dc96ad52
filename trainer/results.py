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
    stage: str = "multitask"  # or "finetuned": an epoch of one task's fine-tuning run


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
    stage: str = "multitask"
    # The fine-tuning stage: each fine-tuned task's own run (one task each), by task name.
    finetuned: dict[str, RunResult] = field(default_factory=dict)

    def stage_best(self, stage: str) -> Metrics:
        """Each task's best metrics in `stage` (finetuned: only the tasks fine-tuned)."""
        if stage == "finetuned":
            return {task: run.best[task] for task, run in self.finetuned.items()}
        return self.best

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        known = {"best", "best_epoch", "final", "history", "wall_time_s", "train_time_s",
                 "train_examples_per_s", "train_sizes", "truncated", "output_dir", "stage",
                 "finetuned"}
        return cls(
            **{k: data[k] for k in known - {"output_dir", "finetuned", "stage"}},
            output_dir=Path(data["output_dir"]),
            stage=data.get("stage", "multitask"),
            finetuned={t: cls.from_dict(r) for t, r in data.get("finetuned", {}).items()},
            extra={k: v for k, v in data.items() if k not in known},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
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
            "finetuned": {task: run.to_dict() for task, run in self.finetuned.items()},
        }
