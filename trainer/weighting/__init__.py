"""Loss-weighting schemes: named, pure strategies that give each batch its loss weight.

YAML (`weighting` key of a run config):

    weighting: {scheme: siwlm, central_weight: 9}    # + variant, aux_weight, aux_weights,
                                                     #   focus_span, off_focus
    weighting: {scheme: equal}
    weighting: {scheme: static, weights: {rte: 3}}   # unlisted tasks get 1.0

A config without a `weighting` key trains with `equal` (plain MT-DNN): SIWLM cannot default,
because its central weight is the very value a search has to choose. A `weighting` mapping
must name its scheme.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Union

from trainer.weighting._checks import PREFIX
from trainer.weighting._equal import EqualScheme, EqualSettings
from trainer.weighting._siwlm import VARIANTS, SiwlmScheme, SiwlmSettings
from trainer.weighting._static import StaticScheme, StaticSettings
from trainer.weighting.base import Scheme, Settings, WeightingScheme
from weightsearch.errors import ConfigError

__all__ = [
    "SCHEMES",
    "VARIANTS",
    "EqualScheme",
    "EqualSettings",
    "Scheme",
    "Settings",
    "SiwlmScheme",
    "SiwlmSettings",
    "StaticScheme",
    "StaticSettings",
    "WeightingScheme",
    "WeightingSettings",
    "build_scheme",
    "parse_weighting",
    "scheme_problems",
]

WeightingSettings = Union[SiwlmSettings, EqualSettings, StaticSettings]  # noqa: UP007

SCHEMES: dict[str, type[Scheme]] = {
    scheme.name: scheme for scheme in (SiwlmScheme, EqualScheme, StaticScheme)
}


def parse_weighting(raw: object, problems: list[str]) -> WeightingSettings | None:
    """Settings from the YAML `weighting` value (None when the key is absent: `equal`).

    Appends one message per problem to `problems` and returns None if there was any.
    """
    if raw is None:
        return EqualSettings()
    known = ", ".join(sorted(SCHEMES))
    if not isinstance(raw, Mapping):
        problems.append(
            f"{PREFIX}: must be a mapping such as {{scheme: siwlm, central_weight: 9}}, "
            f"got {type(raw).__name__}"
        )
        return None
    name = raw.get("scheme")
    if name is None:
        problems.append(f"{PREFIX}.scheme: required; choose one of {known}")
        return None
    if not isinstance(name, str) or name not in SCHEMES:
        problems.append(f"{PREFIX}.scheme: unknown scheme {name!r}; choose one of {known}")
        return None
    return SCHEMES[name].settings_type.from_mapping(raw, problems)  # type: ignore[attr-defined]


def scheme_problems(
    settings: WeightingSettings, tasks: Sequence[str], central_task: str | None
) -> list[str]:
    """Every problem of `settings` on its own and with the run's tasks (empty if it is fine)."""
    if not isinstance(settings, Settings) or getattr(settings, "scheme", None) not in SCHEMES:
        return [f"{PREFIX}: not a weighting settings object: {settings!r}"]
    found = list(settings.problems())
    if not tasks:
        found.append("tasks: at least one task is needed")
    elif len(set(tasks)) != len(tasks):
        found.append(f"tasks: names must be unique, got {', '.join(tasks)}")
    found.extend(settings.task_problems(tasks, central_task))
    return found


def build_scheme(
    settings: WeightingSettings, tasks: Sequence[str], central_task: str | None
) -> WeightingScheme:
    """The scheme for a run; `tasks` ordered central task first. Raises ConfigError."""
    found = scheme_problems(settings, tasks, central_task)
    if found:
        raise ConfigError(found)
    return SCHEMES[settings.scheme](settings, tasks, central_task)
