"""One MT-DNN training run, top to bottom: load, train, evaluate, checkpoint, report."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from tqdm.auto import tqdm

from trainer.checkpoint import (
    CHECKPOINTS,
    latest_checkpoint,
    load_checkpoint,
    load_initial,
    save_checkpoint,
)
from trainer.config import DEFAULT_ENCODER, RunConfig, load_config
from trainer.data import (
    Subset,
    TaskData,
    batch_plan,
    eval_batches,
    load_task_data,
    token_limits,
)
from trainer.device import Runtime, select_runtime
from trainer.distill import soft_targets
from trainer.encoders import load_tokenizer, resolve_encoder, resolve_pooling
from trainer.finetune import FINETUNE_DIR, run_stage
from trainer.heads import EvalSplit, head_class
from trainer.init_weights import init_head_weights
from trainer.model import MTDNN, load_encoder
from trainer.optim import build_optimizer, build_scheduler
from trainer.results import EpochReport, Metrics, RunResult
from trainer.resume import resume_problems, resume_record, source_digests, source_problems
from trainer.sampling import build_sampler
from trainer.smart import smart_loss
from trainer.tracking import Tracker, open_tracker, run_params
from trainer.weighting import build_scheme
from weightsearch.errors import ConfigError

STEPS, METRICS, RESULT, CONFIG, DATA_REPORT = (
    "steps.jsonl",
    "metrics.jsonl",
    "result.json",
    "config.yaml",
    "data.json",
)

Report = Callable[[EpochReport], None]


def train_subset(cfg: RunConfig) -> Subset:
    return Subset(n=cfg.max_train_examples, fraction=cfg.train_fraction,
                  random=cfg.subsample == "random", seed=cfg.subsample_seed)


def load_data(cfg: RunConfig, tokenizer: Any) -> dict[str, TaskData]:
    return {
        t.name: load_task_data(
            t,
            cfg.data_dir,
            tokenizer,
            cfg.max_seq_len,
            cfg.cache_dir,
            cfg.max_train_examples,
            cfg.max_eval_examples,
            cfg.overlong,
            cfg.eval_max_seq_len,
            train_subset(cfg),
        )
        for t in cfg.tasks
    }


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
    run_started = time.perf_counter()  # wall time covers loading data and model too
    if quiet:
        _silence_libraries()
    runtime = select_runtime(cfg.device, cfg.precision, cfg.num_threads)
    out = Path(cfg.output_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError([f"output_dir: {out} is a file, not a folder; choose a folder path"])
    ckpt = latest_checkpoint(out, warn=tqdm.write) if resume else None
    held = _holds_run(out)
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
    if cfg.finetune is not None and not held and (out / FINETUNE_DIR).exists():
        raise ConfigError([f"output_dir: {out / FINETUNE_DIR} exists, but {out} holds no run; "
                           "the fine-tuning stage writes there: move it or choose another "
                           "output_dir"])

    encoder_path = os.path.expanduser(resolve_encoder(cfg.encoder))
    _check_positions(cfg, encoder_path)
    tokenizer = load_tokenizer(encoder_path)
    data = load_data(cfg, tokenizer)
    soft = soft_targets(cfg, data, tokenizer, runtime, note=tqdm.write)
    sources = source_digests(cfg, soft, warn=tqdm.write)
    if ckpt is not None and (problems := source_problems(ckpt.meta, sources, out)):
        raise ConfigError(problems)
    scheme = build_scheme(cfg.weighting, cfg.task_names, cfg.central_task)

    _seed_everything(cfg.seed)
    try:
        encoder = load_encoder(encoder_path, cfg.seed)
    except OSError as exc:
        raise ConfigError(
            [
                f"encoder: cannot load {cfg.encoder!r} ({str(exc).splitlines()[0]}); give a local "
                f"folder saved with save_pretrained, or leave it out for {DEFAULT_ENCODER}"
            ]
        ) from None
    model = MTDNN(encoder, cfg.tasks, resolve_pooling(cfg.pooling, encoder_path), cfg.mixture)
    init_head_weights(model, cfg.head_init)  # before init_from, whose heads then replace them
    if cfg.init_from and ckpt is None:
        load_initial(model, cfg.init_from, cfg.init_heads, warn=tqdm.write)
    model = model.to(runtime.device)
    if cfg.compile:
        model.encoder = torch.compile(model.encoder, dynamic=True)
    optimizer = build_optimizer(model, cfg, runtime.device)
    # Each epoch's batch order is a pure function of (seed, epoch): build it once, here, where
    # the schedule needs the total number of updates, and train from the same lists below.
    sampler = build_sampler(cfg.sampling, cfg.task_names)
    plans = {
        e: batch_plan(data, cfg.batch_size, cfg.seed, e, cfg.length_bucketing, sampler)
        for e in range(1, cfg.epochs + 1)
    }
    total_steps = sum(len(p) for p in plans.values())
    scheduler = build_scheduler(optimizer, total_steps, cfg.warmup)

    # Inputs are valid: from here on the output folder is written.
    out.mkdir(parents=True, exist_ok=True)
    truncated = {name: d.truncated for name, d in data.items()}
    sizes = {name: d.train_size for name, d in data.items()}
    if ckpt is not None:
        load_checkpoint(ckpt, model, optimizer, scheduler, runtime.device)
        history: list[dict[str, Any]] = ckpt.meta["history"]
        global_step, examples_seen = ckpt.meta["global_step"], ckpt.meta["examples_seen"]
        elapsed_before, train_time = ckpt.meta["elapsed_s"], ckpt.meta["train_time_s"]
        _truncate_jsonl(out / STEPS, lambda r: r["global_step"] < global_step)
        # Fine-tuning rows are copied in again from their own runs when those finish.
        _truncate_jsonl(out / METRICS, lambda r: r.get("stage", stage) == stage
                        and r["epoch"] <= ckpt.epoch)
    else:
        history, global_step, examples_seen, elapsed_before, train_time = [], 0, 0, 0.0, 0.0
        for name in (STEPS, METRICS, RESULT):
            (out / name).unlink(missing_ok=True)
    if cfg.finetune is not None and held and (ckpt is None or ckpt.epoch < cfg.epochs):
        # Fine-tuning starts from the last multi-task epoch; an earlier attempt's is stale.
        shutil.rmtree(out / FINETUNE_DIR, ignore_errors=True)
    (out / CONFIG).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    tracker = open_tracker(cfg.tracking, out, stage, run_params(cfg),
                           resumed_at=global_step if ckpt is not None else None)
    notes = {name: d.notes for name, d in data.items() if d.notes}
    (out / DATA_REPORT).write_text(json.dumps(
        {"train_sizes": sizes, "truncated": truncated, "overlong_train": cfg.overlong,
         **({"notes": notes} if notes else {})}, indent=1
    ))
    if not quiet:
        _report_overlong(data, cfg)

    start_epoch = (ckpt.epoch + 1) if ckpt else 1
    bar = tqdm(
        total=total_steps,
        initial=global_step,
        disable=quiet,
        unit="step",
        dynamic_ncols=True,
        desc="train",
    )
    pad_id = tokenizer.pad_token_id or 0
    for epoch in range(start_epoch, cfg.epochs + 1):
        model.train()
        plan = plans[epoch]
        phase = scheme.stage(epoch)  # swl or iwl under SIWLM
        epoch_started = time.perf_counter()
        pending: list[tuple[dict[str, Any], torch.Tensor]] = []
        epoch_losses: list[torch.Tensor] = []
        skipped = 0
        with (out / STEPS).open("a") as steps_log:
            for step, (task, indices) in enumerate(plan):
                batch = _to_device(data[task].collate(data[task].train, indices, pad_id),
                                   runtime)
                if task in soft:
                    batch["soft_targets"] = soft[task][torch.as_tensor(indices)].to(runtime.device)
                weight = scheme.weight(task, epoch, step)
                lr = scheduler.get_last_lr()[0]
                # A weight-0 batch contributes nothing: no optimizer step, which would still
                # move the weights through Adamax's momentum and the decoupled weight decay.
                skip = weight == 0
                with torch.set_grad_enabled(not skip):
                    with runtime.autocast():
                        logits = model(task, batch)
                    loss = model.head(task).loss(logits.float(), batch)
                    if task in soft:  # MT-DNN-KD: the mean of the hard and soft losses
                        soft_loss = model.head(task).soft_loss(logits.float(),
                                                               batch["soft_targets"])
                        loss = (loss + soft_loss) / 2
                if skip:
                    skipped += 1
                else:
                    optimizer.zero_grad(set_to_none=True)
                    total = loss
                    if cfg.adversarial.enabled:
                        with runtime.autocast():
                            total = total + cfg.adversarial.weight * smart_loss(
                                model, task, batch, logits, cfg.adversarial)
                    (total * weight).backward()
                    if cfg.grad_clip > 0:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                    optimizer.step()
                # The schedule counts every batch of the plan, skipped ones too; torch flags
                # a scheduler step before the first optimizer step, which is intended here.
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler")
                    scheduler.step()
                record = {
                    "epoch": epoch,
                    "step": step,
                    "global_step": global_step,
                    "task": task,
                    "stage": phase,
                    "focus": scheme.focus(epoch, step),
                    "weight": weight,
                    "lr": lr,
                    "batch_size": len(indices),
                    "skipped": skip,
                }
                # Keep losses on the device and read them in one go every `log_every`
                # updates: a `.item()` per step would stall a GPU pipeline.
                pending.append((record, loss.detach()))
                epoch_losses.append(pending[-1][1])
                global_step += 1
                examples_seen += len(indices)
                bar.update(1)
                if len(pending) >= cfg.log_every or step == len(plan) - 1:
                    last = _flush_steps(pending, steps_log, tracker)
                    bar.set_postfix(epoch=epoch, loss=f"{last:.4f}")
                    pending = []
        if runtime.device.type == "cuda":
            torch.cuda.synchronize()
        train_time += time.perf_counter() - epoch_started
        if skipped and not quiet:
            tqdm.write(f"epoch {epoch}: {skipped} batches with weight 0 skipped (no update)")
        train_loss = float(torch.stack(epoch_losses).mean()) if epoch_losses else float("nan")

        metrics = evaluate(model, data, runtime, cfg.eval_batch_size, pad_id, out, epoch)
        primary = {t.name: metrics[t.name][t.primary_metric] for t in cfg.tasks}
        history.append(
            {"epoch": epoch, "metrics": metrics, "primary": primary, "train_loss": train_loss}
        )
        with (out / METRICS).open("a") as metrics_log:
            for spec in cfg.tasks:
                row = {
                    "stage": stage,
                    "epoch": epoch,
                    "task": spec.name,
                    **metrics[spec.name],
                    "primary_metric": spec.primary_metric,
                    "primary": primary[spec.name],
                }
                metrics_log.write(json.dumps(row) + "\n")
        tracker.epoch(epoch, metrics, train_loss)
        elapsed = elapsed_before + (time.perf_counter() - run_started)
        path = save_checkpoint(
            out,
            epoch,
            model,
            optimizer,
            scheduler,
            meta={
                "global_step": global_step,
                "examples_seen": examples_seen,
                "history": history,
                "elapsed_s": elapsed,
                "train_time_s": train_time,
                **resume_record(cfg, runtime.precision, sources),
            },
            keep=cfg.keep_checkpoints,
        )
        if not quiet:
            summary = "  ".join(f"{t} {cfg.task(t).primary_metric}={v:.4f}"
                                for t, v in primary.items())
            tqdm.write(f"epoch {epoch}: train_loss={train_loss:.4f}  {summary}")
        if report is not None:
            report(
                EpochReport(
                    epoch=epoch,
                    metrics=metrics,
                    primary=primary,
                    checkpoint=path,
                    train_loss=train_loss,
                    examples_seen=examples_seen,
                    elapsed_s=elapsed,
                    stage=stage,
                )
            )
    bar.close()
    tracker.close()

    result = _result(
        cfg,
        history,
        out,
        sizes,
        truncated,
        train_time,
        examples_seen,
        elapsed_before + (time.perf_counter() - run_started),
        model.pooling,
        stage,
    )
    if cfg.finetune is not None:
        del model, encoder, optimizer, scheduler  # the fine-tuning runs load their own copies
        finetuned = run_stage(cfg, out / CHECKPOINTS / f"epoch-{cfg.epochs:03d}", report, quiet)
        with (out / METRICS).open("a") as metrics_log:
            for run in finetuned.values():
                metrics_log.write((run.output_dir / METRICS).read_text())
        result = dataclasses.replace(result, finetuned=finetuned)
    (out / RESULT).write_text(json.dumps(result.to_dict(), indent=1))
    return result


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


def task_sizes(config: RunConfig | str | os.PathLike | dict) -> dict[str, int]:
    """Training examples per task after subsampling (before any overlong drops), without
    loading a tokenizer or model."""
    from trainer.readers import read_task_file, resolve_path

    cfg = config if isinstance(config, RunConfig) else load_config(config)
    subset = train_subset(cfg)
    return {spec.name: len(subset.apply(read_task_file(spec, resolve_path(cfg.data_dir,
                                                                          spec.train_file))))
            for spec in cfg.tasks}


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
            **peak_memory(),
        },
    )


def peak_memory() -> dict[str, float]:
    """Peak host RSS of this process and, on CUDA, peak GPU memory allocated, in MiB."""
    import resource
    import sys

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"peak_rss_mib": rss / (1024 * 1024 if sys.platform == "darwin" else 1024)}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def _holds_run(out: Path) -> bool:
    return (out / CHECKPOINTS).exists() or (out / RESULT).exists() or (out / STEPS).exists()


def _silence_libraries() -> None:
    """Workers log through their reports; library progress bars would only flood their logs."""
    import datasets
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()


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
                 tracker: Tracker) -> float:
    losses = torch.stack([loss for _, loss in pending]).float().cpu().tolist()
    rows = [{**record, "loss": value} for (record, _), value in zip(pending, losses, strict=True)]
    for row in rows:
        log.write(json.dumps(row) + "\n")
    log.flush()
    tracker.steps(rows)
    return losses[-1]


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


def _report_overlong(data: dict[str, TaskData], cfg: RunConfig) -> None:
    for name, task in data.items():
        head = head_class(task.spec.type)
        train_len, eval_len = token_limits(task.spec, cfg.max_seq_len, cfg.eval_max_seq_len)
        for split, n in task.truncated.items():
            train = split == "train"
            limit = train_len if train else eval_len
            for line in head.describe_split(task.spec, split, n, task.notes.get(split, {}),
                                            limit, dropped=train and cfg.overlong == "drop"):
                tqdm.write(f"{name}: {line}")


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


__all__ = ["evaluate", "task_sizes", "train"]
