"""Task definitions: what a task's files look like, how its labels map to indices, how it is scored.

`TaskSpec` declares each plain field's rule (`weightsearch.trainer.task_rules`) beside its
default; `TASK_PRESETS` holds the tasks known by name (GLUE, SNLI, SciTail, SQuAD 2.0, SWAG).
The YAML `tasks` list becomes TaskSpecs in `weightsearch.trainer.task_parsing`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from weightsearch.core.fields import AT_DEFAULT, Number, Text, setting
from weightsearch.trainer.task_rules import (
    Choices,
    Column,
    DevFiles,
    Dropout,
    Header,
    Labels,
    Metrics,
    OneOf,
    TaskName,
    TypeOption,
    known_metrics,
)
from weightsearch.trainer.task_types import TASK_TYPES

_TYPES = TASK_TYPES  # a live view of the registry: a type registered later counts at once

FORMATS = ("tsv", "csv", "jsonl", "parquet", "squad")
# The settings only some task types have (span_qa's window sizes): those of the types
# registered when TaskSpec is defined, which has a field for each.
TYPE_OPTIONS = tuple(dict.fromkeys(k for t in _TYPES.values() for k in t.options))


def __getattr__(name: str) -> Any:
    if name == "METRICS":  # the module attribute stays readable, and as live as the registry
        return known_metrics()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _answer_modules() -> tuple[str, ...]:
    return tuple(dict.fromkeys(m for t in _TYPES.values() for m in t.answer_modules))


@dataclass(frozen=True)
class TaskSpec:
    """One task: its files, their column mapping, its label set and its metrics."""

    # No default for these four: a full definition gives them, a preset has them.
    name: str = setting(
        rule=TaskName(),
        doc="the task's name, unique in the list and kept in lower case: it names the study and "
            "the metrics")
    type: str = setting(
        rule=OneOf("task type", lambda: _TYPES),
        doc="what one example is, and so the task's head, loss and metrics (trainer/task_types.py)")
    train_file: str = setting(
        rule=Text(),
        doc="the training file; a relative path starts at the task's data_dir, else the run's")
    dev_files: tuple[tuple[str, str], ...] = setting(
        rule=DevFiles(),
        doc="the dev file (the split `dev`), or a mapping split name -> path, e.g. {matched: "
            "MNLI/dev_matched.tsv, mismatched: MNLI/dev_mismatched.tsv}")
    format: str = setting(
        "tsv", OneOf("format", lambda: FORMATS),
        doc="the files' layout (squad: the official SQuAD JSON); a full definition without it: "
            "the one the training file's extension implies")
    text_a: str = setting(
        "sentence1", Column(),
        doc="the column of the first text (multiple_choice: the context; span_qa: the question); "
            "a column is a name, or its position from 0 in a file without header")
    text_b: str | None = setting(
        None, Column(optional=True),
        doc="the column of the second text (multiple_choice: the lead-in of every choice; "
            "span_qa: the context); null: single texts")
    label: str = setting(
        "label", Column(),
        doc="the label column: one of labels, a score (regression), the index of the right "
            "choice (multiple_choice) or the answers (span_qa)")
    group: str | None = setting(
        None, Column(optional=True),
        doc="ranking only: the column whose equal values form one candidate list")
    header: bool = setting(
        True, Header(),
        doc="whether the file's first line names its columns; false (tsv and csv only): "
            "columns are named by position from 0")
    labels: tuple[str, ...] | None = setting(
        None, Labels(),
        doc="the label set in index order (YAML [0, 1] means the file's \"0\" and \"1\"); null "
            "or []: none (regression, multiple_choice, span_qa)")
    primary_metric: str = setting(
        "accuracy", OneOf("metric", known_metrics),
        doc="the metric the task is judged by (the epoch summary's; a study's `primary` "
            "objective), one of metrics; unset: the preset's, else the type's usual one if in "
            "metrics, else the first of metrics")
    metrics: tuple[str, ...] = setting(
        ("accuracy",), Metrics(),
        doc="the dev metrics reported, a name or a list; unset: the preset's, else "
            "primary_metric if the type reports it, else the type's default ones")
    dropout: float = setting(0.1, Dropout(),
                             doc="the dropout rate in the task's head, in [0, 1)")
    head: str = setting(
        "linear", OneOf("answer module", _answer_modules),
        doc="the answer module: linear, or san (classification only: MT-DNN's stochastic answer "
            "network)")
    choices: tuple[str, ...] | None = setting(
        None, Choices(),
        doc="multiple_choice only: the columns of the choices, at least two, all different")
    max_seq_len: int | None = setting(
        None, Number(integer=True, low=8, high=8192, optional=True),
        doc="this task's token limit, for its training and dev examples; null: the run's "
            "max_seq_len and eval_max_seq_len")
    # BERT's SQuAD settings, which the MT-DNN SQuAD paper used.
    doc_stride: int | None = setting(
        None, TypeOption("doc_stride"),
        doc="span_qa only: tokens between the starts of a context's windows, an integer >= 1; "
            "null: 128")
    max_query_len: int | None = setting(
        None, TypeOption("max_query_len"),
        doc="span_qa only: the question's tokens kept, an integer >= 1; null: 64")
    max_answer_len: int | None = setting(
        None, TypeOption("max_answer_len"),
        doc="span_qa only: the longest answer span, in tokens, an integer >= 1; null: 30")
    n_best: int | None = setting(
        None, TypeOption("n_best"),
        doc="span_qa only: the best starts and ends kept per window, an integer >= 1; null: 20")
    # A ladder of sizes of one task: one preset, several names, one cap each.
    max_train_examples: int | None = setting(
        None, Number(integer=True, low=1, optional=True), since="0.2.0", omit_when=AT_DEFAULT,
        doc="this task's cap on training examples, picked by the run's subsample; null: the "
            "run's max_train_examples or train_fraction")
    # E.g. full dev sets for the central task, short ones for auxiliaries.
    max_eval_examples: int | None = setting(
        None, Number(integer=True, low=1, optional=True), since="0.2.0", omit_when=AT_DEFAULT,
        doc="this task's cap on each dev split's examples, the first ones; null: the run's "
            "max_eval_examples")

    @property
    def num_labels(self) -> int:
        """Outputs of the task head: one per class, a single score for regression and ranking."""
        if self.labels is not None and getattr(_TYPES.get(self.type), "class_outputs", False):
            return len(self.labels)
        return 1

    def seq_len(self, run_max_seq_len: int) -> int:
        return self.max_seq_len or run_max_seq_len

    @property
    def dev_splits(self) -> tuple[str, ...]:
        return tuple(split for split, _ in self.dev_files)


_BINARY = ("0", "1")
_NLI = ("contradiction", "neutral", "entailment")
_ENTAIL = ("not_entailment", "entailment")  # positive class last, so "entailment" is index 1


def _pair(name: str, folder: str, text_a: str, text_b: str, label: str,
          labels: tuple[str, ...] | None, **extra: Any) -> TaskSpec:
    return TaskSpec(name=name, type=extra.pop("type", "classification"),
                    train_file=f"{folder}/train.tsv",
                    dev_files=extra.pop("dev_files", (("dev", f"{folder}/dev.tsv"),)),
                    text_a=text_a, text_b=text_b, label=label, labels=labels, **extra)


TASK_PRESETS: dict[str, TaskSpec] = {
    # CoLA has no header: source, label, original label, sentence.
    "cola": TaskSpec(name="cola", type="classification", train_file="CoLA/train.tsv",
                     dev_files=(("dev", "CoLA/dev.tsv"),), text_a="3", label="1", header=False,
                     labels=_BINARY, primary_metric="mcc", metrics=("mcc", "accuracy"),
                     dropout=0.05),
    "sst2": TaskSpec(name="sst2", type="classification", train_file="SST-2/train.tsv",
                     dev_files=(("dev", "SST-2/dev.tsv"),), text_a="sentence", labels=_BINARY),
    "mrpc": _pair("mrpc", "MRPC", "#1 String", "#2 String", "Quality", _BINARY,
                  metrics=("accuracy", "f1")),
    "stsb": _pair("stsb", "STS-B", "sentence1", "sentence2", "score", None, type="regression",
                  primary_metric="corr", metrics=("pearson", "spearman", "corr")),
    "qqp": _pair("qqp", "QQP", "question1", "question2", "is_duplicate", _BINARY,
                 metrics=("accuracy", "f1")),
    "mnli": _pair("mnli", "MNLI", "sentence1", "sentence2", "gold_label", _NLI,
                  dev_files=(("matched", "MNLI/dev_matched.tsv"),
                             ("mismatched", "MNLI/dev_mismatched.tsv"))),
    # QNLI as both reference codes (SIWLM's and MT-DNN's glue_task_def.yml) train it: two
    # classes per (question, sentence) pair. MT-DNN v0.1's pairwise ranking of a question's
    # candidate sentences is `qnli_rank`.
    "qnli": _pair("qnli", "QNLI", "question", "sentence", "label", _ENTAIL),
    "qnlirank": _pair("qnli_rank", "QNLI", "question", "sentence", "label", _ENTAIL,
                      type="ranking", group="question"),
    "rte": _pair("rte", "RTE", "sentence1", "sentence2", "label", _ENTAIL),
    "wnli": _pair("wnli", "WNLI", "sentence1", "sentence2", "label", _BINARY),
    "snli": _pair("snli", "SNLI", "sentence1", "sentence2", "gold_label", _NLI),
    # SciTail's tsv_format files: premise, hypothesis, label; no header.
    "scitail": TaskSpec(name="scitail", type="classification",
                        train_file="SciTail/tsv_format/scitail_1.0_train.tsv",
                        dev_files=(("dev", "SciTail/tsv_format/scitail_1.0_dev.tsv"),),
                        text_a="0", text_b="1", label="2", header=False,
                        labels=("neutral", "entails")),
    # The official SQuAD 2.0 JSON; windows of 384 tokens as in BERT and the MT-DNN SQuAD paper.
    "squad2": TaskSpec(name="squad2", type="span_qa", format="squad",
                       train_file="SQuAD2/train-v2.0.json",
                       dev_files=(("dev", "SQuAD2/dev-v2.0.json"),), text_a="question",
                       text_b="context", label="answers", labels=None, max_seq_len=384,
                       metrics=_TYPES["span_qa"].default_metrics, primary_metric="f1",
                       **{k: v[0] for k, v in _TYPES["span_qa"].options.items()}),
    # The official SWAG CSV: the context sent1, then sent2 + each ending as the second text.
    "swag": TaskSpec(name="swag", type="multiple_choice", format="csv",
                     train_file="SWAG/train.csv", dev_files=(("dev", "SWAG/val.csv"),),
                     text_a="sent1", text_b="sent2", label="label",
                     choices=("ending0", "ending1", "ending2", "ending3")),
}


def dataset_name(spec: TaskSpec) -> str:
    """The data a task is drawn from: the preset whose files it reads (so that `sst2_125`, the
    SST-2 preset with a cap of its own, is SST-2), else the task's own name."""
    for name, preset in TASK_PRESETS.items():
        if (preset.train_file, preset.format) == (spec.train_file, spec.format):
            return name
    return spec.name


def preset_key(name: str) -> str:
    """Normalise a preset spelling: 'SST-2', 'sts_b' and 'STS-B' all name a preset."""
    return re.sub(r"[\s_\-]", "", name.lower())
