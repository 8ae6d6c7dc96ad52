"""Search strategies: how a study chooses its units of work (see `base.Strategy`).

    search: {strategy: grid}                                  # every point, every seed
    search: {strategy: guided, n_trials: 8, sampler: tpe}     # tpe | gp | random | cmaes
    search: {strategy: halving, min_epochs: 1, reduction_factor: 2}  # + start: recommend
    search: {strategy: forward}                               # greedy task-group selection

Adding a strategy: one module with its settings dataclass and its `Strategy` subclass (whose
class attributes say what the study file and the launch need to know: `accepts_warm_start`,
`stops_early`, ...), and one `register_strategy` call (the built-in ones are below).
"""

from __future__ import annotations

from weightsearch.core.registry import Registry
from weightsearch.sweep.strategies._forward import ForwardStrategy, forward_next
from weightsearch.sweep.strategies._grid import GridStrategy
from weightsearch.sweep.strategies._guided import SAMPLERS, GuidedStrategy
from weightsearch.sweep.strategies._halving import (
    HalvingStrategy,
    keep_count,
    promote,
    rung_budgets,
    successive_halving,
)
from weightsearch.sweep.strategies.base import Record, Strategy, Unit

STRATEGIES: Registry = Registry("search strategy", Strategy)


def register_strategy(strategy: type[Strategy]) -> type[Strategy]:
    """Make `strategy` available as `search: {strategy: <its name>}` (usable as a decorator).
    A name already taken is refused: unregister the other one first."""
    return STRATEGIES.register(strategy)


def unregister_strategy(name: str) -> None:
    """Remove the strategy registered as `name` (for tests and plug-ins); absent: nothing."""
    STRATEGIES.unregister(name)


for _builtin in (GridStrategy, GuidedStrategy, HalvingStrategy, ForwardStrategy):
    register_strategy(_builtin)
del _builtin

__all__ = ["SAMPLERS", "STRATEGIES", "ForwardStrategy", "GridStrategy", "GuidedStrategy",
           "HalvingStrategy", "Record", "Strategy", "Unit", "forward_next", "keep_count",
           "promote", "register_strategy", "rung_budgets", "successive_halving",
           "unregister_strategy"]
