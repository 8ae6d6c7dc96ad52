"""Batch-order strategies: how one epoch's batches are sequenced, one task per batch.

YAML (`sampling` key of a run config):

    sampling: {scheme: shuffle}                       # MT-DNN (the default)
    sampling: {scheme: weighted, weights: {squad2: 0.8}, epoch_ends_with: squad2}
                                                      # + others: share | number
    sampling: {scheme: proportional}                  # p_t ∝ n_t (batches)
    sampling: {scheme: sqrt}                          # p_t ∝ sqrt(n_t)
    sampling: {scheme: temperature, T: 2, cap: 65536} # p_t ∝ min(n_t, cap)^(1/T) (T5)
    sampling: {scheme: unimax, max_epochs: 4}         # UniMax's allocation (Chung et al.)

The order composes with any loss-weighting scheme: weighting schemes see each update's task,
epoch and step, whatever order produced it.

Adding a sampler: one module with its settings (a `SamplerSettings` dataclass whose settings
are fields `x: T = setting(default, Rule, doc=...)`) and its `Sampler` subclass, and one
`register_sampler` call (the built-in ones are below). What the run config and the sweep need
to know about its settings, the settings class says itself (`task_problems`, `to_dict`,
`keep_tasks`; see `base.SamplerSettings`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from weightsearch.core.fields import unknown_keys
from weightsearch.core.registry import Registry
from weightsearch.trainer.sampling._shuffle import ShuffleSampler, ShuffleSettings
from weightsearch.trainer.sampling._sizes import (
    ProportionalSampler,
    ProportionalSettings,
    SizeRuleSampler,
    SqrtSampler,
    SqrtSettings,
    TemperatureSampler,
    TemperatureSettings,
)
from weightsearch.trainer.sampling._unimax import UnimaxSampler, UnimaxSettings
from weightsearch.trainer.sampling._weighted import WeightedSampler, WeightedSettings
from weightsearch.trainer.sampling.base import (
    PREFIX,
    Batches,
    Plan,
    Real,
    Sampler,
    SamplerContext,
    SamplerSettings,
)


def _has_settings(sampler: type[Sampler]) -> None:
    settings = getattr(sampler, "settings_type", None)
    if not (isinstance(settings, type) and issubclass(settings, SamplerSettings)):
        raise TypeError(f"{sampler.__name__}.settings_type must be a SamplerSettings subclass")


SAMPLERS: Registry = Registry("batch sampler", Sampler, _has_settings)


def register_sampler(sampler: type[Sampler]) -> type[Sampler]:
    """Make `sampler` available as `sampling: {scheme: <its name>}` (usable as a decorator).
    A name already taken is refused: unregister the other one first."""
    return SAMPLERS.register(sampler)


def unregister_sampler(name: str) -> None:
    """Remove the sampler registered as `name` (for tests and plug-ins); absent: nothing."""
    SAMPLERS.unregister(name)


for _builtin in (ShuffleSampler, WeightedSampler, ProportionalSampler, SqrtSampler,
                 TemperatureSampler, UnimaxSampler):
    register_sampler(_builtin)
del _builtin

__all__ = ["SAMPLERS", "Batches", "Plan", "ProportionalSettings", "Real", "Sampler",
           "SamplerContext", "SamplerSettings", "ShuffleSettings", "SizeRuleSampler",
           "SqrtSettings", "TemperatureSettings", "UnimaxSettings", "WeightedSettings",
           "build_sampler", "keep_tasks", "parse_sampling", "register_sampler", "scheme_keys",
           "unregister_sampler"]


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
    keys = ("scheme", *settings_type.KEYS)  # type: ignore[attr-defined]
    if unknown_keys(raw, keys, problems, f"{PREFIX}.", owner=f"scheme {name!r}"):
        return None
    context = SamplerContext(tuple(tasks))
    return settings_type.from_mapping(raw, context, problems)  # type: ignore[attr-defined]


def build_sampler(settings: Any, tasks: Sequence[str]) -> Sampler:
    return SAMPLERS[settings.scheme](settings, tasks)


def scheme_keys(name: object) -> tuple[str, ...] | None:
    """The YAML keys the sampler registered as `name` takes besides `scheme`; None if unknown."""
    sampler = SAMPLERS.get(name) if isinstance(name, str) else None
    return None if sampler is None else tuple(sampler.settings_type.KEYS)


def keep_tasks(raw: Any, keep: set[str]) -> Any:
    """The YAML `sampling` value for a run that trains only the tasks in `keep`: what its
    scheme's settings say (`SamplerSettings.keep_tasks`). A value that is not a mapping of a
    known scheme comes back as it is, for the run config to report."""
    if not isinstance(raw, Mapping):
        return raw
    name = raw.get("scheme", "shuffle")
    sampler = SAMPLERS.get(name) if isinstance(name, str) else None
    return raw if sampler is None else sampler.settings_type.keep_tasks(raw, keep)
