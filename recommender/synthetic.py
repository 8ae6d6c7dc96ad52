"""Synthetic weight-search worlds with a known truth, to measure the recommender.

A world: tasks with training sizes spread log-uniformly over 10^2.5 .. 10^5.7; each task's true
best weight follows LAW (high for small tasks, low for large ones, as the SIWLM paper reports)
plus a task-to-task scatter of sd TASK_SD, clipped to [1, 15]. A task's score at weight w is
a concave curve peaking at its best weight, with a peak height that differs per task; a fraction
FLAT_SHARE of tasks has no peak at all (the weight does not matter). Seed noise per trial is
larger for small tasks (small dev sets), 0.4 .. 2 points. Everything is drawn from one
`numpy.random.Generator`, so a seed fixes the world.

Paired settings (`world_task`): each task of a world draws from its own generator, keyed by
(world, task), and its seed noise comes from a fixed-width block of which a study with n seeds
uses the first n columns. So the world with 8 tasks holds the world with 4, and the study with 5
seeds the one with 3: comparing settings compares the same tasks (common random numbers), and
a difference in error is the setting's, not the draw's.

Per-epoch curves (`epoch_curves`, for the search benchmark): the scores above are the last
epoch's. Earlier epochs of the same trial lie below them by a rise common to every weight
(RISE points at epoch 0, shrinking linearly), show only part of the final curve's shape (the
fraction sqrt(epoch / epochs): which weight wins forms as training goes on), give larger
weights a small head start (EARLY_LEAD points at the first epoch between weights 1 and 15,
gone by the last: the central task's loss is scaled up, so it learns faster early), and carry
extra seed noise: a random walk backwards from the last epoch, so a trial's epochs are
correlated and the first epoch's seed noise is sqrt(1 + EARLY_NOISE^2) times the last's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from recommender.recommend import EvidencePoint, _point

GRID = (1.0, 3.0, 6.0, 9.0, 12.0, 15.0)
TASK_SD = 1.5
FLAT_SHARE = 0.2
LOG_SIZE_RANGE = (2.5, 5.7)
NOISE_BLOCK = 8  # seed-noise columns drawn per weight (the most seeds that stay paired)
EPOCHS = 5  # MT-DNN's default
RISE = 4.0  # points the score climbs from epoch 0 to the last, the same at every weight
EARLY_LEAD = 0.5  # points weight 15 leads weight 1 by at the first epoch, beyond the curve
EARLY_NOISE = 1.0  # first epoch's extra seed noise, relative to the last epoch's


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
    height: float = 0.0  # points the curve drops from its peak to 7 weight units away
    noise: float = 0.0  # seed noise sd of the last epoch, points

    def true_score(self, weight: float) -> float:
        """The noise-free last-epoch score at `weight`."""
        return BASE - self.height * min(abs(weight - self.true_best) / 7.0, 1.0) ** 2

    def top2(self, grid: tuple[float, ...] = GRID) -> set[float]:
        """The grid's two best weights by the true curve; ties included (a flat task: all)."""
        scores = {w: self.true_score(w) for w in grid}
        second = sorted(scores.values(), reverse=True)[min(1, len(grid) - 1)]
        return {w for w, v in scores.items() if v >= second - 1e-9}


BASE = 80.0


def noise_sd(log_size: float) -> float:
    return float(np.interp(log_size, LOG_SIZE_RANGE, (2.0, 0.4)))


def make_task(rng: np.random.Generator, name: str, seeds: int, log_size: float | None = None,
              grid: tuple[float, ...] = GRID) -> SyntheticTask:
    x = float(rng.uniform(*LOG_SIZE_RANGE)) if log_size is None else log_size
    best = float(np.clip(law(x) + rng.normal(0.0, TASK_SD), 1.0, 15.0))
    flat = bool(rng.random() < FLAT_SHARE)
    height = 0.0 if flat else float(rng.uniform(1.5, 5.0))  # points gained from w far to best
    sd = noise_sd(x)
    # One block of noise, whatever the seeds: n seeds use its first n columns.
    noise = rng.standard_normal((len(grid), max(seeds, NOISE_BLOCK))) * sd
    values = {}
    for i, w in enumerate(grid):
        mean = BASE - height * min(abs(w - best) / 7.0, 1.0) ** 2
        values[w] = [float(mean + e) for e in noise[i, :seeds]]
    return SyntheticTask(name=name, train_size=round(10 ** x), true_best=best, flat=flat,
                         values=values, height=height, noise=sd)


def make_world(seed: int, tasks: int, seeds: int) -> list[SyntheticTask]:
    return [world_task(seed, 0, i, seeds) for i in range(tasks)]


def world_task(world: int, role: int, index: int, seeds: int) -> SyntheticTask:
    """Task `index` of world `world`, from a generator of its own (role 0: the tasks a study
    database holds; role 1: new tasks to predict)."""
    rng = np.random.default_rng(np.random.SeedSequence(world, spawn_key=(role, index)))
    return make_task(rng, f"{'t' if role == 0 else 'new'}{index}", seeds)


@dataclass(frozen=True)
class EpochCurves:
    """Every trial of a task epoch by epoch: weight -> per seed -> scores at epochs 1..epochs
    (the last is the task's `values`)."""

    task: SyntheticTask
    epochs: int
    scores: dict[float, list[list[float]]] = field(repr=False)

    def mean_at(self, weight: float, epoch: int) -> float:
        """The mean over seeds at `epoch`: what halving promotes by."""
        return float(np.mean([run[epoch - 1] for run in self.scores[weight]]))


def epoch_curves(task: SyntheticTask, rng: np.random.Generator, epochs: int = EPOCHS,
                 early_lead: float = EARLY_LEAD, early_noise: float = EARLY_NOISE,
                 ) -> EpochCurves:
    """Per-epoch scores of every trial of `task`, ending at its last-epoch scores."""
    steps = max(epochs - 1, 1)
    walk_sd = task.noise * early_noise / math.sqrt(steps)
    out: dict[float, list[list[float]]] = {}
    for w, finals in task.values.items():
        shape = task.true_score(w) - BASE
        runs = []
        for final in finals:
            seed_part = final - task.true_score(w)  # the last epoch's seed noise, kept
            extra = np.concatenate([np.cumsum(rng.normal(0.0, walk_sd, epochs - 1))[::-1], [0]])
            run = []
            for e in range(1, epochs + 1):
                left = (epochs - e) / epochs  # share of training still to come
                lead = early_lead * (w - 1.0) / 14.0 * (epochs - e) / steps
                run.append(BASE - RISE * left + shape * math.sqrt(e / epochs) + lead
                           + seed_part + float(extra[e - 1]))
            runs.append(run)
        out[w] = runs
    return EpochCurves(task=task, epochs=epochs, scores=out)


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
    error of the point estimate.

    Predictions within a world share its fit, so they are not independent: `coverage_se` is the
    standard error from the spread of the per-world coverage (clustered by world), and
    `coverage_se_binomial` what independent predictions would give. With held_out=1 every
    prediction has a world of its own and the two agree in expectation."""
    from recommender.recommend import recommend_from

    per_world, errors = [], []
    for k in range(worlds):
        world = first_seed + k
        train = [as_evidence(t) for t in make_world(world, tasks, seeds)]
        hits = 0
        for j in range(held_out):
            new = world_task(world, 1, j, seeds)
            rec = recommend_from(train, new.train_size)
            hits += rec.interval[0] <= new.true_best <= rec.interval[1]
            errors.append(abs(rec.central_weight - new.true_best))
        per_world.append(hits / held_out)
    n = worlds * held_out
    coverage = float(np.mean(per_world))
    clustered = float(np.std(per_world, ddof=1) / math.sqrt(worlds)) if worlds > 1 else math.nan
    return {"tasks": tasks, "seeds": seeds, "worlds": worlds, "predictions": n,
            "coverage80": coverage, "mean_abs_error": float(np.mean(errors)),
            "errors": errors, "coverage_se": clustered,
            "coverage_se_binomial": math.sqrt(coverage * (1 - coverage) / n)}
