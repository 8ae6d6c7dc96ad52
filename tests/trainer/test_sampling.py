"""Batch-order strategies: MT-DNN's shuffle and weighted stochastic batch selection."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from weightsearch.trainer.sampling import WeightedSettings, build_sampler, parse_sampling

TASKS = ["qa", "mc", "cls"]


def _batches(sizes: dict[str, int]) -> dict[str, list[np.ndarray]]:
    return {task: [np.array([task_id * 100000 + i]) for i in range(n)]
            for task_id, (task, n) in enumerate(sizes.items())}


def _weighted(raw: dict, tasks=TASKS):
    problems: list[str] = []
    settings = parse_sampling({"scheme": "weighted", **raw}, tasks, problems)
    assert problems == [], problems
    return build_sampler(settings, tasks)


def test_task_frequencies_follow_the_weights():
    # QA at 0.8, the others share 0.2; QA's batches end the epoch long before the others run
    # out, so every draw is from all three tasks. A chi-square test at the 0.1% level with a
    # fixed seed: it fails only if the draws do not follow the weights (or with probability
    # 0.001 for an unlucky seed, which the fixed seed rules out once it passed).
    sampler = _weighted({"weights": {"qa": 0.8}, "epoch_ends_with": "qa"})
    batches = _batches({"qa": 2000, "mc": 5000, "cls": 5000})
    counts = np.zeros(3)
    for epoch in (1, 2, 3):
        plan = sampler.order(batches, seed=7, epoch=epoch)
        counts += [sum(task == t for task, _ in plan) for t in TASKS]
    expected = counts.sum() * np.array([0.8, 0.1, 0.1])
    assert stats.chisquare(counts, expected).pvalue > 0.001, counts
    assert counts[0] == 3 * 2000


def test_an_epoch_ends_when_the_named_tasks_batches_run_out():
    sampler = _weighted({"weights": {"qa": 0.5, "mc": 0.5, "cls": 0.5}, "epoch_ends_with": "qa"})
    plan = sampler.order(_batches({"qa": 30, "mc": 40, "cls": 5}), seed=1, epoch=1)
    assert plan[-1][0] == "qa"
    assert sum(task == "qa" for task, _ in plan) == 30
    assert sum(task == "cls" for task, _ in plan) <= 5  # a task that runs out drops out
    used = [int(b[0]) for _, b in plan]
    assert len(used) == len(set(used))  # no batch twice


def test_without_an_end_task_every_weighted_batch_is_used_once():
    sampler = _weighted({"weights": {"qa": 0.7, "mc": 0.3, "cls": 0}})
    batches = _batches({"qa": 20, "mc": 10, "cls": 10})
    plan = sampler.order(batches, seed=1, epoch=1)
    assert sorted(int(b[0]) for _, b in plan) == sorted(
        int(b[0]) for t in ("qa", "mc") for b in batches[t])  # weight 0: never drawn


def test_orders_are_a_pure_function_of_seed_and_epoch():
    sampler = _weighted({"weights": {"qa": 0.6}})
    batches = _batches({"qa": 50, "mc": 20, "cls": 20})
    first = [(t, int(b[0])) for t, b in sampler.order(batches, 3, 1)]
    assert first == [(t, int(b[0])) for t, b in sampler.order(batches, 3, 1)]
    assert first != [(t, int(b[0])) for t, b in sampler.order(batches, 3, 2)]
    assert first != [(t, int(b[0])) for t, b in sampler.order(batches, 4, 1)]


def test_share_splits_what_the_listed_weights_leave():
    assert WeightedSettings((("qa", 0.8),)).resolved(TASKS) == pytest.approx(
        {"qa": 0.8, "mc": 0.1, "cls": 0.1})
    assert WeightedSettings((("qa", 2.0),), others=1.0).resolved(TASKS) == {
        "qa": 2.0, "mc": 1.0, "cls": 1.0}


@pytest.mark.parametrize(("raw", "fragment"), [
    ({"weights": {"qa": -1}}, "sampling.weights.qa: must be a finite number >= 0"),
    ({"weights": {"qa": 0, "mc": 0, "cls": 0}}, "every task's weight is 0"),
    ({"weights": {"qa": 1.0}, "others": 0}, None),  # QA only: allowed
    ({"weights": {"squad": 0.8}}, "sampling.weights.squad: not one of the run's tasks"),
    ({"weights": {"qa": 0.8}, "epoch_ends_with": "squad"}, "sampling.epoch_ends_with: 'squad'"),
    ({"weights": {"qa": 0.8, "mc": 0}, "others": 0, "epoch_ends_with": "mc"},
     "mc has sampling weight 0"),
    ({"weights": {"qa": 0.9, "mc": 0.3}}, "sum to 1.2 > 1"),
    ({"weights": {"qa": 0.8}, "others": "many"}, "sampling.others"),
    ({"weights": {"qa": 0.8}, "ends": "qa"}, "sampling.ends: not a setting"),
    ({"weights": {}}, "sampling.weights: a mapping"),
])
def test_bad_settings_name_the_field(raw, fragment):
    problems: list[str] = []
    parse_sampling({"scheme": "weighted", **raw}, TASKS, problems)
    if fragment is None:
        assert problems == []
    else:
        assert any(fragment in p for p in problems), problems


def test_unknown_scheme():
    problems: list[str] = []
    parse_sampling({"scheme": "roundrobin"}, TASKS, problems)
    assert problems == ["sampling.scheme: unknown scheme 'roundrobin'; choose one of shuffle, "
                        "weighted, proportional, sqrt, temperature, unimax"]


# --- declared settings --------------------------------------------------------------------------
def test_a_samplers_keys_are_its_declared_settings():
    import dataclasses

    from weightsearch.core.fields import DOC
    from weightsearch.trainer.sampling import SAMPLERS

    for name, sampler in SAMPLERS.items():
        declared = [f for f in dataclasses.fields(sampler.settings_type) if f.init]
        assert tuple(f.name for f in declared) == sampler.settings_type.KEYS, name
        assert all(f.metadata.get(DOC) for f in declared), name


def test_sampler_settings_rules_in_declaration_order():
    problems: list[str] = []
    assert parse_sampling({"scheme": "temperature", "cap": 0}, TASKS, problems) is None
    assert problems == [
        "sampling.T: required for scheme 'temperature'; give the temperature, e.g. T: 2 (T: 1 "
        "with no cap samples in proportion to size)",
        "sampling.cap: must be a number of batches >= 1 (T5's size limit K), or left out for no "
        "cap, got 0"]
    problems = []
    settings = parse_sampling({"scheme": "temperature", "T": 2, "cap": None}, TASKS, problems)
    assert problems == [] and (settings.T, settings.cap) == (2.0, None)
    assert type(settings.T) is float  # kept as a float, as config.yaml has always said


def test_weighted_settings_check_the_tasks_in_order():
    problems: list[str] = []
    raw = {"scheme": "weighted", "weights": {"zz": -1, "qa": -1}, "others": -1,
           "epoch_ends_with": "zz"}
    assert parse_sampling(raw, TASKS, problems) is None
    assert problems == [
        "sampling.weights.zz: not one of the run's tasks (qa, mc, cls); name tasks the run trains",
        "sampling.weights.qa: must be a finite number >= 0, got -1",
        "sampling.others: must be share or a finite number >= 0, got -1",
        "sampling.epoch_ends_with: 'zz' is not one of the run's tasks (qa, mc, cls); name the "
        "task whose batches end an epoch"]
