"""The batch samplers' conformance suite (weightsearch.testing.samplers) on every built-in
sampler, with the settings that change what it promises, and on a broken sampler, which it
rejects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.helpers import plugged_in
from weightsearch.testing import ConformanceError, SamplerConformance, check_sampler
from weightsearch.trainer.sampling import (
    SAMPLERS,
    Batches,
    Plan,
    Sampler,
    SamplerSettings,
    register_sampler,
    unregister_sampler,
)

# Settings every built-in sampler is held to its contract with (its defaults, and the settings
# that change what it promises); tasks qa, mc, cls.
SAMPLINGS: dict[str, list[dict[str, Any]]] = {
    "shuffle": [{}],
    "weighted": [{"weights": {"qa": 0.6}},
                 {"weights": {"qa": 0.7, "mc": 0.3, "cls": 0}},
                 {"weights": {"qa": 0.8}, "epoch_ends_with": "qa"},
                 {"weights": {"qa": 0.5, "mc": 0}, "others": 0.5, "epoch_ends_with": "cls"}],
    "proportional": [{}],
    "sqrt": [{}],
    "temperature": [{"T": 2}, {"T": 1}, {"T": 5, "cap": 3}, {"T": 0.5, "cap": 1}],
    "unimax": [{"max_epochs": 1}, {"max_epochs": 2.5}, {"max_epochs": 100}],
}


def test_every_registered_sampler_has_a_conformance_case() -> None:
    assert set(SAMPLINGS) == set(SAMPLERS)


@pytest.mark.parametrize(("name", "settings"), [(name, settings)
                                                for name, cases in SAMPLINGS.items()
                                                for settings in cases])
def test_every_built_in_sampler_keeps_the_contract(name: str, settings: dict) -> None:
    check_sampler(name, settings)


class TestShuffleOverOtherTasks(SamplerConformance):
    """The suite as a plug-in's tests subclass it, on tasks of their own."""

    sampler = "shuffle"
    tasks = ("a", "b")
    sizes = ({"a": 2, "b": 9},)


# --- a broken sampler: a task's first batch once more at the end of every epoch ------------
@dataclass(frozen=True)
class EncoreSettings(SamplerSettings):
    scheme: str = field(default="encore", init=False)


class EncoreSampler(Sampler):
    name = "encore"
    settings_type = EncoreSettings

    def order(self, batches: Batches, seed: int, epoch: int, keep_order: bool = False) -> Plan:
        plan = [(task, b) for task, task_batches in batches.items() for b in task_batches]
        return plan + plan[:1]


def test_the_suite_rejects_a_broken_sampler() -> None:
    with (plugged_in(register_sampler, unregister_sampler, EncoreSampler, "encore"),
          pytest.raises(ConformanceError) as info):
        check_sampler("encore")
    assert str(info.value).splitlines() == [
        "SamplerConformance: 2 of 4 checks failed",
        "test_plans_keep_the_contract: a batch of qa was used twice",
        "test_keep_order_uses_each_tasks_batches_in_the_given_order: a batch of qa was used "
        "twice"]
