"""A stage's output folder: opening it, the step log, each epoch's end and the stage's result.

`open_output` starts the folder's logs afresh or restores a checkpoint's progress, dropping log
lines written after it; `EpochLog` writes `steps.jsonl` over an epoch; `end_epoch` evaluates
(`evaluate`), writes `metrics.jsonl`, checkpoints and reports; `stage_result` condenses what the
stage trained. The single runs (`weightsearch.trainer.loop`) and the fused ones
(`weightsearch.trainer.fused`) share them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from tqdm.auto import tqdm

from weightsearch.core.errors import TrainingDiverged
from weightsearch.trainer.checkpoint import CHECKPOINTS, FULL, load_checkpoint, save_checkpoint
from weightsearch.trainer.clipping import clip_summary, reading_fields
from weightsearch.trainer.config import RunConfig, default_lr
from weightsearch.trainer.device import Runtime
from weightsearch.trainer.heads import EvalSplit, head_class
from weightsearch.trainer.majority import majority_scores
from weightsearch.trainer.memory import give_back, peak_memory
from weightsearch.trainer.model import MTDNN
from weightsearch.trainer.optim import make_capturable
from weightsearch.trainer.results import EpochReport, Metrics, RunResult
from weightsearch.trainer.resume import resume_record
from weightsearch.trainer.stage import Progress, Report, StageRun
from weightsearch.trainer.step import to_device
from weightsearch.trainer.task_data import TaskData, eval_batches, token_limits
from weightsearch.trainer.tracking import Tracker
from weightsearch.trainer.weighting import Scheme

STEPS, METRICS, RESULT, CONFIG, DATA_REPORT = (
    "steps.jsonl",
    "metrics.jsonl",
    "result.json",
    "config.yaml",
    "data.json",
)


def holds_run(out: Path) -> bool:
    """Whether `out` holds (part of) a run: a checkpoint, a result or a step log."""
    return (out / CHECKPOINTS).exists() or (out / RESULT).exists() or (out / STEPS).exists()


def open_output(run: StageRun, quiet: bool) -> Progress:
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


def step_rows(pending: list[tuple[dict[str, Any], torch.Tensor]],
              weighted_task_gradient: bool = True) -> list[dict[str, Any]]:
    """The steps.jsonl rows of pending steps (their readings read in one transfer)."""
    if not pending:
        return []
    readings = torch.stack([r for _, r in pending]).cpu().tolist()
    return [{**record, "loss": loss, **reading_fields(record, norm, scale, weighted_task_gradient)}
            for (record, _), (loss, norm, scale) in zip(pending, readings, strict=True)]


def _flush_steps(pending: list[tuple[dict[str, Any], torch.Tensor]], log: Any,
                 tracker: Tracker, weighted_task_gradient: bool = True) -> list[dict[str, Any]]:
    rows = step_rows(pending, weighted_task_gradient)
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


def end_epoch(run: StageRun, epoch: int, train_loss: float,
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
                    batch = to_device(task.collate(ds, indices, pad_id), runtime)
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


__all__ = ["CONFIG", "DATA_REPORT", "METRICS", "RESULT", "STEPS", "EpochLog", "end_epoch",
           "evaluate", "holds_run", "nominal_weights", "open_output", "run_clipping",
           "stage_result", "step_rows"]
