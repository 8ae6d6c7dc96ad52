"""The training step: what one update of a stage does with one batch.

`train_step` collates the batch, takes the scheme's weight and runs the update (the forward
pass, the weighted loss, its backward pass, the clip and the optimizer's step) eagerly or as a
CUDA graph's replay, then steps the schedule. The fused runs (`weightsearch.trainer.fused`)
build their stacked step from the same parts: `step_batch`, `task_loss`, `weighted_total`,
`clip_and_step`, `step_scheduler` and `step_record`.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import numpy as np
import torch

from weightsearch.trainer.clipping import clip_gradient, step_readings
from weightsearch.trainer.device import Runtime
from weightsearch.trainer.optim import current_lr
from weightsearch.trainer.smart import smart_loss
from weightsearch.trainer.stage import StageRun


def train_step(run: StageRun, epoch: int, step: int, task: str, indices: np.ndarray
                ) -> tuple[dict[str, Any], torch.Tensor]:
    """One batch: its weighted loss, and an update unless its weight is 0. The step's log
    record (without its global step) and its readings, still on the device: the unweighted
    loss, the gradient's pre-clip norm and the clip's factor (`weightsearch.trainer.clipping`)."""
    batch = step_batch(run, task, indices)
    weight = run.scheme.weight(task, epoch, step)
    lr = current_lr(run.scheduler)
    # A weight-0 batch contributes nothing: no optimizer step, which would still
    # move the weights through Adamax's momentum and the decoupled weight decay.
    skip = weight == 0
    readings = None
    if run.graphs is not None and not skip:
        readings = run.graphs.step(task, batch, weight)
    if readings is None:
        graphs = run.graphs if not skip else None  # a skipped batch takes no update
        with graphs.eager(task) if graphs is not None else contextlib.nullcontext():
            readings = _eager_step(run, task, batch, weight, skip)
    step_scheduler(run)
    return step_record(run, epoch, step, task, len(indices), weight, lr, skip), readings


def _eager_step(run: StageRun, task: str, batch: dict[str, torch.Tensor], weight: float,
                skip: bool) -> torch.Tensor:
    """The step's update, or where `skip` only its forward pass; its readings."""
    if not skip:
        # skip: a parameter without a gradient this batch is not stepped; step: zero-filled, as
        # torch 1.4 did for the SIWLM code (RunConfig.idle_params)
        run.optimizer.zero_grad(set_to_none=run.cfg.idle_params == "skip")
        return update(run, task, batch, weight)
    with torch.no_grad():
        with run.runtime.autocast():
            logits = run.model(task, batch)
        loss = task_loss(run, task, logits, batch)
    return step_readings(None, None, loss)


def update(run: StageRun, task: str, batch: dict[str, torch.Tensor],
           weight: float | torch.Tensor) -> torch.Tensor:
    """Forward, the weighted loss's backward into the gradients the parameters hold, the clip
    and the optimizer's step; the readings (loss, pre-clip norm, clip factor) on the device.
    An eager step and a CUDA graph run this same code."""
    with run.runtime.autocast():
        logits = run.model(task, batch)
    loss = task_loss(run, task, logits, batch)
    total = weighted_total(run, task, batch, logits, loss, weight)
    with run.runtime.backward():
        total.backward()
    norm, scale = clip_and_step(run, weight)
    return step_readings(norm, scale, loss)


def step_batch(run: StageRun, task: str, indices: np.ndarray) -> dict[str, torch.Tensor]:
    """The training batch of `indices`, on the run's device, with its soft targets if any."""
    data = run.data[task]
    batch = to_device(data.collate(data.train, indices, run.pad_id), run.runtime)
    if task in run.soft:
        batch["soft_targets"] = run.soft[task][torch.as_tensor(indices)].to(run.runtime.device)
    return batch


def task_loss(run: StageRun, task: str, logits: torch.Tensor,
              batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The batch's unweighted loss."""
    head = run.model.head(task)
    loss = head.loss(logits.float(), batch)
    if task in run.soft:  # MT-DNN-KD: the mean of the hard and soft losses
        loss = (loss + head.soft_loss(logits.float(), batch["soft_targets"])) / 2
    return loss


def weighted_total(run: StageRun, task: str, batch: dict[str, torch.Tensor],
                   logits: torch.Tensor, loss: torch.Tensor,
                   weight: float | torch.Tensor) -> torch.Tensor:
    """What the update minimises: the scheme's weighted loss, plus SMART's term."""
    total = run.scheme.weighted_loss(task, loss, weight)  # default: loss * weight
    if run.cfg.adversarial.enabled:  # unweighted, as the reference adds it after the task weight
        total = total + run.cfg.adversarial.weight * smart_loss(
            run.model, task, batch, logits, run.cfg.adversarial)
    return total


def clip_and_step(run: StageRun, weight: float | torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip the model's gradients and take the optimizer's step; the pre-clip norm and the
    clip's factor."""
    norm, scale = clip_gradient(run.model.parameters(), run.cfg.grad_clip,
                                run.cfg.grad_clip_mode, weight)
    run.optimizer.step()
    return norm, scale


def step_scheduler(run: StageRun) -> None:
    # The schedule counts every batch of the plan, skipped ones too; torch flags
    # a scheduler step before the first optimizer step, which is intended here.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler")
        run.scheduler.step()


def step_record(run: StageRun, epoch: int, step: int, task: str, size: int, weight: float,
                lr: float, skipped: bool) -> dict[str, Any]:
    """The step's steps.jsonl record, without its global step and readings."""
    return {"epoch": epoch, "step": step, "global_step": None, "task": task,
            "stage": run.scheme.stage(epoch), "focus": run.scheme.focus(epoch, step),
            "weight": weight, "lr": lr, "batch_size": size, "skipped": skipped}


def to_device(batch: dict[str, torch.Tensor], runtime: Runtime) -> dict[str, torch.Tensor]:
    """`batch` on the runtime's device, pinned first where the runtime says so; on a CPU, as it
    is. Training and evaluation batches alike."""
    if runtime.device.type == "cpu":
        return batch
    pin = runtime.pin_memory
    return {
        k: (v.pin_memory() if pin else v).to(runtime.device, non_blocking=True)
        for k, v in batch.items()
    }


__all__ = ["clip_and_step", "step_batch", "step_record", "step_scheduler", "task_loss",
           "to_device", "train_step", "update", "weighted_total"]
