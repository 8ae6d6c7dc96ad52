"""Conventions of the study database, shared by the sweep (writer) and studies/ (readers).

One Optuna study per (study name, central task), named `<study>/<central_task>`. Everything is
stored as study or trial user attributes, but for the long stored study file (a study system
attribute, see A_SPEC), and read back through Optuna's public API only.
"""

from __future__ import annotations

SEPARATOR = "/"
# What a study name may be, for every way a study is made or named (launch, import, HTTP):
# it names a folder and is part of every trial folder's path, so no separators, no newline.
STUDY_NAME_MAX = 100
STUDY_NAME_PATTERN = rf"(?!\.)[A-Za-z0-9._-]{{1,{STUDY_NAME_MAX}}}"
STUDY_NAME_FIX = (f"use up to {STUDY_NAME_MAX} letters, digits, '-', '_' and '.', not starting "
                  "with '.'")


def study_name_problem(name: object, where: str) -> str | None:
    """What is wrong with `name` as a study name (matched whole: "a\n" is not "a"), or None."""
    import re

    if isinstance(name, str) and re.fullmatch(STUDY_NAME_PATTERN, name):
        return None
    return f"{where}: {name!r} is not a study name; {STUDY_NAME_FIX}"
PARAM = "central_weight"  # the one Optuna param of every trial
WEIGHT_LOW, WEIGHT_HIGH = 1.0, 15.0  # the SIWLM paper's range for the central weight
DEFAULT_GRID = (1.0, 3.0, 6.0, 9.0, 12.0, 15.0)  # the paper's grid (Son et al. 2021, sec. 4.2.2)
# A study's grid where its file gives none: the paper's range in even steps of log weight. The
# weight acts multiplicatively (and under global clipping only up to a few), so the paper's
# grid spends 5 of its 6 points above 3; this one spends 3 of 5 at or below 4.
SEARCH_GRID = (1.0, 2.0, 4.0, 8.0, 15.0)

# Study user attributes.
A_STUDY = "study"  # the base study name
A_CENTRAL = "central_task"
A_TASK_TYPE = "task_type"  # classification | regression | ranking
A_TRAIN_SIZE = "train_size"  # training examples of the central task
# The data the central task is drawn from (a preset's name, else the task's): central tasks
# that are sizes of one dataset (a ladder) are one task to the recommender. Absent: the task.
A_DATASET = "dataset"
A_AUX_TASKS = "aux_tasks"  # list of auxiliary task names, config order
A_AUX_SIZES = "aux_sizes"  # {aux task: training examples}
A_PRIMARY = "primary_metric"  # the central task's metric that the trial value is
A_ENCODER = "encoder"
A_ENCODER_SIZE = "encoder_size"  # hidden size x layers, e.g. "384x6"; absent: unknown
A_VARIANT = "variant"  # siwlm variant: reference | paper
A_STAGE = "stage"  # the stage the scores come from: multitask | finetuned (absent: multitask)
STAGES = ("multitask", "finetuned")
A_DIGEST = "config_digest"  # sha256 of the canonical study config
# The study file as a dict, so `resume NAME` needs nothing else. Stored as the study *system*
# attribute SYS_SPEC (`optuna studies` prints every user attribute in one column, and the file
# made it ~1,500 characters wide); studies launched before hold it as the user attribute
# A_SPEC. Readers see it under A_SPEC either way: `with_stored_spec`.
A_SPEC = "spec"
SYS_SPEC = "weightsearch:spec"
A_SOURCE = "source"  # "sweep" for launched studies, "imported" for `weightsearch import`
A_CREATED = "created_at"
A_SPACE = "search_space"  # the run-config paths a study searches over; absent: central_weight
A_STRATEGY = "strategy"  # the search strategy: grid | guided | halving | forward
# The cells (points x seeds) of a launched grid, known up front: what `inspect` counts its
# unstarted cells against. Absent: not known in advance (adaptive searches, imports).
A_GRID_CELLS = "grid_cells"
# {"central_weight", "interval", "regime"}: the recommender's answer a seeded search starts from
A_RECOMMENDATION = "recommendation"
# A budgeted grouping study (`tasks: {groups_of: [...]}`): no central task, one Optuna study
# `<study>/groups` whose trials are networks; its value is the mean of the group's primary
# metrics, and each task's own primary metric and training-set size are study attributes.
GROUPS_STUDY = "groups"
GROUP_MEAN = "group_mean"
A_GROUP_TASKS = "group_tasks"  # every task of the study, config order
A_GROUP_METRICS = "group_metrics"  # {task: its primary metric}
A_GROUP_SIZES = "group_sizes"  # {task: training examples}
A_GROUP_MAX_SIZE = "group_max_size"  # the largest group trained (absent: every group)

STAGES = ("multitask", "finetuned")
SOURCE_SWEEP = "sweep"
SOURCE_IMPORTED = "imported"
# Another program's study in the same database (no weightsearch source attribute, or several
# objectives): listed as such, never read as evidence.
SOURCE_FOREIGN = "foreign"

# Trial user attributes.
T_SEED = "seed"
T_CELL = "cell"  # "<weight>|<seed>", unique among a study's COMPLETE trials
T_METRICS = "metrics"  # {task: {metric: value}} at the epoch that gave the trial's value
T_FINAL_METRICS = "final_metrics"  # {task: {metric: value}} at the last epoch
# {task: {metric: value}}: each fine-tuned task's best epoch of its fine-tuning run
T_FINETUNED_METRICS = "finetuned_metrics"
T_HISTORY = "history"  # [{"epoch": e, "metrics": {task: {metric: value}}}, ...]
T_BEST_EPOCH = "best_epoch"
T_WALL_TIME = "wall_time_s"  # the trial's own training time, evaluation included
# The multi-task epochs the trial trained (its compute in trial-epochs; fine-tuning, the same
# for every trial of a study, is not counted); absent on trials from before it was recorded.
T_EPOCHS = "epochs_trained"
T_EXAMPLES_PER_S = "examples_per_s"
T_ATTEMPT = "attempt"  # 0 for the first try of a cell, +1 per retry or resume
T_SLOT = "slot"  # guided search: "slot:<seed>:<i>", the claimable unit the trial fills
T_FUSED = "fused_with"  # the cells a trial trained with as one stacked model (itself included)
# A fused cell trained by another of its unit from an epoch on, the two one treatment:
# {"trained_by": that cell's run folder, "from_epoch": n, "weights": its nominal weights per
# task} (`weightsearch.trainer.same_treatment`)
T_SAME_TREATMENT = "same_treatment"
T_UNIT = "unit"  # the claimable unit of work the trial fills (a cell, a slot, a halving rung)
T_POINT = "point"  # {run-config path: value}: the search point the trial trained
T_GROUP = "group"  # task grouping: the auxiliary tasks trained with the central task
T_GROUP_PATH = "tasks"  # the key of a task group in a trial's `point`
T_CENTRAL_WEIGHT_PATH = "weighting.central_weight"  # the central weight in a trial's `point`
# The run-config paths of the methods a study may compare (a trial's `point` keys).
T_SCHEME_PATHS = ("weighting.scheme", "sampling.scheme")
T_BUDGET = "budget"  # successive halving: the epoch this trial's stint trains up to
# {grad_clip, grad_clip_mode, tasks: {task: {updates, clipped, clip_share, median_norm,
# acts_below}}}: the run's gradient clipping (trainer.clipping.clip_summary); absent on trials
# from before it was recorded and on imported ones that did not give it.
T_CLIPPING = "clipping"
# A trial failed because its driver stopped (Ctrl-C, a lost driver): the "error" user attribute
# says so, and readers show the cell as interrupted (resume continues it), not failed.
T_ERROR = "error"
DRIVER_STOPPED = "driver stopped before it ended"
# Each task's metrics for a constant prediction (trainer.majority): {task: {metric: value}}.
T_MAJORITY = "majority"
# In a trial's clipping record, where the searched weight was not SIWLM's loss weight:
# "sampling" (the central task's sampling rate, sweep/weight_action.py).
WEIGHT_ACTS_ON = "weight_acts_on"
# The GPU a trial had and used. T_GPU_SHARE: the fraction of a GPU Ray gave it (a number of
# GPUs above 1), written when it starts; absent on CPU trials and on trials from before it was
# recorded. The peaks, in MiB, written at its end where it ran on CUDA (trainer.memory
# `gpu_peaks`; the most of its stages, a fused trial's are its process's): what tensors held,
# what PyTorch's caching allocator reserved (what `resources.gpu: auto` packs trials by), and
# the card's size.
T_GPU_SHARE = "gpu_share"
T_PEAK_GPU = "peak_gpu_mib"
T_PEAK_GPU_RESERVED = "peak_gpu_reserved_mib"
T_GPU_TOTAL = "gpu_total_mib"
GPU_MEASURES = (T_PEAK_GPU, T_PEAK_GPU_RESERVED, T_GPU_TOTAL)


# The gradient clipping a study's scores were trained with (trainer.clipping): the run
# template's, or the import file's columns; absent: not recorded.
A_GRAD_CLIP = "grad_clip"
A_GRAD_CLIP_MODE = "grad_clip_mode"
# The run-config paths that set it, which a study may search beside the central weight.
T_CLIP_PATHS = ("grad_clip", "grad_clip_mode")


def clipping_label(grad_clip: float | None, mode: str | None, acts_on: str = "loss") -> str:
    """A clipping regime in one word: "clip1" (global at norm 1, the reference's), "uclip1"
    (the unweighted gradient clipped), "noclip"; "unknown" when not recorded. Where the weight
    was the central task's sampling rate (`acts_on` "sampling"), "rate-" leads: "rate-clip1"."""
    if grad_clip is None:
        return "unknown"
    unweighted = "u" if mode == "unweighted" else ""
    label = "noclip" if grad_clip == 0 else f"{unweighted}clip{grad_clip:g}"
    return f"rate-{label}" if acts_on == "sampling" else label


def with_stored_spec(user_attrs: dict, system_attrs: dict) -> dict:
    """A study's user attributes with its stored study file under A_SPEC, wherever it was
    written: the system attribute SYS_SPEC, else (studies launched before) the user one."""
    spec = system_attrs.get(SYS_SPEC)
    return dict(user_attrs) if spec is None else {**user_attrs, A_SPEC: spec}


def study_attrs(study) -> dict:
    """`with_stored_spec` of an Optuna Study (its storage read twice, through Optuna's storage
    API: a Study has no public accessor for its system attributes)."""
    return with_stored_spec(study.user_attrs,
                            study._storage.get_study_system_attrs(study._study_id))


def set_study_attr(study, key: str, value) -> None:
    """Write one study attribute as the project stores it: the study file (A_SPEC) as the
    system attribute SYS_SPEC, everything else as a user attribute."""
    if key == A_SPEC:
        study._storage.set_study_system_attr(study._study_id, SYS_SPEC, value)
    else:
        study.set_user_attr(key, value)


def study_name(study: str, central_task: str) -> str:
    return f"{study}{SEPARATOR}{central_task}"


def split_study_name(name: str) -> tuple[str, str]:
    """`"glue/rte"` -> `("glue", "rte")`; the central task is the part after the last separator."""
    base, sep, central = name.rpartition(SEPARATOR)
    if not sep:
        return name, ""
    return base, central


def cell_key(weight: float, seed: int) -> str:
    return f"{float(weight):g}|{int(seed)}"
