"""Batch-order strategies: how one epoch's batches are sequenced, one task per batch.

YAML (`sampling` key of a run config):

    sampling: {scheme: shuffle}                       # MT-DNN (the default)
    sampling: {scheme: weighted, weights: {squad2: 0.8}, epoch_ends_with: squad2}
                                                      # + others: share | number

The order composes with any loss-weighting scheme: weighting schemes see each update's task,
epoch and step, whatever order produced it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainer.sampling._shuffle import ShuffleSampler, ShuffleSettings
from trainer.sampling._weighted import WeightedSampler, WeightedSettings
from trainer.sampling.base import PREFIX, Batches, Plan, Sampler

SAMPLERS: dict[str, type[Sampler]] = {s.name: s for s in (ShuffleSampler, WeightedSampler)}

__all__ = ["SAMPLERS", "Batches", "Plan", "Sampler", "ShuffleSettings", "WeightedSettings",
           "build_sampler", "parse_sampling"]


def parse_sampling(raw: object, tasks: Sequence[str], problems: list[str]) -> Any:
    """Settings from the YAML `sampling` value (absent: shuffle); None after a problem."""
    if raw is None:
        return ShuffleSettings()
    known = ", ".join(SAMPLERS)
    if not isinstance(raw, Mapping):
        problems.append(f"{PREFIX}: must be a mapping such as {{scheme: weighted, weights: "
                        f"{{squad2: 0.8}}}}, got {type(raw).__name__}")
        return None
    name = raw.get("scheme", "shuffle")
    if name not in SAMPLERS:
        problems.append(f"{PREFIX}.scheme: unknown scheme {name!r}; choose one of {known}")
        return None
    settings_type = SAMPLERS[name].settings_type
    unknown = [k for k in raw if k not in ("scheme", *settings_type.KEYS)]  # type: ignore
    for key in unknown:
        allowed = ", ".join(("scheme", *settings_type.KEYS))  # type: ignore[attr-defined]
        problems.append(f"{PREFIX}.{key}: not a setting of scheme {name!r}; its settings are "
                        f"{allowed}")
    if unknown:
        return None
    return settings_type.from_mapping(raw, tasks, problems)  # type: ignore[attr-defined]


def build_sampler(settings: Any, tasks: Sequence[str]) -> Sampler:
    return SAMPLERS[settings.scheme](settings, tasks)
