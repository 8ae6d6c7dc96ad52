"""The conformance suite of search strategies: what every strategy registered with
`register_strategy` must keep, as a study's drivers use it (the `Strategy` docstring), run on
synthetic results: no Ray, no database, no model.

    from weightsearch.testing import StrategyConformance, check_strategy

    class TestMyStrategy(StrategyConformance):  # pytest collects it as it stands
        strategy = "my-strategy"
        search = {"space": {"weighting.central_weight": [1, 9]}}  # the study's `search:`

    check_strategy("my-strategy", {"space": {"weighting.central_weight": [1, 9]}})

`drive` runs a study to its end as one driver would, scoring each unit on a synthetic learning
curve (`synthetic_score`); tests of a strategy's own decisions may use it too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

from weightsearch.sweep import load_study_spec
from weightsearch.sweep.space import CENTRAL_WEIGHT, GROUP, Point
from weightsearch.sweep.strategies import STRATEGIES, Record, Strategy, Unit
from weightsearch.sweep.strategies.base import done_units, taken_cells
from weightsearch.testing.suite import (
    Conformance,
    ConformanceError,
    expect,
    registered,
    run_suite,
)

TRAIN = MappingProxyType({"tasks": ["rte", "mrpc", "stsb", "cola"], "epochs": 4})
Curve = Callable[[Point, int, int], float]


def synthetic_score(point: Point, seed: int, epoch: int) -> float:
    """A learning curve: peaks at central weight 9, rises with the epochs and the seed; mrpc
    in the task group helps, cola hurts."""
    weight = float(point.get(CENTRAL_WEIGHT, 9.0))
    group = point.get(GROUP, ())
    return (0.7 - 0.002 * (weight - 9) ** 2 + 0.05 * ("mrpc" in group)
            - 0.03 * ("cola" in group) + 0.01 * epoch + 0.001 * seed)


def drive(strategy: Strategy, curve: Curve = synthetic_score,
          fail: Callable[[int], bool] = lambda step: False,
          records: Sequence[Record] = ()) -> tuple[list[Record], list[Unit]]:
    """Run a study to its end as one driver does: take the first unit listed, its point
    proposed where it has none, train it (score it on `curve`; `fail(step)`: the trial fails),
    record the trial. Starts from `records` (a study begun before). Returns every record and
    the units trained, in order. Checks on the way that `units` is a pure function of the
    records and each point lies in the space."""
    done: list[Record] = list(records)
    trained: list[Unit] = []
    for step in range(10 * strategy.max_units() + 10):
        units = strategy.units(done)
        expect(units == strategy.units(done), "units() must be a pure function of the records")
        if not units:
            return done, trained
        unit = units[0]
        point = unit.point or strategy.propose(unit, done, taken_cells(done))
        expect(point is not None, f"propose gave no point for unit {unit.key}")
        assert point is not None
        expect(strategy.space.contains(point, strategy.central),
               f"unit {unit.key}'s point {point} is not in the search space")
        trained.append(unit)
        epochs = unit.budget or strategy.epochs
        values = {e: curve(point, unit.seed, e) for e in range(1, epochs + 1)}
        if fail(step):
            state, value = "fail", None
        elif unit.budget is not None:
            state, value = "pruned", values[epochs]
        else:
            state, value = "complete", max(values.values())
        done.append(Record(len(done), unit.key, strategy.space.cell_key(point, unit.seed),
                           unit.seed, point, state, value, values))
    raise ConformanceError(f"{strategy.name} did not finish within 10 x max_units() units")


class StrategyConformance(Conformance):
    """Checks of one search strategy; set `strategy` (its registered name) and `search` (the
    study file's `search:` mapping without `strategy`: its space, and its settings)."""

    strategy: ClassVar[str]
    search: ClassVar[Mapping[str, Any]]
    train: ClassVar[Mapping[str, Any]] = TRAIN  # the study's `train:` template
    central_task: ClassVar[str] = "rte"
    seeds: ClassVar[tuple[int, ...]] = (1, 2)

    def curve(self, point: Point, seed: int, epoch: int) -> float:
        """The synthetic score of `point` at `epoch` (override for a strategy that needs
        another landscape)."""
        return synthetic_score(point, seed, epoch)

    def study(self) -> Any:
        return load_study_spec({"study": "conformance", "train": dict(self.train),
                                "central_tasks": [self.central_task],
                                "search": {"strategy": self.strategy, **self.search},
                                "seeds": list(self.seeds)})

    def built(self, first: Sequence[Point] = ()) -> Strategy:
        return self.study().strategy(self.central_task, first)

    def test_registered(self) -> None:
        cls = registered(STRATEGIES, self.strategy)
        for flag in ("accepts_warm_start", "stops_early"):
            expect(isinstance(getattr(cls, flag), bool), f"{flag} is not a bool")
        expect(isinstance(cls.unit_word, str) and cls.unit_word, "unit_word names no unit")
        strategy = self.built()
        expect(type(strategy) is cls and isinstance(strategy.settings, cls.settings_type),
               f"the study built {strategy!r} with settings {strategy.settings!r}")
        expect(isinstance(strategy.max_units(), int) and strategy.max_units() > 0,
               f"max_units() = {strategy.max_units()!r}: want a whole number > 0")

    def test_settings_round_trip(self) -> None:
        """The study's canonical form (stored with it, read by `resume`) holds the settings:
        it loads back to the same search and digest."""
        spec = self.study()
        again = load_study_spec(spec.to_dict())
        expect(again.search == spec.search and again.digest() == spec.digest(),
               f"the canonical form loads back as {again.search}, not {spec.search}")

    def test_a_study_runs_to_its_end(self) -> None:
        strategy = self.built()
        records, trained = drive(strategy, self.curve)
        keys = [u.key for u in trained]
        expect(len(keys) == len(set(keys)), "a unit was trained twice")
        expect(0 < len(trained) <= strategy.max_units(),
               f"{len(trained)} units trained, max_units() = {strategy.max_units()}")
        done, total = strategy.progress(records)
        expect(done == total == len(done_units(records)),
               f"progress at the end is {done}/{total} of {len(done_units(records))} units")
        cells = [(r.cell, u.rung) for r, u in zip(records, trained, strict=True)]
        expect(len(cells) == len(set(cells)), "a cell was trained twice at one rung")
        for unit in trained:
            self.check_unit(strategy, unit)
        spec = self.study()
        for record in records:  # the trainer accepts every cell's run config
            assert record.point is not None and record.seed is not None
            spec.for_cell(self.central_task, record.point, record.seed, "unused")

    def check_unit(self, strategy: Strategy, unit: Unit) -> None:
        expect(unit.seed in self.seeds, f"unit {unit.key} has seed {unit.seed}")
        expect(unit.budget is None or 1 <= unit.budget <= strategy.epochs,
               f"unit {unit.key} has budget {unit.budget}, past the study's epochs")
        expect(unit.budget in (None, strategy.epochs) or type(strategy).stops_early,
               f"unit {unit.key} stops at epoch {unit.budget}: declare stops_early = True")

    def test_failed_units_come_back_and_running_ones_stay_listed(self) -> None:
        _, trained = drive(self.built(), self.curve, fail=lambda step: step == 0)
        expect(trained[0].key in {u.key for u in trained[1:]}, "a failed unit was not retried")
        # A unit whose trial is still running (another driver's) is still needed: whoever
        # claims it after that driver's lease expires continues it.
        fresh = self.built()
        first = fresh.units([])[0]
        point = first.point or fresh.propose(first, [], set())
        assert point is not None
        running = Record(0, first.key, fresh.space.cell_key(point, first.seed), first.seed,
                         point, "running", None)
        expect(first.key in {u.key for u in fresh.units([running])},
               "a unit whose trial is running dropped out of units()")

    def test_a_driver_that_starts_midway_finishes_the_study(self) -> None:
        """A resumed study, or a second driver, sees the same units and finishes the study
        without training a finished unit again."""
        records, _ = drive(self.built(), self.curve)
        for cut in sorted({1, len(records) // 2, len(records) - 1}):
            begun = records[:cut]
            expect(self.built().units(begun) == self.built().units(begun),
                   "two drivers list other units for the same records")
            ended, more = drive(self.built(), self.curve, records=begun)
            again = {u.key for u in more} & done_units(begun)
            expect(not again, f"units {sorted(again)} were finished and trained again")
            expect(done_units(ended) == done_units(records),
                   f"a driver starting after {cut} trials finished other units")

    def test_proposals_avoid_taken_cells(self) -> None:
        strategy = self.built()
        unit = strategy.units([])[0]
        if unit.point is not None:
            return  # its units carry their points
        point = strategy.propose(unit, [], set())
        expect(point is not None, "propose gave no point for a study without trials")
        assert point is not None
        taken = {strategy.space.cell_key(point, unit.seed)}
        other = self.built().propose(unit, [], taken)
        expect(other is None or strategy.space.cell_key(other, unit.seed) not in taken,
               f"propose gave the taken cell {taken.pop()}")

    def test_warm_start_points_go_first(self) -> None:
        if not STRATEGIES[self.strategy].accepts_warm_start:
            return  # the study file refuses warm_start for it
        last = drive(self.built(), self.curve)[0][-1].point
        assert last is not None
        records, _ = drive(self.built([last]), self.curve)
        expect(records[0].point == last,
               f"warm start {last} was given, the first trial trained {records[0].point}")


def check_strategy(strategy: str, search: Mapping[str, Any], **options: Any) -> None:
    """Every check of `StrategyConformance` on the strategy registered as `strategy`, with
    `search` (the study's `search:` mapping without `strategy`) and any other attribute."""
    run_suite(StrategyConformance, {"strategy": strategy, "search": search, **options})
