"""Task definitions: what a task's files look like, how its labels map to indices, how it is scored.

A task comes from the YAML `tasks` list as a preset name (`rte`), a preset with overrides
(`{preset: rte, dropout: 0.2}`) or a full definition. `TaskSpec` declares each plain field's
rule beside its default, and `parse_tasks` checks every item with the settings walker of
`weightsearch.core.fields` and then the rules that tie fields together (the format a file's
extension implies, what a task type needs, the label set, the metrics), reporting all problems at
once so the user fixes the whole list in one go.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from weightsearch.core.fields import (
    AT_DEFAULT,
    Number,
    Text,
    check_fields,
    is_number,
    json_schema,
    setting,
    unknown_keys,
)
from weightsearch.trainer.task_types import TASK_TYPES, TYPE_COLUMNS, TaskType

_TYPES = TASK_TYPES  # a live view of the registry: a type registered later counts at once

FORMATS = ("tsv", "csv", "jsonl", "parquet", "squad")


def known_metrics() -> tuple[str, ...]:
    """Every metric some registered task type reports, in a stable order; read when asked,
    so a type registered later counts at once."""
    return tuple(dict.fromkeys(m for t in _TYPES.values() for m in t.metrics))


def __getattr__(name: str) -> Any:
    if name == "METRICS":  # the module attribute stays readable, and as live as the registry
        return known_metrics()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_EXTENSION_FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl",
                      ".parquet": "parquet"}


# Rules of task fields (any object with `check(key, value) -> (value, problem)`).

@dataclass(frozen=True)
class OneOf:
    """One of the names `options()` gives when the value is checked (a registry may have grown
    since), in any letter case (kept in lower case)."""

    noun: str
    options: Callable[[], Iterable[str]]

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        names = tuple(self.options())
        if not isinstance(value, str) or value.lower() not in names:
            return None, f"{key}: unknown {self.noun} {value!r}; use one of {', '.join(names)}"
        return value.lower(), None

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.options())}


def _column(value: object) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value >= 0:
        return str(value)
    if isinstance(value, str) and value:
        return value
    return None


_COLUMN_SCHEMA = {"anyOf": [{"type": "string", "minLength": 1}, {"type": "integer", "minimum": 0}]}


def _nullable(schema: dict[str, Any], optional: bool = True) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]} if optional else schema


@dataclass(frozen=True)
class Column:
    """A column: its name, or its position from 0 in a file without header (kept as text)."""

    optional: bool = False

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        column = _column(value)
        if column is None:
            null = " (or null)" if self.optional else ""
            return None, (f"{key}: expected a column name or index{null}, got {value!r}; name "
                          "the column, or give its position from 0 in a file without header")
        return column, None

    def schema(self) -> dict[str, Any]:
        return _nullable(_COLUMN_SCHEMA, self.optional)


@dataclass(frozen=True)
class _Choices:
    """Multiple choice: the columns of the choices, at least two, all different."""

    optional: bool = True

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        columns = [_column(c) for c in value] if isinstance(value, list | tuple) else [None]
        if len(columns) < 2 or None in columns or len(set(columns)) != len(columns):
            return None, (f"{key}: expected at least two distinct columns, one per choice, got "
                          f"{value!r}; e.g. [ending0, ending1, ending2, ending3]")
        return tuple(columns), None

    def schema(self) -> dict[str, Any]:
        return _nullable({"type": "array", "items": _COLUMN_SCHEMA, "minItems": 2,
                          "uniqueItems": True})


@dataclass(frozen=True)
class _DevFiles:
    """A path (the split `dev`), or a mapping split name -> path."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if isinstance(value, str) and value.strip():
            return (("dev", value.strip()),), None
        pairs = tuple((str(k), v) for k, v in value.items()) if isinstance(value, Mapping) else ()
        if not pairs or not all(k and isinstance(v, str) and v.strip() for k, v in pairs):
            return None, (f"{key}: expected a path, or a mapping split name -> path, got "
                          f"{value!r}; e.g. {{matched: MNLI/dev_matched.tsv}}")
        return tuple((k, v.strip()) for k, v in pairs), None

    def schema(self) -> dict[str, Any]:
        path = {"type": "string", "minLength": 1}
        return {"anyOf": [path, {"type": "object", "additionalProperties": path,
                                 "minProperties": 1}]}


@dataclass(frozen=True)
class _Labels:
    """The label set in index order, distinct; YAML [0, 1] means the file's "0" and "1". An
    empty list or null: none (regression)."""

    optional: bool = True

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        ok = isinstance(value, list | tuple) and all(
            isinstance(v, str | int) and not isinstance(v, bool) for v in value)
        labels = tuple(str(v) for v in value) if ok else ()
        if not ok or len(set(labels)) != len(labels):
            return None, (f"{key}: must be a list of distinct label values in index order, "
                          "e.g. [not_entailment, entailment], or null for regression")
        return labels or None, None

    def schema(self) -> dict[str, Any]:
        label = {"type": ["string", "integer"]}
        return _nullable({"type": "array", "items": label, "uniqueItems": True})


@dataclass(frozen=True)
class _Metrics:
    """A metric name, or a non-empty list of them (each kept once, in order)."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list | tuple) or not names:
            return None, (f"{key}: expected a metric name or a non-empty list of them, got "
                          f"{value!r}; use names from {', '.join(known_metrics())}")
        unknown = [m for m in names if m not in known_metrics()]
        if unknown:
            return None, (f"{key}: unknown metric(s) {', '.join(map(repr, unknown))}; use "
                          f"names from {', '.join(known_metrics())}")
        return tuple(dict.fromkeys(names)), None

    def schema(self) -> dict[str, Any]:
        name = {"type": "string", "enum": list(known_metrics())}
        return {"anyOf": [name, {"type": "array", "items": name, "minItems": 1}]}


@dataclass(frozen=True)
class _Dropout:
    """A dropout rate: a number in [0, 1)."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if not is_number(value) or not 0 <= value < 1:
            return None, f"{key}: must be a number in [0, 1), got {value!r}"
        return float(value), None

    def schema(self) -> dict[str, Any]:
        return {"type": "number", "minimum": 0, "exclusiveMaximum": 1}


@dataclass(frozen=True)
class _Header:
    """true or false: whether the first line of the file names its columns."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if not isinstance(value, bool):
            return None, f"{key}: must be true or false, got {value!r}"
        return value, None

    def schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


@dataclass(frozen=True)
class _TaskName:
    """A task's name, kept in lower case: it names the study and the metrics."""

    pattern: str = r"[A-Za-z0-9][A-Za-z0-9_\-]*"

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if not isinstance(value, str) or not re.fullmatch(self.pattern, value.strip()):
            return None, (f"{key}: expected a task name, got {value!r}; use letters, digits, "
                          "'_' or '-' (it names the study and the metrics)")
        return value.strip().lower(), None

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "pattern": f"^{self.pattern}$"}


@dataclass(frozen=True)
class _TypeOption:
    """A setting only some task types have (span_qa's window sizes): null, or a value the check
    of the registered type that has it passes."""

    name: str
    optional: bool = True

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        owner = next((t for t in _TYPES.values() if self.name in t.options), None)
        problem = owner.options[self.name][1](value) if owner is not None else None
        return (None, f"{key}: {problem}") if problem else (value, None)


def _answer_modules() -> tuple[str, ...]:
    return tuple(dict.fromkeys(m for t in _TYPES.values() for m in t.answer_modules))


@dataclass(frozen=True)
class TaskSpec:
    """One task: its files, their column mapping, its label set and its metrics."""

    # No default for these four: a full definition gives them, a preset has them.
    name: str = setting(
        rule=_TaskName(),
        doc="the task's name, unique in the list and kept in lower case: it names the study and "
            "the metrics")
    type: str = setting(
        rule=OneOf("task type", lambda: _TYPES),
        doc="what one example is, and so the task's head, loss and metrics (trainer/task_types.py)")
    train_file: str = setting(
        rule=Text(),
        doc="the training file; a relative path starts at the task's data_dir, else the run's")
    dev_files: tuple[tuple[str, str], ...] = setting(
        rule=_DevFiles(),
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
        True, _Header(),
        doc="whether the file's first line names its columns; false (tsv and csv only): "
            "columns are named by position from 0")
    labels: tuple[str, ...] | None = setting(
        None, _Labels(),
        doc="the label set in index order (YAML [0, 1] means the file's \"0\" and \"1\"); null "
            "or []: none (regression, multiple_choice, span_qa)")
    primary_metric: str = setting(
        "accuracy", OneOf("metric", known_metrics),
        doc="the metric the task is judged by (the epoch summary's; a study's `primary` "
            "objective), one of metrics; unset: the preset's, else the type's usual one if in "
            "metrics, else the first of metrics")
    metrics: tuple[str, ...] = setting(
        ("accuracy",), _Metrics(),
        doc="the dev metrics reported, a name or a list; unset: the preset's, else "
            "primary_metric if the type reports it, else the type's default ones")
    dropout: float = setting(0.1, _Dropout(),
                             doc="the dropout rate in the task's head, in [0, 1)")
    head: str = setting(
        "linear", OneOf("answer module", _answer_modules),
        doc="the answer module: linear, or san (classification only: MT-DNN's stochastic answer "
            "network)")
    choices: tuple[str, ...] | None = setting(
        None, _Choices(),
        doc="multiple_choice only: the columns of the choices, at least two, all different")
    max_seq_len: int | None = setting(
        None, Number(integer=True, low=8, high=8192, optional=True),
        doc="this task's token limit, for its training and dev examples; null: the run's "
            "max_seq_len and eval_max_seq_len")
    # BERT's SQuAD settings, which the MT-DNN SQuAD paper used.
    doc_stride: int | None = setting(
        None, _TypeOption("doc_stride"),
        doc="span_qa only: tokens between the starts of a context's windows, an integer >= 1; "
            "null: 128")
    max_query_len: int | None = setting(
        None, _TypeOption("max_query_len"),
        doc="span_qa only: the question's tokens kept, an integer >= 1; null: 64")
    max_answer_len: int | None = setting(
        None, _TypeOption("max_answer_len"),
        doc="span_qa only: the longest answer span, in tokens, an integer >= 1; null: 30")
    n_best: int | None = setting(
        None, _TypeOption("n_best"),
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

_FIELDS = tuple(f.name for f in dataclasses.fields(TaskSpec))
_KEYS = ("preset", "data_dir", *_FIELDS)
_REQUIRED = tuple(f.name for f in dataclasses.fields(TaskSpec)
                  if f.default is dataclasses.MISSING)  # name, type, train_file, dev_files
_OPTIONS = tuple(dict.fromkeys(k for t in _TYPES.values() for k in t.options))
_Bad = Callable[[str, str], None]  # bad(field, what is wrong; the fix)


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


def _preset_choices() -> str:
    return ", ".join(TASK_PRESETS)


def tasks_schema() -> dict[str, Any]:
    """The JSON Schema of the `tasks` list: preset names, and mappings that name a preset or
    give a full definition (read from the registry when called)."""
    parts = {"preset": {"type": "string"}, "data_dir": {"type": "string", "minLength": 1}}
    items = [json_schema(TaskSpec, keys=_KEYS, parts=parts, required=required)
             for required in (["preset"], _REQUIRED)]
    return {"type": "array", "minItems": 1, "items": {"anyOf": [{"type": "string"}, *items]}}


def parse_tasks(raw: object, problems: list[str]) -> tuple[TaskSpec, ...]:
    """Turn the YAML `tasks` value into TaskSpecs; every problem is appended to `problems`."""
    if raw is None or raw == []:
        problems.append(f"tasks: no task given; list at least one, e.g. [rte, mrpc] "
                        f"(presets: {_preset_choices()})")
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list | tuple):
        problems.append(f"tasks: expected a list of preset names or task definitions, "
                        f"got {type(raw).__name__}")
        return ()
    specs: list[TaskSpec] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(raw):
        where = f"tasks[{i}]"
        spec = _parse_item(item, where, problems)
        if spec is None:
            continue
        if spec.name in seen:
            problems.append(f"{where}.name: task name '{spec.name}' is already used by "
                            f"tasks[{seen[spec.name]}]; give each task a unique name "
                            f"(e.g. {{preset: {spec.name}, name: {spec.name}_2}})")
            continue
        seen[spec.name] = i
        specs.append(spec)
    return tuple(specs)


def _preset(name: object, where: str, problems: list[str], other: str = "") -> TaskSpec | None:
    preset = TASK_PRESETS.get(preset_key(name)) if isinstance(name, str) else None
    if preset is None:
        problems.append(f"{where}: unknown preset {name!r}; choose one of "
                        f"{_preset_choices()}{other}")
    return preset


def _parse_item(item: object, where: str, problems: list[str]) -> TaskSpec | None:
    """A preset name, or a mapping: a preset with overrides or a full definition."""
    if isinstance(item, str):
        return _preset(item, where, problems, " or write a full task definition")
    if not isinstance(item, Mapping):
        problems.append(f"{where}: expected a preset name or a mapping, got "
                        f"{type(item).__name__}")
        return None
    before = len(problems)
    unknown_keys(item, _KEYS, problems, f"{where}.", noun="key")
    base = None
    if "preset" in item:
        base = _preset(item["preset"], f"{where}.preset", problems)
        if base is None:
            return None
    missing = [] if base else [k for k in _REQUIRED if k not in item]
    for key in missing:
        problems.append(f"{where}.{key}: missing; a full task definition needs "
                        f"{', '.join(_REQUIRED)} (or use `preset: <name>`)")
    values = _check_fields(item, base, where, problems)
    if len(problems) == before and "data_dir" in item:
        _move_files(values, item["data_dir"], where, problems)
    return TaskSpec(**values) if len(problems) == before else None


def _move_files(values: dict[str, Any], data_dir: object, where: str,
                problems: list[str]) -> None:
    """A task's own `data_dir`: its relative file paths start there instead of at the run's."""
    folder = Path(data_dir).expanduser() if isinstance(data_dir, str) and data_dir else None
    if folder is None or not folder.is_dir():
        problems.append(f"{where}.data_dir: folder {data_dir!r} does not exist; point it at the "
                        "folder that holds this task's files, or remove it to use the run's")
        return
    folder = Path(os.path.realpath(folder))

    def moved(path: str) -> str:
        return path if Path(path).expanduser().is_absolute() else str(folder / path)

    values["train_file"] = moved(values["train_file"])
    values["dev_files"] = tuple((split, moved(p)) for split, p in values["dev_files"])


def _check_fields(item: Mapping[str, Any], base: TaskSpec | None, where: str,
                  problems: list[str]) -> dict[str, Any]:
    """The field values: the preset's, then the item's that pass their rules, then the
    defaults that depend on other fields; checked against each other."""

    def bad(key: str, message: str) -> None:
        problems.append(f"{where}.{key}: {message}")

    given = check_fields(item, TaskSpec, problems, prefix=f"{where}.")
    values = {**(dataclasses.asdict(base) if base else {}), **given}
    kind = _TYPES.get(values.get("type", ""))
    if base is None and "format" not in item and "train_file" in values:
        _infer_format(values, kind, bad)
    if kind is not None:
        _check_type_settings(values, kind, bad)
    _default_metrics(item, given, values, kind)
    _check_metrics(values, kind, bad)
    if kind is not None and all(k in values for k in _REQUIRED):
        _check_labels(values, kind, bad)
        if not values.get("header", True):
            _check_headerless(values, bad)
    return values


def _infer_format(values: dict[str, Any], kind: TaskType | None, bad: _Bad) -> None:
    """A full definition without `format`: the one its training file's extension implies."""
    suffix = PurePath(values["train_file"]).suffix.lower()
    # a .json file of a type that reads SQuAD files (span_qa) is that layout, not JSON lines
    squad = kind is not None and "squad" in kind.formats
    fmt = "squad" if suffix == ".json" and squad else _EXTENSION_FORMATS.get(suffix)
    if fmt is None:
        bad("format", f"cannot tell the format of '{values['train_file']}' from its "
                      f"extension; set format to one of {', '.join(FORMATS)}")
    else:
        values["format"] = fmt


def _owners(setting_of: Callable[[TaskType], Iterable[str]], key: str) -> list[str]:
    return [t.name for t in _TYPES.values() if key in setting_of(t)]


def _check_type_settings(values: dict[str, Any], kind: TaskType, bad: _Bad) -> None:
    """What a task's type allows and needs: its answer modules, its own options (span_qa's
    window settings; the type's default where not given), its columns and file formats."""
    head = values.get("head", "linear")
    if head not in kind.answer_modules:
        others = _owners(lambda t: t.answer_modules, head)
        hint = (f"head: {head} applies to {', '.join(others)} tasks only" if others
                else f"use one of {', '.join(kind.answer_modules)}")
        bad("head", f"{head!r} is not an answer module of a {kind.name} task; {hint}")
    for key in _OPTIONS:
        if key in kind.options and values.get(key) is None:
            values[key] = kind.options[key][0]
        elif key not in kind.options and values.get(key) is not None:
            owners = _owners(lambda t: t.options, key)
            bad(key, f"only {', '.join(owners)} tasks use {key}; remove it")
    for column, example in kind.required_columns.items():
        if not values.get(column):
            bad(column, f"a {kind.name} task needs {column}, e.g. {example}")
    for column in TYPE_COLUMNS:
        if column not in kind.required_columns and values.get(column):
            owners = _owners(lambda t: t.required_columns, column)
            bad(column, f"only {', '.join(owners)} tasks use {column}; remove it or set "
                        f"type: {owners[0]}")
    fmt = values.get("format")
    if fmt is not None and fmt not in kind.formats:
        bad("format", f"a {kind.name} task reads {', '.join(kind.formats)} files, not {fmt}")


def _default_metrics(item: Mapping[str, Any], given: Mapping[str, Any],
                     values: dict[str, Any], kind: TaskType | None) -> None:
    """Metrics a definition leaves out: its primary metric (if the type reports it) or the
    type's natural ones, also where a preset's type was changed; the primary metric: the type's
    usual one (STS-B: the mean correlation) if listed, else the first listed."""
    allowed = kind.metrics if kind else known_metrics()
    kept = values.get("metrics")  # a preset's, unless its type was changed
    if "metrics" not in item and (kept is None or not set(kept) <= set(allowed)):
        primary = given.get("primary_metric")
        values["metrics"] = ((primary,) if primary in allowed
                             else kind.default_metrics if kind else ("accuracy",))
    metrics = values.get("metrics") or ("accuracy",)
    if "primary_metric" not in item and values.get("primary_metric") not in metrics:
        usual = kind.default_primary if kind else None
        values["primary_metric"] = usual if usual in metrics else metrics[0]


def _check_metrics(values: dict[str, Any], kind: TaskType | None, bad: _Bad) -> None:
    metrics, primary = values.get("metrics", ()), values.get("primary_metric")
    if primary in known_metrics() and metrics and primary not in metrics:
        bad("primary_metric", f"'{primary}' is not in metrics ({', '.join(metrics)}); "
                              "add it to metrics or pick one of them")
    wrong = [m for m in metrics if kind and m not in kind.metrics]
    if wrong:
        bad("metrics", f"{', '.join(wrong)} cannot score a {kind.name} task; "
                       f"use {', '.join(kind.metrics)}")


def _check_labels(values: dict[str, Any], kind: TaskType, bad: _Bad) -> None:
    """The label set against the type: none, exactly `label_count`, or at least two (and two
    where f1 is reported)."""
    labels = values.get("labels")
    if not kind.has_label_set:
        if labels:
            bad("labels", f"a {kind.name} task has no label set; remove labels (or set it to "
                          "null)")
    elif not labels:
        bad("labels", f"a {kind.name} task needs its label set in index order, "
                      "e.g. labels: [not_entailment, entailment]")
    elif kind.label_count is not None and len(labels) != kind.label_count:
        bad("labels", f"a {kind.name} task needs exactly {kind.label_count} labels, e.g. "
                      "[negative, positive]")
    elif len(labels) < 2:
        bad("labels", "needs at least two labels")
    elif "f1" in values.get("metrics", ()) and len(labels) != 2:
        bad("metrics", "f1 is computed for binary tasks only; drop it or use two labels")


def _check_headerless(values: dict[str, Any], bad: _Bad) -> None:
    """`header: false`: only delimited files, whose columns are named by position from 0."""
    if values.get("format") in ("jsonl", "parquet", "squad"):
        bad("header", f"{values['format']} files always name their columns; remove header")
    for key in ("text_a", "text_b", "label", "group", "choices"):
        columns = values.get(key)
        for column in (columns if isinstance(columns, tuple) else (columns,)):
            if column is not None and not column.isdigit():
                bad(key, f"'{column}' is not a column index; a file without header names "
                         "its columns by position from 0, e.g. text_a: 3")
