"""The second stage of MT-DNN: each listed task fine-tuned alone from the multi-task encoder.

Every fine-tuned task is a run of its own: a one-task `RunConfig` derived from the multi-task
one (`stage_config`), initialised from the multi-task stage's last checkpoint (`init_from`) and
written to `<output_dir>/finetune/<task>/`, so it has its own epoch checkpoints, resumes where it
was killed, and is refused on resume like any run whose settings or data changed. The parent
run collects their scores under the `finetuned` stage.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

from weightsearch.trainer.config.finetune_settings import FINETUNE_DIR
from weightsearch.trainer.results import RunResult
from weightsearch.trainer.task_types import TASK_TYPES
from weightsearch.trainer.weighting import EqualSettings

if TYPE_CHECKING:
    from weightsearch.trainer.config import RunConfig

def stage_config(cfg: RunConfig, task: str, init_from: Path) -> RunConfig:
    """The one-task run that fine-tunes `task` from the multi-task checkpoint `init_from`."""
    ft = cfg.finetune
    assert ft is not None
    spec = cfg.task(task)
    if ft.head is not None and ft.head in TASK_TYPES[spec.type].answer_modules:
        spec = dataclasses.replace(spec, head=ft.head)
    return cfg.replace(
        tasks=(spec,),
        central_task=task,
        weighting=EqualSettings(),
        epochs=ft.epochs,
        lr=ft.lr if ft.lr is not None else cfg.learning_rate,
        batch_size=ft.batch_size or cfg.batch_size,
        optimizer=ft.optimizer or cfg.optimizer,
        warmup=ft.warmup if ft.warmup is not None else cfg.warmup,
        weight_decay=ft.weight_decay if ft.weight_decay is not None else cfg.weight_decay,
        adversarial=ft.adversarial,
        # One task: every parameter has a gradient at every update, so no parameter is idle;
        # the multi-task stage's setting would only tie the fine-tuning optimizer to Adamax.
        idle_params="skip",
        init_from=str(init_from),
        init_heads=ft.heads,
        finetune=None,
        distill=None,  # MT-DNN-KD distils in the multi-task stage
        output_dir=str(Path(cfg.output_dir) / FINETUNE_DIR / task),
    )


def read_result(path: Path) -> RunResult:
    """A finished run's `result.json`."""
    return RunResult.from_dict(json.loads(path.read_text()))
