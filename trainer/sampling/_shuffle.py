"""MT-DNN's order: every batch of every task once per epoch, all of them shuffled together."""

from __future__ import annotations

from dataclasses import dataclass, field

from weightsearch.trainer.sampling.base import Batches, Plan, Sampler, SamplerSettings, rng


@dataclass(frozen=True)
class ShuffleSettings(SamplerSettings):
    """No settings: every batch once, all shuffled together."""

    scheme: str = field(default="shuffle", init=False)


class ShuffleSampler(Sampler):
    name = "shuffle"
    settings_type = ShuffleSettings

    def order(self, batches: Batches, seed: int, epoch: int, keep_order: bool = False) -> Plan:
        if keep_order:  # the reference: shuffle the sequence of task ids, then take each
            ids = [task for task, task_batches in batches.items() for _ in task_batches]
            queues = {task: iter(task_batches) for task, task_batches in batches.items()}
            return [(ids[i], next(queues[ids[i]]))
                    for i in rng(seed, epoch, 0).permutation(len(ids))]
        plan = [(task, b) for task, task_batches in batches.items() for b in task_batches]
        permutation = rng(seed, epoch, 0).permutation(len(plan))
        return [plan[i] for i in permutation]
