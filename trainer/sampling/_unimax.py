"""UniMax (Chung et al. 2023, "UniMax: Fairer and More Effective Language Sampling for
Large-Scale Multilingual Pretraining", Algorithm 1): a budget spread uniformly over the tasks,
no task repeated more than `max_epochs` times.

Their Algorithm 1, with tasks for languages and batches for characters: visit the tasks in
increasing order of size; each gets an equal share of the budget still left,
`remaining / tasks still to visit`, but at most `max_epochs * n_t` (`max_epochs` passes over its
data); what it does not take is left to the larger tasks that follow. A task smaller than its
share is capped and its leftover redistributed; the largest tasks split what remains equally.

The budget of an epoch is the number of updates of an MT-DNN epoch (every task's batches once:
sum_t n_t), so a UniMax run costs what a shuffled one costs; n_t is a task's number of batches
(as for the other size rules: `_sizes`). With `max_epochs` >= 1 the tasks can always absorb the
whole budget. The paper turns the allocation into sampling probabilities; here each epoch trains
exactly its allocation, in whole batches: the fractional allocations are rounded down and the
batches left over given one each to the tasks with the largest remainders (ties: the smaller
task first, then config order), never beyond a task's `floor(max_epochs * n_t)`. The epoch's
updates are those batches in a random order seeded by (seed, epoch); a task allocated more than
its batches goes through them again in whole passes (`base.in_passes`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from weightsearch.core.fields import setting
from weightsearch.trainer.sampling.base import (
    Batches,
    Plan,
    Real,
    Sampler,
    SamplerSettings,
    in_passes,
    rng,
)


@dataclass(frozen=True)
class UnimaxSettings(SamplerSettings):
    """UniMax's allocation; `max_epochs` must be given."""

    max_epochs: float = setting(1.0, Real(
        "a number >= 1 (the most passes over a task's batches in one epoch)", 1,
        required="required for scheme 'unimax'; give the most passes over a task's batches "
        "in one epoch, e.g. max_epochs: 4"),
        doc="The most passes over a task's batches in one epoch (>= 1).")
    scheme: str = field(default="unimax", init=False)


class UnimaxSampler(Sampler):
    name = "unimax"
    settings_type = UnimaxSettings
    repeats_batches = True

    def allocation(self, sizes: Mapping[str, int]) -> dict[str, Fraction]:
        """Algorithm 1's allocation of the epoch's budget (sum of the sizes), exact."""
        index = {task: t for t, task in enumerate(sizes)}
        visit = sorted((task for task, n in sizes.items() if n > 0),
                       key=lambda task: (sizes[task], index[task]))
        remaining = Fraction(sum(int(n) for n in sizes.values()))
        limit = Fraction(self.settings.max_epochs)
        out = dict.fromkeys(sizes, Fraction(0))
        for i, task in enumerate(visit):
            share = remaining / (len(visit) - i)
            out[task] = min(share, limit * int(sizes[task]))
            remaining -= out[task]
        return out

    def counts(self, sizes: Mapping[str, int]) -> dict[str, int]:
        """Each task's updates in an epoch: the allocation in whole batches."""
        exact = self.allocation(sizes)
        limit = Fraction(self.settings.max_epochs)
        caps = {task: math.floor(limit * int(n)) for task, n in sizes.items()}
        counts = {task: min(math.floor(a), caps[task]) for task, a in exact.items()}
        left = sum(int(n) for n in sizes.values()) - sum(counts.values())
        index = {task: t for t, task in enumerate(sizes)}
        ranked = sorted(sizes, key=lambda task: (-(exact[task] - counts[task]), sizes[task],
                                                 index[task]))
        while left > 0:
            open_ = [task for task in ranked if counts[task] < caps[task]]
            if not open_:  # cannot happen with max_epochs >= 1: the caps hold the budget
                break
            for task in open_[:left]:
                counts[task] += 1
            left -= len(open_[:left])
        return counts

    def batches_used(self, sizes: Mapping[str, int]) -> dict[str, int | None]:
        return dict(self.counts(sizes))

    def order(self, batches: Batches, seed: int, epoch: int, keep_order: bool = False) -> Plan:
        counts = self.counts({task: len(b) for task, b in batches.items()})
        sequence = [task for task in batches for _ in range(counts[task])]
        sequence = [sequence[i] for i in rng(seed, epoch, 8).permutation(len(sequence))]
        queues = {task: iter(in_passes(list(b), counts[task], seed, epoch, t, keep_order))
                  for t, (task, b) in enumerate(batches.items())}
        return [(task, next(queues[task])) for task in sequence]
