"""The budgeted task-grouping selection (studies/grouping.py) against brute force over every
subset of groups, on random score tables up to 8 tasks: ties, per-network costs, budgets that
cannot serve every task, and the pairwise estimate of larger groups."""

from __future__ import annotations

import itertools
import math
import random
import time

import pytest

from weightsearch.studies.grouping import (
    ScoreTable,
    all_groups,
    estimate_from_pairs,
    select,
    select_each,
)


def _brute(table: ScoreTable, budget: float, costs=None) -> float | None:
    """The best total over every subset of the table's groups within the budget, written
    without the partition argument: each task takes its best score among the chosen groups."""
    groups = list(table.scores)
    best = None
    for r in range(1, len(groups) + 1):
        for chosen in itertools.combinations(groups, r):
            spent = len(chosen) if costs is None else sum(costs[g] for g in chosen)
            if spent > budget + 1e-9:
                continue
            total = 0.0
            for t in table.tasks:
                found = [table.scores[g][t] for g in chosen if t in g]
                if not found:
                    break
                total += max(found)
            else:
                if best is None or total > best:
                    best = total
    return best


def _random_table(rng: random.Random, n: int, n_groups: int, ties: bool = False) -> ScoreTable:
    tasks = tuple(f"t{i}" for i in range(n))
    pool = all_groups(tasks)
    groups = rng.sample(pool, min(n_groups, len(pool)))
    groups.sort(key=pool.index)

    def score() -> float:
        return rng.choice([0.5, 0.6, 0.7]) if ties else round(rng.uniform(0.2, 0.9), 3)

    return ScoreTable(tasks, {g: {t: score() for t in g} for g in groups})


def _check(table: ScoreTable, chosen, budget: float, costs=None) -> None:
    """A selection is feasible, within budget, and its total is what its groups give."""
    assert set(chosen.served_by) == set(table.tasks)
    spent = len(chosen.groups) if costs is None else sum(costs[g] for g in chosen.groups)
    assert spent <= budget + 1e-9 and chosen.cost == pytest.approx(spent)
    for t, g in chosen.served_by.items():
        assert g in chosen.groups and t in g
        assert chosen.scores[t] == max(table.scores[h][t] for h in chosen.groups if t in h)
    assert chosen.total == pytest.approx(sum(chosen.scores.values()))
    assert chosen.mean == pytest.approx(chosen.total / len(table.tasks))


@pytest.mark.parametrize("seed", range(30))
def test_selection_matches_brute_force_for_every_network_budget(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 8)
    table = _random_table(rng, n, rng.randint(1, 12), ties=seed % 3 == 0)
    answers = select_each(table)
    assert set(answers) == set(range(1, n + 1))
    for b, chosen in answers.items():
        expected = _brute(table, b)
        if expected is None:
            assert chosen is None
            continue
        assert chosen is not None and chosen.total == pytest.approx(expected)
        _check(table, chosen, b)
        assert select(table, b).total == pytest.approx(expected)


@pytest.mark.parametrize("seed", range(30))
def test_selection_matches_brute_force_with_costs_per_network(seed: int) -> None:
    rng = random.Random(1000 + seed)
    n = rng.randint(1, 8)
    table = _random_table(rng, n, rng.randint(1, 11), ties=seed % 4 == 0)
    # e.g. inference time: a network's cost grows with its heads, or an encoder size class
    costs = {g: rng.choice([1.0, 1.5, 2.0, 3.0]) for g in table.scores}
    for budget in (0.5, 1.0, 2.5, 4.0, 7.0):
        expected = _brute(table, budget, costs)
        chosen = select(table, budget, costs)
        if expected is None:
            assert chosen is None
        else:
            assert chosen is not None and chosen.total == pytest.approx(expected)
            _check(table, chosen, budget, costs)


@pytest.mark.parametrize("seed", range(2))
def test_eight_tasks_against_brute_force(seed: int) -> None:
    rng = random.Random(2000 + seed)
    tasks = tuple(f"t{i}" for i in range(8))
    pool = [g for g in all_groups(tasks) if len(g) > 1]
    groups = [(t,) for t in tasks] + rng.sample(pool, 6)  # singles: every budget of 8 serves
    table = ScoreTable(tasks, {g: {t: round(rng.uniform(0.2, 0.9), 2) for t in g}
                               for g in sorted(groups, key=all_groups(tasks).index)})
    for b, chosen in select_each(table).items():
        expected = _brute(table, b)
        assert (chosen is None) == (expected is None)
        if chosen is not None:
            assert chosen.total == pytest.approx(expected)
    costs = {g: float(len(g)) for g in table.scores}
    for budget in (4.0, 8.0, 11.0):
        expected = _brute(table, budget, costs)
        chosen = select(table, budget, costs)
        assert (chosen is None) == (expected is None)
        if chosen is not None:
            assert chosen.total == pytest.approx(expected)


def test_ties_go_to_fewer_networks_and_a_larger_budget_never_scores_less() -> None:
    tasks = ("a", "b", "c")
    flat = {g: {t: 0.5 for t in g} for g in all_groups(tasks)}
    answers = select_each(ScoreTable(tasks, flat))
    assert [a.groups for a in answers.values()] == [(("a", "b", "c"),)] * 3
    rng = random.Random(7)
    table = _random_table(rng, 6, 63)
    totals = [a.total for a in select_each(table).values()]
    assert totals == sorted(totals)


def test_a_budget_that_cannot_serve_every_task_has_no_selection() -> None:
    tasks = ("a", "b", "c")
    table = ScoreTable(tasks, {("a",): {"a": 0.9}, ("b", "c"): {"b": 0.5, "c": 0.4},
                               ("a", "b"): {"a": 0.7, "b": 0.8}})
    answers = select_each(table)
    assert answers[1] is None  # no group holds every task
    # {a, b} + {b, c} (a 0.7, b 0.8, c 0.4) beats {a} + {b, c} (0.9 + 0.5 + 0.4)
    assert answers[2].groups == (("b", "c"), ("a", "b"))
    assert answers[2].total == pytest.approx(1.9)
    assert answers[2].served_by == {"a": ("a", "b"), "b": ("a", "b"), "c": ("b", "c")}
    assert answers[3].total == pytest.approx(0.9 + 0.8 + 0.4)
    assert ScoreTable(tasks, {("a",): {"a": 1.0}}).unserved() == ["b", "c"]
    assert select(ScoreTable(tasks, {("a",): {"a": 1.0}}), 3) is None


def test_pairwise_estimate_is_the_mean_of_each_tasks_pairs() -> None:
    tasks = ("a", "b", "c", "d")
    trained = {g: {t: 0.1 * (i + 1) + 0.01 * j for j, t in enumerate(g)}
               for i, g in enumerate(all_groups(tasks, max_size=2))}
    table, missing = estimate_from_pairs(ScoreTable(tasks, trained), max_size=2)
    assert missing == []
    assert len(table.scores) == 15 and len(table.estimated) == 5
    pair = trained
    assert table.scores["a", "b", "c"]["a"] == pytest.approx(
        (pair["a", "b"]["a"] + pair["a", "c"]["a"]) / 2)
    assert table.scores["a", "b", "c", "d"]["d"] == pytest.approx(
        (pair["a", "d"]["d"] + pair["b", "d"]["d"] + pair["c", "d"]["d"]) / 3)
    # A pair that did not train leaves the larger groups that need it unestimated.
    del trained["b", "c"]
    table, missing = estimate_from_pairs(ScoreTable(tasks, trained), max_size=2)
    assert missing == [("a", "b", "c"), ("b", "c", "d"), ("a", "b", "c", "d")]
    chosen = select_each(table)[1]
    assert chosen is None  # the all-task network needs {b, c}


def test_estimated_groups_are_named_in_the_selection() -> None:
    tasks = ("a", "b", "c")
    pairs = {("a",): {"a": 0.5}, ("b",): {"b": 0.5}, ("c",): {"c": 0.5},
             ("a", "b"): {"a": 0.9, "b": 0.9}, ("a", "c"): {"a": 0.9, "c": 0.9},
             ("b", "c"): {"b": 0.9, "c": 0.9}}
    table, _ = estimate_from_pairs(ScoreTable(tasks, pairs), max_size=2)
    one = select(table, 1)
    assert one.groups == (("a", "b", "c"),) and one.estimated == (("a", "b", "c"),)
    assert one.total == pytest.approx(2.7)


def test_ten_tasks_every_group_every_budget_in_seconds() -> None:
    rng = random.Random(3)
    tasks = tuple(f"t{i}" for i in range(10))
    table = ScoreTable(tasks, {g: {t: rng.uniform(0.3, 0.9) for t in g}
                               for g in all_groups(tasks)})
    assert len(table.scores) == 1023
    start = time.process_time()  # CPU time: a loaded machine slows the clock, not the work
    answers = select_each(table)
    assert time.process_time() - start < 30  # about 1 s on a 2-core CPU (BENCHMARKS.md)
    assert all(a is not None for a in answers.values())
    singles = sum(table.scores[(t,)][t] for t in tasks)
    assert answers[10].total >= singles - 1e-9
    assert not math.isnan(answers[1].mean)


def test_bad_tables_are_refused() -> None:
    with pytest.raises(ValueError, match="needs a score"):
        ScoreTable(("a", "b"), {("a", "b"): {"a": 1.0}})
    with pytest.raises(ValueError, match="task order"):
        ScoreTable(("a", "b"), {("b", "a"): {"a": 1.0, "b": 1.0}})
    with pytest.raises(ValueError, match="no cost"):
        select(ScoreTable(("a",), {("a",): {"a": 1.0}}), 1, costs={})
