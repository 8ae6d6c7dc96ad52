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

STRATEGIES: dict[str, type[Strategy]] = {}


def register_strategy(strategy: type[Strategy]) -> type[Strategy]:
    """Make `strategy` available as `search: {strategy: <its name>}` (usable as a decorator).
    A name already taken is refused: unregister the other one first."""
    if not (isinstance(strategy, type) and issubclass(strategy, Strategy)):
        raise TypeError(f"{strategy!r} is not a Strategy subclass")
    name = getattr(strategy, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{strategy.__name__} needs a class attribute `name`")
    if name in STRATEGIES and STRATEGIES[name] is not strategy:
        raise ValueError(f"a search strategy named {name!r} is already registered "
                         f"({STRATEGIES[name].__name__})")
    STRATEGIES[name] = strategy
    return strategy


def unregister_strategy(name: str) -> None:
    """Remove the strategy registered as `name` (for tests and plug-ins); absent: nothing."""
    STRATEGIES.pop(name, None)


for _builtin in (GridStrategy, GuidedStrategy, HalvingStrategy, ForwardStrategy):
    register_strategy(_builtin)
del _builtin

__all__ = ["SAMPLERS", "STRATEGIES", "ForwardStrategy", "GridStrategy", "GuidedStrategy",
           "HalvingStrategy", "Record", "Strategy", "Unit", "forward_next", "keep_count",
           "promote", "register_strategy", "rung_budgets", "successive_halving",
           "unregister_strategy"]
