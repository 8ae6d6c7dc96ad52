"""Extension points stand alone: a batch sampler, or a search strategy, is one module plus one
registration call. Each example below is such a module, written in the test, registered through
the registry's public function (and unregistered afterwards), and run through the real path:
the run config and the trainer's epoch plan for the sampler, the study file and the launch's
planning for the strategy. The conformance suites run over every built-in one in tests/testing/."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from weightsearch.core.errors import ConfigError
from weightsearch.studies import schema as S
from weightsearch.sweep.space import CENTRAL_WEIGHT, GROUP, Space
from weightsearch.sweep.spec import load_study_spec
from weightsearch.sweep.strategies import (
    STRATEGIES,
    Record,
    Strategy,
    Unit,
    register_strategy,
    unregister_strategy,
)
from weightsearch.sweep.strategies.base import done_units, grid_or_problem, taken_cells
from weightsearch.testing import check_sampler, check_strategy
from weightsearch.trainer.config import load_config
from weightsearch.trainer.sampling import (
    SAMPLERS,
    Sampler,
    SamplerSettings,
    build_sampler,
    parse_sampling,
    register_sampler,
    unregister_sampler,
)
from weightsearch.trainer.sampling.base import PREFIX, Batches, Plan, rng


# --- a batch sampler in one module ----------------------------------------------------------
@dataclass(frozen=True)
class BlockSettings(SamplerSettings):
    """Tasks one after another, each task's batches shuffled; `first` leads."""

    first: str | None = None
    scheme: str = field(default="blocks", init=False)

    KEYS: ClassVar[tuple[str, ...]] = ("first",)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], tasks: Sequence[str],
                     problems: list[str]) -> BlockSettings | None:
        first = raw.get("first")
        if first is not None and first not in tasks:
            problems.append(f"{PREFIX}.first: {first!r} is not one of the run's tasks "
                            f"({', '.join(tasks)})")
            return None
        return cls(first=first)

    @classmethod
    def keep_tasks(cls, raw: Mapping[str, Any], keep: set[str]) -> dict[str, Any]:
        # `first` names a task: a run without it starts with the central task instead.
        return {k: v for k, v in raw.items() if k != "first" or v in keep}


class BlockSampler(Sampler):
    name = "blocks"
    settings_type = BlockSettings

    def order(self, batches: Batches, seed: int, epoch: int, keep_order: bool = False) -> Plan:
        tasks = sorted(batches, key=lambda t: t != self.settings.first)  # stable: config order
        plan: Plan = []
        for t, task in enumerate(tasks):
            n = len(batches[task])
            for i in range(n) if keep_order else rng(seed, epoch, 5, t).permutation(n):
                plan.append((task, batches[task][i]))
        return plan


@pytest.fixture
def blocks() -> Iterator[type[Sampler]]:
    register_sampler(BlockSampler)
    try:
        yield BlockSampler
    finally:
        unregister_sampler(BlockSampler.name)
    assert BlockSampler.name not in SAMPLERS


# --- a search strategy in one module ---------------------------------------------------------
@dataclass(frozen=True)
class TopDownSettings:
    limit: int | None = None  # train only the `limit` first points

    KEYS: ClassVar[tuple[str, ...]] = ("limit",)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], space: Space, problems: list[str],
                     where: str = "search") -> TopDownSettings:
        limit = raw.get("limit")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)
                                  or limit < 1):
            problems.append(f"{where}.limit: expected a whole number >= 1, got {limit!r}")
            limit = None
        return cls(limit=limit)

    def to_plain(self) -> dict[str, Any]:
        return {} if self.limit is None else {"limit": self.limit}


class TopDownStrategy(Strategy):
    """Every point of a finite space from the highest central weight down (the warm start's
    points first), at most `limit` of them, every seed."""

    name = "topdown"
    settings_type = TopDownSettings
    accepts_warm_start = True

    @classmethod
    def check(cls, settings: Any, space: Space, central_tasks: Sequence[str],
              problems: list[str], where: str = "search", epochs: int | None = None) -> None:
        grid_or_problem(space, central_tasks, cls.name, problems)

    def _all(self) -> list[Unit]:
        points = sorted(self.space.grid(self.central) or [],
                        key=lambda p: -float(p.get(CENTRAL_WEIGHT, 0)))
        points = self.ordered(points)[:self.settings.limit]
        return [Unit(self.cell(p, s), s, p) for s in self.seeds for p in points]

    def units(self, records: Sequence[Record]) -> list[Unit]:
        done = done_units(records)
        return [u for u in self._all() if u.key not in done]

    def max_units(self) -> int:
        return len(self._all())


class EarlyTopDownStrategy(TopDownStrategy):
    """The same, declared as one that stops trials early (and takes no warm start)."""

    name = "topdown-early"
    accepts_warm_start = False
    stops_early = True


@pytest.fixture
def topdown() -> Iterator[type[Strategy]]:
    register_strategy(TopDownStrategy)
    register_strategy(EarlyTopDownStrategy)
    try:
        yield TopDownStrategy
    finally:
        unregister_strategy(TopDownStrategy.name)
        unregister_strategy(EarlyTopDownStrategy.name)
    assert {TopDownStrategy.name, EarlyTopDownStrategy.name}.isdisjoint(STRATEGIES)


# --- helpers --------------------------------------------------------------------------------
TASKS = ("qa", "mc", "cls")


# --- adding a batch sampler -----------------------------------------------------------------
def _task_data(cfg: Any, sizes: Mapping[str, int]) -> dict[str, Any]:
    """Tokenized-looking training sets (only the `length` column batching reads)."""
    import datasets

    from weightsearch.trainer.task_data import TaskData

    return {name: TaskData(spec=cfg.task(name), evals={}, truncated={},
                           train=datasets.Dataset.from_dict(
                               {"length": [8 + (i * 7) % 50 for i in range(sizes[name])]}))
            for name in cfg.task_names}


def test_a_new_sampler_is_one_module_and_a_registration(blocks, sample_data_dir: Path) -> None:
    from weightsearch.trainer.task_data import batch_plan

    raw = {"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc", "stsb"],
           "central_task": "rte", "batch_size": 4,
           "sampling": {"scheme": "blocks", "first": "stsb"}}
    cfg = load_config(raw)
    assert cfg.sampling == BlockSettings(first="stsb")
    # config.yaml and the digest come from the settings' own to_dict, and load back.
    assert cfg.to_dict()["sampling"] == {"first": "stsb", "scheme": "blocks"}
    assert load_config({**raw, "sampling": cfg.to_dict()["sampling"]}).digest() == cfg.digest()

    # The epoch plan, built as the training loop builds it.
    sizes = {"rte": 10, "mrpc": 7, "stsb": 5}
    data = _task_data(cfg, sizes)
    sampler = build_sampler(cfg.sampling, cfg.task_names)
    assert isinstance(sampler, BlockSampler)
    plan = batch_plan(data, cfg.batch_size, cfg.seed, 1, cfg.length_bucketing, sampler)
    tasks = [t for t, _ in plan]
    counts = {t: math.ceil(n / cfg.batch_size) for t, n in sizes.items()}
    assert tasks == ["stsb"] * counts["stsb"] + ["rte"] * counts["rte"] + ["mrpc"] * counts["mrpc"]
    assert all(len(batch) <= cfg.batch_size for _, batch in plan)
    for task, n in sizes.items():  # every example of every task exactly once
        rows = sorted(int(r) for t, b in plan if t == task for r in b)
        assert rows == list(range(n))
    again = batch_plan(data, cfg.batch_size, cfg.seed, 1, cfg.length_bucketing,
                       build_sampler(cfg.sampling, cfg.task_names))
    assert [(t, b.tolist()) for t, b in again] == [(t, b.tolist()) for t, b in plan]
    check_sampler("blocks", {"first": "mc"})  # the conformance suite

    # Its own problems, named like every other setting's.
    with pytest.raises(ConfigError) as info:
        load_config({**raw, "sampling": {"scheme": "blocks", "first": "qqp", "ends": 1}})
    assert info.value.problems == ["sampling.ends: not a setting of scheme 'blocks'; its "
                                   "settings are scheme, first"]
    problems: list[str] = []
    parse_sampling({"scheme": "nope"}, ["rte"], problems)
    assert problems == ["sampling.scheme: unknown scheme 'nope'; choose one of shuffle, "
                        "weighted, proportional, sqrt, temperature, unimax, blocks"]


def test_a_task_group_search_drops_what_the_new_sampler_names(blocks,
                                                              sample_data_dir: Path) -> None:
    # The sweep asks the settings class which settings name tasks (`keep_tasks`).
    spec = load_study_spec({
        "study": "blocks",
        "train": {"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc", "stsb"],
                  "epochs": 1, "sampling": {"scheme": "blocks", "first": "mrpc"}},
        "central_tasks": ["rte"],
        "search": {"strategy": "grid", "space": {GROUP: {"subsets_of": ["mrpc", "stsb"]}}},
    })
    firsts = {}
    for point in spec.space.grid("rte") or []:
        cfg = spec.for_cell("rte", point, 1, "/tmp/unused")
        firsts[point[GROUP]] = cfg.sampling.first
    assert firsts == {(): None, ("mrpc",): "mrpc", ("stsb",): None,
                      ("mrpc", "stsb"): "mrpc"}


def test_registering_a_sampler_is_checked() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_sampler(type("Other", (BlockSampler,), {"name": "shuffle"}))
    with pytest.raises(TypeError, match="SamplerSettings"):
        register_sampler(type("Bare", (BlockSampler,), {"name": "bare",
                                                        "settings_type": dict}))
    assert set(SAMPLERS) == {"shuffle", "weighted", "proportional", "sqrt", "temperature",
                             "unimax"}


# --- adding a search strategy ---------------------------------------------------------------
def _study(sample_data_dir: Path, **extra: Any) -> dict[str, Any]:
    return {"study": "topdown",
            "train": {"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc"], "epochs": 2},
            "central_tasks": ["rte"],
            "search": {"strategy": "topdown", "limit": 2,
                       "space": {CENTRAL_WEIGHT: [1, 3, 9], "lr": [1.0e-4]}},
            "seeds": [1, 2], **extra}


def _drive(spec: Any, strategy: Strategy) -> tuple[list[Record], list[Unit]]:
    """One driver, as the searcher runs it: take each unit the strategy lists, build its run
    config (the trainer validates it), train it (here: a synthetic score), record the trial."""
    records: list[Record] = []
    trained: list[Unit] = []
    for _ in range(strategy.max_units() + 1):
        units = strategy.units(records)
        if not units:
            return records, trained
        unit = units[0]
        point = unit.point or strategy.propose(unit, records, taken_cells(records))
        assert point is not None
        cfg = spec.for_cell(strategy.central, point, unit.seed, "/tmp/unused")
        assert cfg.weighting.central_weight == point[CENTRAL_WEIGHT]
        value = 0.7 - 0.002 * (point[CENTRAL_WEIGHT] - 9) ** 2
        records.append(Record(len(records), unit.key, spec.space.cell_key(point, unit.seed),
                              unit.seed, point, "complete", value, {1: value}))
        trained.append(unit)
    raise AssertionError("the strategy did not finish within its unit budget")


def test_a_new_strategy_is_one_module_and_a_registration(topdown,
                                                         sample_data_dir: Path) -> None:
    from weightsearch.sweep.launch import first_points
    from weightsearch.sweep.study_db import Central

    spec = load_study_spec(_study(sample_data_dir, warm_start=[{CENTRAL_WEIGHT: 3,
                                                                "lr": 1.0e-4}]))
    assert spec.search.strategy == "topdown" and spec.search.settings == TopDownSettings(2)
    # Its settings are part of the canonical form, and the digest survives the round trip.
    assert spec.to_dict()["search"] == {"strategy": "topdown", "limit": 2,
                                        "space": spec.space.to_plain()}
    assert load_study_spec(spec.to_dict()).digest() == spec.digest()

    # The launch's planning, without Ray: the first points (the warm start), then the units.
    first = first_points(spec, [Central("rte", None, {}, {})], "sqlite:///:memory:")
    assert first == {"rte": [{CENTRAL_WEIGHT: 3.0, "lr": 1.0e-4}]}
    strategy = spec.strategy("rte", first["rte"])
    assert isinstance(strategy, TopDownStrategy) and strategy.max_units() == 4
    assert [u.point[CENTRAL_WEIGHT] for u in strategy.units([])] == [3.0, 9.0, 3.0, 9.0]
    records, trained = _drive(spec, strategy)
    assert [(u.seed, u.point[CENTRAL_WEIGHT]) for u in trained] == [
        (1, 3.0), (1, 9.0), (2, 3.0), (2, 9.0)]
    assert strategy.progress(records) == (4, 4)
    assert strategy.units(records) == []
    check_strategy("topdown", _study(sample_data_dir)["search"])  # the conformance suite


def test_the_launch_makes_a_recommendation_into_the_new_strategys_first_points(
        topdown, sample_data_dir: Path) -> None:
    from weightsearch.sweep.launch import first_points
    from weightsearch.sweep.study_db import Central

    spec = load_study_spec(_study(sample_data_dir, warm_start="recommend"))
    # An existing study holds the recommender's answer: the launch reads it back.
    existing = {"rte": SimpleNamespace(user_attrs={S.A_RECOMMENDATION: {
        "central_weight": 7.6, "interval": [5.0, 12.0], "regime": "test"}})}
    first = first_points(spec, [Central("rte", None, {}, {})], "sqlite:///:memory:", existing)
    assert first == {"rte": [{CENTRAL_WEIGHT: 9.0, "lr": 1.0e-4}]}  # the nearest grid weight
    assert [u.point[CENTRAL_WEIGHT] for u in spec.strategy("rte", first["rte"]).units([])] \
        == [9.0, 3.0, 9.0, 3.0]


def test_what_the_study_file_knows_of_a_strategy_is_its_class_attributes(
        topdown, sample_data_dir: Path) -> None:
    # accepts_warm_start = True, stops_early = False: ASHA may stop its trials.
    spec = load_study_spec(_study(sample_data_dir, scheduler="asha", warm_start=[
        {CENTRAL_WEIGHT: 9, "lr": 1.0e-4}]))
    assert spec.scheduler.name == "asha" and len(spec.warm_start) == 1

    def problems(**extra: Any) -> list[str]:
        with pytest.raises(ConfigError) as info:
            load_study_spec(_study(sample_data_dir, **extra))
        return info.value.problems

    early = {"strategy": "topdown-early", "space": {CENTRAL_WEIGHT: [1, 9]}}
    assert problems(search=early, scheduler="asha") == [
        "scheduler: asha and strategy topdown-early both stop trials early; use scheduler: "
        "fifo with topdown-early"]
    assert problems(search=early, warm_start=[9])[0].startswith("warm_start: applies to")
    finetuned = problems(search=early, objective={"stage": "finetuned"},
                         train={"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc"],
                                "epochs": 2, "finetune": {"tasks": "central", "epochs": 1}})
    assert finetuned == [
        "objective.stage: finetuned cannot be combined with strategy: topdown-early, which stops "
        "trials on their multi-task epoch scores before any fine-tuned score exists; use "
        "scheduler: fifo and the grid, guided, forward or topdown strategy"]
    assert problems(search={**_study(sample_data_dir)["search"], "limit": 0}) == [
        "search.limit: expected a whole number >= 1, got 0"]


def test_registering_a_strategy_is_checked() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_strategy(type("Other", (TopDownStrategy,), {"name": "grid"}))
    with pytest.raises(TypeError, match="not a Strategy"):
        register_strategy(dict)  # type: ignore[arg-type]
    assert set(STRATEGIES) == {"grid", "guided", "halving", "forward"}


# --- extensions declared with settings (no parser of their own) --------------------------------
def test_a_sampler_declared_with_settings_needs_no_parser() -> None:
    from weightsearch.core.fields import setting
    from weightsearch.trainer.sampling import Real, SamplerContext

    @dataclass(frozen=True)
    class LeadSettings(SamplerSettings):
        first: str | None = setting(None, doc="The task that leads.")
        share: float = setting(0.5, Real("a number >= 0", 0), doc="The lead's share.")
        scheme: str = field(default="lead", init=False)

        def task_problems(self, context: SamplerContext) -> list[str]:
            if self.first is not None and self.first not in context.tasks:
                return [f"{PREFIX}.first: {self.first!r} is not one of the run's tasks"]
            return []

    class LeadSampler(BlockSampler):
        name = "lead"
        settings_type = LeadSettings

    register_sampler(LeadSampler)
    try:
        assert LeadSettings.KEYS == ("first", "share")
        problems: list[str] = []
        assert parse_sampling({"scheme": "lead", "first": "mc", "share": 1}, TASKS,
                              problems) == LeadSettings("mc", 1.0)
        for raw, expected in (({"share": -1}, "sampling.share: must be a number >= 0, got -1"),
                              ({"first": "zz"}, "sampling.first: 'zz' is not one of the run's "
                                                "tasks")):
            problems = []
            assert parse_sampling({"scheme": "lead", **raw}, TASKS, problems) is None
            assert problems == [expected]
    finally:
        unregister_sampler("lead")


def test_a_strategy_declared_with_settings_needs_no_parser(sample_data_dir: Path) -> None:
    from weightsearch.core.fields import setting
    from weightsearch.sweep.strategies import StrategyContext, StrategySettings, parse_settings
    from weightsearch.sweep.strategies.base import Whole

    @dataclass(frozen=True)
    class LimitSettings(StrategySettings):
        limit: int | None = setting(None, Whole("a whole number >= 1"), doc="Points to train.")

    class LimitStrategy(TopDownStrategy):
        name = "limited"
        settings_type = LimitSettings

    register_strategy(LimitStrategy)
    register_strategy(TopDownStrategy)
    try:
        assert LimitSettings.KEYS == ("limit",)
        space = Space(())
        for name, settings_type in (("limited", LimitSettings), ("topdown", TopDownSettings)):
            problems: list[str] = []
            context = StrategyContext(space, "search")
            assert parse_settings(name, {"limit": 2}, context, problems) == settings_type(2)
            assert parse_settings(name, {"limit": 0}, context, problems) == settings_type(None)
            assert problems == ["search.limit: expected a whole number >= 1, got 0"]
        spec = load_study_spec({**_study(sample_data_dir),
                                "search": {**_study(sample_data_dir)["search"],
                                           "strategy": "limited"}})
        assert spec.search.settings == LimitSettings(2)
        assert spec.to_dict()["search"]["limit"] == 2
    finally:
        unregister_strategy("limited")
        unregister_strategy(TopDownStrategy.name)
