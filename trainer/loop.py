"""One stage of an MT-DNN run, top to bottom: set up, the epochs, the end of each epoch.

`set_up` checks every input and loads the data and the model without writing anything;
`train_stage` then trains the stage's epochs into `output_dir`, evaluating, checkpointing and
reporting after each. Which stages a run has (soft targets, multi-task, fine-tuning) is the
business of `weightsearch.trainer.pipeline`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import random
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from tqdm.auto import tqdm

from weightsearch.core.errors import ConfigError, TrainingDiverged
from weightsearch.trainer.checkpoint import (
    CHECKPOINTS,
    FULL,
    Checkpoint,
    latest_checkpoint,
    load_checkpoint,
    load_initial,
    save_checkpoint,
)
from weightsearch.trainer.clipping import clip_gradient, clip_summary, reading_fields, step_readings
from weightsearch.trainer.config import DEFAULT_ENCODER, RunConfig, default_lr
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
from weightsearch.trainer.heads import EvalSplit, head_class
from weightsearch.trainer.init_weights import init_head_weights
from weightsearch.trainer.majority import majority_scores
from weightsearch.trainer.memory import give_back, peak_memory
from weightsearch.trainer.model import MTDNN, load_encoder, recompute_activations
from weightsearch.trainer.optim import (
    build_optimizer,
    build_scheduler,
    current_lr,
    make_capturable,
)
from weightsearch.trainer.results import EpochReport, Metrics, RunResult
from weightsearch.trainer.resume import (
    resume_problems,
    resume_record,
    source_digests,
    source_problems,
    trained_defaults,
)
from weightsearch.trainer.run_data import load_data
from weightsearch.trainer.sampling import build_sampler
from weightsearch.trainer.smart import smart_loss
from weightsearch.trainer.task_data import TaskData, batch_plan, eval_batches, token_limits
from weightsearch.trainer.tracking import Tracker, open_tracker, run_params
from weightsearch.trainer.weighting import Scheme, build_scheme

STEPS, METRICS, RESULT, CONFIG, DATA_REPORT = (
    "steps.jsonl",
    "metrics.jsonl",
    "result.json",
    "config.yaml",
    "data.json",
)

Report = Callable[[EpochReport], None]
# Soft targets of the distilled tasks, one row per training example: (cfg, data, tokenizer,
# runtime, note) -> task -> tensor. The pipeline passes `weightsearch.trainer.distill.soft_targets`.
SoftTargets = Callable[..., dict[str, torch.Tensor]]


def no_soft_targets(*_: Any, **__: Any) -> dict[str, torch.Tensor]:
    return {}


@dataclass
class Progress:
    """What a stage has done so far; a checkpoint restores it."""

    history: list[dict[str, Any]] = field(default_factory=list)
    global_step: int = 0
    examples_seen: int = 0
    elapsed_before: float = 0.0  # wall time of earlier attempts of this run
    train_time: float = 0.0


@dataclass
class StageRun:
    """A stage whose inputs are checked and whose data and model are loaded; nothing written."""

    cfg: RunConfig
    stage: str
    out: Path
    started: float  # wall time covers loading data and model too
    runtime: Runtime
    ckpt: Checkpoint | None
    held: bool  # `out` held a run before this one started
    pad_id: int
    data: dict[str, TaskData]
    soft: dict[str, torch.Tensor]
    sources: dict[str, str]
    scheme: Scheme
    model: MTDNN
    optimizer: torch.optim.Optimizer
    scheduler: Any
    plans: dict[int, list[tuple[str, np.ndarray]]]
    graph_plan: GraphPlan = field(default_factory=lambda: GraphPlan(False))
    graphs: GraphedSteps | None = None  # the CUDA graphs of the steps, when they are on

    @property
    def total_steps(self) -> int:
        return sum(len(p) for p in self.plans.values())


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
        e: batch_plan(data, cfg.batch_size, cfg.seed, e, cfg.length_bucketing, sampler,
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
    progress = _open_output(run, quiet)
    tracker = open_tracker(cfg.tracking, out, run.stage, run_params(cfg),
                           resumed_at=progress.global_step if run.ckpt is not None else None)
    bar = tqdm(total=run.total_steps, initial=progress.global_step, disable=quiet, unit="step",
               dynamic_ncols=True, desc="train")
    try:
        for epoch in range(run.ckpt.epoch + 1 if run.ckpt else 1, cfg.epochs + 1):
            train_loss, clipping = _train_epoch(run, epoch, progress, tracker, bar, quiet)
            _end_epoch(run, epoch, train_loss, clipping, progress, tracker, report, quiet)
        if run.graphs is not None and not quiet:
            tqdm.write(run.graphs.summary())
    finally:  # also when a report stops the run (a halving stint, ASHA, divergence): a reused
        bar.close()  # worker must not keep a writer thread per stopped trial
        tracker.close()
    return stage_result(run, progress)


def stage_result(run: StageRun, progress: Progress) -> RunResult:
    """The stage's result from what it has trained so far."""
    result = _result(run.cfg, progress.history, run.out,
                     {n: d.train_size for n, d in run.data.items()},
                     {n: d.truncated for n, d in run.data.items()}, progress.train_time,
                     progress.examples_seen,
                     progress.elapsed_before + (time.perf_counter() - run.started),
                     run.model.pooling, run.stage, nominal_weights(run.scheme))
    return dataclasses.replace(result, extra={**result.extra,
                                              "majority": majority_scores(run.data)})


def holds_run(out: Path) -> bool:
    """Whether `out` holds (part of) a run: a checkpoint, a result or a step log."""
    return (out / CHECKPOINTS).exists() or (out / RESULT).exists() or (out / STEPS).exists()


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


def _open_output(run: StageRun, quiet: bool) -> Progress:
    """Inputs are valid: from here on the output folder is written. Restores the checkpoint's
    progress (dropping log lines written after it) or starts the logs afresh."""
    cfg, out, ckpt = run.cfg, run.out, run.ckpt
    out.mkdir(parents=True, exist_ok=True)
    if ckpt is not None:
        if ckpt.kept == FULL:
            state = load_checkpoint(ckpt, run.model, run.optimizer, run.scheduler,
                                    run.runtime.device)
            if run.graphs is not None:  # the checkpoint keeps plain learning rates
                make_capturable(run.optimizer, run.runtime.device)
            run.scheme.load_state_dict(state.get("scheme") or {})
        meta = ckpt.meta
        progress = Progress(meta["history"], meta["global_step"], meta["examples_seen"],
                            meta["elapsed_s"], meta["train_time_s"])
        _truncate_jsonl(out / STEPS, lambda r: r["global_step"] < progress.global_step)
        # Fine-tuning rows are copied in again from their own runs when those finish.
        _truncate_jsonl(out / METRICS, lambda r: r.get("stage", run.stage) == run.stage
                        and r["epoch"] <= ckpt.epoch)
    else:
        progress = Progress()
        for name in (STEPS, METRICS, RESULT):
            (out / name).unlink(missing_ok=True)
    (out / CONFIG).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    if not quiet:
        source = "set in the config" if cfg.lr is not None else default_lr(cfg.encoder)[1]
        tqdm.write(f"lr {cfg.learning_rate:g} ({source})")
        why_not = run.graph_plan.why_not
        if run.runtime.device.type == "cuda" and why_not and cfg.cuda_graphs != "off":
            tqdm.write(f"cuda graphs off: {why_not}")
    notes = {name: d.notes for name, d in run.data.items() if d.notes}
    (out / DATA_REPORT).write_text(json.dumps(
        {"train_sizes": {name: d.train_size for name, d in run.data.items()},
         "truncated": {name: d.truncated for name, d in run.data.items()},
         "overlong_train": cfg.overlong_policy, **({"notes": notes} if notes else {})}, indent=1
    ))
    _report_overlong(run.data, cfg, quiet)
    return progress


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


@dataclass
class EpochLog:
    """One run's step log over an epoch. Losses and gradient norms stay on the device and are
    read in one go every `log_every` updates: a `.item()` per step would stall a GPU pipeline."""

    run: StageRun
    progress: Progress
    tracker: Tracker
    file: Any
    pending: list[tuple[dict[str, Any], torch.Tensor]] = field(default_factory=list)
    losses: list[torch.Tensor] = field(default_factory=list)
    logged: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0

    def add(self, record: dict[str, Any], readings: torch.Tensor) -> None:
        self.skipped += record["skipped"]
        record["global_step"] = self.progress.global_step
        self.pending.append((record, readings))
        self.losses.append(readings[0])
        self.progress.global_step += 1
        self.progress.examples_seen += record["batch_size"]

    def flush(self) -> list[dict[str, Any]]:
        """Write the pending steps; raises TrainingDiverged on a loss that is not finite."""
        rows = _flush_steps(self.pending, self.file, self.tracker,
                            weighted_task_gradient=not self.run.cfg.adversarial.enabled)
        self.pending = []
        self.logged.extend(rows)
        if self.run.cfg.stop_on_divergence:
            _check_losses(rows)
        return rows

    def finish(self, epoch: int, quiet: bool) -> tuple[float, dict[str, dict[str, Any]]]:
        """The epoch's mean training loss and each task's clipping; tells the scheme."""
        run = self.run
        if self.skipped and not quiet:
            tqdm.write(f"epoch {epoch}: {self.skipped} batches with weight 0 skipped (no update)")
        run.scheme.end_epoch(epoch, _task_means(run.plans[epoch], self.losses))
        clipping = clip_summary(self.logged, run.cfg.grad_clip, run.cfg.grad_clip_mode,
                                nominal_weights(run.scheme))
        mean = float(torch.stack(self.losses).mean()) if self.losses else float("nan")
        return mean, clipping


def _task_means(plan: list[tuple[str, np.ndarray]], losses: list[torch.Tensor]
                ) -> dict[str, float]:
    """Each task's mean (unweighted) batch loss over the epoch, for the tasks it trained."""
    values = torch.stack(losses).float().cpu().tolist() if losses else []
    by_task: dict[str, list[float]] = {}
    for (task, _), value in zip(plan, values, strict=True):
        by_task.setdefault(task, []).append(value)
    return {task: sum(v) / len(v) for task, v in by_task.items()}


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
    batch = _to_device(data.collate(data.train, indices, run.pad_id), run.runtime)
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


def _end_epoch(run: StageRun, epoch: int, train_loss: float,
               clipping: dict[str, dict[str, Any]], progress: Progress, tracker: Tracker,
               report: Report | None, quiet: bool) -> None:
    """Evaluate, log the metrics, checkpoint, and report the epoch."""
    cfg, out = run.cfg, run.out
    give_back()  # the epoch's freed activations, before evaluation allocates its own
    metrics = evaluate(run.model, run.data, run.runtime, cfg.eval_batch_size, run.pad_id, out,
                       epoch)
    give_back()
    if cfg.stop_on_divergence:
        _check_metrics(metrics, epoch)
    primary = {t.name: metrics[t.name][t.primary_metric] for t in cfg.tasks}
    progress.history.append(
        {"epoch": epoch, "metrics": metrics, "primary": primary, "train_loss": train_loss,
         "clipping": clipping}
    )
    with (out / METRICS).open("a") as metrics_log:
        for spec in cfg.tasks:
            row = {"stage": run.stage, "epoch": epoch, "task": spec.name, **metrics[spec.name],
                   "primary_metric": spec.primary_metric, "primary": primary[spec.name]}
            metrics_log.write(json.dumps(row) + "\n")
    tracker.epoch(epoch, metrics, train_loss)
    elapsed = progress.elapsed_before + (time.perf_counter() - run.started)
    path = save_checkpoint(
        out, epoch, run.model, run.optimizer, run.scheduler,
        meta={"global_step": progress.global_step, "examples_seen": progress.examples_seen,
              "history": progress.history, "elapsed_s": elapsed,
              "train_time_s": progress.train_time,
              **resume_record(cfg, run.runtime.precision, run.sources)},
        keep=None if cfg.checkpoints == "all" else cfg.keep_checkpoints,
        scheme_state=run.scheme.state_dict(),
    )
    if not quiet:
        summary = "  ".join(f"{t} {cfg.task(t).primary_metric}={v:.4f}"
                            for t, v in primary.items())
        tqdm.write(f"epoch {epoch}: train_loss={train_loss:.4f}  {summary}")
    if report is not None:
        report(EpochReport(epoch=epoch, metrics=metrics, primary=primary, checkpoint=path,
                           train_loss=train_loss, examples_seen=progress.examples_seen,
                           elapsed_s=elapsed, stage=run.stage))


def evaluate(
    model: MTDNN, data: dict[str, TaskData], runtime: Runtime, batch_size: int, pad_id: int,
    output_dir: Path | None = None, epoch: int = 0,
) -> Metrics:
    """Each task's metrics on all its dev splits; later splits get a `<split>_` prefix. Heads
    that write prediction files (span QA) write them into `output_dir`, tagged with `epoch`."""
    model.eval()
    metrics: Metrics = {}
    with torch.inference_mode():
        for name, task in data.items():
            head = model.head(name)
            row: dict[str, float] = {}
            for i, (split, ds) in enumerate(task.evals.items()):
                preds, refs, order = [], [], []
                for indices in eval_batches(ds, batch_size):
                    batch = _to_device(task.collate(ds, indices, pad_id), runtime)
                    with runtime.autocast():
                        outputs = model(name, batch)
                    preds.append(head.predict(outputs.float(), batch))
                    refs.append(batch["labels"])
                    order.append(indices)
                values = head.score(
                    torch.cat(preds).cpu().numpy(),
                    torch.cat(refs).cpu().numpy(),
                    EvalSplit(name, split, np.concatenate(order), ds, task.references.get(split),
                              output_dir, epoch, first=i == 0),
                )
                prefix = "" if i == 0 else f"{split}_"
                row.update({prefix + k: v for k, v in values.items()})
            metrics[name] = row
    model.train()
    return metrics


def _result(
    cfg: RunConfig,
    history: list[dict[str, Any]],
    out: Path,
    sizes: dict[str, int],
    truncated: dict[str, dict[str, int]],
    train_time: float,
    examples: int,
    wall: float,
    pooling: str,
    stage: str,
    nominal: dict[str, float] | None = None,
) -> RunResult:
    best: Metrics = {}
    best_epoch: dict[str, int] = {}
    for spec in cfg.tasks:
        # Earliest epoch wins a tie, so a flat curve does not reward extra training.
        top = max(history, key=lambda h: (h["primary"][spec.name], -h["epoch"]))
        best[spec.name] = top["metrics"][spec.name]
        best_epoch[spec.name] = top["epoch"]
    final = history[-1]["metrics"] if history else {}
    return RunResult(
        stage=stage,
        best=best,
        best_epoch=best_epoch,
        final=final,
        history=history,
        wall_time_s=wall,
        train_time_s=train_time,
        train_examples_per_s=examples / train_time if train_time else 0.0,
        train_sizes=sizes,
        truncated=truncated,
        output_dir=out,
        extra={
            "central_task": cfg.central_task,
            "primary_metric": cfg.task(cfg.central_task).primary_metric,
            "pooling": pooling,
            "clipping": run_clipping(cfg, out, nominal),
            **peak_memory(),
        },
    )


def nominal_weights(scheme: Scheme) -> dict[str, float] | None:
    """Each task's weight as a study sets it, which every update's weight scales (SIWLM's
    initial weights: the central weight, the auxiliary weights); None for schemes without."""
    initial = getattr(scheme, "initial", None)
    if getattr(getattr(scheme, "settings", None), "variant", None) == "paper":
        return None  # its focus batches train at 1 whatever the weight: no single scale
    return dict(initial) if isinstance(initial, dict) else None


def run_clipping(cfg: RunConfig, out: Path,
                 nominal: dict[str, float] | None = None) -> dict[str, Any]:
    """The clipping regime and each task's clipping over the whole stage, from its step log
    (which a resumed run keeps whole: its earlier attempts' rows are in it)."""
    rows = []
    if (out / STEPS).is_file():
        for line in (out / STEPS).read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return {"grad_clip": cfg.grad_clip, "grad_clip_mode": cfg.grad_clip_mode,
            # SMART's unweighted term: the clipped direction depends on the weight
            **({"adversarial": True} if cfg.adversarial.enabled else {}),
            "tasks": clip_summary(rows, cfg.grad_clip, cfg.grad_clip_mode, nominal)}


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _to_device(batch: dict[str, torch.Tensor], runtime: Runtime) -> dict[str, torch.Tensor]:
    if runtime.device.type == "cpu":
        return batch
    pin = runtime.pin_memory
    return {
        k: (v.pin_memory() if pin else v).to(runtime.device, non_blocking=True)
        for k, v in batch.items()
    }


def _flush_steps(pending: list[tuple[dict[str, Any], torch.Tensor]], log: Any,
                 tracker: Tracker, weighted_task_gradient: bool = True) -> list[dict[str, Any]]:
    readings = torch.stack([r for _, r in pending]).cpu().tolist()
    rows = [{**record, "loss": loss,
             **reading_fields(record, norm, scale, weighted_task_gradient)}
            for (record, _), (loss, norm, scale) in zip(pending, readings, strict=True)]
    for row in rows:
        log.write(json.dumps(row) + "\n")
    log.flush()
    tracker.steps(rows)
    return rows


_DIVERGED_FIX = ("lower lr or the loss weights, or set stop_on_divergence: false to train on "
                 "regardless")


def _check_losses(rows: list[dict[str, Any]]) -> None:
    bad = next((r for r in rows if not math.isfinite(r["loss"])), None)
    if bad is not None:
        raise TrainingDiverged(
            f"training diverged: the {bad['task']} loss is {bad['loss']} at update "
            f"{bad['global_step']} (epoch {bad['epoch']}, loss weight {bad['weight']:g}, lr "
            f"{bad['lr']:.3g}); {_DIVERGED_FIX}")


def _check_metrics(metrics: Metrics, epoch: int) -> None:
    bad = [f"{task} {name}={value}" for task, values in metrics.items()
           for name, value in values.items()
           if isinstance(value, float) and not math.isfinite(value)]
    if bad:
        raise TrainingDiverged(f"training diverged: epoch {epoch}'s dev metrics are not finite "
                               f"({', '.join(bad)}); {_DIVERGED_FIX}")


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


def _report_overlong(data: dict[str, TaskData], cfg: RunConfig, quiet: bool) -> None:
    """What fitting each split to its token limit did; a warning (even when quiet) where
    dropping left out most of a task's training examples."""
    for name, task in data.items():
        head = head_class(task.spec.type)
        train_len, eval_len = token_limits(task.spec, cfg.max_seq_len, cfg.eval_max_seq_len)
        for split, n in task.truncated.items():
            train = split == "train"
            limit = train_len if train else eval_len
            dropped = train and cfg.overlong_policy == "drop" and head.drops_overlong
            for line in head.describe_split(task.spec, split, n, task.notes.get(split, {}),
                                            limit, dropped=dropped):
                if not quiet:
                    tqdm.write(f"{name}: {line}")
            if dropped and n > task.train_size:  # most of the task would go unseen
                tqdm.write(f"{name}: warning: {n} of {n + task.train_size} training examples "
                           f"are over max_seq_len={limit} and were dropped; raise max_seq_len "
                           "or set overlong: truncate to train on them", file=sys.stderr)


def _truncate_jsonl(path: Path, keep: Callable[[dict[str, Any]], bool]) -> None:
    """Drop log lines written after the checkpoint we resume from (or half-written by a crash)."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if keep(row):
            kept.append(line)
    path.write_text("".join(line + "\n" for line in kept))


__all__ = ["StageRun", "evaluate", "set_up", "train_stage"]
