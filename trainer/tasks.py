"""Task definitions: what a task's files look like, how its labels map to indices, how it is scored.

A task comes from the YAML `tasks` list as a preset name (`rte`), a preset with overrides
(`{preset: rte, dropout: 0.2}`) or a full definition. `parse_tasks` checks every item and
reports all problems at once so the user fixes the whole list in one go.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from trainer.task_types import TASK_TYPES, TYPE_COLUMNS

_TYPES = TASK_TYPES  # a live view of the registry: a type registered later counts at once

FORMATS = ("tsv", "csv", "jsonl", "parquet", "squad")
# Every metric some task type reports, in a stable order.
METRICS = tuple(dict.fromkeys(m for t in _TYPES.values() for m in t.metrics))
_EXTENSION_FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl",
                      ".parquet": "parquet"}
_NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")


@dataclass(frozen=True)
class TaskSpec:
    """One task: its files, their column mapping, its label set and its metrics."""

    name: str
    type: str
    train_file: str
    dev_files: tuple[tuple[str, str], ...]
    format: str = "tsv"
    text_a: str = "sentence1"
    text_b: str | None = None
    label: str = "label"
    group: str | None = None
    header: bool = True
    labels: tuple[str, ...] | None = None
    primary_metric: str = "accuracy"
    metrics: tuple[str, ...] = ("accuracy",)
    dropout: float = 0.1
    head: str = "linear"  # the answer module: linear, or san (classification)
    choices: tuple[str, ...] | None = None  # multiple choice: the columns of the choices
    max_seq_len: int | None = None  # this task's token limit; None: the run's max_seq_len
    # span_qa only (None elsewhere): BERT's window and answer settings
    doc_stride: int | None = None
    max_query_len: int | None = None
    max_answer_len: int | None = None
    n_best: int | None = None

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


PRESETS: dict[str, TaskSpec] = {
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
    "qnli": _pair("qnli", "QNLI", "question", "sentence", "label", _ENTAIL, type="ranking",
                  group="question"),
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
_REQUIRED = ("name", "type", "train_file", "dev_files")
_OPTIONS = tuple(dict.fromkeys(k for t in _TYPES.values() for k in t.options))


def preset_key(name: str) -> str:
    """Normalise a preset spelling: 'SST-2', 'sts_b' and 'STS-B' all name a preset."""
    return re.sub(r"[\s_\-]", "", name.lower())


def _preset_choices() -> str:
    return ", ".join(PRESETS)


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


def _parse_item(item: object, where: str, problems: list[str]) -> TaskSpec | None:
    if isinstance(item, str):
        preset = PRESETS.get(preset_key(item))
        if preset is None:
            problems.append(f"{where}: unknown preset '{item}'; choose one of "
                            f"{_preset_choices()} or write a full task definition")
        return preset
    if not isinstance(item, Mapping):
        problems.append(f"{where}: expected a preset name or a mapping, got "
                        f"{type(item).__name__}")
        return None
    item = dict(item)
    before = len(problems)
    unknown = [k for k in item if k not in (*_FIELDS, "preset", "data_dir")]
    for key in unknown:
        problems.append(f"{where}.{key}: unknown key; allowed keys are preset, data_dir, "
                        f"{', '.join(_FIELDS)}")
    base: TaskSpec | None = None
    if "preset" in item:
        name = item.pop("preset")
        base = PRESETS.get(preset_key(name)) if isinstance(name, str) else None
        if base is None:
            problems.append(f"{where}.preset: unknown preset {name!r}; choose one of "
                            f"{_preset_choices()}")
            return None
    else:
        for key in _REQUIRED:
            if key not in item:
                problems.append(f"{where}.{key}: missing; a full task definition needs "
                                f"{', '.join(_REQUIRED)} (or use `preset: <name>`)")
    values = _check_fields(item, base, where, problems)
    if len(problems) > before or values is None:
        return None
    if "data_dir" in item:
        _move_files(values, item["data_dir"], where, problems)
        if len(problems) > before:
            return None
    return TaskSpec(**values)


def _move_files(values: dict[str, Any], data_dir: object, where: str,
                problems: list[str]) -> None:
    """A task's own `data_dir`: its relative file paths start there instead of at the run's."""
    folder = Path(data_dir).expanduser() if isinstance(data_dir, str) and data_dir else None
    if folder is None or not folder.is_dir():
        problems.append(f"{where}.data_dir: folder {data_dir!r} does not exist; point it at the "
                        "folder that holds this task's files, or remove it to use the run's")
        return
    folder = folder.resolve()

    def moved(path: str) -> str:
        return path if Path(path).expanduser().is_absolute() else str(folder / path)

    values["train_file"] = moved(values["train_file"])
    values["dev_files"] = tuple((split, moved(p)) for split, p in values["dev_files"])


def _check_fields(item: dict[str, Any], base: TaskSpec | None, where: str,
                  problems: list[str]) -> dict[str, Any] | None:
    """Validate each given field; returns the merged field values (base preset + overrides)."""
    values: dict[str, Any] = dataclasses.asdict(base) if base else {}
    if base:
        values["dev_files"] = base.dev_files
        values["labels"] = base.labels
        values["metrics"] = base.metrics

    def bad(key: str, message: str) -> None:
        problems.append(f"{where}.{key}: {message}")

    for key in ("name", "train_file"):
        if key in item:
            value = item[key]
            if not isinstance(value, str) or not value.strip():
                bad(key, "must be a non-empty string")
            else:
                values[key] = value.strip()
    if isinstance(values.get("name"), str):
        values["name"] = values["name"].lower()
        if not _NAME_PATTERN.match(values["name"]):
            bad("name", f"'{values['name']}' is not a valid task name; use lower-case letters, "
                        "digits, '_' or '-' (it names the study and the metrics)")
    if "type" in item:
        if item["type"] not in TASK_TYPES:
            bad("type", f"unknown task type {item['type']!r}; use one of {', '.join(TASK_TYPES)}")
        else:
            values["type"] = item["type"]
    if "dev_files" in item:
        dev = _parse_dev_files(item["dev_files"])
        if dev is None:
            bad("dev_files", "give a path string, or a mapping split name -> path, "
                             "e.g. {matched: MNLI/dev_matched.tsv}")
        else:
            values["dev_files"] = dev
    for key in ("text_a", "label"):
        if key in item:
            value = _column(item[key])
            if value is None:
                bad(key, "must be a column name (or a column index for headerless files)")
            else:
                values[key] = value
    for key in ("text_b", "group"):
        if key in item:
            value = None if item[key] is None else _column(item[key])
            if item[key] is not None and value is None:
                bad(key, "must be a column name, a column index, or null")
            else:
                values[key] = value
    if "header" in item:
        if not isinstance(item["header"], bool):
            bad("header", "must be true or false")
        else:
            values["header"] = item["header"]
    if "format" in item:
        if item["format"] not in FORMATS:
            bad("format", f"unknown format {item['format']!r}; use one of {', '.join(FORMATS)}")
        else:
            values["format"] = item["format"]
    elif base is None and isinstance(values.get("train_file"), str):
        suffix = PurePath(values["train_file"]).suffix.lower()
        # a .json file of a type that reads SQuAD files (span_qa) is that layout, not JSON lines
        squad = "squad" in getattr(_TYPES.get(values.get("type", "")), "formats", ())
        fmt = "squad" if suffix == ".json" and squad else _EXTENSION_FORMATS.get(suffix)
        if fmt is None:
            bad("format", f"cannot tell the format of '{values['train_file']}' from its "
                          f"extension; set format to one of {', '.join(FORMATS)}")
        else:
            values["format"] = fmt
    if "labels" in item:
        labels = None if item["labels"] is None else _parse_labels(item["labels"])
        if item["labels"] is not None and labels is None:
            bad("labels", "must be a list of distinct label values in index order, "
                          "e.g. [not_entailment, entailment], or null for regression")
        else:
            values["labels"] = labels or None
    if "dropout" in item:
        value = item["dropout"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
            bad("dropout", f"must be a number in [0, 1), got {value!r}")
        else:
            values["dropout"] = float(value)
    _check_type_settings(item, values, bad)
    _check_metrics(item, values, bad)
    if any(k not in values for k in _REQUIRED):
        return None
    _check_consistency(values, bad)
    return values


def _check_type_settings(item: dict[str, Any], values: dict[str, Any], bad: Any) -> None:
    """The settings that only some task types have: head, choices, max_seq_len and the type's
    own options (span_qa's window settings)."""
    kind = _TYPES.get(values.get("type", ""))
    if "head" in item:
        values["head"] = item["head"]
    if kind is not None and values.get("head", "linear") not in kind.answer_modules:
        others = [t.name for t in _TYPES.values() if values.get("head") in t.answer_modules]
        hint = (f"head: {values['head']} applies to {', '.join(others)} tasks only"
                if others else f"use one of {', '.join(kind.answer_modules)}")
        bad("head", f"{values.get('head')!r} is not an answer module of a {kind.name} task; "
                    f"{hint}")
    if item.get("choices") is not None:
        raw = item["choices"]
        columns = [_column(c) for c in raw] if isinstance(raw, list | tuple) else None
        if columns is None or len(columns) < 2 or None in columns or len(set(columns)) != len(
                columns):
            bad("choices", "must list at least two distinct columns, one per choice, e.g. "
                           "[ending0, ending1, ending2, ending3]")
        else:
            values["choices"] = tuple(columns)
    if "max_seq_len" in item:
        value = item["max_seq_len"]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 8 <= value <= 8192):
            bad("max_seq_len", f"must be an integer in [8, 8192] or null, got {value!r}")
        else:
            values["max_seq_len"] = value
    for key in _OPTIONS:
        if key in item:
            values[key] = item[key]
    if kind is None:
        return
    for key in _OPTIONS:
        if key not in kind.options:
            if values.get(key) is not None:
                owners = [t.name for t in _TYPES.values() if key in t.options]
                bad(key, f"only {', '.join(owners)} tasks use {key}; remove it")
            continue
        default, check = kind.options[key]
        if values.get(key) is None:
            values[key] = default
        else:
            problem = check(values[key])
            if problem:
                bad(key, problem)
    for column, example in kind.required_columns.items():
        if not values.get(column):
            bad(column, f"a {kind.name} task needs {column}, e.g. {example}")
    for column in TYPE_COLUMNS:
        if column not in kind.required_columns and values.get(column):
            owners = [t.name for t in _TYPES.values() if column in t.required_columns]
            bad(column, f"only {', '.join(owners)} tasks use {column}; remove it or set "
                        f"type: {owners[0]}")
    fmt = values.get("format")
    if fmt in FORMATS and fmt not in kind.formats:
        bad("format", f"a {kind.name} task reads {', '.join(kind.formats)} files, not {fmt}")


def _check_metrics(item: dict[str, Any], values: dict[str, Any], bad: Any) -> None:
    task_type = values.get("type", "classification")
    kind = _TYPES.get(task_type)
    allowed = kind.metrics if kind else METRICS
    if "metrics" in item:
        raw = item["metrics"]
        raw = [raw] if isinstance(raw, str) else raw
        if not isinstance(raw, list | tuple) or not raw:
            bad("metrics", f"must be a non-empty list of metric names from {', '.join(METRICS)}")
        else:
            unknown = [m for m in raw if m not in METRICS]
            if unknown:
                bad("metrics", f"unknown metric(s) {', '.join(map(repr, unknown))}; "
                               f"use names from {', '.join(METRICS)}")
            else:
                values["metrics"] = tuple(dict.fromkeys(raw))
    elif "metrics" not in values or (kind and not set(values["metrics"]) <= set(allowed)):
        # a full definition without metrics, or a preset whose type was changed
        if item.get("primary_metric") in allowed:
            values["metrics"] = (item["primary_metric"],)
        else:  # the type's natural ones
            values["metrics"] = kind.default_metrics if kind else ("accuracy",)
    if "primary_metric" in item:
        primary = item["primary_metric"]
        if primary not in METRICS:
            bad("primary_metric", f"unknown metric {primary!r}; use one of {', '.join(METRICS)}")
        else:
            values["primary_metric"] = primary
    elif "metrics" in item or values.get("primary_metric") not in values.get("metrics", ()):
        metrics = values.get("metrics") or ("accuracy",)
        if values.get("primary_metric") not in metrics:
            # the type's usual one (STS-B: the mean correlation), else the first listed
            usual = kind.default_primary if kind else None
            values["primary_metric"] = usual if usual in metrics else metrics[0]
    metrics = values.get("metrics", ())
    primary = values.get("primary_metric")
    if primary in METRICS and metrics and primary not in metrics:
        bad("primary_metric", f"'{primary}' is not in metrics ({', '.join(metrics)}); "
                              "add it to metrics or pick one of them")
    wrong = [m for m in metrics if m in METRICS and m not in allowed]
    if kind and wrong:
        bad("metrics", f"{', '.join(wrong)} cannot score a {task_type} task; "
                       f"use {', '.join(allowed)}")


def _check_consistency(values: dict[str, Any], bad: Any) -> None:
    """Rules that tie several fields together (type vs labels/group, format vs header)."""
    task_type = values["type"]
    labels = values.get("labels")
    kind = _TYPES.get(task_type)
    if kind is None:
        return
    if not kind.has_label_set:
        if labels:
            bad("labels", f"a {task_type} task has no label set; remove labels (or set it to "
                          "null)")
    elif not labels:
        bad("labels", f"a {task_type} task needs its label set in index order, "
                      "e.g. labels: [not_entailment, entailment]")
    elif kind.label_count is not None and len(labels) != kind.label_count:
        bad("labels", f"a {task_type} task needs exactly {kind.label_count} labels, e.g. "
                      "[negative, positive]")
    elif len(labels) < 2:
        bad("labels", "needs at least two labels")
    elif "f1" in values.get("metrics", ()) and len(labels) != 2:
        bad("metrics", "f1 is computed for binary tasks only; drop it or use two labels")
    if not values.get("header", True) and values.get("format") in ("jsonl", "parquet", "squad"):
        bad("header", f"{values['format']} files always name their columns; remove header")
    if not values.get("header", True):
        for key in ("text_a", "text_b", "label", "group", "choices"):
            columns = values.get(key)
            for column in (columns if isinstance(columns, tuple) else (columns,)):
                if column is not None and not column.isdigit():
                    bad(key, f"'{column}' is not a column index; a file without header names "
                             "its columns by position from 0, e.g. text_a: 3")


def _column(value: object) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value >= 0:
        return str(value)
    if isinstance(value, str) and value:
        return value
    return None


def _parse_dev_files(raw: object) -> tuple[tuple[str, str], ...] | None:
    if isinstance(raw, str) and raw.strip():
        return (("dev", raw.strip()),)
    if isinstance(raw, Mapping) and raw:
        pairs = tuple((str(k), v) for k, v in raw.items())
        if all(k and isinstance(v, str) and v.strip() for k, v in pairs):
            return tuple((k, v.strip()) for k, v in pairs)
    return None


def _parse_labels(raw: object) -> tuple[str, ...] | None:
    if not isinstance(raw, list | tuple):
        return None
    if not raw:
        return ()
    if any(isinstance(v, bool) or not isinstance(v, str | int) for v in raw):
        return None
    labels = tuple(str(v) for v in raw)  # YAML [0, 1] means the file's "0" and "1"
    return labels if len(set(labels)) == len(labels) else None
