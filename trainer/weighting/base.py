"""What a weighting scheme is, and the base class of the built-in ones."""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from weightsearch.core.registry import DeclaredKeys, check_settings
from weightsearch.trainer.weighting._checks import PREFIX, check_keys

if TYPE_CHECKING:  # torch-free at import, as the config's checks need it
    import torch


@runtime_checkable
class WeightingScheme(Protocol):
    """Gives each training batch the factor its loss is multiplied by."""

    def weight(self, task: str, epoch: int, step: int) -> float: ...

    def stage(self, epoch: int) -> str | None: ...

    def focus(self, epoch: int, step: int) -> str | None: ...


class Scheme(abc.ABC):
    """Base class of the weighting schemes (the built-in ones and any `register_scheme` adds).

    Lifecycle, as the training loop uses it:

    - `__init__(settings, tasks, central_task)` once per run, through `build_scheme`, after the
      settings were validated. `tasks` are the run's task names, central task first, then the
      auxiliary tasks in config order.
    - `stage(epoch)` at the start of every epoch, to log and report what the epoch trains
      ("swl" / "iwl" for SIWLM; None for schemes without stages).
    - `weight(task, epoch, step)` before every backward pass, with the batch's task; the batch
      loss (a plain mean over its examples) is multiplied by the returned value.
    - `focus(epoch, step)` alongside `weight`, for logs only: the task the scheme favours at that
      update, or None.

    `epoch` counts from 1; `step` is the update index within the epoch, from 0, counting every
    batch of every task. All three are pure functions of their arguments and of the scheme's
    state: no call changes that state, so the loop may call them in any order.

    A scheme may have state: weights learned with the model (uncertainty weighting's
    log-variances) or taken from the losses of past epochs (DWA). It changes only through the
    hooks below, which the loop calls at fixed points, and `state_dict` holds all of it, so that
    a resumed run gets the weights of an uninterrupted one. The defaults are those of a
    stateless scheme whose batch loss is multiplied by `weight` (siwlm, equal, static):

    - `setup(task_types, device)` once per run, after the model is built and before the
      optimizer is: the run's task types (task -> type name) and the device. Returns the
      optimizer parameter groups of the tensors the scheme learns (`{"params": [...]}`, an
      `lr` of their own where the scheme says); the loop adds them to the optimizer without
      weight decay, and leaves them out of the model's gradient clipping. Default: none.
    - `weighted_loss(task, loss, weight)` once per update that is not skipped (weight 0),
      after the forward pass, with the batch's loss (a tensor, plain mean over its examples)
      and what `weight` returned for it (a 0-dim tensor on the device where a CUDA graph
      replays the update): the batch's contribution to the total loss, through which the
      scheme's parameters get their gradient. Default: `loss * weight`.
    - `end_epoch(epoch, task_losses)` after the epoch's last update, before its checkpoint: each
      task's mean (unweighted) batch loss over the epoch, for the tasks that had batches in it.
    - `state_dict()` with every epoch checkpoint, and `load_state_dict(state)` when a run resumes
      from one, after `setup` and before its first update. Default: no state.

    `capturable`: whether `weighted_loss` is device arithmetic alone (no host reads, no Python
    side effects), so a CUDA graph may capture it once and replay it (`cuda_graphs`); a scheme
    that says False keeps its runs in the eager loop.
    """

    name: ClassVar[str]
    settings_type: ClassVar[type]
    capturable: ClassVar[bool] = True

    def __init__(self, settings: Any, tasks: Sequence[str], central_task: str | None) -> None:
        self.settings = settings
        self.tasks = tuple(tasks)
        self.central_task = central_task

    @abc.abstractmethod
    def weight(self, task: str, epoch: int, step: int) -> float:
        """Loss factor of a batch of `task` at update `step` of `epoch`: finite, >= 0."""

    def stage(self, epoch: int) -> str | None:
        """Name of the stage that `epoch` trains, or None."""
        self._check_position(epoch, 0)
        return None

    def focus(self, epoch: int, step: int) -> str | None:
        """The task favoured at this update, or None."""
        self._check_position(epoch, step)
        return None

    def setup(self, task_types: Mapping[str, str], device: Any) -> list[dict[str, Any]]:
        """The optimizer parameter groups of what the scheme learns (see the class docstring)."""
        return []

    def weighted_loss(self, task: str, loss: Any, weight: float | torch.Tensor) -> Any:
        """The batch's contribution to the total loss (see the class docstring)."""
        return loss * weight

    def end_epoch(self, epoch: int, task_losses: Mapping[str, float]) -> None:
        """Each task's mean training loss over `epoch` (see the class docstring)."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs to give the weights of an uninterrupted one."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        return None

    def _check_position(self, epoch: int, step: int, task: str | None = None) -> None:
        # Programming errors of the caller, not user input: ValueError, not ConfigError.
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
            raise ValueError(f"epoch counts from 1, got {epoch!r}")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step counts from 0, got {step!r}")
        if task is not None and task not in self.tasks:
            raise ValueError(f"unknown task {task!r}; this scheme knows {', '.join(self.tasks)}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings!r}, tasks={self.tasks!r})"


@dataclass(frozen=True)
class SchemeContext:
    """What parsing a scheme's settings may consult besides the mapping: nothing, since the run's
    tasks are judged later (`Settings.task_problems`, through `scheme_problems`). Here so that
    every extension family parses through `from_mapping(raw, context, problems)`."""


class Settings:
    """Mixin of the frozen settings dataclasses: building from YAML and validating.

    Each subclass is a frozen dataclass with a `scheme` field (init=False) naming its scheme, so
    `dataclasses.asdict(settings)` is a complete record of the weighting. Its settings are
    fields `x: T = setting(default, Rule, doc=...)` (`weightsearch.core.fields`): `KEYS` (the
    YAML keys) are those fields, and `problems()` checks each value with its rule. A value that
    passes is kept as given. What a setting must satisfy with the run's tasks is
    `task_problems`.
    """

    KEYS: ClassVar[tuple[str, ...]] = DeclaredKeys()  # type: ignore[assignment]
    # Whether the scheme has a `central_weight` setting: the value a weight search sweeps
    # (`weightsearch.trainer.weighting.has_central_weight`).
    has_central_weight: ClassVar[bool] = False

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], context: SchemeContext,
                     problems: list[str]) -> Any:
        """Settings from the YAML mapping, or None after appending what is wrong with it."""
        found: list[str] = []
        check_keys(raw, cls.KEYS, cls.scheme_name(), found)
        # Mappings are copied so the settings do not alias the caller's (mutable) YAML tree.
        kwargs = {
            key: dict(raw[key]) if isinstance(raw[key], Mapping) else raw[key]
            for key in cls.KEYS
            if key in raw
        }
        missing = [key for key in cls.required() if key not in raw]
        for key in missing:
            found.append(f"{PREFIX}.{key}: required for scheme {cls.scheme_name()!r}")
        if not missing:
            settings = cls(**kwargs)
            found.extend(settings.problems())
        problems.extend(found)
        return None if found else settings

    @classmethod
    def scheme_name(cls) -> str:
        return cls.__dataclass_fields__["scheme"].default  # type: ignore[attr-defined]

    @classmethod
    def required(cls) -> tuple[str, ...]:
        return tuple(
            f.name
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if f.init
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        )

    def problems(self) -> list[str]:
        """What is wrong with the values themselves (types, ranges): each setting's rule, in
        declaration order. Settings built in code are checked as parsed ones are."""
        found: list[str] = []
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        check_settings(values, type(self), found, f"{PREFIX}.")
        return found

    def task_problems(self, tasks: Sequence[str], central_task: str | None) -> list[str]:
        """What does not fit the run's tasks (unknown task names, missing central task)."""
        return []
