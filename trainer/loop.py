"""One stage of an MT-DNN run, top to bottom: set up, then train its epochs.

`set_up` checks every input and loads the data and the model without writing anything;
`train_stage` then trains the stage's epochs into `output_dir`, evaluating, checkpointing and
reporting after each. One update is `weightsearch.trainer.step`'s, what the output folder gets
(the logs, each epoch's end, the result) `weightsearch.trainer.stage_output`'s. Which stages a
run has (soft targets, multi-task, fine-tuning) is the business of
`weightsearch.trainer.pipeline`.
"""

from __future__ import annotations

import functools
import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from weightsearch.core.errors import ConfigError
from weightsearch.trainer.checkpoint import FULL, Checkpoint, latest_checkpoint, load_initial
from weightsearch.trainer.config import DEFAULT_ENCODER, RunConfig
from weightsearch.trainer.config.paths import writable_folder_problem
from weightsearch.trainer.device import Runtime, select_runtime
from weightsearch.trainer.encoders import load_tokenizer, resolve_encoder, resolve_pooling
from weightsearch.trainer.graphs import (
    GraphedSteps,
    GraphPlan,
    emulation_problems,
    plan_graphs,
    static_shapes,
)
from weightsearch.trainer.init_weights import init_head_weights
from weightsearch.trainer.model import MTDNN, load_encoder, recompute_activations
from weightsearch.trainer.optim import build_optimizer, build_scheduler, make_capturable
from weightsearch.trainer.results import RunResult
from weightsearch.trainer.resume import (
    resume_problems,
    source_digests,
    source_problems,
    trained_defaults,
)
from weightsearch.trainer.run_data import load_data
from weightsearch.trainer.sampling import build_sampler
from weightsearch.trainer.stage import Progress, Report, StageRun
from weightsearch.trainer.stage_output import (
    STEPS,
    EpochLog,
    end_epoch,
    evaluate,
    holds_run,
    open_output,
    stage_result,
)
from weightsearch.trainer.step import train_step, update
from weightsearch.trainer.task_data import batch_plan
from weightsearch.trainer.tracking import Tracker, open_tracker, run_params
from weightsearch.trainer.weighting import build_scheme

# Soft targets of the distilled tasks, one row per training example: (cfg, data, tokenizer,
# runtime, note) -> task -> tensor. The pipeline passes `weightsearch.trainer.distill.soft_targets`.
SoftTargets = Callable[..., dict[str, torch.Tensor]]


def no_soft_targets(*_: Any, **__: Any) -> dict[str, torch.Tensor]:
    return {}


def set_up(cfg: RunConfig, resume: bool = False, stage: str = "multitask",
           soft_targets: SoftTargets = no_soft_targets,
           graphs: GraphPlan | None = None) -> StageRun:
    """Check every input and load what the stage trains; raises ConfigError before `output_dir`
    is touched. `resume=True` picks up the newest epoch checkpoint there (none: a fresh run).
    `graphs` overrides what `cuda_graphs` resolves to (a fused stage: none; the CPU's check of
    the graph steps: enabled without capture)."""
    started = time.perf_counter()
    folders = [writable_folder_problem(cfg.output_dir, "output_dir"),
               writable_folder_problem(cfg.cache_dir, "cache_dir")]
    if any(folders):
        raise ConfigError([p for p in folders if p])
    runtime = select_runtime(cfg.device, cfg.precision, cfg.num_threads)
    out = Path(cfg.output_dir)
    ckpt, held = _checkpoint_to_resume(cfg, out, resume, runtime)
    if ckpt is not None:
        cfg = trained_defaults(ckpt.meta, cfg)

    encoder_path = os.path.expanduser(resolve_encoder(cfg.encoder))
    _check_positions(cfg, encoder_path)
    tokenizer = load_tokenizer(encoder_path)
    data = load_data(cfg, tokenizer)
    if static_shapes(cfg, runtime):
        for task in data.values():
            task.use_buckets(cfg.pad_buckets, cfg.max_seq_len, cfg.eval_max_seq_len)
    soft = soft_targets(cfg, data, tokenizer, runtime, note=tqdm.write)
    sources = source_digests(cfg, soft, warn=tqdm.write)
    if ckpt is not None and (problems := source_problems(ckpt.meta, sources, out)):
        raise ConfigError(problems)
    scheme = build_scheme(cfg.weighting, cfg.task_names, cfg.central_task)
    graph_plan = plan_graphs(cfg, runtime, scheme) if graphs is None else graphs
    if graph_plan.enabled and not graph_plan.capture and (problems := emulation_problems(cfg)):
        raise ConfigError(problems)

    _seed_everything(cfg.seed)
    model = _build_model(cfg, encoder_path, ckpt, runtime)
    # What the scheme learns with the model (uncertainty weighting's log-variances), if anything.
    learned = scheme.setup({t.name: t.type for t in cfg.tasks}, runtime.device)
    optimizer = build_optimizer(model, cfg, runtime.device, learned,
                                capturable=graph_plan.enabled)
    # Each epoch's batch order is a pure function of (seed, epoch): build it once, here, where
    # the schedule needs the total number of updates, and train from the same lists below.
    sampler = build_sampler(cfg.sampling, cfg.task_names)
    plans = {
        e: batch_plan(data, cfg.batch_size, cfg.seed, e, bool(cfg.length_bucketing), sampler,
                      fixed=cfg.batches == "fixed")
        for e in range(1, cfg.epochs + 1)
    }
    scheduler = build_scheduler(optimizer, sum(len(p) for p in plans.values()), cfg)
    run = StageRun(cfg, stage, out, started, runtime, ckpt, held, tokenizer.pad_token_id or 0,
                   data, soft, sources, scheme, model, optimizer, scheduler, plans, graph_plan)
    if graph_plan.enabled:
        make_capturable(optimizer, runtime.device)
        run.graphs = GraphedSteps(run, functools.partial(update, run), graph_plan.capture,
                                  note=tqdm.write)
    return run


def train_stage(run: StageRun, report: Report | None = None, quiet: bool = False) -> RunResult:
    """Train the stage's epochs into `output_dir`; its `result.json` is the pipeline's to write,
    since a run with a fine-tuning stage is finished only when that is."""
    cfg, out = run.cfg, run.out
    progress = open_output(run, quiet)
    tracker = open_tracker(cfg.tracking, out, run.stage, run_params(cfg),
                           resumed_at=progress.global_step if run.ckpt is not None else None)
    bar = tqdm(total=run.total_steps, initial=progress.global_step, disable=quiet, unit="step",
               dynamic_ncols=True, desc="train")
    try:
        for epoch in range(run.ckpt.epoch + 1 if run.ckpt else 1, cfg.epochs + 1):
            train_loss, clipping = _train_epoch(run, epoch, progress, tracker, bar, quiet)
            end_epoch(run, epoch, train_loss, clipping, progress, tracker, report, quiet)
        if run.graphs is not None and not quiet:
            tqdm.write(run.graphs.summary())
    finally:  # also when a report stops the run (a halving stint, ASHA, divergence): a reused
        bar.close()  # worker must not keep a writer thread per stopped trial
        tracker.close()
    return stage_result(run, progress)


def _checkpoint_to_resume(cfg: RunConfig, out: Path, resume: bool, runtime: Runtime
                          ) -> tuple[Checkpoint | None, bool]:
    if out.exists() and not out.is_dir():
        raise ConfigError([f"output_dir: {out} is a file, not a folder; choose a folder path"])
    ckpt = latest_checkpoint(out, warn=tqdm.write) if resume else None
    held = holds_run(out)
    if ckpt is None and not resume and held:
        raise ConfigError(
            [
                f"output_dir: {out} already holds a run; pass --resume to continue it, or "
                "choose another output_dir"
            ]
        )
    if ckpt is not None:
        problems = resume_problems(ckpt.meta, cfg, runtime.precision, out)
        if problems:
            raise ConfigError(problems)
        if ckpt.kept != FULL and ckpt.epoch < cfg.epochs:  # trimmed, yet the run is unfinished
            raise ConfigError([f"output_dir: {ckpt.path} keeps no optimizer state, so the run "
                               "cannot continue from it; choose another output_dir"])
    return ckpt, held


def _build_model(cfg: RunConfig, encoder_path: str, ckpt: Checkpoint | None,
                 runtime: Runtime) -> MTDNN:
    try:
        encoder = load_encoder(encoder_path, cfg.seed, cfg.attention_dropout)
    except OSError as exc:
        raise ConfigError(
            [
                f"encoder: cannot load {cfg.encoder!r} ({str(exc).splitlines()[0]}); give a local "
                f"folder saved with save_pretrained, or leave it out for {DEFAULT_ENCODER}"
            ]
        ) from None
    if cfg.recompute_activations:
        recompute_activations(encoder, cfg.encoder)
    model = MTDNN(encoder, cfg.tasks, resolve_pooling(cfg.pooling, encoder_path), cfg.mixture)
    init_head_weights(model, cfg.head_init)  # before init_from, whose heads then replace them
    if cfg.init_from and ckpt is None:
        load_initial(model, cfg.init_from, cfg.init_heads, warn=tqdm.write)
    model = model.to(runtime.device)
    if cfg.compile:
        model.encoder = torch.compile(model.encoder, dynamic=True)
    return model


def _train_epoch(run: StageRun, epoch: int, progress: Progress, tracker: Tracker, bar: Any,
                 quiet: bool) -> tuple[float, dict[str, dict[str, Any]]]:
    """One pass over the epoch's batch plan; the epoch's mean training loss and each task's
    clipping (`weightsearch.trainer.clipping.clip_summary`)."""
    run.model.train()
    plan = run.plans[epoch]
    started = time.perf_counter()
    with (run.out / STEPS).open("a") as steps_log:
        log = EpochLog(run, progress, tracker, steps_log)
        for step, (task, indices) in enumerate(plan):
            log.add(*train_step(run, epoch, step, task, indices))
            bar.update(1)
            if len(log.pending) >= run.cfg.log_every or step == len(plan) - 1:
                bar.set_postfix(epoch=epoch, loss=f"{log.flush()[-1]['loss']:.4f}")
    if run.runtime.device.type == "cuda":
        torch.cuda.synchronize()
    progress.train_time += time.perf_counter() - started
    return log.finish(epoch, quiet)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _check_positions(cfg: RunConfig, encoder_path: str) -> None:
    """Refuse token limits beyond the encoder's position embeddings before anything is written."""
    try:
        config = json.loads((Path(encoder_path) / "config.json").read_text())
    except (OSError, ValueError):
        return  # a hub id or an odd folder: the encoder's own loader reports it
    limit = config.get("max_position_embeddings")
    if not isinstance(limit, int):
        return
    # RoBERTa-style encoders offset positions by padding_idx + 1.
    if config.get("model_type") in ("roberta", "xlm-roberta", "camembert"):
        limit -= 2
    limits = [("max_seq_len", cfg.max_seq_len), ("eval_max_seq_len", cfg.eval_max_seq_len),
              *((f"tasks[{i}].max_seq_len", t.max_seq_len) for i, t in enumerate(cfg.tasks))]
    problems = [f"{key}: {value} exceeds the {limit} positions of encoder {cfg.encoder!r}; use "
                f"at most {limit}"
                for key, value in limits if value is not None and value > limit]
    if problems:
        raise ConfigError(problems)


__all__ = ["StageRun", "evaluate", "set_up", "train_stage"]
