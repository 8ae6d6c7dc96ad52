"""The conformance suite of batch samplers: what every sampler registered with
`register_sampler` must keep, as the training loop builds each epoch's plan from it up front
and a resumed run rebuilds the plans (the `Sampler` docstring).

    from weightsearch.testing import SamplerConformance, check_sampler

    class TestMySampler(SamplerConformance):    # pytest collects it as it stands
        sampler = "my-sampler"
        settings = {"first": "qa"}              # the YAML `sampling` mapping, less `scheme`

    check_sampler("my-sampler", {"first": "qa"})  # the same checks, without pytest

Batches are made up for the check: each holds one row number that says its task and index,
so the suite can tell which batch each update used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from weightsearch.testing.suite import Conformance, expect, registered, run_suite
from weightsearch.trainer.sampling import (
    SAMPLERS,
    Plan,
    Sampler,
    SamplerSettings,
    build_sampler,
    parse_sampling,
)

TASKS = ("qa", "mc", "cls")
# Batches per task, each epoch: uneven, one task with a single batch, one with none.
SIZES = ({"qa": 7, "mc": 3, "cls": 1}, {"qa": 1, "mc": 20, "cls": 5}, {"qa": 4, "mc": 0, "cls": 4})
SEEDS_AND_EPOCHS = ((1, 1), (1, 2), (7, 1))
ROWS_PER_TASK = 100_000  # a batch's row number: task index * ROWS_PER_TASK + batch index


def made_up_batches(sizes: Mapping[str, int]) -> dict[str, list[np.ndarray]]:
    """Batches whose row numbers say their task and index (both rows of a batch alike)."""
    return {task: [np.array([t * ROWS_PER_TASK + i] * 2) for i in range(n)]
            for t, (task, n) in enumerate(sizes.items())}


def plan_keys(plan: Plan) -> list[tuple[str, int]]:
    return [(task, int(batch[0])) for task, batch in plan]


def check_plan(sampler: Sampler, sizes: Mapping[str, int], seed: int, epoch: int,
               keep_order: bool = False) -> Plan:
    """One epoch's plan against what every sampler promises (`Sampler.order`): each update a
    batch of its own task, no batch twice (one that `repeats_batches`: in whole passes, none
    used again before all of its task's were), each task's batches used as `batches_used`
    says, and a rebuilt sampler (a resumed run) giving the same plan."""
    batches = made_up_batches(sizes)
    plan = sampler.order(batches, seed, epoch, keep_order)
    owner = {int(b[0]): task for task, bs in batches.items() for b in bs}
    uses = dict.fromkeys(owner, 0)
    for task, batch in plan:
        row = int(batch[0])
        expect(owner.get(row) == task and len(set(batch.tolist())) == 1,
               f"an update of {task} holds a batch of {owner.get(row)}")
        expect(sampler.repeats_batches or uses[row] == 0, f"a batch of {task} was used twice")
        expect(uses[row] == min(uses[int(b[0])] for b in batches[task]),
               f"a batch of {task} was used again before the others of its pass")
        uses[row] += 1
    claimed = sampler.batches_used(dict(sizes))
    expect(set(claimed) == set(sizes), f"batches_used names {sorted(claimed)}")
    for task, n in sizes.items():
        count = sum(t == task for t, _ in plan)
        most = len(plan) if sampler.repeats_batches else n  # None: the draws decide
        right = 0 <= count <= most if claimed[task] is None else count == claimed[task]
        expect(right, f"{task}: {count} of its {n} batches used, batches_used says "
                      f"{claimed[task]}")
    again = build_sampler(sampler.settings, sampler.tasks).order(batches, seed, epoch, keep_order)
    expect(plan_keys(again) == plan_keys(plan),
           f"a rebuilt sampler orders epoch {epoch} of seed {seed} otherwise")
    return plan


class SamplerConformance(Conformance):
    """Checks of one batch sampler; set `sampler` (its registered name) and, where it needs
    them, `settings` (the YAML mapping without `scheme`, naming tasks of `tasks`)."""

    sampler: ClassVar[str]
    settings: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    tasks: ClassVar[tuple[str, ...]] = TASKS  # central task first
    sizes: ClassVar[tuple[Mapping[str, int], ...]] = SIZES
    seeds_and_epochs: ClassVar[tuple[tuple[int, int], ...]] = SEEDS_AND_EPOCHS

    def raw(self) -> dict[str, Any]:
        return {"scheme": self.sampler, **self.settings}

    def parsed(self, raw: Mapping[str, Any] | None = None) -> Any:
        problems: list[str] = []
        settings = parse_sampling(self.raw() if raw is None else raw, self.tasks, problems)
        expect(settings is not None and not problems,
               f"sampling {raw or self.raw()} does not parse: {problems}")
        return settings

    def built(self) -> Sampler:
        return build_sampler(self.parsed(), self.tasks)

    def test_registered(self) -> None:
        cls = registered(SAMPLERS, self.sampler)
        settings = self.parsed()
        expect(isinstance(settings, cls.settings_type) and isinstance(settings, SamplerSettings),
               f"its settings parse to {type(settings).__name__}, not {cls.settings_type}")
        expect(getattr(settings, "scheme", None) == self.sampler,
               f"settings.scheme is {getattr(settings, 'scheme', None)!r}")
        expect(isinstance(cls.repeats_batches, bool), "repeats_batches is not a bool")
        expect(type(self.built()) is cls, "build_sampler built another class")

    def test_settings_round_trip(self) -> None:
        """config.yaml and the config's digest hold `to_dict()`: plain data that parses back
        to the same settings. `keep_tasks` with every task kept changes nothing, and leaves
        the caller's mapping alone."""
        settings = self.parsed()
        plain = settings.to_dict()
        expect(plain == json.loads(json.dumps(plain)), f"to_dict() is not plain data: {plain!r}")
        expect(self.parsed(plain) == settings, f"to_dict() parses to other settings: {plain!r}")
        raw = self.raw()
        kept = settings.keep_tasks(raw, set(self.tasks))
        expect(raw == self.raw(), "keep_tasks changed the mapping it was given")
        expect(self.parsed(kept) == settings, f"keep_tasks with every task gave {kept!r}")

    def test_plans_keep_the_contract(self) -> None:
        sampler = self.built()
        for sizes in self.sizes:
            for seed, epoch in self.seeds_and_epochs:
                check_plan(sampler, sizes, seed, epoch)

    def test_keep_order_uses_each_tasks_batches_in_the_given_order(self) -> None:
        """`batches: fixed`: only which task comes next is the sampler's to decide."""
        sampler = self.built()
        for sizes in self.sizes:
            for seed, epoch in self.seeds_and_epochs:
                plan = check_plan(sampler, sizes, seed, epoch, keep_order=True)
                for t, (task, n) in enumerate(sizes.items()):
                    used = [row - t * ROWS_PER_TASK for name, row in plan_keys(plan)
                            if name == task]
                    expect(used == [i % n for i in range(len(used))],
                           f"with keep_order, {task}'s batches were used as {used}")


def check_sampler(sampler: str, settings: Mapping[str, Any] | None = None,
                  **options: Any) -> None:
    """Every check of `SamplerConformance` on the sampler registered as `sampler`, with
    `settings` (the YAML mapping without `scheme`) and any other of its attributes."""
    given = {"settings": settings} if settings is not None else {}
    run_suite(SamplerConformance, {"sampler": sampler, **given, **options})
