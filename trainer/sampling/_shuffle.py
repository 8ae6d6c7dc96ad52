"""MT-DNN's order: every batch of every task once per epoch, all of them shuffled together."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from trainer.sampling.base import Batches, Plan, Sampler, rng


@dataclass(frozen=True)
class ShuffleSettings:
    scheme: str = field(default="shuffle", init=False)

    KEYS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], tasks: Sequence[str],
                     problems: list[str]) -> ShuffleSettings:
        return cls()


class ShuffleSampler(Sampler):
    name = "shuffle"
    settings_type = ShuffleSettings

    def order(self, batches: Batches, seed: int, epoch: int) -> Plan:
        plan = [(task, b) for task, task_batches in batches.items() for b in task_batches]
        permutation = rng(seed, epoch, 0).permutation(len(plan))
        return [plan[i] for i in permutation]
