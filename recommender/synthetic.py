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

World kinds (`KINDS`, for the calibration benchmark): `smooth` is the world above; the others
each break one assumption of the recommender, the rest as in `smooth`: `step` (the best weight
jumps from 12 to 4 at 10^4 examples, the paper's finding read literally), `bump` (a smooth
law with a non-monotone bump of +5 around 10^3.9), `heavy_noise` (seed noise Student-t with 3
degrees of freedom, and each task's noise scaled by a factor drawn log-normally, sd 0.5),
`two_peaks` (half the curves have a second peak 8 units away, 0.8 as high), `plateau` (half
the curves are flat within 2.5 units of their best), `ignores_size` (40% of tasks have a best
weight uniform on 1-15, whatever their size), `grids` (each study runs {1, 9}, the six-point
grid or {1, 5, 10, 15}), `sparse` (1-5 seeds per study, 15% of trials missing), `mislabelled`
(20% of studied tasks record a training size 10x too large or too small) and `regime` (half the
studies ran in another regime whose best weights lie 3 units higher). New tasks to predict are
drawn from the same world, measured in the asked regime with their true sizes.

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
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from weightsearch.recommender.evidence import EvidencePoint, point_from_scores

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


def step_law(log_size: float) -> float:
    """The paper's finding read literally: 12 below 10^4 training examples, 4 above."""
    return 12.0 if log_size < 4.0 else 4.0


def bump_law(log_size: float) -> float:
    """The smooth law with a non-monotone bump of +5 around 10^3.9."""
    return float(np.clip(law(log_size) + 5.0 * math.exp(-0.5 * ((log_size - 3.9) / 0.2) ** 2),
                         1.0, 15.0))


@dataclass(frozen=True)
class Shape:
    """How far below its peak a score curve lies at a weight, as a share of its height: 0 at
    the best weight (or within `plateau` of it), 1 from 7 units beyond; a `second` peak lies
    `second_drop` of the height below the first."""

    best: float
    second: float | None = None
    second_drop: float = 0.2
    plateau: float = 0.0

    def drop(self, weight: float) -> float:
        first = min(max(abs(weight - self.best) - self.plateau, 0.0) / 7.0, 1.0) ** 2
        if self.second is None:
            return first
        other = self.second_drop + (1 - self.second_drop) * min(
            abs(weight - self.second) / 7.0, 1.0) ** 2
        return min(first, other)


@dataclass(frozen=True)
class WorldKind:
    """A world that breaks one of the recommender's assumptions (see the module docstring)."""

    name: str
    law: Callable[[float], float] = law
    ignore_share: float = 0.0  # tasks whose best weight is uniform on 1-15
    heavy_noise: bool = False  # Student-t(3) seed noise, scaled per task
    second_peak_share: float = 0.0
    plateau_share: float = 0.0
    grids: tuple[tuple[float, ...], ...] = ()  # each study's grid, drawn from these
    seed_range: tuple[int, int] | None = None  # each study's seeds, drawn uniformly
    missing: float = 0.0  # share of trials that never finished
    mislabel_share: float = 0.0  # studied tasks whose size is recorded 10x off
    regime_share: float = 0.0  # studied tasks run in another regime ...
    regime_shift: float = 0.0  # ... whose best weights lie this much higher

    def vary(self, rng: np.random.Generator, best: float, grid: tuple[float, ...],
             seeds: int, noise: np.ndarray, sd: float, studied: bool):
        """The task's curve, study design and noise in this world."""
        if self.ignore_share and rng.random() < self.ignore_share:
            best = float(rng.uniform(1.0, 15.0))
        regime = "synthetic"
        if studied and self.regime_share and rng.random() < self.regime_share:
            regime, best = "other", float(np.clip(best + self.regime_shift, 1.0, 15.0))
        shape = Shape(best)
        if self.second_peak_share and rng.random() < self.second_peak_share:
            shape = Shape(best, second=best - 8.0 if best > 8.0 else best + 8.0)
        if self.plateau_share and rng.random() < self.plateau_share:
            shape = Shape(best, plateau=2.5)
        if self.grids and studied:
            grid = self.grids[int(rng.integers(len(self.grids)))]
        if self.seed_range and studied:
            seeds = int(rng.integers(self.seed_range[0], self.seed_range[1] + 1))
        block = (len(grid), max(seeds, NOISE_BLOCK))
        if self.heavy_noise:
            sd *= float(np.exp(rng.normal(0.0, 0.5)))
            noise = rng.standard_t(3, block) * sd / math.sqrt(3.0)  # t(3) has variance 3
        elif noise.shape != block:
            noise = rng.standard_normal(block) * sd
        if self.missing and studied:
            noise = np.where(rng.random(block) < self.missing, np.nan, noise)
        return shape, best, grid, seeds, noise, sd, regime

    def recorded_size(self, rng: np.random.Generator, size: int) -> int:
        if self.mislabel_share and rng.random() < self.mislabel_share:
            return size * 10 if rng.random() < 0.5 else max(1, size // 10)
        return size


KINDS: dict[str, WorldKind] = {k.name: k for k in (
    WorldKind("smooth"),
    WorldKind("step", law=step_law),
    WorldKind("bump", law=bump_law),
    WorldKind("heavy_noise", heavy_noise=True),
    WorldKind("two_peaks", second_peak_share=0.5),
    WorldKind("plateau", plateau_share=0.5),
    WorldKind("ignores_size", ignore_share=0.4),
    WorldKind("grids", grids=((1.0, 9.0), GRID, (1.0, 5.0, 10.0, 15.0))),
    WorldKind("sparse", seed_range=(1, 5), missing=0.15),
    WorldKind("mislabelled", mislabel_share=0.2),
    WorldKind("regime", regime_share=0.5, regime_shift=3.0),
)}


@dataclass(frozen=True)
class SyntheticTask:
    name: str
    train_size: int
    true_best: float
    flat: bool
    values: dict[float, list[float]]  # weight -> one score per seed
    height: float = 0.0  # points the curve drops from its peak to 7 weight units away
    noise: float = 0.0  # seed noise sd of the last epoch, points
    shape: Shape | None = None  # the curve's shape (None: one peak at true_best)
    regime: str = "synthetic"  # the encoder its study records

    def true_score(self, weight: float) -> float:
        """The noise-free last-epoch score at `weight`."""
        return BASE - self.height * (self.shape or Shape(self.true_best)).drop(weight)

    def top2(self, grid: tuple[float, ...] = GRID) -> set[float]:
        """The grid's two best weights by the true curve; ties included (a flat task: all)."""
        scores = {w: self.true_score(w) for w in grid}
        second = sorted(scores.values(), reverse=True)[min(1, len(grid) - 1)]
        return {w for w, v in scores.items() if v >= second - 1e-9}


BASE = 80.0


def noise_sd(log_size: float) -> float:
    return float(np.interp(log_size, LOG_SIZE_RANGE, (2.0, 0.4)))


def make_task(rng: np.random.Generator, name: str, seeds: int, log_size: float | None = None,
              grid: tuple[float, ...] = GRID, kind: WorldKind | None = None,
              studied: bool = True) -> SyntheticTask:
    """A task drawn from `rng`; `kind` changes the world (None: `smooth`), `studied` says it is
    one a study database holds (a new task to predict keeps its true size and regime)."""
    kind = kind or KINDS["smooth"]
    x = float(rng.uniform(*LOG_SIZE_RANGE)) if log_size is None else log_size
    best = float(np.clip(kind.law(x) + rng.normal(0.0, TASK_SD), 1.0, 15.0))
    flat = bool(rng.random() < FLAT_SHARE)
    height = 0.0 if flat else float(rng.uniform(1.5, 5.0))  # points gained from w far to best
    sd = noise_sd(x)
    # One block of noise, whatever the seeds: n seeds use its first n columns. The draws above
    # and this block are the same for every kind, so kinds pair with `smooth` task by task.
    noise = rng.standard_normal((len(grid), max(seeds, NOISE_BLOCK))) * sd
    shape, regime, size = Shape(best), "synthetic", round(10 ** x)
    if kind.name != "smooth":
        shape, best, grid, seeds, noise, sd, regime = kind.vary(rng, best, grid, seeds, noise,
                                                                sd, studied)
        size = kind.recorded_size(rng, size) if studied else size
    values = {}
    for i, w in enumerate(grid):
        mean = BASE - height * shape.drop(w)
        kept = [float(mean + e) for e in noise[i, :seeds] if not np.isnan(e)]
        if kept:
            values[w] = kept
    return SyntheticTask(name=name, train_size=size, true_best=best, flat=flat,
                         values=values, height=height, noise=sd, shape=shape, regime=regime)


def make_world(seed: int, tasks: int, seeds: int, kind: str = "smooth") -> list[SyntheticTask]:
    return [world_task(seed, 0, i, seeds, kind) for i in range(tasks)]


def world_task(world: int, role: int, index: int, seeds: int,
               kind: str = "smooth") -> SyntheticTask:
    """Task `index` of world `world`, from a generator of its own (role 0: the tasks a study
    database holds; role 1: new tasks to predict)."""
    rng = np.random.default_rng(np.random.SeedSequence(world, spawn_key=(role, index)))
    return make_task(rng, f"{'t' if role == 0 else 'new'}{index}", seeds, kind=KINDS[kind],
                     studied=role == 0)


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


def as_evidence(task: SyntheticTask, encoder: str | None = None,
                stage: str = "multitask") -> EvidencePoint | None:
    """The task's study as the recommender reads it; None when it has fewer than two weights
    (a study that contributes nothing)."""
    return point_from_scores(task.name, f"synthetic/{task.name}", task.train_size, "classification",
                             "studies", task.values, True, encoder or task.regime, stage, None)


def as_rows(task: SyntheticTask) -> list[dict]:
    """Rows of the import format (`weightsearch import`)."""
    return [{"central_task": task.name, "task_type": "classification",
             "train_size": task.train_size, "central_weight": w, "seed": s,
             "metric": round(v, 4)}
            for w, vs in task.values.items() for s, v in enumerate(vs)]


def coverage_and_error(worlds: int, tasks: int, seeds: int, held_out: int = 4,
                       first_seed: int = 0, kind: str = "smooth") -> dict:
    """Over `worlds` generated worlds of `kind`: fit on `tasks` tasks, predict `held_out` fresh
    tasks of the same world; the share of 80% intervals that hold the true best weight, overall
    and by cell (`weightsearch.recommender.baselines.cells`), their mean width, and the mean
    absolute error of the point estimate and of the simple rules
    (`weightsearch.recommender.baselines`).

    Predictions within a world share its fit, so they are not independent: `coverage_se` is the
    standard error from the spread of the per-world coverage (clustered by world), and
    `coverage_se_binomial` what independent predictions would give. With held_out=1 every
    prediction has a world of its own and the two agree in expectation."""
    from weightsearch.recommender.baselines import BASELINES, baseline_errors, cells
    from weightsearch.recommender.recommend import recommend_from

    per_world, errors, widths = [], [], []
    by_cell: dict[str, list[bool]] = {}
    rules: dict[str, list[float]] = {b: [] for b in BASELINES}
    for k in range(worlds):
        world = first_seed + k
        studied = make_world(world, tasks, seeds, kind)
        train = [e for e in map(as_evidence, studied) if e is not None]
        measured = [(e.train_size, e.best_weight) for e in train]
        hits = 0
        for j in range(held_out):
            new = world_task(world, 1, j, seeds, kind)
            rec = recommend_from(train, new.train_size, encoder="synthetic")
            hit = rec.law_interval[0] <= new.true_best <= rec.law_interval[1]
            hits += hit
            errors.append(abs(rec.central_weight - new.true_best))
            widths.append(rec.law_interval[1] - rec.law_interval[0])
            for axis, cell in cells(new.train_size, new.true_best,
                                    [e.train_size for e in train]).items():
                by_cell.setdefault(f"{axis}:{cell}", []).append(hit)
            for b, err in baseline_errors(new.train_size, new.true_best, measured,
                                          GRID).items():
                rules[b].append(err)
        per_world.append(hits / held_out)
    n = worlds * held_out
    coverage = float(np.mean(per_world))
    clustered = float(np.std(per_world, ddof=1) / math.sqrt(worlds)) if worlds > 1 else math.nan
    return {"kind": kind, "tasks": tasks, "seeds": seeds, "worlds": worlds, "predictions": n,
            "coverage80": coverage, "mean_abs_error": float(np.mean(errors)),
            "errors": errors, "coverage_se": clustered,
            "coverage_se_binomial": math.sqrt(coverage * (1 - coverage) / n),
            "width80": float(np.mean(widths)),
            "cells": {c: (float(np.mean(h)), len(h)) for c, h in sorted(by_cell.items())},
            "baselines": {b: float(np.mean(v)) for b, v in rules.items() if v}}
