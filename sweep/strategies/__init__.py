"""Search strategies: how a study chooses its units of work (see `base.Strategy`).

    search: {strategy: grid}                                  # every point, every seed
    search: {strategy: guided, n_trials: 8, sampler: tpe}     # tpe | gp | random | cmaes
    search: {strategy: halving, min_epochs: 1, reduction_factor: 2}  # + start: recommend
    search: {strategy: forward}                               # greedy task-group selection

Adding a strategy: one module with its settings (a `StrategySettings` dataclass whose settings
are fields `x: T = setting(default, Rule, doc=...)`) and its `Strategy` subclass (whose class
attributes say what the study file and the launch need to know: `accepts_warm_start`,
`stops_early`, ...), and one `register_strategy` call (the built-in ones are below).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
from weightsearch.sweep.strategies.base import (
    Record,
    Strategy,
    StrategyContext,
    StrategySettings,
    Unit,
)

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
           "HalvingStrategy", "Record", "Strategy", "StrategyContext", "StrategySettings", "Unit",
           "forward_next", "keep_count", "parse_settings", "promote", "register_strategy",
           "rung_budgets", "successive_halving", "unregister_strategy"]


def parse_settings(name: str, raw: Mapping[str, Any], context: StrategyContext,
                   problems: list[str]) -> Any:
    """The settings of the strategy registered as `name`, from its mapping (whose keys were
    checked before). A settings class without the `StrategySettings` base (written for 0.1) is
    called as 0.1 called it: `from_mapping(raw, space, problems, where)`."""
    settings_type = STRATEGIES[name].settings_type
    if isinstance(settings_type, type) and issubclass(settings_type, StrategySettings):
        return settings_type.from_mapping(raw, context, problems)
    return settings_type.from_mapping(raw, context.space, problems, context.where)
