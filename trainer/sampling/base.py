"""What a batch-order strategy is, and the base class of the built-in ones."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

Batches = Mapping[str, list[np.ndarray]]  # task -> its batches (row indices), in task order
Plan = list[tuple[str, np.ndarray]]  # one epoch: (task, row indices) per update

PREFIX = "sampling"


class Sampler(abc.ABC):
    """Orders one epoch's batches, one task per batch.

    Lifecycle, as the training loop uses it:

    - `__init__(settings, tasks)` once per run, through `build_sampler`, after the settings were
      validated against the run's tasks (central task first, then the others in config order).
    - `order(batches, seed, epoch)` once per epoch, before the epoch trains (the loop builds
      every epoch's plan up front, since the learning-rate schedule needs the number of
      updates). `batches` holds each task's batches for this epoch. The result is the epoch's
      updates in order; it may leave batches out (an epoch that ends when one task's batches
      run out) but never uses one twice.

    `order` must be a pure function of its arguments: a resumed run rebuilds the plans and must
    get the same updates as an uninterrupted one. Randomness comes from
    `np.random.default_rng([seed, epoch, ...])`.
    """

    name: ClassVar[str]
    settings_type: ClassVar[type]

    def __init__(self, settings: Any, tasks: Sequence[str]) -> None:
        self.settings = settings
        self.tasks = tuple(tasks)

    @abc.abstractmethod
    def order(self, batches: Batches, seed: int, epoch: int) -> Plan:
        """The epoch's updates."""


def rng(seed: int, epoch: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng([int(seed) % 2**32, int(epoch) % 2**32, *stream])
