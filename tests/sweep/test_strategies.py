"""Search strategies: each strategy's own decision rules, on synthetic results (no Ray, no
database, no model). The conformance suite runs over every registered strategy in
tests/testing/test_strategies.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from weightsearch.sweep.space import CENTRAL_WEIGHT, GROUP, Space
from weightsearch.sweep.spec import load_study_spec
from weightsearch.sweep.strategies import (
    STRATEGIES,
    Strategy,
    forward_next,
    keep_count,
    promote,
    rung_budgets,
    successive_halving,
)
from weightsearch.testing.strategies import drive

EPOCHS = 4


def _train(sample_data_dir: Path) -> dict:
    return {"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc", "stsb", "cola"],
            "epochs": EPOCHS}


# The searches the tests of each strategy's own decisions run.
SEARCHES: dict[str, dict] = {
    "guided": {"strategy": "guided", "n_trials": 5, "sampler": "tpe",
               "space": {CENTRAL_WEIGHT: {"low": 1, "high": 15, "step": 1},
                         "pooling": {"choices": ["mean", "cls"]}}},
    "halving": {"strategy": "halving", "min_epochs": 1, "reduction_factor": 2,
                "space": {CENTRAL_WEIGHT: [1, 3, 6, 9, 12, 15]}},
}


def _strategy(name: str, sample_data_dir: Path, seeds=(1, 2)) -> Strategy:
    spec = load_study_spec({"study": "conf", "train": _train(sample_data_dir),
                            "central_tasks": ["rte"], "search": SEARCHES[name],
                            "seeds": list(seeds)})
    return spec.strategy("rte")


def test_guided_never_proposes_a_taken_cell_and_two_drivers_spread(sample_data_dir) -> None:
    a = _strategy("guided", sample_data_dir, seeds=(1,))
    b = _strategy("guided", sample_data_dir, seeds=(1,))
    unit = a.units([])[0]
    unit_b = b.units([])[1]
    p1 = a.propose(unit, [], set())
    # The same seed and history give the same first proposal; the cell claim decides, and the
    # loser asks again with the winner's cell taken.
    assert b.propose(unit_b, [], set()) == p1
    taken = {a.space.cell_key(p1, 1)}
    p2 = b.propose(unit_b, [], taken)
    assert p2 is not None and a.space.cell_key(p2, 1) not in taken
    # A finite space runs out: every cell taken -> None, never a repeat.
    small = load_study_spec({"study": "s", "train": _train(sample_data_dir),
                             "central_tasks": ["rte"],
                             "search": {"strategy": "guided", "n_trials": 2, "sampler": "random",
                                        "space": {CENTRAL_WEIGHT: [1, 9]}}}).strategy("rte")
    u = small.units([])[0]
    everything = {small.space.cell_key({CENTRAL_WEIGHT: w}, 1) for w in (1.0, 9.0)}
    assert small.propose(u, [], everything) is None


@pytest.mark.parametrize("sampler", ["tpe", "gp", "random"])
def test_every_sampler_proposes_inside_the_space(sampler: str, sample_data_dir: Path) -> None:
    spec = load_study_spec({"study": "s", "train": _train(sample_data_dir),
                            "central_tasks": ["rte"],
                            "search": {"strategy": "guided", "n_trials": 4, "sampler": sampler,
                                       "space": {CENTRAL_WEIGHT: {"low": 1, "high": 15},
                                                 "lr": {"low": 1.0e-5, "high": 1.0e-3,
                                                        "log": True}}}})
    records, trained = drive(spec.strategy("rte"))
    assert len(trained) == 4 and all(r.state == "complete" for r in records)
    assert len({r.cell for r in records}) == 4


# --- successive halving -------------------------------------------------------------------
def test_halving_schedule_is_a_pure_function() -> None:
    assert rung_budgets(4, 1, 2) == [1, 2, 4]
    assert rung_budgets(5, 1, 3) == [1, 3, 5]
    assert rung_budgets(3, 3, 2) == [3]
    assert [keep_count(n, 2) for n in (6, 3, 1)] == [3, 1, 1]
    # Ties go to the earlier point in the given order (the grid's, or the recommender's).
    assert promote({"a": 0.5, "b": 0.7, "c": 0.7}, 2, ["c", "b", "a"]) == ["c", "b"]


def test_halving_finds_the_peak_of_synthetic_curves_for_fewer_epochs() -> None:
    points = [str(w) for w in (1, 3, 6, 9, 12, 15)]

    def curve(p: str, epoch: int) -> float:
        return 0.7 - 0.002 * (float(p) - 9) ** 2 + 0.01 * epoch

    winner, cost = successive_halving(points, rung_budgets(4, 1, 2), 2, curve)
    assert winner == "9"
    assert cost < len(points) * 4  # 6 + 3 + 2 = 11 trial-epochs instead of 24


def test_halving_strategy_follows_the_pure_schedule(sample_data_dir: Path) -> None:
    strategy = _strategy("halving", sample_data_dir, seeds=(1,))
    _, trained = drive(strategy)
    assert [u.rung for u in trained] == [0] * 6 + [1] * 3 + [2]
    assert [u.budget for u in trained] == [1] * 6 + [2] * 3 + [None]
    assert trained[-1].point == {CENTRAL_WEIGHT: 9.0}
    epochs = sum((u.budget or EPOCHS) - ([0, 1, 2][u.rung]) for u in trained)
    assert epochs == 6 + 3 + 2 < 6 * EPOCHS


def test_halving_with_seeds_promotes_points_with_all_their_seeds(sample_data_dir) -> None:
    strategy = _strategy("halving", sample_data_dir, seeds=(1, 2))
    _, trained = drive(strategy)
    rung1 = [u for u in trained if u.rung == 1]
    assert len(rung1) == 6 and {u.seed for u in rung1} == {1, 2}


# --- task grouping ------------------------------------------------------------------------
def test_group_space_enumerates_every_subset_with_the_central_task_alone(
        sample_data_dir) -> None:
    spec = load_study_spec({"study": "g", "train": _train(sample_data_dir),
                            "central_tasks": ["rte", "mrpc"],
                            "search": {"space": {GROUP: {"subsets_of": ["mrpc", "stsb",
                                                                        "cola"]}}}})
    assert spec.search.strategy == "grid"
    groups = [p[GROUP] for p in spec.space.grid("rte")]
    assert groups[0] == () and len(groups) == 8 and ("mrpc", "stsb", "cola") in groups
    assert len(spec.space.grid("mrpc")) == 4  # the central task is no candidate of its own
    cfg = spec.for_cell("rte", {GROUP: ("stsb",)}, 1, "/tmp/x")
    assert cfg.task_names == ("rte", "stsb")
    assert spec.for_cell("rte", {GROUP: ()}, 1, "/tmp/x").task_names == ("rte",)


def test_more_than_five_candidates_default_to_forward_selection(sample_data_dir) -> None:
    train = {**_train(sample_data_dir),
             "tasks": ["rte", "mrpc", "stsb", "cola", "sst2", "qnli", "wnli"]}
    spec = load_study_spec({"study": "g", "train": train, "central_tasks": ["rte"],
                            "search": {"space": {GROUP: {"subsets_of": train["tasks"][1:]}}}})
    assert spec.search.strategy == "forward"
    assert spec.strategy("rte").max_units() == 1 + 6 * 7 // 2


def test_forward_selection_rounds() -> None:
    c = ["a", "b", "c"]
    assert forward_next(c, {}) == [(), ("a",), ("b",), ("c",)]
    scores = {(): 0.5, ("a",): 0.6, ("b",): 0.55, ("c",): 0.4}
    assert forward_next(c, scores) == [("a", "b"), ("a", "c")]
    assert forward_next(c, {**scores, ("a", "b"): 0.58, ("a", "c"): 0.5}) == []  # no gain
    assert forward_next(c, {(): 0.7, ("a",): 0.6, ("b",): 0.55, ("c",): 0.4}) == []  # alone


def test_space_keys_and_folders(sample_data_dir: Path) -> None:
    train = {**_train(sample_data_dir), "sampling": {"scheme": "weighted", "weights": {"rte": 0.4}}}
    space = Space(load_study_spec({
        "study": "k", "train": train, "central_tasks": ["rte"],
        "search": {"space": {CENTRAL_WEIGHT: [9], "sampling.weights.rte": [0.5],
                             "weighting.aux_weights.mrpc": [2]}}}).space.dims)
    point = {CENTRAL_WEIGHT: 9.0, "sampling.weights.rte": 0.5, "weighting.aux_weights.mrpc": 2}
    assert space.cell_key(point, 3) == ("weighting.central_weight=9,sampling.weights.rte=0.5,"
                                        "weighting.aux_weights.mrpc=2|3")
    assert space.folder(point, 3) == "w9_rte0.5_mrpc2_s3"
    assert space.params(point, "rte") == {"central_weight": 9.0, "sampling.weights.rte": 0.5,
                                          "weighting.aux_weights.mrpc": 2}
    long = {CENTRAL_WEIGHT: 9.0, "sampling.weights.rte": 0.123456789012,
            "weighting.aux_weights.mrpc": "x" * 200}
    assert len(space.cell_key(long, 1)) < 128 and len(space.folder(long, 1)) < 140


def test_strategy_settings_are_declared_fields_parsed_through_one_entry() -> None:
    """Settings declared as fields (KEYS derived, every setting documented), parsed through
    `parse_settings(name, raw, context, problems)`."""
    import dataclasses

    from weightsearch.core.fields import DOC
    from weightsearch.sweep.strategies import StrategyContext, parse_settings

    space = Space(())
    raw = {"n_trials": 0, "sampler": "TPE", "min_epochs": True, "reduction_factor": 1,
           "start": "recommend"}
    for name, strategy in STRATEGIES.items():
        declared = dataclasses.fields(strategy.settings_type)
        assert tuple(f.name for f in declared) == strategy.settings_type.KEYS
        assert all(f.metadata.get(DOC) for f in declared)
        found: list[str] = []
        assert parse_settings(name, raw, StrategyContext(space, "weights"), found) == \
            strategy.settings_type.from_mapping(raw, StrategyContext(space, "weights"), [])
        assert all(p.startswith("weights.") for p in found)
    problems: list[str] = []
    parse_settings("halving", raw, StrategyContext(space), problems)
    assert problems == [
        "search.min_epochs: expected a whole number of epochs >= 1 (what every point trains "
        "before the first cut), got True",
        "search.reduction_factor: expected a number > 1 (2 keeps the better half at each rung), "
        "got 1",
        "search.start: recommend narrows the central weight, and this space does not search "
        "weighting.central_weight; use start: grid"]
