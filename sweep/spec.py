"""Study files: YAML -> one frozen `StudySpec`, every problem reported at once.

    study: glue-small                 # letters, digits, - _ . ; studies are named <study>/<central>
    storage: sqlite:///weightsearch.db  # default: $WEIGHTSEARCH_STORAGE or ./weightsearch.db
    train: {...}                      # the run-config template every cell starts from
                                      # (with checkpoints: none unless it says otherwise)
    central_tasks: [rte, mrpc]        # default: every task of train.tasks
    aux_tasks: [stsb, cola]           # trained beside each central task; default: every
                                      # other task of train.tasks
    search:                           # what varies and how points are chosen (sweep/space.py,
      strategy: grid                  # sweep/strategies/): grid | guided | halving | forward
      # space: {tasks: {groups_of: [rte, mrpc, stsb, cola]}}: networks to deploy under a
      #   budget, no central task (sweep/space.py, studies/grouping.py)
      space: {weighting.central_weight: [1, 2, 4, 8, 15]}         # the default space
    weights: [1, 2, 4, 8, 15]         # shorthand for the central weight alone: a grid, or
                                      # {low, high, n_trials, sampler: tpe, step} (guided)
    seeds: [1]                        # replicates of every point
    resources: {cpu: 1, gpu: 0}       # per trial; fractions share a GPU; auto: by measured memory
    max_concurrent: null              # default: what the cluster's CPUs/GPUs allow
    scheduler: fifo                   # or asha, or {name: asha, grace_period: 1,
                                      #                reduction_factor: 3}
    max_failures: 1                   # Ray retries per trial; a retry resumes its checkpoint
    reuse_workers: true               # a worker trains trial after trial (imports once)
    allow_inert: false                # refuse a search whose every weight is one treatment
                                      # (sweep/inert_grid.py); true: train it, with a note
    weight_acts_on: loss              # sampling: the searched weight is the central task's
                                      # sampling rate (sweep/weight_action.py)
    workdir: ./weightsearch_runs      # trial outputs and checkpoints; every node must reach it
    warm_start: [9]                   # guided/halving: points tried first, or `recommend`
    objective: {stage: multitask, metric: primary}  # the score a trial is: which stage, which
                                      # metric of the central task (finetuned needs train.finetune)

Relative paths (workdir, train.data_dir, train.cache_dir, train.init_from, a task's data_dir,
a local train.encoder, distillation teachers, an MLflow folder in train.tracking) resolve
against the study file's folder (against the working directory for a study given as a mapping
or on the command line with --set), once, here, because Ray runs trials in other directories.
The storage URL, like every command's --storage, is relative to the working directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from weightsearch.core.errors import ConfigError
from weightsearch.sweep.study_checks import (
    parse_study,
    read_study_source,
)
from weightsearch.sweep.study_file import (
    DEFAULT_WORKDIR,
    KEYS,
    MAX_CELLS,
    SCHEDULERS,
    SPEC_VERSION,
    TRIAL_CHECKPOINTS,
    Objective,
    Resources,
    Scheduler,
    Search,
    StudyFile,
    StudySpec,
    study_file_schema,
)

__all__ = ["DEFAULT_WORKDIR", "KEYS", "MAX_CELLS", "SCHEDULERS", "SPEC_VERSION",
           "TRIAL_CHECKPOINTS", "Objective", "Resources", "Scheduler", "Search", "StudyFile",
           "StudySpec", "as_launched", "load_study_spec", "study_file_schema"]


def as_launched(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A study file stored by an earlier release, with what that release's trainer did by
    default written out, so that its remaining cells train as its first ones did: before
    format 4, over-long training examples were truncated; before format 5, every encoder
    trained at MT-DNN's lr 5e-5 (written in only where today's default differs: the default
    encoder, its lr not searched); before format 6, so did the default encoder named by its
    folder; before format 7, `preset: siwlm-paper` trained with `idle_params: skip` (it now
    sets `step`); before format 8, a grid of one treatment trained on with a note
    (`allow_inert: true`, now refused by default). (A stored file without `version` is
    format 1.)"""
    from weightsearch.trainer.config import DEFAULT_ENCODER, MT_DNN_LR, default_lr
    from weightsearch.trainer.config.presets import expand_preset
    from weightsearch.trainer.encoders import DEFAULT_ENCODER_ALIASES

    out = dict(stored)
    train = out.get("train")
    version = out.get("version", 1)
    # Not a format number (an edited database): left to the study file's own check, which
    # names the field.
    if isinstance(version, bool) or not isinstance(version, int) or version >= 8:
        return out
    out.setdefault("allow_inert", True)
    if version >= 7 or not isinstance(train, Mapping):
        return out
    expanded = expand_preset(train, [])  # a preset may set them
    train = dict(train)
    if version < 4 and "overlong" not in expanded:
        train["overlong"] = "truncate"
    search = out.get("search")
    searched = search.get("space") if isinstance(search, Mapping) else None
    searched = searched if isinstance(searched, Mapping) else {}
    encoder = expanded.get("encoder", DEFAULT_ENCODER)
    # Only where today's default differs (a searched lr is the point's, whatever the default):
    # before format 5 for any encoder, in format 5 for the default encoder's folder alone.
    differs = default_lr(encoder)[0] != MT_DNN_LR
    if version == 5:
        differs = differs and encoder not in DEFAULT_ENCODER_ALIASES
    if version < 6 and "lr" not in expanded and "lr" not in searched and differs:
        train["lr"] = MT_DNN_LR
    if expanded.get("idle_params") == "step" and "idle_params" not in train:
        train["idle_params"] = "skip"  # the preset's new setting, not what the study trained
    out["train"] = train
    return out


def load_study_spec(
    source: str | os.PathLike | Mapping[str, Any], overrides: Iterable[str] = ()
) -> StudySpec:
    """Read a study from a YAML path, YAML text or a mapping; apply `key=value` overrides.

    Raises ConfigError listing every problem at once (the run config's problems prefixed
    with `train.`).
    """
    from weightsearch.trainer.config import apply_overrides

    label, raw, base = read_study_source(source)
    if not isinstance(raw, Mapping):
        raise ConfigError(["the study file must hold a mapping of settings (key: value)"], label)
    overrides = list(overrides)
    raw = apply_overrides(raw, overrides, label)
    # Paths given with --set are typed relative to where the command runs.
    from_cli = {item.partition("=")[0].strip() for item in overrides}
    return parse_study(raw, label, base, from_cli)


