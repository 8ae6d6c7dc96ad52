"""Synthetic weight-search worlds with a known truth, to measure the recommender.

A world: tasks with training sizes spread log-uniformly over 10^2.5 .. 10^5.7; each task's true
best weight follows LAW (high for small tasks, low for large ones, as the SIWLM paper reports)
plus a task-to-task scatter of sd TASK_SD, clipped to [1, 15]. A task's score at weight w is
a concave curve peaking at its best weight, with a peak height that differs per task; a fraction
FLAT_SHARE of tasks has no peak at all (the weight does not matter). Seed noise per trial is
larger for small tasks (small dev sets), 0.4 .. 2 points. Everything is drawn from one
`numpy.random.Generator`, so a seed fixes the world.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from studies.recommend import EvidencePoint, _point

GRID = (1.0, 3.0, 6.0, 9.0, 12.0, 15.0)
TASK_SD = 1.5
FLAT_SHARE = 0.2
LOG_SIZE_RANGE = (2.5, 5.7)


def law(log_size: float) -> float:
    """The true best weight of a typical task of 10^log_size training examples."""
    return float(np.clip(15.0 - 4.0 * (log_size - 2.5), 1.0, 15.0))


@dataclass(frozen=True)
class SyntheticTask:
    name: str
    train_size: int
    true_best: float
    flat: bool
    values: dict[float, list[float]]  # weight -> one score per seed


def noise_sd(log_size: float) -> float:
    return float(np.interp(log_size, LOG_SIZE_RANGE, (2.0, 0.4)))


def make_task(rng: np.random.Generator, name: str, seeds: int, log_size: float | None = None,
              grid: tuple[float, ...] = GRID) -> SyntheticTask:
    x = float(rng.uniform(*LOG_SIZE_RANGE)) if log_size is None else log_size
    best = float(np.clip(law(x) + rng.normal(0.0, TASK_SD), 1.0, 15.0))
    flat = bool(rng.random() < FLAT_SHARE)
    height = 0.0 if flat else float(rng.uniform(1.5, 5.0))  # points gained from w far to best
    sd = noise_sd(x)
    base = 80.0
    values = {}
    for w in grid:
        mean = base - height * min(abs(w - best) / 7.0, 1.0) ** 2
        values[w] = [float(mean + rng.normal(0.0, sd)) for _ in range(seeds)]
    return SyntheticTask(name=name, train_size=round(10 ** x), true_best=best, flat=flat,
                         values=values)


def make_world(seed: int, tasks: int, seeds: int) -> list[SyntheticTask]:
    rng = np.random.default_rng(seed)
    return [make_task(rng, f"t{i}", seeds) for i in range(tasks)]


def as_evidence(task: SyntheticTask, encoder: str = "synthetic",
                stage: str = "multitask") -> EvidencePoint:
    point = _point(task.name, f"synthetic/{task.name}", task.train_size, "classification",
                   "studies", task.values, True, encoder, stage, None)
    assert point is not None
    return point


def as_rows(task: SyntheticTask) -> list[dict]:
    """Rows of the import format (`weightsearch import`)."""
    return [{"central_task": task.name, "task_type": "classification",
             "train_size": task.train_size, "central_weight": w, "seed": s,
             "metric": round(v, 4)}
            for w, vs in task.values.items() for s, v in enumerate(vs)]


def coverage_and_error(worlds: int, tasks: int, seeds: int, held_out: int = 4,
                       first_seed: int = 0) -> dict:
    """Over `worlds` generated worlds: fit on `tasks` tasks, predict `held_out` fresh tasks of the
    same world; the share of 80% intervals that hold the true best weight, and the mean absolute
    error of the point estimate."""
    from studies.recommend import recommend_from

    hits, errors = 0, []
    for k in range(worlds):
        rng = np.random.default_rng(first_seed + k)
        train = [as_evidence(make_task(rng, f"t{i}", seeds)) for i in range(tasks)]
        for j in range(held_out):
            new = make_task(rng, f"new{j}", seeds)
            rec = recommend_from(train, new.train_size)
            hits += rec.interval[0] <= new.true_best <= rec.interval[1]
            errors.append(abs(rec.central_weight - new.true_best))
    n = worlds * held_out
    return {"tasks": tasks, "seeds": seeds, "worlds": worlds, "predictions": n,
            "coverage80": hits / n, "mean_abs_error": float(np.mean(errors)),
            "coverage_se": math.sqrt(0.8 * 0.2 / n)}
