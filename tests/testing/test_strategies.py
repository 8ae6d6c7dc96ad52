"""The search strategies' conformance suite (weightsearch.testing.strategies) on every built-in
strategy, each over a space that suits it, and on a broken strategy, which it rejects."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from tests.helpers import plugged_in
from weightsearch.sweep.space import CENTRAL_WEIGHT, GROUP
from weightsearch.sweep.strategies import (
    STRATEGIES,
    GridStrategy,
    Record,
    Unit,
    register_strategy,
    unregister_strategy,
)
from weightsearch.testing import ConformanceError, StrategyConformance, check_strategy

# One search per built-in strategy (the study's `search:` less `strategy`).
SEARCHES: dict[str, dict[str, Any]] = {
    "grid": {"space": {CENTRAL_WEIGHT: [1, 9], "lr": [1.0e-4, 2.0e-4]}},
    "guided": {"n_trials": 4, "sampler": "tpe",
               "space": {CENTRAL_WEIGHT: {"low": 1, "high": 15, "step": 2},
                         "lr": {"low": 1.0e-5, "high": 1.0e-3, "log": True}}},
    "halving": {"min_epochs": 1, "reduction_factor": 3,
                "space": {CENTRAL_WEIGHT: [1, 2, 4, 8, 15]}},
    "forward": {"space": {GROUP: {"subsets_of": ["mrpc", "stsb", "cola"]}}},
}


def test_every_registered_strategy_has_a_conformance_case() -> None:
    assert set(SEARCHES) == set(STRATEGIES)


@pytest.mark.parametrize("name", sorted(SEARCHES))
def test_every_built_in_strategy_keeps_the_contract(name: str) -> None:
    check_strategy(name, SEARCHES[name])


class TestGuidedRandomOverTwoSeeds(StrategyConformance):
    """The suite as a plug-in's tests subclass it: a random search of its own."""

    strategy = "guided"
    search: ClassVar[dict] = {"n_trials": 3, "sampler": "random",
                              "space": {CENTRAL_WEIGHT: [1, 3, 9, 15]}}
    seeds = (3, 4)


# --- a broken strategy: a grid that forgets what was trained --------------------------------
class ForgetfulGrid(GridStrategy):
    name = "forgetful"

    def units(self, records: Sequence[Record]) -> list[Unit]:
        return super().units([])


def test_the_suite_rejects_a_broken_strategy() -> None:
    with (plugged_in(register_strategy, unregister_strategy, ForgetfulGrid, "forgetful"),
          pytest.raises(ConformanceError) as info):
        check_strategy("forgetful", SEARCHES["grid"])
    lines = str(info.value).splitlines()
    assert lines[0] == "StrategyConformance: 3 of 7 checks failed"
    assert [line.split(":")[0] for line in lines[1:]] == [
        "test_a_study_runs_to_its_end", "test_failed_units_come_back_and_running_ones_stay_listed",
        "test_a_driver_that_starts_midway_finishes_the_study"]
    assert lines[1] == "test_a_study_runs_to_its_end: forgetful did not finish within 10 x " \
                       "max_units() units"
