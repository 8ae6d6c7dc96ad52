"""Dynamic weight average (Liu, Johns & Davison 2019, "End-to-End Multi-Task Learning with
Attention", eq. 7): each task's weight follows the rate at which its training loss fell.

The definition, with K tasks and epochs t counted from 1:

    w_k(t) = K * exp(r_k(t-1) / T) / sum_i exp(r_i(t-1) / T),   r_k(t-1) = L_k(t-1) / L_k(t-2)

where L_k(t) is the average training loss of task k over epoch t (the unweighted loss, as their
code records it), T = 2, and w_k(t) = 1 for t = 1, 2. A task whose loss fell more slowly gets
more weight; the weights always sum to K.

One task per batch, as MT-DNN trains: the paper weights the sum of the K task losses of each
update, sum_k w_k(t) L_k; here an update holds one task's batch, and a batch of task k in epoch
t contributes w_k(t) times its loss. Over an epoch that is the same weighted sum, spread over the
updates. L_k(t) is the mean of the (unweighted) losses of task k's batches in epoch t: what
`steps.jsonl` logs as `loss`. The weights change once per epoch, from losses the loop hands to
`end_epoch`; they are part of the scheme's state (`state_dict`), saved with every checkpoint, so
a resumed run recomputes the same weights.

Where the ratio is undefined, r_k = 1 (the task's loss taken as unchanged): a task that had no
batch in epoch t-1 or t-2 (a sampling rule may leave a task out of an epoch), or whose loss in
t-2 was 0. The softmax is computed with its largest term factored out, which changes nothing
but keeps a large ratio from overflowing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from weightsearch.core.fields import setting
from weightsearch.trainer.weighting._checks import Positive
from weightsearch.trainer.weighting.base import Scheme, Settings

DEFAULT_TEMPERATURE = 2.0  # Liu et al.'s T


@dataclass(frozen=True)
class DwaSettings(Settings):
    """Settings of dynamic weight average."""

    temperature: float = setting(
        DEFAULT_TEMPERATURE, Positive(" (Liu et al. use 2), got "),
        doc="T of the softmax over the loss ratios (Liu et al.: 2; larger is flatter).")
    scheme: str = field(default="dwa", init=False)


class DwaScheme(Scheme):
    """Weights from the ratio of each task's last two epoch losses (see the module docstring)."""

    name = "dwa"
    settings_type = DwaSettings

    def __init__(self, settings: DwaSettings, tasks: Sequence[str],
                 central_task: str | None) -> None:
        super().__init__(settings, tasks, central_task)
        self.epoch_losses: dict[int, dict[str, float]] = {}
        self._by_epoch: dict[int, dict[str, float]] = {}  # weights once per epoch, not per update

    def weights(self, epoch: int) -> dict[str, float]:
        """Every task's weight in `epoch`."""
        self._check_position(epoch, 0)
        if epoch <= 2:
            return dict.fromkeys(self.tasks, 1.0)
        missing = [e for e in (epoch - 1, epoch - 2) if e not in self.epoch_losses]
        if missing:
            raise ValueError(f"DWA weights of epoch {epoch} need the task losses of epoch "
                             f"{missing[0]}; the loop hands them to end_epoch")
        last, before = self.epoch_losses[epoch - 1], self.epoch_losses[epoch - 2]
        ratios = {task: _ratio(last.get(task), before.get(task)) for task in self.tasks}
        top = max(r / self.settings.temperature for r in ratios.values())
        terms = {t: math.exp(r / self.settings.temperature - top) for t, r in ratios.items()}
        total = sum(terms.values())
        return {t: len(self.tasks) * v / total for t, v in terms.items()}

    def weight(self, task: str, epoch: int, step: int) -> float:
        self._check_position(epoch, step, task)
        if epoch not in self._by_epoch:
            self._by_epoch[epoch] = self.weights(epoch)
        return float(self._by_epoch[epoch][task])

    def end_epoch(self, epoch: int, task_losses: Mapping[str, float]) -> None:
        self.epoch_losses[int(epoch)] = {t: float(v) for t, v in task_losses.items()}
        self._by_epoch.clear()

    def state_dict(self) -> dict[str, Any]:
        return {"epoch_losses": {e: dict(v) for e, v in self.epoch_losses.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        saved = state.get("epoch_losses", {})
        self.epoch_losses = {int(e): {t: float(x) for t, x in v.items()}
                             for e, v in saved.items()}
        self._by_epoch.clear()


def _ratio(last: float | None, before: float | None) -> float:
    if last is None or before is None or not before > 0 or not math.isfinite(last / before):
        return 1.0
    return last / before
