"""`inspect` of a budgeted grouping study: which networks to train for each budget.

A grouping study (`search: {space: {tasks: {groups_of: [...]}}}`) trains one network per group
of tasks and records every member task's score in it. Here its COMPLETE trials become a score
table (each task's primary metric, mean over seeds, per group), the larger groups of a pairwise
study are estimated from the pairs, and `weightsearch.studies.grouping` chooses the groups for every
budget of 1..|T| networks. Beside the choices stand the two fixed answers: one network per task, and
one network for every task.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from weightsearch.core.errors import ConfigError
from weightsearch.studies import schema
from weightsearch.studies.central import CentralStudy
from weightsearch.studies.grouping import (
    Group,
    ScoreTable,
    Selection,
    all_groups,
    estimate_from_pairs,
    group_of,
    select_each,
)


@dataclass(frozen=True)
class BudgetReport:
    study: str
    metrics: dict[str, str]  # task -> its primary metric, in task order
    table: ScoreTable  # usable groups (trained, or estimated from pairs)
    seeds: dict[Group, int]  # COMPLETE trials per trained group
    unusable: list[tuple[Group, str]]  # groups the selection could not use, and why
    choices: dict[int, Selection | None]  # budget (networks) -> the best choice
    max_size: int | None = None  # the largest group trained (None: every group)
    singles: Selection | None = None  # one network per task
    everything: Selection | None = None  # one network for every task
    notes: list[str] = field(default_factory=list)

    @property
    def tasks(self) -> tuple[str, ...]:
        return self.table.tasks


def budget_report(s: CentralStudy, budget: int | None = None) -> BudgetReport:
    """The selection for every budget (or only `budget`, checked against the task count)."""
    tasks = tuple(s.group_metrics or {})
    if budget is not None and not 1 <= budget <= len(tasks):
        raise ConfigError(f"--budget: {budget} networks for {len(tasks)} tasks; give a number "
                          f"from 1 (one network for every task) to {len(tasks)} (one per task)")
    table, seeds, unusable = _score_table(s, tasks)
    missing_pairs: list[Group] = []
    if s.group_max_size is not None:
        table, missing_pairs = estimate_from_pairs(table, s.group_max_size)
        unusable += [(g, "not trained, and a pair it needs has no finished trial")
                     for g in missing_pairs]
    choices = select_each(table)
    if budget is not None:
        choices = {budget: choices[budget]}
    singles = _fixed(table, [(t,) for t in tasks])
    everything = _fixed(table, [tasks])
    return BudgetReport(s.name, dict(s.group_metrics or {}), table, seeds, unusable, choices,
                        s.group_max_size, singles, everything, _notes(s, table, seeds))


def _score_table(s: CentralStudy, tasks: tuple[str, ...]
                 ) -> tuple[ScoreTable, dict[Group, int], list[tuple[Group, str]]]:
    """Each group's score per member task (mean over its COMPLETE trials), the trials behind
    it, and the groups of the space that have no usable trial."""
    metrics = s.group_metrics or {}
    runs: dict[Group, list[dict[str, float]]] = {}
    for c in s.cells:
        members = c.point.get(schema.T_GROUP_PATH)
        if c.state != "complete" or not isinstance(members, list) or not members:
            continue
        group = group_of(tasks, members)
        found = {t: c.metrics.get(f"{t}.{metrics[t]}") for t in group}
        if all(isinstance(v, float) and math.isfinite(v) for v in found.values()):
            runs.setdefault(group, []).append(found)  # type: ignore[arg-type]
    scores = {g: {t: statistics.fmean(r[t] for r in found) for t in g}
              for g, found in runs.items()}
    order = all_groups(tasks, s.group_max_size)
    unusable = [(g, "no finished trial") for g in order if g not in scores]
    ordered = {g: scores[g] for g in order if g in scores}
    return ScoreTable(tasks, ordered), {g: len(runs[g]) for g in ordered}, unusable


def _fixed(table: ScoreTable, groups: list[Group]) -> Selection | None:
    """A fixed choice (one network per task, or one for all), when every group is usable."""
    if not all(g in table.scores for g in groups):
        return None
    scores = {t: table.scores[g][t] for g in groups for t in g}
    served = {t: g for g in groups for t in g}
    return Selection(len(groups), tuple(groups), served, scores, sum(scores.values()),
                     float(len(groups)), tuple(g for g in groups if g in table.estimated))


def _notes(s: CentralStudy, table: ScoreTable, seeds: dict[Group, int]) -> list[str]:
    metrics = ", ".join(f"{t} {m}" for t, m in (s.group_metrics or {}).items())
    notes = [f"scores: each task's primary metric ({metrics}) on dev, in its network's best "
             "epoch (the one where the network's tasks do best on average); total: their sum, "
             "mean: the total over the tasks",
             "in-sample: the networks (and each network's epoch) are chosen on these same dev "
             "scores, so the totals of the chosen networks are optimistic; Standley et al. "
             "choose on validation data and report on test data"]
    counts = sorted(set(seeds.values()))
    if counts == [1]:
        notes.append("one seed per network: every score is a single run, and totals a few "
                     "points apart may be seed noise")
    elif counts:
        notes.append(f"scores are means over {counts[0]}-{counts[-1]} seeds per network; the "
                     "selection compares means and does not test their differences")
    if table.estimated:
        notes.append("estimated (*): a group not trained, its score for each task the mean of "
                     "that task's scores in the pairwise networks with the group's other "
                     "members (Standley et al. 2020)")
    return notes


# --- the words and the rows ------------------------------------------------------------------
def group_text(group: Group, table: ScoreTable) -> str:
    return "+".join(group) + ("*" if group in table.estimated else "")


def choice_row(label: str | int, chosen: Selection | None, report: BudgetReport) -> dict:
    """One row of the per-budget table: the groups, each task's score, the total and mean."""
    row: dict = {"budget": label}
    if chosen is None:
        row.update({"networks": None, "groups": "no choice serves every task"})
        return row
    row["networks"] = len(chosen.groups)
    row["groups"] = " | ".join(group_text(g, report.table) for g in chosen.groups)
    row.update({t: chosen.scores[t] for t in report.tasks})
    row.update({"total": chosen.total, "mean": chosen.mean})
    return row


def rows(report: BudgetReport) -> list[dict]:
    out = [choice_row(b, c, report) for b, c in report.choices.items()]
    out.append(choice_row("singles", report.singles, report))
    out.append(choice_row("all", report.everything, report))
    return out


def to_dict(report: BudgetReport) -> dict:
    def selection(chosen: Selection | None) -> dict | None:
        if chosen is None:
            return None
        return {"networks": len(chosen.groups), "groups": [list(g) for g in chosen.groups],
                "served_by": {t: list(g) for t, g in chosen.served_by.items()},
                "scores": dict(chosen.scores), "total": chosen.total, "mean": chosen.mean,
                "estimated": [list(g) for g in chosen.estimated]}

    return {
        "tasks": list(report.tasks), "metrics": report.metrics, "max_size": report.max_size,
        "budgets": {str(b): selection(c) for b, c in report.choices.items()},
        "single_task_networks": selection(report.singles),
        "all_task_network": selection(report.everything),
        "groups": [{"group": list(g), "scores": dict(v), "seeds": report.seeds.get(g, 0),
                    "estimated": g in report.table.estimated}
                   for g, v in report.table.scores.items()],
        "unusable": [{"group": list(g), "why": why} for g, why in report.unusable],
        "notes": report.notes,
    }


def unusable_text(report: BudgetReport) -> str | None:
    """The groups the selection could not use, in one line (None when it used every one)."""
    if not report.unusable:
        return None
    by_why: dict[str, list[str]] = {}
    for g, why in report.unusable:
        by_why.setdefault(why, []).append("+".join(g))
    return "not usable by the selection: " + "; ".join(
        f"{', '.join(gs)} ({why})" for why, gs in by_why.items())
