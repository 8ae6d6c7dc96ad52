"""Which tasks to train together under a budget (Standley et al. 2020, "Which Tasks Should Be
Learned Together in Multi-task Learning?"): pure functions over a table of scores, no study
database and no torch.

The table holds, for each trained group (a network that trains those tasks together), every
member task's score in that network. Given a budget, the *selection* picks groups so that every
task is served by at least one of them and the sum over tasks of each task's best score among
the chosen groups that serve it is as high as possible (the mean is that sum over the number of
tasks; the same choice maximises both). The budget is a number of networks (1 up to the number
of tasks), or, with a cost per network (e.g. its encoder's size or inference time), a total
cost.

Exact, not greedy:
- A choice of groups is scored by serving each task from its best chosen group, so an optimal
  choice is also an optimal *partition* of the tasks into parts, each part served by one group
  that contains it (two parts served by one group merge into one part at no loss and one
  network less). With `w(A)` the best one network can do for exactly the tasks A, the best
  partition into at most k parts is a dynamic program over subsets of tasks: one pass gives
  every budget 1..|T| (3^|T| steps; |T| = 10 takes well under a second).
- With costs, the same partition is searched by branch and bound: parts are added for the
  lowest unserved task, and a branch is cut when its score plus an upper bound for the tasks
  left (each at its best score in any affordable group) cannot beat the best choice found.

Ties: among equal totals the choice with fewer networks (then the lower cost) wins, so a budget
that buys nothing over the one below it repeats that answer.

The pairwise approximation (`estimate_from_pairs`): when only single-task and pairwise networks
were trained, a larger group's score for each member task is estimated, as Standley et al. do,
by the mean of that task's scores in the pairwise networks with the group's other members (for
{a, b, c}, task a's estimate is the mean of its score in {a, b} and in {a, c}). The selection
then treats estimated groups like trained ones; the result says which groups were estimated.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Group = tuple[str, ...]  # member tasks, in the table's task order
_EPS = 1e-12  # totals closer than this are ties (sums of floats in another order)


@dataclass(frozen=True)
class ScoreTable:
    """Every usable group's score for each of its member tasks (higher is better)."""

    tasks: tuple[str, ...]
    scores: Mapping[Group, Mapping[str, float]]
    estimated: frozenset[Group] = frozenset()  # groups whose scores come from pairs

    def __post_init__(self) -> None:
        order = {t: i for i, t in enumerate(self.tasks)}
        for group, by_task in self.scores.items():
            if not group or any(t not in order for t in group) or set(by_task) != set(group):
                raise ValueError(f"group {group!r}: needs a score for each member, all among "
                                 f"{self.tasks}")
            if list(group) != sorted(group, key=order.__getitem__) or len(set(group)) != \
                    len(group):
                raise ValueError(f"group {group!r}: list its tasks once each, in task order")

    def unserved(self) -> list[str]:
        """Tasks that no group of the table contains (no budget can serve them)."""
        held = {t for g in self.scores for t in g}
        return [t for t in self.tasks if t not in held]


@dataclass(frozen=True)
class Selection:
    """The groups chosen for one budget and what each task scores in them."""

    budget: float
    groups: tuple[Group, ...]  # the networks to train, in table order
    served_by: Mapping[str, Group]  # each task's best chosen group
    scores: Mapping[str, float]  # each task's score there
    total: float
    cost: float  # the chosen groups' cost (their number without costs)
    estimated: tuple[Group, ...] = field(default=())  # chosen groups whose scores are estimates

    @property
    def mean(self) -> float:
        return self.total / len(self.scores) if self.scores else math.nan


def group_of(tasks: Sequence[str], members: Iterable[str]) -> Group:
    """`members` as a group of `tasks`: each once, in task order."""
    chosen = set(members)
    return tuple(t for t in tasks if t in chosen)


def all_groups(tasks: Sequence[str], max_size: int | None = None) -> list[Group]:
    """Every non-empty group of `tasks` up to `max_size` members, smallest first."""
    top = len(tasks) if max_size is None else min(max_size, len(tasks))
    return [combo for size in range(1, top + 1) for combo in itertools.combinations(tasks, size)]


def estimate_from_pairs(table: ScoreTable, max_size: int) -> tuple[ScoreTable, list[Group]]:
    """`table` with every group larger than `max_size` (the largest trained) estimated from the
    pairwise networks, as Standley et al. do: task a's score in a group is the mean of its
    scores in the pairs {a, b} over the group's other members b. Returns the table and the
    larger groups that could not be estimated (a pair they need is not in the table)."""
    scores = dict(table.scores)
    estimated, missing = set(table.estimated), []
    for group in all_groups(table.tasks):
        if len(group) <= max(max_size, 2) or group in scores:
            continue
        pairs = {(a, b): table.scores.get(group_of(table.tasks, (a, b)))
                 for a in group for b in group if a != b}
        if any(v is None for v in pairs.values()):
            missing.append(group)
            continue
        known = {k: v for k, v in pairs.items() if v is not None}  # every pair, checked above
        scores[group] = {a: statistics.fmean(known[a, b][a] for b in group if b != a)
                         for a in group}
        estimated.add(group)
    return ScoreTable(table.tasks, scores, frozenset(estimated)), missing


# --- the selection -----------------------------------------------------------------------------
def select(table: ScoreTable, budget: float,
           costs: Mapping[Group, float] | None = None) -> Selection | None:
    """The best choice of groups within `budget`: a number of networks without `costs`, else
    a total cost. None when no choice within the budget serves every task."""
    if costs is None:
        return select_each(table, int(budget)).get(int(budget))
    return _branch_and_bound(table, float(budget), costs)


def select_each(table: ScoreTable, top: int | None = None) -> dict[int, Selection | None]:
    """The best choice for every budget of 1..`top` networks (default: one per task); None
    for a budget that cannot serve every task."""
    n = len(table.tasks)
    top = n if top is None else top
    best_for, _ = _best_per_part(table, None)
    # f[k][mask]: the best total for the tasks `mask` with at most k parts; how[k][mask]: the
    # part holding mask's lowest task (0: fewer parts do as well).
    f = [[-math.inf] * (1 << n) for _ in range(top + 1)]
    how = [[0] * (1 << n) for _ in range(top + 1)]
    f[0][0] = 0.0
    for k in range(1, top + 1):
        f[k][0] = 0.0
        for mask in range(1, 1 << n):
            best, part = f[k - 1][mask], 0
            low = mask & -mask
            rest = mask ^ low
            sub = rest
            while True:  # every part that holds the lowest task of `mask`
                a = sub | low
                if a in best_for:
                    value = best_for[a][0] + f[k - 1][mask ^ a]
                    if value > best + _EPS:
                        best, part = value, a
                if sub == 0:
                    break
                sub = (sub - 1) & rest
            f[k][mask], how[k][mask] = best, part
    full = (1 << n) - 1
    out: dict[int, Selection | None] = {}
    for b in range(1, top + 1):
        if f[b][full] == -math.inf:
            out[b] = None
            continue
        parts, k, mask = [], b, full
        while mask:
            while how[k][mask] == 0:
                k -= 1
            part = how[k][mask]
            parts.append(best_for[part][1])
            mask, k = mask ^ part, k - 1
        out[b] = _selection(table, b, parts, None)
    return out


def _best_per_part(table: ScoreTable, costs: Mapping[Group, float] | None
                   ) -> tuple[dict[int, tuple[float, Group]], dict[int, list]]:
    """For each set of tasks A (a bit mask) that some group holds: the best score one network
    gives exactly those tasks and that group (`best_for`); with costs, every (cost, score,
    group) that no cheaper group matches (`by_mask`, cheapest first)."""
    bit = {t: 1 << i for i, t in enumerate(table.tasks)}
    options: dict[int, list[tuple[float, float, Group]]] = {}
    for group, by_task in table.scores.items():
        members = [bit[t] for t in group]
        for size in range(1, len(members) + 1):
            for combo in itertools.combinations(range(len(members)), size):
                mask = sum(members[i] for i in combo)
                score = sum(by_task[group[i]] for i in combo)
                cost = 1.0 if costs is None else float(costs[group])
                options.setdefault(mask, []).append((cost, score, group))
    order = {g: i for i, g in enumerate(table.scores)}
    best_for, by_mask = {}, {}
    for mask, found in options.items():
        # Best score; ties: the smaller group, then the table's order.
        top = max(found, key=lambda o: (o[1], -len(o[2]), -order[o[2]]))
        best_for[mask] = (top[1], top[2])
        found.sort(key=lambda o: (o[0], -o[1], len(o[2]), order[o[2]]))
        frontier, seen = [], -math.inf
        for o in found:
            if o[1] > seen + _EPS:
                frontier.append(o)
                seen = o[1]
        by_mask[mask] = frontier
    return best_for, by_mask


def _branch_and_bound(table: ScoreTable, budget: float,
                      costs: Mapping[Group, float]) -> Selection | None:
    """The best choice of groups of total cost <= `budget` (see the module docstring)."""
    missing = [g for g in table.scores if g not in costs]
    if missing:
        raise ValueError(f"no cost for group(s) {missing}")
    n = len(table.tasks)
    _, by_mask = _best_per_part(table, costs)
    bound = _upper_bounds(table, budget, costs)
    if bound is None:
        return None
    parts_of: dict[int, list[int]] = {}  # lowest task -> every part holding it
    for mask in by_mask:
        parts_of.setdefault((mask & -mask).bit_length() - 1, []).append(mask)
    for found in parts_of.values():  # closest to its bound first: good choices early
        found.sort(key=lambda m: (bound[m] - by_mask[m][-1][1], -m.bit_count()))
    best: list = [-math.inf, math.inf, None]  # total, cost, parts
    _search((1 << n) - 1, budget, 0.0, 0.0, [], _Tree(parts_of, by_mask, bound, best))
    if best[2] is None:
        return None
    return _selection(table, budget, best[2], costs)


@dataclass(frozen=True)
class _Tree:
    """What the depth-first search reads: each lowest task's parts, each part's frontier
    (cost, score, group; cheapest first), the bounds, and the best found so far (updated)."""

    parts_of: dict[int, list[int]]
    by_mask: dict[int, list]
    bound: list[float]
    best: list  # total, cost, parts


def _search(left: int, money: float, total: float, spent: float, parts: list,
            tree: _Tree) -> None:
    """Cover the tasks in `left` with parts holding its lowest task first, pruning branches
    whose bound cannot beat the best found."""
    best = tree.best
    if left == 0:
        if total > best[0] + _EPS or (total > best[0] - _EPS and spent < best[1] - _EPS):
            best[:] = [total, spent, list(parts)]
        return
    low = (left & -left).bit_length() - 1
    for part in tree.parts_of.get(low, ()):
        if part & left != part:
            continue
        for cost, score, group in tree.by_mask[part]:
            if cost > money + _EPS:
                break  # cheapest first: the rest cost more
            if total + score + tree.bound[left ^ part] < best[0] - _EPS:
                continue
            parts.append(group)
            _search(left ^ part, money - cost, total + score, spent + cost, parts, tree)
            parts.pop()


def _upper_bounds(table: ScoreTable, budget: float,
                  costs: Mapping[Group, float]) -> list[float] | None:
    """Per set of tasks (a bit mask), the most its tasks can score: each task's best in any
    affordable group. None when some task has no affordable group."""
    alone = [max((s[t] for g, s in table.scores.items()
                  if t in s and costs[g] <= budget + _EPS), default=-math.inf)
             for t in table.tasks]
    if any(a == -math.inf for a in alone):
        return None
    bound = [0.0] * (1 << len(table.tasks))
    for mask in range(1, len(bound)):
        low = (mask & -mask).bit_length() - 1
        bound[mask] = bound[mask & (mask - 1)] + alone[low]
    return bound


def _selection(table: ScoreTable, budget: float, parts: Sequence[Group],
               costs: Mapping[Group, float] | None) -> Selection:
    """The Selection of the chosen groups: each task served by its best chosen group."""
    order = {g: i for i, g in enumerate(table.scores)}
    groups = tuple(sorted(set(parts), key=order.__getitem__))
    served_by, scores = {}, {}
    for t in table.tasks:
        group = max((g for g in groups if t in g),
                    key=lambda g: (table.scores[g][t], -len(g), -order[g]))
        served_by[t], scores[t] = group, table.scores[group][t]
    cost = float(len(groups)) if costs is None else sum(float(costs[g]) for g in groups)
    return Selection(budget, groups, served_by, scores, sum(scores.values()), cost,
                     tuple(g for g in groups if g in table.estimated))
