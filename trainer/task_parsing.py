"""Reading the YAML `tasks` list of a run config into `TaskSpec`s.

A task comes from the list as a preset name (`rte`), a preset with overrides
(`{preset: rte, dropout: 0.2}`) or a full definition. `parse_tasks` checks every item with the
settings walker of `weightsearch.core.fields` (each field's rule: `TaskSpec`) and then the rules
that tie fields together (the format a file's extension implies, what a task type needs, the
label set, the metrics), reporting all problems at once so the user fixes the whole list in
one go.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePath
from typing import Any

from weightsearch.core.fields import check_fields, json_schema, unknown_keys
from weightsearch.trainer.task_rules import known_metrics
from weightsearch.trainer.task_types import TASK_TYPES, TYPE_COLUMNS, TaskType
from weightsearch.trainer.tasks import (
    FORMATS,
    TASK_PRESETS,
    TYPE_OPTIONS,
    TaskSpec,
    preset_key,
)

_EXTENSION_FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl",
                      ".parquet": "parquet"}
_FIELDS = tuple(f.name for f in dataclasses.fields(TaskSpec))
_KEYS = ("preset", "data_dir", *_FIELDS)
_REQUIRED = tuple(f.name for f in dataclasses.fields(TaskSpec)
                  if f.default is dataclasses.MISSING)  # name, type, train_file, dev_files
_Bad = Callable[[str, str], None]  # bad(field, what is wrong; the fix)


def _preset_choices() -> str:
    return ", ".join(TASK_PRESETS)


def tasks_schema() -> dict[str, Any]:
    """The JSON Schema of the `tasks` list: preset names, and mappings that name a preset or
    give a full definition (read from the registry when called)."""
    parts: dict[str, dict[str, Any]] = {"preset": {"type": "string"},
                                        "data_dir": {"type": "string", "minLength": 1}}
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
    kind = TASK_TYPES.get(values.get("type", ""))
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
    return [t.name for t in TASK_TYPES.values() if key in setting_of(t)]


def _check_type_settings(values: dict[str, Any], kind: TaskType, bad: _Bad) -> None:
    """What a task's type allows and needs: its answer modules, its own options (span_qa's
    window settings; the type's default where not given), its columns and file formats."""
    head = values.get("head", "linear")
    if head not in kind.answer_modules:
        others = _owners(lambda t: t.answer_modules, head)
        hint = (f"head: {head} applies to {', '.join(others)} tasks only" if others
                else f"use one of {', '.join(kind.answer_modules)}")
        bad("head", f"{head!r} is not an answer module of a {kind.name} task; {hint}")
    for key in TYPE_OPTIONS:
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
    if wrong and kind is not None:  # a wrong metric implies a type
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
