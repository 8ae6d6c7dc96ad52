"""Search strategies: how a study chooses its units of work (see `base.Strategy`).

    search: {strategy: grid}                                  # every point, every seed
    search: {strategy: guided, n_trials: 8, sampler: tpe}     # tpe | gp | random | cmaes
    search: {strategy: halving, min_epochs: 1, reduction_factor: 2}  # + start: recommend
    search: {strategy: forward}                               # greedy task-group selection

Adding a strategy: one module here with its settings dataclass and its `Strategy` subclass,
and one entry in STRATEGIES below.
"""

from __future__ import annotations

from sweep.strategies._forward import ForwardStrategy, forward_next
from sweep.strategies._grid import GridStrategy
from sweep.strategies._guided import SAMPLERS, GuidedStrategy
from sweep.strategies._halving import (
    HalvingStrategy,
    keep_count,
    promote,
    rung_budgets,
    successive_halving,
)
from sweep.strategies.base import Record, Strategy, Unit

STRATEGIES: dict[str, type[Strategy]] = {
    s.name: s for s in (GridStrategy, GuidedStrategy, HalvingStrategy, ForwardStrategy)
}

__all__ = ["SAMPLERS", "STRATEGIES", "ForwardStrategy", "GridStrategy", "GuidedStrategy",
           "HalvingStrategy", "Record", "Strategy", "Unit", "forward_next", "keep_count",
           "promote", "rung_budgets", "successive_halving"]
