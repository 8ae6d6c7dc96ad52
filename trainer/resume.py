"""What a checkpoint must match for a run to continue from it: settings, data files, precision.

A resumed run must reach the result of an uninterrupted one, so a checkpoint records the
settings that shape the outcome, a digest of every data file, a digest of the weights the run
started from (`init_from`) and of the soft targets it distils, and the precision that was
actually used (`auto` resolves to bf16 on one machine and fp32 on another). A mismatch is
refused with the names of what changed. Weight sources count by content, not by path, so a run
folder that moved (or a study retry's copy of it, whose fine-tuning runs start from the copied
multi-task checkpoint) still continues.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from weightsearch.core.fields import resume_free_keys
from weightsearch.core.files import file_digest
from weightsearch.trainer.config import OVERLONG, RunConfig
from weightsearch.trainer.data.readers import resolve_path

BY_CONTENT = "compared by content"  # a weight source's place in the settings

# Settings that may differ between a run and its resumption without changing its outcome:
# those RunConfig declares `resume_free`.
RESUME_FREE = resume_free_keys(RunConfig)


def resume_settings(cfg: RunConfig) -> dict[str, Any]:
    out = {k: v for k, v in cfg.to_dict().items() if k not in RESUME_FREE}
    # Paths of weight sources are left out: `source_digests` compares what they hold.
    if out.get("init_from") is not None:
        out["init_from"] = BY_CONTENT
    if out.get("distill") is not None:
        out["distill"] = {"teachers": dict.fromkeys(out["distill"]["teachers"], BY_CONTENT)}
    return out


def source_digests(cfg: RunConfig, soft: Mapping[str, Any],
                   warn: Callable[[str], None] = print) -> dict[str, str]:
    """sha256 of the weights `init_from` names and of each distilled task's soft targets (the
    tensors the run trains against, however they were built)."""
    from weightsearch.trainer.checkpoint import initial_weights_file

    out = {}
    if cfg.init_from is not None:
        out["init_from"] = file_sha256(initial_weights_file(cfg.init_from, warn))
    for task, targets in sorted(soft.items()):
        out[f"distill.teachers.{task}"] = hashlib.sha256(
            targets.detach().cpu().contiguous().numpy().tobytes()).hexdigest()
    return out


def source_problems(meta: dict[str, Any], sources: Mapping[str, str],
                    where: str | os.PathLike) -> list[str]:
    """Why the run in `where` cannot continue from these weight sources (see source_digests)."""
    old = meta.get("source_digests")
    if not isinstance(old, dict):
        return []  # a checkpoint from before source digests: nothing to compare
    problems = []
    for key in sorted(old.keys() | sources.keys()):
        if old.get(key) == sources.get(key):
            continue
        if key == "init_from":
            problems.append(f"init_from: the weights it names are not those the run in {where} "
                            "started from; point it at those weights again or start a new "
                            "output_dir")
        else:
            problems.append(f"{key}: the soft targets differ from those the run in {where} "
                            "trained with (its teachers or soft-target file changed); restore "
                            "them or start a new output_dir")
    return problems


def settings_digest(cfg: RunConfig) -> str:
    text = json.dumps(resume_settings(cfg), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def data_digests(cfg: RunConfig) -> dict[str, str]:
    """sha256 of each task split's file, keyed 'task/split'."""
    out = {}
    for spec in cfg.tasks:
        for split, name in (("train", spec.train_file), *spec.dev_files):
            out[f"{spec.name}/{split}"] = file_sha256(resolve_path(cfg.data_dir, name))
    return out


def file_sha256(path: Path) -> str:
    stat = path.stat()
    return _sha256(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=256)
def _sha256(path: str, mtime_ns: int, size: int) -> str:  # (mtime, size): re-hash on change
    return file_digest(path)


def resume_record(cfg: RunConfig, precision: str,
                  sources: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What save_checkpoint stores in meta.json for `resume_problems` and `source_problems`
    to check later; `sources` from `source_digests`."""
    return {
        "resume_digest": settings_digest(cfg),
        "resume_settings": json.loads(json.dumps(resume_settings(cfg), default=str)),
        "data_digests": data_digests(cfg),
        "source_digests": dict(sources or {}),
        "precision": precision,
    }


def trained_defaults(meta: dict[str, Any], cfg: RunConfig) -> RunConfig:
    """`cfg` with the checkpointed run's own `overlong` and `lr` where `cfg` leaves them unset:
    a run continues as it trained (releases before the default became drop truncated, and
    trained every encoder at MT-DNN's 5e-5 by default)."""
    old = meta.get("resume_settings")
    old = old if isinstance(old, dict) else {}
    trained, rate = old.get("overlong"), old.get("lr")
    if cfg.overlong is None and trained in OVERLONG:
        cfg = dataclasses.replace(cfg, overlong=trained)
    if cfg.lr is None and isinstance(rate, int | float) and not isinstance(rate, bool) \
            and rate > 0:
        cfg = dataclasses.replace(cfg, lr=float(rate))
    return cfg


def _as_trained(meta: dict[str, Any], cfg: RunConfig, precision: str) -> RunConfig:
    """`cfg` with the run's own settings where `cfg` leaves them to a default: `overlong`
    (trained_defaults), and precision `auto`, which is the precision it meant on the first
    machine where both resolve to the precision the run trained in (the resolved precision
    is compared on its own, below)."""
    cfg = trained_defaults(meta, cfg)
    old = meta.get("resume_settings")
    setting = old.get("precision") if isinstance(old, dict) else None
    if setting in (None, cfg.precision) or meta.get("precision") != precision:
        return cfg
    return dataclasses.replace(cfg, precision=setting)


def resume_problems(meta: dict[str, Any], cfg: RunConfig, precision: str,
                    where: str | os.PathLike) -> list[str]:
    """Why the run in `where` cannot continue with `cfg`, one message per kind of change."""
    problems = []
    cfg = _as_trained(meta, cfg, precision)
    if meta.get("resume_digest") != settings_digest(cfg):
        old = meta.get("resume_settings")
        new = json.loads(json.dumps(resume_settings(cfg), default=str))
        changed = (sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
                   if isinstance(old, dict) else [])
        names = f" ({', '.join(changed)})" if changed else ""
        problems.append(f"output_dir: {where} holds a run with different settings{names}; resume "
                        f"it with its own config ({Path(where) / 'config.yaml'}) or choose "
                        "another output_dir")
    old_data = meta.get("data_digests")
    if isinstance(old_data, dict):
        now = data_digests(cfg)
        changed = sorted(k for k in old_data.keys() | now.keys() if old_data.get(k) != now.get(k))
        if changed:
            problems.append(f"data_dir: the data files of {', '.join(changed)} changed since the "
                            f"run in {where} started; restore them or start a new output_dir")
    old_precision = meta.get("precision")
    if old_precision is not None and old_precision != precision:
        problems.append(f"precision: the run in {where} trained in {old_precision} and this "
                        f"machine resolves {cfg.precision} to {precision}; set precision: "
                        f"{old_precision} to continue it here")
    return problems
