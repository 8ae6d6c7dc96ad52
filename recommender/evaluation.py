"""How well the recommender does on the tasks it has seen (`recommend --evaluate`).

`leave_one_task_out` recommends for each measured task from every other task's points and scores
the answer against the task's own measurements: whether the grid weight nearest it is among the
task's two best, how far it lies from the best weight, whether the law's 80% interval holds it,
and what training there loses (`regret`, in metric points). `evaluation_summary` sets these
beside chance and the simple rules (`weightsearch.recommender.baselines`) and judges whether the
recommender beats the best rule, by point error (`against_best_rule`) and by regret
(`regret_comparison`). Loss weights only: a sampling rate is another quantity.
"""

from __future__ import annotations

import math
from typing import Any

from weightsearch.recommender.baselines import (
    BASELINES,
    POINT_RULES,
    baseline_errors,
    cells,
    rule_points,
)
from weightsearch.recommender.evidence import EvidencePoint, same_quantity
from weightsearch.recommender.prior import PRIOR_STUDY
from weightsearch.recommender.recommend import chance_of_top2, nearest, recommend_from
from weightsearch.studies import schema

# `--evaluate`: a lead in mean |error| over the best simple rule smaller than this (weight
# units), or than twice its standard error over the tasks, is no clear gain ("barely better").
CLEAR_GAIN = 0.5


def leave_one_task_out(evidence: list[EvidencePoint], encoder: str | None = None,
                       stage: str | None = None) -> tuple[list[dict], float | None, str]:
    """For each measured task (the prior's tasks when no study is usable): recommend without
    every point of that task, and check whether the grid weight nearest the recommendation is
    among the task's two best weights (chance: 2 / that task's grid size), how far the
    recommendation lies from the task's best weight (chance: the mean distance of that task's
    grid weights from it), whether the 80% interval holds the task's best weight, and the regret
    in metric points (`regret`: the best measured mean score less the one at the grid weight
    nearest the recommendation; chance: a random grid weight's). Returns (rows, hit rate, which
    points were evaluated). Loss weights only: a sampling rate is another quantity, and the
    shipped rate ladder is one dataset, which nothing else predicts out of sample."""
    evidence, _ = same_quantity(evidence, None)
    targets = [p for p in evidence if p.source == "studies"]
    over = "studies"
    if not targets:
        targets, over = [p for p in evidence if p.source == "prior"], "prior"
    rows = []
    for p in targets:
        rest = [q for q in evidence if q.family != p.family]
        if not rest:
            continue
        rec = recommend_from(rest, p.train_size, p.task_type, encoder, stage)
        grid = p.grid or schema.DEFAULT_GRID
        snapped = nearest(rec.central_weight, grid)
        measured = [(q.train_size, q.best_weight) for q in rest]
        rows.append({
            "task": p.task, "study": p.study, "train_size": p.train_size,
            "recommended": rec.central_weight, "recommended_grid": snapped,
            "interval": list(rec.interval), "best_weight": p.best_weight,
            "top2": list(p.top2), "hit": snapped in p.top2, "grid_size": len(grid),
            "chance": round(chance_of_top2(grid), 4),
            "abs_error": round(abs(rec.central_weight - p.best_weight), 3),
            "chance_abs_error": round(sum(abs(g - p.best_weight) for g in grid) / len(grid), 3),
            # the law's own 80% interval: what its coverage is a claim about
            "in_interval": rec.law_interval[0] <= p.best_weight <= rec.law_interval[1],
            "regret": _rounded(regret(p, snapped)),
            "chance_regret": _rounded(_mean([regret(p, g) for g in grid])),
            "baselines": {k: round(v, 3) for k, v in baseline_errors(
                p.train_size, p.best_weight, measured, grid).items()},
            "cells": cells(p.train_size, p.best_weight, [q.train_size for q in rest]),
            "family": p.family,
            # the paper's own tasks: its rule of thumb's constants were read from them
            "rule_in_sample": p.study == PRIOR_STUDY or p.study.startswith("siwlm-paper/"),
            "rule_regrets": {name: _rounded(regret(p, nearest(w, grid))) for name, w in
                             rule_points(p.train_size, measured).items()},
        })
    rate = sum(bool(r["hit"]) for r in rows) / len(rows) if rows else None
    return rows, rate, over


def regret(p: EvidencePoint, weight: float) -> float | None:
    """What training at `weight` (a weight of the task's grid) loses against the task's best
    measured weight: the difference of their mean scores, in metric points, not negative. A
    maximised score on a 0-1 scale (accuracy, F1, a correlation) counts x100, as percent; tables
    in percent and losses count as measured. None where the task's scores are not known."""
    means = dict(p.means)
    if weight not in means:
        return None
    sign = 1.0 if p.maximize else -1.0
    scale = 100.0 if p.maximize and all(abs(v) <= 1.0 for v in means.values()) else 1.0
    return scale * (max(sign * v for v in means.values()) - sign * means[weight])


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def evaluation_summary(rows: list[dict]) -> dict:
    """Hit rate against the chance level of the tasks' own grids, the point error (mean
    absolute distance of the recommended from the best weight) against a random grid weight's
    and the other simple rules' (`weightsearch.recommender.baselines`), the mean regret in metric
    points against a random grid weight's (`regret`), and interval coverage, overall and by
    cell (size inside / outside the other tasks' sizes; best weight at an end / in the
    middle)."""
    if not rows:
        return {"hit_rate": None, "chance": None, "mean_abs_error": None,
                "chance_abs_error": None, "mean_regret": None, "chance_regret": None,
                "coverage": None, "tasks": 0, "baselines": {}, "coverage_by_cell": {},
                "against_best_rule": None}
    n = len(rows)
    names = [b for b in BASELINES if all(b in r["baselines"] for r in rows)]
    by_cell: dict[str, dict] = {}
    for axis in ("size", "best"):
        for r in rows:
            cell = by_cell.setdefault(f"{axis}:{r['cells'][axis]}", {"tasks": 0, "covered": 0})
            cell["tasks"] += 1
            cell["covered"] += bool(r["in_interval"])
    return {"hit_rate": sum(r["hit"] for r in rows) / n,
            "chance": sum(r["chance"] for r in rows) / n,
            "mean_abs_error": sum(r["abs_error"] for r in rows) / n,
            "chance_abs_error": sum(r["chance_abs_error"] for r in rows) / n,
            # Over the tasks whose scores per weight are known (all but hand-made points).
            "mean_regret": _mean([r["regret"] for r in rows]),
            "chance_regret": _mean([r["chance_regret"] for r in rows]),
            "coverage": sum(r["in_interval"] for r in rows) / n, "tasks": n,
            "baselines": {b: sum(r["baselines"][b] for r in rows) / n for b in names},
            "coverage_by_cell": {k: {**v, "coverage": v["covered"] / v["tasks"]}
                                 for k, v in sorted(by_cell.items())},
            "against_best_rule": against_best_rule(rows),
            "by_regret": regret_comparison(rows)}


MIN_DATASETS = 3  # held-out datasets below which the evaluation cannot judge
BOOTSTRAP = 2000


class _DatasetDraws:
    """The bootstrap's draws over the scored rows, each resampling whole datasets (`families`):
    a draw is the count of each dataset it holds, so a mean over a draw is a weighted mean of
    the datasets' sums (one matrix product for all draws), and each row's weight in a draw is
    its dataset's count."""

    def __init__(self, scored: list[dict], families: list[str]) -> None:
        import numpy as np

        rng = np.random.default_rng(0)
        self.by_family = [[r for r in scored if r["family"] == f] for f in families]
        self.rows = [r for rows_f in self.by_family for r in rows_f]
        picks = [rng.choice(len(families), len(families)) for _ in range(BOOTSTRAP)] \
            if len(families) >= 2 else []
        self.counts = np.array([np.bincount(p, minlength=len(families)) for p in picks],
                               dtype=float).reshape(len(picks), len(families))
        self.sizes = np.array([len(rows_f) for rows_f in self.by_family], dtype=float)
        self.family_of = np.repeat(np.arange(len(families)), self.sizes.astype(int))

    def mean(self, value_of: Any) -> dict[str, Any]:
        """The mean of `value_of(row)` over the rows, and its bootstrap interval."""
        import numpy as np

        sums = np.array([sum(value_of(r) for r in rows_f) for rows_f in self.by_family])
        boot = list(self.counts @ sums / (self.counts @ self.sizes)) if len(self.counts) else []
        return _interval_summary(float(np.mean([value_of(r) for r in self.rows])), boot)

    def spearman(self) -> dict[str, Any]:
        """Spearman's rho of the recommended against the measured best weight, and its
        bootstrap interval."""
        import numpy as np

        point = _weighted_spearman(self.rows, np.ones((1, len(self.rows))))[0]
        boot = _weighted_spearman(self.rows, self.counts[:, self.family_of]) \
            if len(self.counts) else []
        return _interval_summary(point, boot)


def _weighted_spearman(rows: list[dict], weights: Any) -> list[float | None]:
    """Spearman's rho of `recommended` against `best_weight` in each draw, the draws given as
    each row's multiplicity (draws x rows): Pearson's r of the average ranks (scipy's
    spearmanr), the ranks counted from the multiplicities. None where a draw holds fewer than
    3 rows or one level only (as scipy's check says)."""
    import numpy as np

    def ranks(values: list[float]) -> Any:
        levels, index = np.unique(values, return_inverse=True)
        held = weights @ (index[:, None] == np.arange(len(levels))[None, :])
        below = np.cumsum(held, axis=1) - held  # draw x level: how many rank below it
        return (below + (held + 1) / 2)[:, index]  # draw x row: each row's average rank

    x = ranks([r["recommended"] for r in rows])
    y = ranks([r["best_weight"] for r in rows])
    total = weights.sum(axis=1)
    dx = x - ((weights * x).sum(axis=1) / total)[:, None]
    dy = y - ((weights * y).sum(axis=1) / total)[:, None]
    sxy, sxx, syy = ((weights * a * b).sum(axis=1) for a, b in ((dx, dy), (dx, dx), (dy, dy)))
    tiny = 1e-12 * np.maximum(1.0, total) ** 2
    return [None if n < 3 or a <= t or b <= t else float(c / np.sqrt(a * b))
            for n, a, b, c, t in zip(total, sxx, syy, sxy, tiny, strict=True)]


def _interval_summary(point: float | None, boot: list[Any]) -> dict[str, Any]:
    import numpy as np

    kept = [v for v in boot if v is not None]
    low, high = (np.percentile(kept, [5, 95]) if kept else (None, None))
    return {"mean": None if point is None else round(point, 3),
            "low90": None if low is None else round(float(low), 3),
            "high90": None if high is None else round(float(high), 3)}


def regret_comparison(rows: list[dict]) -> dict:
    """The recommender and each point rule (`baselines.POINT_RULES`) on regret at the held-out
    tasks, in metric points, with 90% intervals from a bootstrap that resamples datasets (the
    sizes of one dataset are correlated cells: each dataset counts once), the recommender's
    edge over the best rule (its regret minus the rule's, negative: the recommender loses less)
    with its interval, and the Spearman rank correlation of the recommended against the
    measured best weight across the held-out tasks. The best rule is chosen among the rules
    scored out of sample: the paper's rule of thumb is reported but not chosen where the tasks
    include the paper's own (`in_sample`). `verdict`: "cannot judge" with fewer than
    MIN_DATASETS datasets, else "better" / "worse" where the edge's interval excludes 0, else
    "no better"."""
    scored = [r for r in rows if r.get("regret") is not None
              and all(r["rule_regrets"].get(m) is not None for m in POINT_RULES
                      if m in r["rule_regrets"])]
    families = sorted({r["family"] for r in scored})
    methods = ["recommender", *(m for m in POINT_RULES
                                if scored and all(m in r["rule_regrets"] for r in scored))]
    in_sample = ["rule_of_thumb"] if any(r.get("rule_in_sample") for r in scored) else []
    out: dict[str, Any] = {"tasks": len(scored), "datasets": len(families), "methods": {},
                           "spearman": None, "edge": None, "verdict": "cannot judge",
                           "in_sample": in_sample}
    if not scored:
        return out

    def value(r: dict, method: str) -> float:
        return r["regret"] if method == "recommender" else r["rule_regrets"][method]

    draws = _DatasetDraws(scored, families)
    for m in methods:
        out["methods"][m] = draws.mean(lambda r, m=m: value(r, m))
    out["spearman"] = draws.spearman()
    rules = [m for m in methods if m != "recommender" and m not in in_sample]
    if rules:
        best_rule = min(rules, key=lambda m: out["methods"][m]["mean"])
        out["edge"] = {"rule": best_rule, **draws.mean(
            lambda r: value(r, "recommender") - value(r, best_rule))}
        if len(families) >= MIN_DATASETS:
            low, high = out["edge"]["low90"], out["edge"]["high90"]
            out["verdict"] = ("better" if high is not None and high < 0 else
                              "worse" if low is not None and low > 0 else "no better")
    return out


def against_best_rule(rows: list[dict]) -> dict | None:
    """The recommender's point error against the best simple rule's (the one with the smallest
    mean |error| over `rows`), task by task: `edge`, the mean of the per-task differences (the
    rule's |error| minus the recommender's: positive when the recommender is closer), its
    standard error `se` (None with one task), and `verdict`: "better" when the edge reaches
    `clear_at` (CLEAR_GAIN or twice the standard error, whichever is larger), "barely better"
    when it is positive but smaller, "no better" when it is not positive but less than
    `clear_at` below zero, "worse" beyond. None without rules to compare."""
    import statistics

    names = [b for b in BASELINES if rows and all(b in r["baselines"] for r in rows)]
    if not names:
        return None
    n = len(rows)
    means = {b: sum(r["baselines"][b] for r in rows) / n for b in names}
    rule = min(names, key=lambda b: (means[b], BASELINES.index(b)))
    diffs = [r["baselines"][rule] - r["abs_error"] for r in rows]
    edge = sum(diffs) / n
    se = statistics.stdev(diffs) / math.sqrt(n) if n > 1 else None
    clear = max(CLEAR_GAIN, 2 * se if se is not None else 0.0)
    verdict = ("better" if edge >= clear else "barely better" if edge > 0 else
               "no better" if edge > -clear else "worse")
    return {"rule": rule, "rule_error": round(means[rule], 3),
            "recommender_error": round(sum(r["abs_error"] for r in rows) / n, 3),
            "edge": round(edge, 3), "se": None if se is None else round(se, 3),
            "clear_at": round(clear, 3), "verdict": verdict}
