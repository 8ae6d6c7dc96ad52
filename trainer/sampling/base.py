"""What a batch-order strategy is, and the base class of the built-in ones."""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from weightsearch.core.registry import DeclaredKeys, check_settings

Batches = Mapping[str, list[np.ndarray]]  # task -> its batches (row indices), in task order
Plan = list[tuple[str, np.ndarray]]  # one epoch: (task, row indices) per update

PREFIX = "sampling"


@dataclass(frozen=True)
class SamplerContext(Sequence[str]):
    """What parsing a sampler's settings may consult besides the mapping: the run's tasks.

    It is also the sequence of those task names, so a `from_mapping` written for 0.1's
    `(raw, tasks, problems)` reads it as the task list it expects."""

    tasks: tuple[str, ...]

    def __getitem__(self, index: Any) -> Any:
        return self.tasks[index]

    def __len__(self) -> int:
        return len(self.tasks)


def _real(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


@dataclass(frozen=True)
class Real:
    """A finite number >= `low` (> `low` with `low_open`), kept as a float; `says` what is
    wanted (`must be <says>, got ...`). A name in `also` passes as it is (`share`). Null
    allowed where `optional`; a `required` setting is checked when absent too, and its absence
    (or null) gets `<key>: <required>`."""

    says: str
    low: float
    low_open: bool = False
    also: tuple[str, ...] = ()
    optional: bool = False
    required: str | None = None

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if value is None and self.required:
            return None, f"{key}: {self.required}"
        if isinstance(value, str) and value in self.also:
            return value, None
        if not _real(value) or (value <= self.low if self.low_open else value < self.low):
            return None, f"{key}: must be {self.says}, got {value!r}"
        return float(value), None


class SamplerSettings:
    """Base of a sampler's settings: a frozen dataclass with a `scheme` field (its sampler's
    name, `field(default=<name>, init=False)`) and its settings as fields
    `x: T = setting(default, Rule, doc=...)` (`weightsearch.core.fields`; `Real` is the
    samplers' rule for a number), whose names are the YAML keys it reads (`KEYS`).

    What the rest of the code needs to know about the settings goes through these methods, so
    that the run config and the sweep never look at a particular scheme's fields:

    - `from_mapping(raw, context, problems)`: the settings from the YAML mapping (its keys are
      `scheme` and `KEYS`, checked before; `context.tasks` the run's tasks), one message per
      problem appended to `problems`, each starting with `sampling.<key>`; None after a
      problem. By default: each setting checked with its rule, then `task_problems`.
    - `task_problems(context)`: what is wrong with the settings together, or with the run's
      tasks (the explicit rules that no single setting's rule can say).
    - `to_dict()`: the plain mapping that parses back to the same settings (config.yaml and
      the config digest).
    - `keep_tasks(raw, keep)`: the YAML mapping for a run that trains only the tasks in `keep`
      (a task-grouping search drops the others from every setting that names them).
    """

    KEYS: ClassVar[tuple[str, ...]] = DeclaredKeys()  # type: ignore[assignment]

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], context: SamplerContext,
                     problems: list[str]) -> Any:
        before = len(problems)
        values = check_settings(raw, cls, problems, f"{PREFIX}.")
        if len(problems) > before:
            return None
        settings = cls(**values)
        problems.extend(settings.task_problems(context))
        return settings if len(problems) == before else None

    def task_problems(self, context: SamplerContext) -> list[str]:
        return []

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def keep_tasks(cls, raw: Mapping[str, Any], keep: set[str]) -> dict[str, Any]:
        return dict(raw)


class Sampler(abc.ABC):
    """Orders one epoch's batches, one task per batch.

    Lifecycle, as the training loop uses it:

    - `__init__(settings, tasks)` once per run, through `build_sampler`, after the settings were
      validated against the run's tasks (central task first, then the others in config order).
    - `order(batches, seed, epoch, keep_order)` once per epoch, before the epoch trains (the
      loop builds every epoch's plan up front, since the learning-rate schedule needs the number
      of updates). `batches` holds each task's batches for this epoch. The result is the epoch's
      updates in order; it may leave batches out (an epoch that ends when one task's batches
      run out) but never uses one twice. With `keep_order` (`batches: fixed`) each task's
      batches are used in the order given, as the reference code iterates them; only which
      task comes next is the sampler's to decide.

    `order` must be a pure function of its arguments: a resumed run rebuilds the plans and must
    get the same updates as an uninterrupted one. Randomness comes from
    `np.random.default_rng([seed, epoch, ...])`.

    A sampler whose class sets `repeats_batches` (a size rule that draws a small task more
    often than it has batches) may use a batch more than once in an epoch, in whole passes: no
    batch of a task is used a (k+1)-th time before every batch of that task was used k times
    (`in_passes`). Every other sampler uses each batch at most once.
    """

    name: ClassVar[str]
    settings_type: ClassVar[type[SamplerSettings]]
    repeats_batches: ClassVar[bool] = False

    def __init__(self, settings: Any, tasks: Sequence[str]) -> None:
        self.settings = settings
        self.tasks = tuple(tasks)

    @abc.abstractmethod
    def order(self, batches: Batches, seed: int, epoch: int, keep_order: bool = False) -> Plan:
        """The epoch's updates."""

    def batches_used(self, sizes: Mapping[str, int]) -> dict[str, int | None]:
        """How many of each task's batches an epoch uses, given each task's number of batches;
        None where the draws decide (then anywhere from none to all of them, or, for a sampler
        that `repeats_batches`, any number of uses). What `order` promises, and what the
        conformance tests hold it to. Default: every batch."""
        return {task: int(n) for task, n in sizes.items()}


def rng(seed: int, epoch: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng([int(seed) % 2**32, int(epoch) % 2**32, *stream])


def in_passes(task_batches: list[np.ndarray], count: int, seed: int, epoch: int, task: int,
              keep_order: bool = False) -> list[np.ndarray]:
    """`count` uses of a task's batches (`task`: its index in the run), in whole passes: each
    pass uses every batch once, in an order of its own (`keep_order`: the order given), and the
    last pass stops where `count` is reached."""
    n = len(task_batches)
    if count > 0 and n == 0:
        raise ValueError(f"{count} batches asked of a task that has none")
    out: list[np.ndarray] = []
    passes = 0
    while len(out) < count:
        order = range(n) if keep_order else rng(seed, epoch, 7, task, passes).permutation(n)
        out.extend(task_batches[i] for i in order)
        passes += 1
    return out[:count]


def pick(weights: np.ndarray, u: Any) -> Any:
    """The index drawn with probability proportional to `weights` (>= 0, not all 0) for a
    uniform draw `u` in [0, 1) (an array of draws gives an array of indices)."""
    return np.searchsorted(np.cumsum(weights / weights.sum()), u, side="right").clip(
        max=len(weights) - 1)
