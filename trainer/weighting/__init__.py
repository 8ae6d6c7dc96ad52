"""Loss-weighting schemes: named, pure strategies that give each batch its loss weight.

YAML (`weighting` key of a run config):

    weighting: {scheme: siwlm, central_weight: 9}    # + variant, aux_weight, aux_weights,
                                                     #   focus_span, off_focus
    weighting: {scheme: equal}
    weighting: {scheme: static, weights: {rte: 3}}   # unlisted tasks get 1.0
    weighting: {scheme: uncertainty}                 # learned log-variances (Kendall et al.)
                                                     #   + lr
    weighting: {scheme: dwa}                         # dynamic weight average (Liu et al.)
                                                     #   + temperature

A config without a `weighting` key trains with `equal` (plain MT-DNN): SIWLM cannot default,
because its central weight is the very value a search has to choose. A `weighting` mapping
must name its scheme.

Adding a scheme: one module with its settings (a frozen dataclass mixing in `base.Settings`,
whose `scheme` field names it and whose settings are fields `x: T = setting(default, Rule,
doc=...)`; what they must satisfy with the run's tasks in `task_problems`) and its `Scheme`
subclass, and one `register_scheme` call (the built-in ones are below). What other code needs
to know about a scheme, its settings class says itself (e.g. `Settings.has_central_weight`,
which a weight search reads). A scheme whose
weights are learned or follow the losses (uncertainty, dwa) uses the hooks of `base.Scheme`
(`setup`, `weighted_loss`, `end_epoch`, `state_dict`); the others leave them alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Union

from weightsearch.core.errors import ConfigError
from weightsearch.core.registry import Registry, positional_parameters
from weightsearch.trainer.weighting._checks import PREFIX
from weightsearch.trainer.weighting._dwa import DwaScheme, DwaSettings
from weightsearch.trainer.weighting._equal import EqualScheme, EqualSettings
from weightsearch.trainer.weighting._siwlm import VARIANTS, SiwlmScheme, SiwlmSettings
from weightsearch.trainer.weighting._static import StaticScheme, StaticSettings
from weightsearch.trainer.weighting._uncertainty import UncertaintyScheme, UncertaintySettings
from weightsearch.trainer.weighting.base import Scheme, SchemeContext, Settings, WeightingScheme

__all__ = [
    "SCHEMES",
    "VARIANTS",
    "DwaScheme",
    "DwaSettings",
    "EqualScheme",
    "EqualSettings",
    "Scheme",
    "SchemeContext",
    "Settings",
    "SiwlmScheme",
    "SiwlmSettings",
    "StaticScheme",
    "StaticSettings",
    "UncertaintyScheme",
    "UncertaintySettings",
    "WeightingScheme",
    "WeightingSettings",
    "build_scheme",
    "has_central_weight",
    "parse_weighting",
    "register_scheme",
    "scheme_keys",
    "scheme_problems",
    "unregister_scheme",
]

# The built-in settings types; a registered scheme brings its own `Settings` subclass.
WeightingSettings = Union[  # noqa: UP007
    SiwlmSettings, EqualSettings, StaticSettings, UncertaintySettings, DwaSettings]

def _has_settings(scheme: type[Scheme]) -> None:
    settings = getattr(scheme, "settings_type", None)
    if not (isinstance(settings, type) and issubclass(settings, Settings)
            and dataclasses.is_dataclass(settings)):
        raise TypeError(f"{scheme.__name__}.settings_type must be a dataclass mixing in "
                        "weightsearch.trainer.weighting.Settings")
    fields = {f.name: f for f in dataclasses.fields(settings)}
    if "scheme" not in fields or fields["scheme"].default != scheme.name:
        raise ValueError(f"{settings.__name__} needs a field `scheme: str = "
                         f"field(default={scheme.name!r}, init=False)` naming its scheme")


SCHEMES: Registry = Registry("weighting scheme", Scheme, _has_settings)


def register_scheme(scheme: type[Scheme]) -> type[Scheme]:
    """Make `scheme` available as `weighting: {scheme: <its name>}` (usable as a decorator).
    A name already taken is refused: unregister the other one first."""
    return SCHEMES.register(scheme)


def unregister_scheme(name: str) -> None:
    """Remove the scheme registered as `name` (for tests and plug-ins); absent: nothing."""
    SCHEMES.unregister(name)


for _builtin in (SiwlmScheme, EqualScheme, StaticScheme, UncertaintyScheme, DwaScheme):
    register_scheme(_builtin)
del _builtin


def has_central_weight(name: object) -> bool:
    """Whether the scheme registered as `name` takes a `central_weight` setting (the value a
    weight search sweeps); False for an unknown name."""
    scheme = SCHEMES.get(name) if isinstance(name, str) else None
    return scheme is not None and bool(scheme.settings_type.has_central_weight)


def scheme_keys(name: object) -> tuple[str, ...] | None:
    """The YAML keys the scheme registered as `name` takes besides `scheme`; None if unknown."""
    scheme = SCHEMES.get(name) if isinstance(name, str) else None
    return None if scheme is None else tuple(scheme.settings_type.KEYS)


def parse_weighting(raw: object, problems: list[str]) -> Settings | None:
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
    settings_type = SCHEMES[name].settings_type
    if positional_parameters(settings_type.from_mapping) == 2:  # 0.1's (raw, problems)
        return settings_type.from_mapping(raw, problems)  # type: ignore[attr-defined]
    return settings_type.from_mapping(raw, SchemeContext(), problems)  # type: ignore[attr-defined]


def scheme_problems(
    settings: Settings, tasks: Sequence[str], central_task: str | None
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
    settings: Settings, tasks: Sequence[str], central_task: str | None
) -> Scheme:
    """The scheme for a run; `tasks` ordered central task first. Raises ConfigError."""
    found = scheme_problems(settings, tasks, central_task)
    if found:
        raise ConfigError(found)
    return SCHEMES[settings.scheme](settings, tasks, central_task)  # type: ignore[attr-defined]
