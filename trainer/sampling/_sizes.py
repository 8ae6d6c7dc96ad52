"""Sampling rules by size: each update's task drawn at random, with a probability set by the
tasks' sizes.

    proportional   p_t ∝ n_t                      (examples-proportional mixing)
    sqrt           p_t ∝ sqrt(n_t)
    temperature    p_t ∝ min(n_t, cap)^(1/T)      (Raffel et al. 2020, T5, section 3.5.2: their
                                                   temperature-scaled mixing with the size
                                                   limit K; T = 1 with no cap is proportional)

n_t is task t's number of batches in the epoch, not its number of examples: a draw picks a
batch, which is what an update costs; batches are the unit of the epoch's budget below; and a
batch count means the same for every task type (a ranking task's batch holds whole question
groups, whose rows are candidates). All tasks share one batch size, so batch counts are example
counts divided by it, up to each task's last, partial batch: the probabilities are those of the
example counts. `cap` is therefore in batches too: T5's K = 2^21 examples is 65,536 batches of
32.

An epoch is as many updates as an MT-DNN epoch (every task's batches once: sum_t n_t), so a run
under a size rule costs what a shuffled one costs. Each update draws its task independently from
p (the draw of `weighted`'s batch selection, `base.pick`); a task drawn more often than it has
batches goes through its batches again, in whole passes, each in an order of its own
(`base.in_passes`); one drawn less often leaves the rest of its batches unused this epoch.
Seeded by (seed, epoch), so a resumed run replays the plan. A task with no batches gets p_t = 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from weightsearch.core.fields import setting
from weightsearch.trainer.sampling.base import (
    Batches,
    Plan,
    Real,
    Sampler,
    SamplerSettings,
    in_passes,
    pick,
    rng,
)


@dataclass(frozen=True)
class ProportionalSettings(SamplerSettings):
    """No settings: p_t ∝ n_t."""

    scheme: str = field(default="proportional", init=False)


@dataclass(frozen=True)
class SqrtSettings(SamplerSettings):
    """No settings: p_t ∝ sqrt(n_t)."""

    scheme: str = field(default="sqrt", init=False)


@dataclass(frozen=True)
class TemperatureSettings(SamplerSettings):
    """p_t ∝ min(n_t, cap)^(1/T); T must be given (T: 1 with no cap is proportional)."""

    T: float = setting(1.0, Real(
        "a number > 0 (1 samples in proportion to size, larger flattens towards uniform)", 0,
        low_open=True, required="required for scheme 'temperature'; give the temperature, e.g. "
        "T: 2 (T: 1 with no cap samples in proportion to size)"),
        doc="The temperature (> 0; 1 is proportional, larger flattens towards uniform).")
    cap: float | None = setting(None, Real(
        "a number of batches >= 1 (T5's size limit K), or left out for no cap", 1,
        optional=True), doc="T5's size limit K, in batches (>= 1); null: no cap.")
    scheme: str = field(default="temperature", init=False)


class SizeRuleSampler(Sampler):
    """Draws each update's task from `probabilities` (see the module docstring)."""

    repeats_batches = True

    def mass(self, n: int) -> float:
        """The unnormalised probability of a task with `n` batches (0 for none)."""
        raise NotImplementedError

    def probabilities(self, sizes: Mapping[str, int]) -> dict[str, float]:
        """Each task's probability of being drawn, from its number of batches."""
        mass = {task: self.mass(int(n)) if n > 0 else 0.0 for task, n in sizes.items()}
        total = sum(mass.values())
        return {task: (m / total if total > 0 else 0.0) for task, m in mass.items()}

    def batches_used(self, sizes: Mapping[str, int]) -> dict[str, int | None]:
        p = self.probabilities(sizes)
        return {task: None if p[task] > 0 else 0 for task in sizes}

    def order(self, batches: Batches, seed: int, epoch: int, keep_order: bool = False) -> Plan:
        sizes = {task: len(b) for task, b in batches.items()}
        p = self.probabilities(sizes)
        tasks = [task for task in batches if p[task] > 0]
        if not tasks:
            return []
        uniforms = rng(seed, epoch, 6).random(sum(sizes.values()))
        draws = pick(np.array([p[t] for t in tasks]), uniforms)
        sequence = [tasks[int(i)] for i in draws]
        index = {task: t for t, task in enumerate(batches)}
        queues = {task: iter(in_passes(list(batches[task]), sequence.count(task), seed, epoch,
                                       index[task], keep_order)) for task in tasks}
        return [(task, next(queues[task])) for task in sequence]


class ProportionalSampler(SizeRuleSampler):
    name = "proportional"
    settings_type = ProportionalSettings

    def mass(self, n: int) -> float:
        return float(n)


class SqrtSampler(SizeRuleSampler):
    name = "sqrt"
    settings_type = SqrtSettings

    def mass(self, n: int) -> float:
        return math.sqrt(n)


class TemperatureSampler(SizeRuleSampler):
    name = "temperature"
    settings_type = TemperatureSettings

    def mass(self, n: int) -> float:
        cap = self.settings.cap
        return float(min(n, cap) if cap is not None else n) ** (1.0 / self.settings.T)
