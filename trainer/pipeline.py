"""A run as a pipeline of stages: soft targets (distillation), the multi-task stage, then the
per-task fine-tuning stage, each as the run config asks.

The multi-task stage trains with the soft targets of its distilled tasks; each fine-tuned task
is a one-task run of its own (`weightsearch.trainer.finetune.stage_config`) in
`output_dir/finetune/<task>/`, started from the multi-task stage's last checkpoint. A run's
`result.json` is written when its last stage has finished: its presence means the run is done. Only
then are its checkpoints trimmed to what the `checkpoints` policy keeps (the fine-tuning stage
starts from the multi-task stage's last checkpoint, so that one stays until every fine-tuned task is
done).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm

from weightsearch.core.errors import ConfigError
from weightsearch.trainer.checkpoint import CHECKPOINTS, finish_checkpoints
from weightsearch.trainer.config import RunConfig, load_config
from weightsearch.trainer.config.finetune_settings import FINETUNE_DIR
from weightsearch.trainer.distill import soft_targets
from weightsearch.trainer.finetune import read_result, stage_config
from weightsearch.trainer.fused import detached, train_fused_stage
from weightsearch.trainer.loop import set_up, train_stage
from weightsearch.trainer.memory import reset_peak
from weightsearch.trainer.results import RunResult
from weightsearch.trainer.stage import Report, StageRun
from weightsearch.trainer.stage_output import METRICS, RESULT, holds_run


def train(
    config: RunConfig | str | os.PathLike | dict,
    report: Report | None = None,
    resume: bool = False,
    quiet: bool = False,
    stage: str = "multitask",
) -> RunResult:
    """Train one MT-DNN run. Every input problem raises before `output_dir` is touched.

    `resume=True` continues from the newest epoch checkpoint in `output_dir` (and starts fresh
    when there is none), reaching the same result as an uninterrupted run. With `finetune`
    set, the multi-task epochs are followed by one fine-tuning run per listed task, each in
    `output_dir/finetune/<task>/`; `stage` labels this run's scores ("finetuned" for those).
    """
    cfg = config if isinstance(config, RunConfig) else load_config(config)
    if quiet:
        silence_libraries()
    threads = torch.get_num_threads()
    reset_peak()  # the run's own peak memory, in a worker that trained runs before
    try:
        return _train(cfg, report, resume, stage, quiet)
    finally:  # num_threads is this run's: a notebook's next run keeps its own thread count
        torch.set_num_threads(threads)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            gc.collect()  # what a stopped run's traceback held is garbage now
            torch.cuda.empty_cache()  # a reused worker does not hold this run's GPU reservation


def train_fused(
    configs: Sequence[RunConfig | str | os.PathLike | dict],
    reports: Sequence[Report | None] | None = None,
    resume: bool = False,
    quiet: bool = False,
    same_treatment: str = "once",
) -> list[RunResult | BaseException]:
    """Train runs that differ only in their loss weighting as one fused unit
    (`weightsearch.trainer.fused`): each run's result, or the exception that stopped it alone
    (its report's, a diverged loss). The multi-task stage trains fused; each run's fine-tuning
    stage, if any, then trains on its own. Raises `CannotFuse` (a ConfigError) before anything
    is written when the runs cannot be fused: train them one by one with `train`. Members that
    would train the same updates (global clipping above the weight's live range) train once,
    the others following (`weightsearch.trainer.same_treatment`), unless `same_treatment` is
    `all`."""
    cfgs = [c if isinstance(c, RunConfig) else load_config(c) for c in configs]
    for cfg in cfgs:
        _check_finetune_folder(cfg)
    if quiet:
        silence_libraries()
    threads = torch.get_num_threads()
    reset_peak()
    reports = list(reports) if reports is not None else [None] * len(cfgs)
    try:
        trained = train_fused_stage(cfgs, reports, resume, quiet, "multitask", soft_targets,
                                    prepare=_drop_stale_finetuning,
                                    same_treatment=same_treatment)
        outcomes: list[RunResult | BaseException] = []
        for (cfg, outcome), report in zip(trained, reports, strict=True):
            if isinstance(outcome, BaseException):
                outcomes.append(outcome)
                continue
            try:
                outcomes.append(_finish_run(cfg, outcome, report, quiet))
            except Exception as exc:  # this run's own failure (its report stopped it)
                outcomes.append(detached(exc))
        return outcomes
    finally:
        torch.set_num_threads(threads)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def _train(cfg: RunConfig, report: Report | None, resume: bool, stage: str,
           quiet: bool) -> RunResult:
    _check_finetune_folder(cfg)
    run = set_up(cfg, resume, stage, soft_targets)
    cfg = run.cfg  # as a resumed run trained it, for the fine-tuning that follows
    _drop_stale_finetuning(run)
    result = _train_and_release(run, report, quiet)
    del run  # the fine-tuning runs load their own copies of the model
    return _finish_run(cfg, result, report, quiet)


def _train_and_release(run: StageRun, report: Report | None, quiet: bool) -> RunResult:
    """`train_stage`, then its graph steps let go of the run (the two point at each other),
    so that the run's model, optimizer and graphs are freed with the run, not by the garbage
    collector while the next stage loads its own."""
    try:
        return train_stage(run, report, quiet)
    finally:
        if run.graphs is not None:
            run.graphs.release()


def _check_finetune_folder(cfg: RunConfig) -> None:
    out = Path(cfg.output_dir)
    if cfg.finetune is not None and not holds_run(out) and (out / FINETUNE_DIR).exists():
        raise ConfigError([f"output_dir: {out / FINETUNE_DIR} exists, but {out} holds no run; "
                           "the fine-tuning stage writes there: move it or choose another "
                           "output_dir"])


def _drop_stale_finetuning(run: StageRun) -> None:
    """Fine-tuning starts from the last multi-task epoch; an earlier attempt's is stale."""
    cfg = run.cfg
    if cfg.finetune is not None and run.held and (run.ckpt is None or run.ckpt.epoch < cfg.epochs):
        shutil.rmtree(run.out / FINETUNE_DIR, ignore_errors=True)


def _finish_run(cfg: RunConfig, result: RunResult, report: Report | None,
                quiet: bool) -> RunResult:
    """After the multi-task stage: the fine-tuning stage if any, then `result.json`."""
    out = Path(cfg.output_dir)
    if cfg.finetune is not None:
        finetuned = _finetune(cfg, out / CHECKPOINTS / f"epoch-{cfg.epochs:03d}", report, quiet)
        with (out / METRICS).open("a") as metrics_log:
            for tuned in finetuned.values():
                metrics_log.write((tuned.output_dir / METRICS).read_text())
        result = dataclasses.replace(result, finetuned=finetuned)
    (out / RESULT).write_text(json.dumps(result.to_dict(), indent=1))
    finish_checkpoints(out, cfg.checkpoints, cfg.keep_checkpoints)
    return result


def _finetune(cfg: RunConfig, init_from: Path, report: Report | None, quiet: bool
              ) -> dict[str, RunResult]:
    """Fine-tune every listed task in turn; a task whose run finished is read back, not rerun,
    and one that was interrupted continues from its last epoch checkpoint. (A fresh parent run
    has removed every earlier `finetune/` folder before it got here.)"""
    assert cfg.finetune is not None
    results: dict[str, RunResult] = {}
    for task in cfg.finetune.task_list(cfg.task_names, cfg.central_task):
        sub = stage_config(cfg, task, init_from)
        done = Path(sub.output_dir) / RESULT
        if done.is_file():  # its folder may have moved with the run's (a study retry's copy)
            results[task] = dataclasses.replace(read_result(done),
                                                output_dir=Path(sub.output_dir))
            finish_checkpoints(Path(sub.output_dir), sub.checkpoints, sub.keep_checkpoints)
            continue
        if not quiet:
            tqdm.write(f"fine-tuning {task} from {init_from}")
        result = _train_and_release(set_up(sub, resume=True, stage="finetuned"), report, quiet)
        (Path(sub.output_dir) / RESULT).write_text(json.dumps(result.to_dict(), indent=1))
        finish_checkpoints(Path(sub.output_dir), sub.checkpoints, sub.keep_checkpoints)
        results[task] = result
    return results


def silence_libraries() -> None:
    """Workers log through their reports; library progress bars would only flood their logs."""
    import datasets
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()


__all__ = ["silence_libraries", "train", "train_fused"]
