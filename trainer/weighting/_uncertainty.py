"""Uncertainty weighting (Kendall, Gal & Cipolla 2018, "Multi-Task Learning Using Uncertainty to
Weigh Losses for Scene Geometry and Semantics", eqs. 7 and 10): each task's weight is learned
with the model, as the precision of the task's likelihood.

The definition: per task a learned s_t = log sigma_t^2, and the total loss

    sum_t [ exp(-s_t) * c_t * L_t + s_t / 2 ]

with c_t = 1/2 for a regression task (a Gaussian likelihood: 1/(2 sigma^2) L + log sigma) and
c_t = 1 for a classification task (their approximation of a softmax likelihood scaled by a
temperature: 1/sigma^2 L + log sigma). The s_t start at 0 (every factor exp(0) * c_t) and are
trained jointly with the network, by the same optimizer, without weight decay. (Kendall et al.
write the regulariser as log sigma_t = s_t / 2.)

Which tasks are regression: those whose task type labels each example with a number (its
`label_kind` is "score": the `regression` type, STS-B), whose head's loss is a squared error.
Every other task type counts as classification: classification, ranking (a softmax over a
question's candidates), multiple choice and span QA (softmaxes over choices and positions) all
train on a softmax cross-entropy.

One task per batch, as MT-DNN trains: the paper sums all tasks' terms in every update; here an
update holds one task's batch, and a batch of task t contributes

    exp(-s_t) * c_t * L_t + s_t / 2

so the regulariser of s_t is applied once per batch of task t, and only then. Every batch that
moves s_t carries both its loss term and its regulariser, so s_t still settles where the paper
has it, at s_t = log(2 c_t L_t); a task with more batches only gets there in more steps.
The factor that `steps.jsonl` logs as the update's `weight` is exp(-s_t) * c_t at that update,
before the optimizer moves s_t (reading s_t for it costs one device synchronisation per update on
a GPU). An update with a weight-0 skip never happens here: the factor is
always positive.

`form: libmtl` is LibMTL's restatement (`LibMTL/weighting/UW.py`), which many MTL papers
compare against: c_t = 1/2 for every task, classification too, and every s_t starting at -0.5
(every factor exp(0.5) / 2, about 0.82). Kendall et al.'s definition above is the default
(`form: kendall`).

The log-variances live outside the model: the loop adds them to the optimizer as a group of
their own (no weight decay, not in the model's gradient clipping, the run's learning-rate
schedule), and the checkpoint saves them with the scheme's state. Named departure:

- `lr`: the log-variances' own learning rate instead of the run's. Kendall et al. train them
  with the network's optimizer; at MT-DNN's 5e-5 an Adam-type optimizer moves each s_t by at
  most about lr per update, so a short run leaves the weights near their start. Default: the
  run's `lr` (the definition).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from weightsearch.core.fields import AT_DEFAULT, setting
from weightsearch.trainer.task_types import TASK_TYPES
from weightsearch.trainer.weighting._checks import PREFIX, OneOf, Positive
from weightsearch.trainer.weighting.base import Scheme, SchemeContext, Settings

if TYPE_CHECKING:
    import torch

REGRESSION, CLASSIFICATION = 0.5, 1.0  # c_t
FORMS = ("kendall", "libmtl")
# Each form's starting s_t (LibMTL's `loss_scale` starts at -0.5).
INITIAL_LOG_VARIANCE = {"kendall": 0.0, "libmtl": -0.5}


def loss_factor(task_type: str, form: str = "kendall") -> float:
    """c_t of a task of `task_type`: 1/2 for a task labelled with numbers (a Gaussian
    likelihood), 1 for every other (a softmax likelihood); 1/2 for every task in LibMTL's
    form."""
    if form == "libmtl":
        return REGRESSION
    kind = TASK_TYPES.get(task_type)
    return REGRESSION if kind is not None and kind.label_kind == "score" else CLASSIFICATION


@dataclass(frozen=True)
class UncertaintySettings(Settings):
    """Settings of uncertainty weighting."""

    lr: float | None = setting(None, Positive(
        " (the log-variances' learning rate), or left out for the run's lr; got ", optional=True),
        doc="The log-variances' learning rate; null: the run's lr (Kendall et al.).")
    # Not `variant`: SIWLM's setting of that name would pass to it in a search over schemes.
    form: str = setting(
        "kendall", OneOf(FORMS), since="0.2.0", omit_when=AT_DEFAULT,
        doc="kendall (Kendall et al.: classification 1 / sigma^2, regression 1 / (2 sigma^2), "
            "s_t from 0) or libmtl (LibMTL's: 1 / (2 sigma^2) for every task, s_t from -0.5).")
    scheme: str = field(default="uncertainty", init=False)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], context: SchemeContext,
                     problems: list[str]) -> Any:
        """Other schemes' weights are refused by name first: a learned weighting cannot honour
        them."""
        refused = [key for key in _NOT_HONOURED if key in raw]
        for key in refused:
            problems.append(f"{PREFIX}.{key}: uncertainty weighting learns every task's weight, "
                            f"so it cannot take {key}; leave {key} out, or use scheme "
                            f"{_NOT_HONOURED[key]} to set weights yourself")
        rest = {k: v for k, v in raw.items() if k not in refused}
        settings = super().from_mapping(rest, context, problems)
        return None if refused else settings


# Settings of other schemes that fix weights by hand, which a learned weighting cannot honour.
_NOT_HONOURED = {"central_weight": "siwlm", "aux_weight": "siwlm", "aux_weights": "siwlm",
                 "weights": "static"}


class UncertaintyScheme(Scheme):
    """Learned per-task log-variances (see the module docstring)."""

    name = "uncertainty"
    settings_type = UncertaintySettings

    def __init__(self, settings: UncertaintySettings, tasks: Sequence[str],
                 central_task: str | None) -> None:
        super().__init__(settings, tasks, central_task)
        self.index = {task: i for i, task in enumerate(self.tasks)}
        self.factors: dict[str, float] | None = None  # c_t, known from setup
        self.log_variance: Any = None  # s_t, a parameter once setup made it

    def setup(self, task_types: Mapping[str, str], device: Any) -> list[dict[str, Any]]:
        import torch

        missing = [t for t in self.tasks if t not in task_types]
        if missing:
            raise ValueError(f"setup needs the task type of every task; missing {missing}")
        form = self.settings.form
        self.factors = {t: loss_factor(task_types[t], form) for t in self.tasks}
        self.log_variance = torch.nn.Parameter(torch.full(
            (len(self.tasks),), INITIAL_LOG_VARIANCE[form], dtype=torch.float32,
            device=device))
        group: dict[str, Any] = {"params": [self.log_variance]}
        if self.settings.lr is not None:
            group["lr"] = float(self.settings.lr)
        return [group]

    def weight(self, task: str, epoch: int, step: int) -> float:
        self._check_position(epoch, step, task)
        factors = self._ready()
        s = float(self.log_variance.detach()[self.index[task]])
        return math.exp(-s) * factors[task]

    def weighted_loss(self, task: str, loss: Any, weight: float | torch.Tensor) -> Any:
        factors = self._ready()
        s = self.log_variance[self.index[task]]
        return (-s).exp() * factors[task] * loss + s / 2

    def log_variances(self) -> dict[str, float]:
        """Every task's s_t now."""
        self._ready()
        return {t: float(v) for t, v in zip(self.tasks, self.log_variance.detach().tolist(),
                                            strict=True)}

    def state_dict(self) -> dict[str, Any]:
        self._ready()
        return {"log_variance": self.log_variance.detach().cpu().clone(), "tasks": self.tasks}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        import torch

        self._ready()
        saved = state.get("log_variance")
        if saved is None:
            return
        if tuple(state.get("tasks", self.tasks)) != self.tasks:
            raise ValueError(f"the saved log-variances belong to tasks {state.get('tasks')}, "
                             f"not {self.tasks}")
        with torch.no_grad():
            self.log_variance.copy_(torch.as_tensor(saved).to(self.log_variance))

    def _ready(self) -> dict[str, float]:
        if self.factors is None:
            raise RuntimeError("uncertainty weighting learns its weights: call setup(task_types, "
                               "device) before asking for them")
        return self.factors
