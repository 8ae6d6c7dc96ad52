"""What a study's driver holds while a round runs: each central task's plan (its Optuna study,
its strategy and the queue of units this driver may claim) and each cell a Tune trial trains,
from its start until its end is recorded (`sweep/searcher.py`)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import optuna

from weightsearch.sweep import lookup, study_db
from weightsearch.sweep.space import Point
from weightsearch.sweep.strategies import Record, Strategy, Unit


@dataclass
class CentralPlan:
    """One central task (one Optuna study) and what this driver knows of its units."""

    central: str
    study: optuna.Study
    strategy: Strategy
    primary_metric: str  # the metric the trial value is (the objective's)
    stage: str = "multitask"  # the stage the trial value scores: multitask | finetuned
    queue: deque[Unit] = field(default_factory=deque)
    tried: set[str] = field(default_factory=set)  # units handed out or deferred this round
    deferred: set[str] = field(default_factory=set)  # held by another driver's live claim
    dirty: bool = True  # something finished since the last read: re-read before giving up
    refreshed: float = 0.0
    # The queued units by what they may be fused with (`unit_handout`), built with the queue.
    groups: dict[tuple, list[Unit]] = field(default_factory=dict)
    cannot_fuse: bool = False  # its cells' configs cannot be fused: stop trying
    # `fuse_cells: auto`: the cells per fused trial decided for each memory key (`fuse_auto`)
    fuse_sizes: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.study.study_name

    def records(self) -> list[Record]:
        return study_db.records(self.study, self.strategy.space, self.central)

    def unit_records(self, unit: Unit) -> list[Record]:
        """What the study holds of a unit that carries its point (its trials and its cell's):
        read by index, so a claim costs the same in a small study and a large one."""
        cell = self.strategy.space.cell_key(unit.point, unit.seed) if unit.point else None
        return lookup.unit_records(self.study, self.strategy.space, unit.key, cell)


# A unit this driver claimed, ready to start: (unit, its point, its claim keys, its records).
Picked = tuple[Unit, Point, list[str], list[Record]]


@dataclass
class LiveCell:
    """One cell a Tune trial trains, from its start until its end is recorded."""

    plan: CentralPlan
    unit: Unit
    trial: optuna.Trial
    point: Point
    seed: int
    claims: list[str]  # claim keys held for this trial (the unit, a guided search's cell)
    started: float
    history: dict[int, dict[str, Any]] = field(default_factory=dict)  # epoch -> metrics
    values: dict[int, float] = field(default_factory=dict)  # epoch -> objective
    summary: dict[str, Any] | None = None
    stint_end: bool = False
    lost: bool = False
    slot: int = 0  # its place in a fused unit (0 alone)
    fused: bool = False  # handed out in a fused unit
    alone_after_all: bool = False  # ... whose trial could not fuse it
    shown_as: str = ""  # its id in the progress display (the Tune trial's, or one per member)
