"""The probe a fused unit passes before anything is written: the wide model of the stacked
members (`weightsearch.trainer.fused.StackedModels`) computes what each member's own model
computes, on one small batch of each task, and its attention dropout draws shared masks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch

from weightsearch.trainer.fusable import CannotFuse
from weightsearch.trainer.model import ATTENTION_DROPOUT_KEYS, MTDNN
from weightsearch.trainer.stage import StageRun
from weightsearch.trainer.step import step_batch, task_loss


class StackedModels(Protocol):
    """What the probe uses of `weightsearch.trainer.fused.StackedModels`."""

    @property
    def models(self) -> Sequence[MTDNN]: ...  # read only, so that a list of them fits

    lead: MTDNN
    lead_device: torch.device
    last: Any  # the last forward pass's draws (`weightsearch.trainer.draws.Stack`)

    def __len__(self) -> int: ...

    def forward(self, task: str, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def clear_gradients(self) -> None: ...


def probe(stack: StackedModels, run: StageRun) -> None:
    """Refuse before anything is written when the wide model does not compute what the
    members' models compute: one batch of two rows per task, on a forked random state so the
    run's own draws are not moved."""
    devices = [stack.lead_device] if stack.lead_device.type == "cuda" else []
    failed = []
    with torch.random.fork_rng(devices=devices):
        for name, data in run.data.items():
            batch = step_batch(run, name, np.arange(min(2, len(data.train))))
            try:
                why = probe_task(stack, run, name, batch)
            except Exception as exc:  # whatever a stacked layer or a module raises: refuse
                why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            finally:
                stack.clear_gradients()
            if why is not None:
                failed.append(f"tasks: {name}'s forward pass (the encoder and its "
                              f"{data.spec.type} head) does not run as one stacked model "
                              f"({why}); train these runs one by one")
    if failed:
        raise CannotFuse(failed)


def probe_task(stack: StackedModels, run: StageRun, task: str,
                batch: dict[str, torch.Tensor]) -> str | None:
    """Why the stacked forward pass of `task` is not the members' (None: it is): in evaluation
    mode each member's outputs against its own model's; in training mode, under the run's
    autocast, a forward and backward pass, whose attention dropout must draw shared masks."""
    stack.lead.eval()
    for model in stack.models:
        model.eval()
    with torch.no_grad():
        outputs = stack.forward(task, batch).float()
        for k, model in enumerate(stack.models):
            alone = model(task, batch).float()
            # Loose enough for other kernels' rounding (TF32 on a GPU); a layer that mixes
            # up members or rows is off by the outputs' own size.
            if outputs[k].shape != alone.shape or \
                    (outputs[k] - alone).abs().max() > 1e-3 * (1 + alone.abs().max()):
                return f"member {k}'s outputs differ from its own model's"
    stack.lead.train()
    for model in stack.models:
        model.train()
    with run.runtime.autocast():
        outputs = stack.forward(task, batch)
    total = sum(task_loss(run, task, outputs[k], batch) for k in range(len(stack)))
    total.backward()  # type: ignore[union-attr]
    config = getattr(stack.lead.encoder, "config", None)
    dropout = max((float(getattr(config, key, 0) or 0) for key in ATTENTION_DROPOUT_KEYS),
                  default=0.0)
    if len(stack) > 1 and dropout > 0 and stack.last.attention_calls == 0:
        return ("its attention dropout does not go through transformers' attention "
                "interface, so the members would draw masks of their own")
    return None


__all__ = ["probe", "probe_task"]
