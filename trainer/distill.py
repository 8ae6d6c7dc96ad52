"""Knowledge distillation from teacher ensembles (MT-DNN-KD, Liu et al. 2019b).

For each task with teachers, the student's loss on a batch is the mean of the hard-label loss
and the soft-target loss: cross-entropy against the teachers' mean class distribution, or the
squared error to their mean score for regression (`Head.soft_loss`).

Soft targets belong to the exact training rows a student sees (after subsampling and dropping
over-long examples), in their order: a file holds one row of targets per training example and a
fingerprint of those tokenized rows, and a student refuses a file whose fingerprint, row count,
task type or label set differ. Built from teacher runs, they are cached under the cache folder
(`soft-targets/`), keyed by the rows and the teachers' weights, so the teachers run once for
every student of a study. Teachers must use the student's tokenizer (as in MT-DNN-KD, where
teachers and student share BERT), since they read the student's tokenized rows.

A teacher run teaches a task with its fine-tuned model of that task when it has one (its
`finetune/<task>/` run: MT-DNN-KD distils fine-tuned MT-DNNs), else with its multi-task model;
either way with that run's newest intact checkpoint, and it is ranked (`pick_teachers`) by the
dev score of that same checkpoint's epoch.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from weightsearch.core.errors import ConfigError
from weightsearch.core.files import file_digest
from weightsearch.core.yamlio import read_yaml_file
from weightsearch.trainer.checkpoint import CHECKPOINTS, latest_checkpoint, no_weights_problem
from weightsearch.trainer.config import RunConfig, load_config
from weightsearch.trainer.config.finetune_settings import FINETUNE_DIR
from weightsearch.trainer.task_types import TASK_TYPES

if TYPE_CHECKING:
    import torch

    from weightsearch.trainer.device import Runtime
    from weightsearch.trainer.task_data import TaskData

SOFT_TARGETS_DIR = "soft-targets"


@dataclass(frozen=True)
class TeacherSource:
    """What one teacher run teaches one task with: a run folder (the teacher's own, or its
    fine-tuning run of the task), that run's config, and its newest intact checkpoint."""

    run: Path
    config: RunConfig
    weights: Path  # the checkpoint's model.safetensors
    epoch: int
    score: float | None  # the task's primary dev metric at that epoch
    stage: str  # multitask or finetuned


def pick_teachers(cfg: RunConfig, candidates: list[str], k: int
                  ) -> dict[str, list[tuple[Path, TeacherSource]]]:
    """Per distillable task of the student, the `k` finished candidate runs whose teaching
    checkpoint (`teacher_source`) scores best on its dev set, best first."""
    scored: dict[str, list[tuple[Path, TeacherSource]]] = {}
    problems = []
    for folder in map(Path, candidates):
        if not (folder / "result.json").is_file():
            problems.append(f"--candidates: {folder} is not a finished run (no result.json); "
                            "train it first or leave it out")
            continue
        trained = _run_config(folder, "--candidates").task_names
        for spec in cfg.tasks:
            if not TASK_TYPES[spec.type].distillable or spec.name not in trained:
                continue
            source = teacher_source(folder, spec.name, "--candidates")
            if source.score is not None:
                scored.setdefault(spec.name, []).append((folder, source))
    if problems:
        raise ConfigError(problems)
    if not scored:
        raise ConfigError(["--candidates: no candidate run trained any of the student's "
                           f"tasks ({', '.join(cfg.task_names)})"])
    return {t: sorted(runs, key=lambda r: -(r[1].score or 0.0))[:k]
            for t, runs in scored.items()}


def teacher_source(folder: Path, task: str, where: str) -> TeacherSource:
    """The run and checkpoint with which the teacher run `folder` teaches `task`: its fine-tuning
    run of `task` when that has an intact checkpoint, else its own newest intact checkpoint."""
    tuned = folder / FINETUNE_DIR / task
    ckpt = (latest_checkpoint(tuned, warn=print, with_state=False)
            if (tuned / CHECKPOINTS).is_dir() else None)
    run, stage = (tuned, "finetuned") if ckpt is not None else (folder, "multitask")
    if ckpt is None:
        ckpt = latest_checkpoint(folder, warn=print, with_state=False)
    if ckpt is None:
        raise ConfigError([f"{where}: {folder} holds no intact checkpoint; train the teacher "
                           "first or give another run"])
    if not ckpt.has_weights:
        raise ConfigError([no_weights_problem(where, run)])
    cfg = _run_config(run, where)
    if task not in cfg.task_names:
        raise ConfigError([f"{where}: teacher {folder} did not train {task} "
                           f"(it trained {', '.join(cfg.task_names)})"])
    score = next((h.get("primary", {}).get(task) for h in ckpt.meta.get("history", [])
                  if h.get("epoch") == ckpt.epoch), None)
    return TeacherSource(run=run, config=cfg, weights=ckpt.weights,
                         epoch=ckpt.epoch, score=float(score) if isinstance(
                             score, (int, float)) else None, stage=stage)


def _run_config(folder: Path, where: str) -> RunConfig:
    """A finished run's config.yaml, read for its model's shape. Its data and weight sources
    (data_dir, init_from, distill) are left out: a teacher reads the student's rows and its
    weights are in its checkpoint, so they need not exist where the student trains."""
    try:
        raw = read_yaml_file(folder / "config.yaml")
        if not isinstance(raw, dict):
            raise ConfigError(["config.yaml holds no mapping of settings"])
        return load_config({k: v for k, v in raw.items()
                            if k not in ("data_dir", "init_from", "distill")})
    except ConfigError as exc:
        raise ConfigError([f"{where}: {folder} is not a finished run folder "
                           f"({exc.problems[0]})"]) from None


def fingerprint(data: TaskData) -> str:
    """sha256 of a task's tokenized training rows, in order: what soft targets are tied to."""
    table = data.train.with_format("arrow")[:]
    digest = hashlib.sha256()
    for name in ("input_ids", "token_type_ids", "label"):
        column = table.column(name).combine_chunks()
        if hasattr(column, "flatten"):
            digest.update(column.offsets.to_numpy().tobytes())
            column = column.flatten()
        digest.update(column.to_numpy(zero_copy_only=False).tobytes())
    return digest.hexdigest()


def soft_targets(cfg: RunConfig, data: dict[str, TaskData], tokenizer: Any, runtime: Runtime,
                 note: Callable[[str], None] = print) -> dict[str, torch.Tensor]:
    """Each distilled task's soft targets, one row per training example (on the CPU)."""
    if cfg.distill is None:
        return {}
    out = {}
    for task, sources in cfg.distill.sources().items():
        where = f"distill.teachers.{task}"
        rows = fingerprint(data[task])
        if len(sources) == 1 and Path(sources[0]).is_file():
            out[task] = read_soft_targets(Path(sources[0]), data[task], rows, where)
            continue
        out[task] = _cached_or_built(cfg, task, sources, data[task], rows, tokenizer, runtime,
                                     where, note)[0]
    return out


def build_soft_target_files(cfg: RunConfig, data: dict[str, TaskData], tokenizer: Any,
                            runtime: Runtime, note: Callable[[str], None] = print
                            ) -> dict[str, Path]:
    """`weightsearch soft-targets`: build (or find) each task's file; task -> its path."""
    assert cfg.distill is not None
    paths = {}
    for task, sources in cfg.distill.sources().items():
        where = f"distill.teachers.{task}"
        if len(sources) == 1 and Path(sources[0]).is_file():
            read_soft_targets(Path(sources[0]), data[task], fingerprint(data[task]), where)
            paths[task] = Path(sources[0])
            continue
        paths[task] = _cached_or_built(cfg, task, sources, data[task], fingerprint(data[task]),
                                       tokenizer, runtime, where, note)[1]
    return paths


def read_soft_targets(path: Path, data: TaskData, rows: str, where: str) -> torch.Tensor:
    import torch
    from safetensors import safe_open

    spec = data.spec
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            targets = f.get_tensor("targets").float()
    except Exception as exc:  # safetensors raises its own types for damaged files
        raise ConfigError([f"{where}: cannot read soft targets from {path} "
                           f"({type(exc).__name__}); build them with `weightsearch soft-targets`"
                           ]) from None
    problems = []
    if meta.get("rows") != rows or targets.shape[0] != data.train_size:
        problems.append(f"{where}: {path} was built for other training rows than this run's "
                        f"({targets.shape[0]} rows, this run has {data.train_size}); rebuild it "
                        "with the student's data settings (subsample, max_seq_len, overlong)")
    if meta.get("type") != spec.type:
        problems.append(f"{where}: {path} holds {meta.get('type')} targets, the task is "
                        f"{spec.type}; build them from teachers of this task")
    elif not TASK_TYPES[spec.type].class_outputs and targets.ndim != 1:
        problems.append(f"{where}: {path} holds class probabilities for the {spec.type} task "
                        f"{spec.name}; a {spec.type} task takes one score per example")
    elif TASK_TYPES[spec.type].class_outputs:
        labels = json.loads(meta.get("labels", "null"))
        if labels != list(spec.labels or ()):
            problems.append(f"{where}: {path} has labels {labels}, the task has "
                            f"{list(spec.labels or ())}; use teachers with the same label set")
        elif targets.ndim != 2 or targets.shape[1] != spec.num_labels:
            problems.append(f"{where}: {path} does not hold one distribution over "
                            f"{spec.num_labels} classes per example")
        elif (targets.min() < 0 or not torch.allclose(targets.sum(1), torch.ones(1), atol=1e-3)):
            problems.append(f"{where}: {path} has rows that are not probability distributions "
                            "(negative, or not summing to 1); rebuild it")
    if not torch.isfinite(targets).all():
        problems.append(f"{where}: {path} holds NaN or infinite targets; rebuild it")
    if problems:
        raise ConfigError(problems)
    return targets


def _cached_or_built(cfg: RunConfig, task: str, teachers: tuple[str, ...], data: TaskData,
                     rows: str, tokenizer: Any, runtime: Runtime, where: str,
                     note: Callable[[str], None]) -> tuple[torch.Tensor, Path]:
    import torch
    from safetensors.torch import save_file

    runs = [_teacher_run(Path(t), task, data, tokenizer, where) for t in teachers]
    key = hashlib.sha256(json.dumps(
        {"rows": rows, "teachers": sorted(file_digest(r.weights) for r in runs)}).encode()
    ).hexdigest()
    path = Path(cfg.cache_dir).expanduser().parent / SOFT_TARGETS_DIR / f"{task}-{key[:24]}"
    path = path.with_suffix(".safetensors")
    if path.is_file():
        try:
            return read_soft_targets(path, data, rows, where), path
        except ConfigError:
            note(f"note: soft targets {path} are damaged; rebuilding them")
    note(f"building soft targets for {task} from {len(runs)} teacher(s)")
    targets = torch.stack([_predict(r.config, r.weights, task, data, tokenizer, runtime)
                           for r in runs])
    mean = targets.mean(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    save_file({"targets": mean.contiguous()}, str(tmp), metadata={
        "task": task, "type": data.spec.type, "rows": rows,
        "labels": json.dumps(list(data.spec.labels or ())),
        "teachers": json.dumps([f"{r.weights} ({r.stage}, epoch {r.epoch})" for r in runs]),
    })
    os.replace(tmp, path)  # atomic: concurrent trials publish the same content
    return mean, path


def _teacher_run(folder: Path, task: str, data: TaskData, tokenizer: Any, where: str
                 ) -> TeacherSource:
    """What a teacher run teaches `task` with (`teacher_source`), checked against the student."""
    from weightsearch.trainer.encoders import load_tokenizer, resolve_encoder

    source = teacher_source(folder, task, where)
    cfg = source.config
    spec = cfg.task(task)
    if (spec.type, spec.labels) != (data.spec.type, data.spec.labels):
        raise ConfigError([f"{where}: teacher {folder} has {task} as {spec.type} with labels "
                           f"{list(spec.labels or ())}, the student {data.spec.type} with "
                           f"{list(data.spec.labels or ())}; teachers must share the label set"])
    theirs = load_tokenizer(os.path.expanduser(resolve_encoder(cfg.encoder)))
    if theirs.get_vocab() != tokenizer.get_vocab():
        raise ConfigError([f"{where}: teacher {folder} uses another tokenizer than the student; "
                           "teachers read the student's tokenized rows, so use one encoder "
                           "family for both"])
    return source


def _predict(cfg: RunConfig, weights: Path, task: str, data: TaskData, tokenizer: Any,
             runtime: Runtime) -> torch.Tensor:
    """One teacher's probabilities (classification) or scores (regression), in row order."""
    import torch
    from safetensors.torch import load_file

    from weightsearch.trainer.encoders import resolve_encoder, resolve_pooling
    from weightsearch.trainer.model import MTDNN, load_encoder
    from weightsearch.trainer.task_data import eval_batches

    path = os.path.expanduser(resolve_encoder(cfg.encoder))
    model = MTDNN(load_encoder(path, cfg.seed), cfg.tasks, resolve_pooling(cfg.pooling, path),
                  cfg.mixture)
    # A teacher trained with compile: true saved its encoder under `_orig_mod`.
    saved = {k.replace("._orig_mod", ""): v for k, v in load_file(str(weights)).items()}
    model.load_state_dict(saved, strict=True)
    model = model.to(runtime.device).eval()
    classes = TASK_TYPES[data.spec.type].class_outputs
    out = torch.empty((data.train_size, data.spec.num_labels) if classes
                      else (data.train_size,))
    for indices in eval_batches(data.train, cfg.eval_batch_size):
        batch = data.collate(data.train, indices, tokenizer.pad_token_id or 0)
        batch = {k: v.to(runtime.device) for k, v in batch.items()}
        with torch.inference_mode(), runtime.autocast():
            logits = model(task, batch).float()
        values = logits.softmax(-1) if classes else logits
        out[torch.as_tensor(indices)] = values.cpu()
    return out
