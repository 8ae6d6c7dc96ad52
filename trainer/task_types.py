"""The task types, by name: the one list every other part of weightsearch takes them from.

Importing this module costs nothing (no torch): the recommender, the importer and the HTTP
service validate task types with it. Each entry names the head module that implements the type
(reading and checking its labels, turning examples into model inputs, the network on the
encoder's token states, the loss, decoding and metrics) and declares what a task definition of
that type may say: its metrics, its own settings and their defaults, and the answer modules
(`head:`) it accepts. What other code needs to know about a type is an attribute of its entry
(or of its head class), never a test of its name.

Adding a task type is one head module (the built-in ones are under `trainer/heads/`) plus one
`register_task_type(TaskType(...))` call (the built-in ones are below). Its entry may name a
`parser` that reads the type's rows without torch (the built-in ones are
`weightsearch.trainer.data.readers`' `pair_rows` and `weightsearch.trainer.data.parsing`'s); without
one, a study's driver loads the head module to count training rows. `TASK_TYPES` is a
read-only view of the registry, so it always shows the registered types; `NAMES` is rebound on
every change, so read it as `task_types.NAMES` (or use `TASK_TYPES`) where a later registration
matters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

# A setting's check: None when the value is fine, else what is wrong with it.
Check = Callable[[Any], "str | None"]


def positive_int(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"expected an integer >= 1, got {value!r}"
    return None


@dataclass(frozen=True)
class TaskType:
    """What a task definition of one type may say, and which head module implements it."""

    name: str
    # The importable module whose `HEAD` class implements the type (built-ins: trainer.heads.*).
    head_module: str
    # What the `label` column holds: "classes" (one of `labels`), "score" (a number),
    # "choice" (the index of the right choice), "answers" (answer spans of a context).
    label_kind: str
    metrics: tuple[str, ...]  # every metric the type can report
    default_metrics: tuple[str, ...]
    default_primary: str
    # Settings only this type has, with their defaults and checks.
    options: Mapping[str, tuple[Any, Check]] = field(
        default_factory=lambda: MappingProxyType({}))
    answer_modules: tuple[str, ...] = ("linear",)  # choices of the task's `head` setting
    formats: tuple[str, ...] = ("tsv", "csv", "jsonl", "parquet")
    # Column settings a task of this type must give, each with an example of the setting.
    required_columns: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}))
    # How many labels its label set must have: None for any number >= 2 (label_kind "classes").
    label_count: int | None = None
    # Whether its head learns from teachers' soft targets (MT-DNN-KD: class distributions or
    # scores), so a run may name teachers for a task of this type.
    distillable: bool = False
    # Whether its head gives one output per class of the label set (soft targets are then
    # class distributions); otherwise one score per example (or per choice, span position).
    class_outputs: bool = False
    # The importable "module:function" that reads a file's table into checked rows without
    # torch, so that a study's driver counts and checks the training rows without loading the
    # trainer; None: the head class's `parse` (which imports the head module, and torch).
    parser: str | None = None

    @property
    def has_label_set(self) -> bool:
        return self.label_kind == "classes"


# Column settings that only some types use (a type that does not require one may not give it).
TYPE_COLUMNS = ("group", "choices")


_CLASS_METRICS = ("accuracy", "f1", "mcc")
_SQUAD_METRICS = ("exact", "f1", "has_ans_exact", "has_ans_f1", "no_ans_exact", "no_ans_f1",
                  "best_exact", "best_f1", "best_exact_thresh", "best_f1_thresh")

_REGISTRY: dict[str, TaskType] = {}
TASK_TYPES: Mapping[str, TaskType] = MappingProxyType(_REGISTRY)  # a live, read-only view
NAMES: tuple[str, ...] = ()
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def register_task_type(kind: TaskType) -> TaskType:
    """Make `kind` available as a task's `type:`. A name already taken by another entry is
    refused: unregister that one first."""
    global NAMES
    if not isinstance(kind, TaskType):
        raise TypeError(f"{kind!r} is not a TaskType")
    if not isinstance(kind.name, str) or not _NAME.match(kind.name):
        raise ValueError(f"task type name {kind.name!r}: use lower-case letters, digits and _")
    if not set(kind.default_metrics) <= set(kind.metrics) \
            or kind.default_primary not in kind.default_metrics:
        raise ValueError(f"task type {kind.name!r}: default_metrics must be among metrics, and "
                         "default_primary among default_metrics")
    if _REGISTRY.get(kind.name, kind) != kind:
        raise ValueError(f"a task type named {kind.name!r} is already registered")
    _REGISTRY[kind.name] = kind
    NAMES = tuple(_REGISTRY)
    return kind


def unregister_task_type(name: str) -> None:
    """Remove the task type registered as `name` (for tests and plug-ins); absent: nothing."""
    global NAMES
    _REGISTRY.pop(name, None)
    NAMES = tuple(_REGISTRY)


_PAIRS = "weightsearch.trainer.data.readers:pair_rows"  # sentences and sentence pairs
_HEADS = "weightsearch.trainer.heads"
for _builtin in (
    TaskType("classification", f"{_HEADS}.classification", "classes", _CLASS_METRICS,
             ("accuracy",), "accuracy", answer_modules=("linear", "san"), distillable=True,
             class_outputs=True, parser=_PAIRS),
    TaskType("regression", f"{_HEADS}.regression", "score",
             ("pearson", "spearman", "corr"), ("pearson", "spearman", "corr"), "corr",
             distillable=True, parser=_PAIRS),
    TaskType("ranking", f"{_HEADS}.ranking", "classes", _CLASS_METRICS, ("accuracy",),
             "accuracy", label_count=2, parser=_PAIRS,
             required_columns=MappingProxyType({
                 "group": "group: question (equal values form one candidate list)"})),
    TaskType("multiple_choice", f"{_HEADS}.multiple_choice", "choice", ("accuracy",),
             ("accuracy",), "accuracy", parser="weightsearch.trainer.data.parsing:choice_rows",
             required_columns=MappingProxyType({
                 "choices": "choices: [ending0, ending1, ending2, ending3]"})),
    TaskType("span_qa", f"{_HEADS}.span_qa", "answers", _SQUAD_METRICS,
             ("exact", "f1", "has_ans_exact", "has_ans_f1", "no_ans_exact", "no_ans_f1",
              "best_exact", "best_f1"), "f1",
             options=MappingProxyType({
                 # BERT's SQuAD settings, which the MT-DNN SQuAD paper used.
                 "doc_stride": (128, positive_int),  # tokens between window starts
                 "max_query_len": (64, positive_int),  # question tokens kept
                 "max_answer_len": (30, positive_int),  # longest answer span, in tokens
                 "n_best": (20, positive_int),  # start/end candidates per window
             }),
             formats=("squad", "jsonl", "parquet"),
             parser="weightsearch.trainer.data.parsing:span_qa_rows",
             required_columns=MappingProxyType({"text_b": "text_b: context"})),
):
    register_task_type(_builtin)
del _builtin


def task_type(name: str) -> TaskType:
    """The registered type `name`; KeyError names the known ones."""
    try:
        return TASK_TYPES[name]
    except KeyError:
        raise KeyError(f"unknown task type {name!r}; known: {', '.join(TASK_TYPES)}") from None
