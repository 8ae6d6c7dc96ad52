"""`weightsearch import`: external weight-search results (e.g. a paper's table) into the study DB.

File format (CSV, TSV or JSONL), one row per (central task, central weight, seed):
    central_task, task_type, train_size, central_weight, seed, metric
Optional: `metric_name` (the primary metric's name, one per task; default "metric"), the
regime the results were measured in, one per task: `encoder`, `stage` (multitask | finetuned),
`variant` (the weighting variant) and the gradient clipping, `grad_clip` (0: none) with
`grad_clip_mode` (global, the default, or unweighted); without them the recommender counts the
task as encoder "unknown", stage multitask, clipping unknown; per row, `clip_share` (the share
of the central task's updates clipped, 0..1) and `central_norm` (their median unweighted
gradient norm); and `dataset`, one per task: the data the task is drawn from, when
several central tasks are sizes of one dataset (e.g. sst2_125 and sst2_4000, dataset sst2), so
that the recommender counts them as one task (default: the central task). Any other
column with numbers is kept as a further metric of the central task (e.g. f1); others are ignored.

Every row is checked before the first write and every problem is reported at once: numbers
finite and in their range (a metric by its name: `metric_range`; train_size below 10**12; seed
within the trainer's range), names one printable line, a task in one regime, a JSONL key once.
Then one Optuna study `<study>/<central_task>` per task gets one COMPLETE trial per row, all of
them written under hidden staging names and published by one rename at the end, so an import
that fails or is killed at any point leaves no study a reader sees (`drop_abandoned`: the next
import removes what it staged).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import math
import os
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from weightsearch.core.errors import (
    DataError,
    DiskFull,
    StorageError,
    WeightsearchError,
    causes,
)
from weightsearch.core.fields import MAX_SEED, check_fields, setting
from weightsearch.studies import schema
from weightsearch.studies.bulk import engine_of
from weightsearch.studies.claims import Claims, lease_states
from weightsearch.studies.urls import shown_url
from weightsearch.trainer import (
    task_types,  # NAMES is read when a row is checked: the registry is live
)
from weightsearch.trainer.clipping import GRAD_CLIP_MODES

A_IMPORTED_FROM = "imported_from"
MAX_LISTED = 50  # problems listed in one error; the count of the rest follows
NAME_MAX = 200  # characters of a task, metric, encoder, variant or dataset name
TRAIN_SIZE_LIMIT = 10**12  # training examples: more is a typo or an overflow
# The largest magnitude of a number the file may give where no tighter range is known (a
# metric of an unknown name, a gradient norm): far inside what the readers use
# (`weightsearch.studies.reading.USABLE_LIMIT`), so a sum over millions of trials stays finite.
VALUE_LIMIT = 1e9


def _number(text: Any) -> float | None:
    """A finite number written in a cell, else None."""
    try:
        v = float(text)
    except (TypeError, ValueError, OverflowError):
        return None
    return v if math.isfinite(v) else None


def _whole(text: Any) -> int | None:
    """A whole number written in a cell, read exactly: "18446744073709551617" stays itself
    (through a float it would become another number); "3.0" and "1e3" are whole too."""
    try:
        return int(str(text).strip())
    except ValueError:  # not digits (or beyond int's 4,300 digits)
        number = _number(text)
        return int(number) if number is not None and number.is_integer() else None


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


# --- the rules of a cell (every cell of an import file is read as text) --------------------
@dataclass(frozen=True)
class _Numeral:
    """A finite number written in a cell: a whole one where `whole`, above 0 where
    `positive`, within `bounds` where given; `fix` says what a valid one is."""

    whole: bool = False
    positive: bool = False
    bounds: tuple[float, float] | None = None
    fix: str = ""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        number = _whole(value) if self.whole else _number(value)
        if number is None or (self.positive and number <= 0):
            kind = f"a {'positive ' * self.positive}{'whole ' * self.whole}number"
            return None, f"{key} {value!r} is not {kind}"
        if self.bounds is not None and not self.bounds[0] <= number <= self.bounds[1]:
            shown = str(number) if isinstance(number, int) and abs(number) < 10**30 \
                else f"{float(number):g}"
            return None, (f"{key} {shown} is outside {_bound(self.bounds[0])}.."
                          f"{_bound(self.bounds[1])}{self.fix}")
        return number, None


@dataclass(frozen=True)
class _OneOf:
    """One of the names `names()` gives when the cell is checked, in their letter case."""

    names: Callable[[], tuple[str, ...]]

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        text = str(value).strip()
        if text not in self.names():
            return None, f"{key} {text!r} is not one of {', '.join(self.names())}"
        return text, None


def _name_problem(key: str, text: str) -> str | None:
    """What makes `text` no name: blank, a control character (a newline, NUL, ...), too long."""
    if not text:
        return f"{key} is blank; give a name"
    if not text.isprintable():
        bad = next(c for c in text if not c.isprintable())
        return (f"{key} {text[:40]!r} holds the control character {bad!r}; names are one "
                "line of printable characters")
    if len(text) > NAME_MAX:
        return f"{key} {text[:40]!r}... has {len(text)} characters; shorten it to {NAME_MAX}"
    return None


@dataclass(frozen=True)
class _Name:
    """A name: one line of printable characters, at most NAME_MAX, kept stripped; with
    `study_part`, without the study-name separator (it becomes part of a study name)."""

    study_part: bool = False

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        text = str(value).strip()
        if self.study_part and (not text or schema.SEPARATOR in text):
            return None, f"{key} {text!r} must be a non-empty name without {schema.SEPARATOR!r}"
        problem = _name_problem(key, text)
        return (None, problem) if problem else (text, None)


# --- the range of a metric, by its name ----------------------------------------------------
# The names the trainer's metrics go by (trainer/metrics.py, the task types' SQuAD metrics) and
# the paper's table's. Scores may be fractions or percentages (the paper's table is in %).
_CORRELATIONS = {"mcc", "matthews", "pearson", "spearman", "corr", "correlation", "kendall"}
_SCORES = {"accuracy", "acc", "f1", "exact", "em", "precision", "recall", "auc", "roc",
           "bleu", "rouge", "map", "mrr", "ndcg"}
_LOSSES = {"loss", "nll", "perplexity", "ppl", "mse", "mae", "rmse"}


def metric_range(name: str) -> tuple[float, float, str]:
    """(low, high, what it is) for a metric called `name`: by the words of its name."""
    words = set(re.split(r"[^a-z0-9]+", name.lower()))
    if "thresh" in words or "threshold" in words:  # SQuAD's best_f1_thresh: a log-odds cut
        return -VALUE_LIMIT, VALUE_LIMIT, "a threshold"
    if words & _LOSSES:
        return 0.0, VALUE_LIMIT, "a loss or error (not negative)"
    if words & _CORRELATIONS:
        return -100.0, 100.0, "a correlation (-1..1, or -100..100 in percent)"
    if words & _SCORES:
        return 0.0, 100.0, "a score (0..1, or 0..100 in percent)"
    return -VALUE_LIMIT, VALUE_LIMIT, "a metric of an unknown kind"


def _metric_problem(key: str, name: str, value: float) -> str | None:
    low, high, what = metric_range(name)
    if low <= value <= high:
        return None
    return (f"{key} {value:g} is outside {low:g}..{high:g}, the range of {name} ({what}); "
            "check the value, or name the metric in metric_name")


@dataclass(frozen=True)
class ImportColumns:
    """The columns of an import file, in the order their problems are listed: the required
    ones, then the optional ones with the value a blank cell leaves."""

    central_task: str = setting(rule=_Name(study_part=True))
    task_type: str = setting(rule=_OneOf(lambda: task_types.NAMES))
    train_size: int = setting(rule=_Numeral(
        whole=True, positive=True, bounds=(1, TRAIN_SIZE_LIMIT - 1),
        fix="; give the central task's number of training examples"))
    central_weight: float = setting(rule=_Numeral(bounds=(schema.WEIGHT_LOW,
                                                          schema.WEIGHT_HIGH)))
    seed: int = setting(rule=_Numeral(whole=True, bounds=(0, MAX_SEED),
                                      fix="; give the seed the run used (the trainer's range)"))
    metric: float = setting(rule=_Numeral())  # its range by metric_name: `_check_row`
    metric_name: str = setting("metric", _Name())  # the primary metric's name
    # The regime the results were measured in; absent: encoder "unknown", stage multitask.
    encoder: str | None = setting(None, _Name())
    stage: str | None = setting(None, _OneOf(lambda: schema.STAGES))
    variant: str | None = setting(None, _Name())
    dataset: str | None = setting(None, _Name())  # the data the task is drawn from
    # The gradient clipping the scores were trained with (trainer.clipping), one per task;
    # absent: not recorded. grad_clip alone means the reference's global clipping.
    grad_clip: float | None = setting(None, _Numeral(bounds=(0.0, VALUE_LIMIT)))
    grad_clip_mode: str | None = setting(None, _OneOf(lambda: GRAD_CLIP_MODES))
    # Per row: the share of the central task's updates clipped, and the median norm of its
    # unweighted gradient (what `weightsearch export` writes from a run's record).
    clip_share: float | None = setting(None, _Numeral(bounds=(0.0, 1.0)))
    central_norm: float | None = setting(None, _Numeral(bounds=(0.0, VALUE_LIMIT)))
    # The weights above which every in-focus, every off-focus central update was clipped
    # (global clipping; trainer.clipping.clip_summary).
    saturates_in_focus: float | None = setting(None, _Numeral(bounds=(0.0, VALUE_LIMIT)))
    saturates_off_focus: float | None = setting(None, _Numeral(bounds=(0.0, VALUE_LIMIT)))
    # What the searched weight set: loss (SIWLM's loss weight; also when blank) or sampling
    # (the central task's sampling rate, `weight_acts_on` of the study file).
    weight_acts_on: str | None = setting(None, _OneOf(lambda: ("loss", "sampling")))


_COLUMNS = dataclasses.fields(ImportColumns)
REQUIRED = tuple(f.name for f in _COLUMNS if f.default is dataclasses.MISSING)
OPTIONAL = tuple(f.name for f in _COLUMNS if f.default is not dataclasses.MISSING)
REGIME = ("encoder", "stage", "variant")


@dataclass(frozen=True)
class ImportRow:
    line: int
    central_task: str
    task_type: str
    train_size: int
    weight: float
    seed: int
    metric: float
    metric_name: str
    extra: dict[str, float]
    regime: dict[str, str] = field(default_factory=dict)  # encoder/stage/variant when given
    dataset: str | None = None
    clipping: tuple[float, str] | None = None  # (grad_clip, grad_clip_mode) when given
    clip_share: float | None = None
    central_norm: float | None = None
    saturates: tuple[float | None, float | None] = (None, None)  # in focus, off focus
    acts_on: str = "loss"  # what the weight set: loss, or sampling (the central task's rate)


# --- reading and checking a file ---------------------------------------------------------
def _line_numbers(path: Path, df) -> list[int]:
    """Each row's line number: a JSONL reader records them (blank lines skipped); CSV/TSV
    rows follow their header line."""
    lines = df.attrs.get("lines")
    if lines is not None and len(lines) == len(df):
        return list(lines)
    first = 2 if path.suffix.lower() in (".csv", ".tsv") else 1
    return list(range(first, first + len(df)))


def _read(path: Path):
    """The file as a table of text cells, with every required column and a row at least."""
    from weightsearch.studies.tables import read_frame
    from weightsearch.trainer.data.readers import bom_note

    df = read_frame(path, as_text=True)
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise DataError(
            f"{path}: missing column(s) {', '.join(missing)}; an import file needs the columns "
            f"{', '.join(REQUIRED)} (optional: metric_name, and further metric columns)"
            + bom_note(df.columns)
        )
    if df.empty:
        raise DataError(f"{path}: no data rows")
    return df


def _numeral(text: str) -> bool:
    """Written as a number, finite or not ("inf" and "nan" too: refused as values later)."""
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


def _metric_columns(df) -> list[str]:
    """The further columns whose every cell is a number or blank: further metrics."""
    return [c for c in df.columns if c not in REQUIRED + OPTIONAL
            and all(v.strip() == "" or _numeral(v) for v in df[c])]


def _extra_metrics(rec: Mapping[str, Any], metric_columns: list[str],
                   problems: list[str]) -> dict[str, float]:
    """The row's further metrics, each finite and within its name's range."""
    extra = {}
    for c in metric_columns:
        text = str(rec[c]).strip()
        if not text:
            continue
        value = _number(text)
        problem = (f"{c} {text!r} is not a finite number" if value is None
                   else _metric_problem(c, c, value))
        if problem:
            problems.append(problem)
        elif value is not None:  # (a None value is a problem above)
            extra[c] = value
    return extra


def _declared_cells(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The row's cells of declared columns; a blank optional cell (or a regime cell reading
    nan) is left out, so the column's default holds."""
    cells = {k: v for k, v in rec.items() if k in REQUIRED}
    for k in OPTIONAL:
        text = str(rec.get(k, "")).strip()
        if text and not (k in (*REGIME, "dataset") and text.lower() == "nan"):
            cells[k] = rec[k]
    return cells


def _check_row(rec: Mapping[str, Any], line: int, metric_columns: list[str],
               problems: list[str]) -> ImportRow | None:
    """The row, or None with its cells' problems added."""
    before = len(problems)
    values = check_fields(_declared_cells(rec), ImportColumns, problems)
    if len(problems) > before:
        return None
    cols = ImportColumns(**values)
    clipping = _clipping(cols, problems)
    if (problem := _metric_problem("metric", cols.metric_name, cols.metric)) is not None:
        problems.append(problem)
    extra = _extra_metrics(rec, metric_columns, problems)
    if len(problems) > before:
        return None
    regime = {k: getattr(cols, k) for k in REGIME if getattr(cols, k) is not None}
    acts_on = cols.weight_acts_on or "loss"
    if clipping is not None:
        regime["clipping"] = schema.clipping_label(*clipping, acts_on=acts_on)
    return ImportRow(line, cols.central_task, cols.task_type, cols.train_size,
                     cols.central_weight, cols.seed, cols.metric, cols.metric_name, extra,
                     regime, cols.dataset, clipping, cols.clip_share, cols.central_norm,
                     (cols.saturates_in_focus, cols.saturates_off_focus), acts_on)


def _clipping(cols: ImportColumns, problems: list[str]) -> tuple[float, str] | None:
    """The row's clipping regime from its two columns, or None when not given."""
    if cols.grad_clip is None:
        given = [k for k in ("grad_clip_mode", "clip_share", "central_norm",
                             "saturates_in_focus", "saturates_off_focus", "weight_acts_on")
                 if getattr(cols, k) is not None]
        if given:
            problems.append(f"{'/'.join(given)} given without grad_clip; give the norm the "
                            "gradient was clipped to in grad_clip (0: none)")
        return None
    mode = cols.grad_clip_mode or "global"
    if mode == "unweighted" and cols.grad_clip == 0:
        problems.append("grad_clip_mode 'unweighted' with grad_clip 0: nothing is clipped; "
                        "give grad_clip above 0, or leave grad_clip_mode blank")
        return None
    if cols.grad_clip == 0 and cols.clip_share:
        problems.append(f"clip_share {cols.clip_share:g} with grad_clip 0: nothing is clipped "
                        "without clipping; give clip_share 0 or blank, or the grad_clip used")
    if cols.central_norm is not None and cols.grad_clip > 0 and not math.isfinite(
            cols.grad_clip / max(cols.central_norm, 1e-300)):
        problems.append(f"central_norm {cols.central_norm:g} with grad_clip {cols.grad_clip:g}: "
                        "the weight at which updates clip is not a finite number; check both")
    return cols.grad_clip, mode


def _duplicate(row: ImportRow, seen: dict[tuple, int]) -> str | None:
    """A second row of the same cell (central task, weight and seed)."""
    key = (row.central_task, row.weight, row.seed)
    if key in seen:
        return (f"duplicate of line {seen[key]} (central_task {row.central_task}, "
                f"central_weight {row.weight:g}, seed {row.seed})")
    seen[key] = row.line
    return None


_REGIME_PARTS = (*REGIME, "clipping")  # what keeps kinds of measurement apart (recommender)


def _meta(r: ImportRow) -> dict[str, Any]:
    return {"task_type": r.task_type, "train_size": r.train_size,
            "metric_name": r.metric_name, "dataset": r.dataset or r.central_task}


def _regime(r: ImportRow) -> dict[str, str]:
    return {k: str(r.regime.get(k, "(blank)")) for k in _REGIME_PARTS}


def _change(now: dict[str, Any], was: dict[str, Any]) -> tuple[list[str], str, str]:
    """The keys that differ, and their values now and before, each joined by "/"."""
    keys = [k for k in now if now[k] != was[k]]
    return keys, "/".join(str(now[k]) for k in keys), "/".join(str(was[k]) for k in keys)


def _differs(row: ImportRow, first_of_task: dict[str, ImportRow],
             mixed: set[str]) -> list[str]:
    """What sets a row apart from its task's first row: its task type, train size, metric name
    or dataset (each such row), or its regime (once per task: `mixed` holds the tasks told)."""
    first = first_of_task.setdefault(row.central_task, row)
    out = []
    keys, now, was = _change(_meta(row), _meta(first))
    if keys:
        out.append(f"task {row.central_task}: {'/'.join(keys)} {now} "
                   f"differ{'s' * (len(keys) == 1)} from line {first.line} ({was}); one task "
                   "has one of each")
    if row.central_task not in mixed and _regime(row) != _regime(first):
        mixed.add(row.central_task)
        out.append(_mixed_regimes(row, first))
    return out


def _mixed_regimes(row: ImportRow, first: ImportRow) -> str:
    """One message for a task whose rows were measured in two regimes: a study holds one (the
    first row's would be kept and the rest counted under it)."""
    keys, now, was = _change(_regime(row), _regime(first))

    def shown(r: ImportRow) -> str:
        return ", ".join(f"{k} {v}" for k, v in _regime(r).items()
                         if k in keys or v != "(blank)")

    given = [v for k, v in _regime(row).items() if k in keys and v != "(blank)"]
    part = given[0].rstrip("/").rsplit("/", 1)[-1] if given else "other"  # a hub name's end
    example = f"e.g. {row.central_task}-{part}"
    return (f"task {row.central_task}: {'/'.join(keys)} {now} differ{'s' * (len(keys) == 1)} "
            f"from line {first.line} ({was}): two regimes in one task (line {first.line}: "
            f"{shown(first)}; line {row.line}: {shown(row)}), and one study holds one regime; "
            "split the file by regime and import each part under its own --study name, or "
            f"give each regime its own central_task name ({example}); later rows of "
            f"{row.central_task} that differ are not listed")


def _problems_error(path: Path, problems: list[str]) -> DataError:
    shown = problems[:MAX_LISTED]
    rest = len(problems) - MAX_LISTED
    more = f"\n  ... and {rest} more" if rest > 0 else ""
    return DataError(f"{path}: {len(problems)} problem(s), nothing was imported:\n"
                     + "\n".join(f"  - {p}" for p in shown) + more)


def parse_rows(path: str | Path) -> list[ImportRow]:
    """Read and validate the whole file; raise one DataError listing every problem."""
    path = Path(path)
    df = _read(path)
    metric_columns = _metric_columns(df)
    problems: list[str] = []
    rows: list[ImportRow] = []
    seen: dict[tuple, int] = {}
    first_of_task: dict[str, ImportRow] = {}
    mixed: set[str] = set()
    nested = df.attrs.get("nested") or [set()] * len(df)
    for line, rec, objects in zip(_line_numbers(path, df), df.to_dict("records"), nested,
                                  strict=True):
        # A declared column holds text or a number; a JSON object or list in it is no name
        # (it would be stored as its JSON text, e.g. a study `x/{"a": 1}`).
        bad = [f"{c} holds a JSON {'object' if rec[c].startswith('{') else 'list'}; give "
               "text or a number" for c in sorted(objects & {*REQUIRED, *OPTIONAL})]
        row = None if bad else _check_row(rec, line, metric_columns, bad)
        if row is not None:
            bad = [p for p in (_duplicate(row, seen),) if p] + _differs(row, first_of_task,
                                                                        mixed)
        problems.extend(f"line {line}: {b}" for b in bad)
        if row is not None and not bad:
            rows.append(row)
    problems.extend(_mixed_scales(rows))
    if problems:
        raise _problems_error(path, problems)
    return rows


def _mixed_scales(rows: list[ImportRow]) -> list[str]:
    """A task whose scores are fractions on some rows and percentages on others (a score or a
    correlation above 1 in magnitude on one row, below 1 on another): one problem per task,
    naming a line of each, since no reading of it compares its weights."""
    found = []
    by_task: dict[str, list[ImportRow]] = {}
    for r in rows:
        _, high, _ = metric_range(r.metric_name)
        if high == 100.0:  # a score or correlation: 0..1 or 0..100
            by_task.setdefault(r.central_task, []).append(r)
    for task, mine in by_task.items():
        percent = [r for r in mine if abs(r.metric) > 1.0]
        fraction = [r for r in mine if 0.0 < abs(r.metric) < 1.0]
        if percent and fraction:
            p, f = percent[0], fraction[0]
            found.append(f"line {max(p.line, f.line)}: task {task}: {p.metric_name} "
                         f"{f.metric:g} (line {f.line}) reads as a fraction and {p.metric:g} "
                         f"(line {p.line}) as a percentage; give every row of a task on one "
                         "scale (0..1 or 0..100)")
    return found


def _study_attrs(study: str, head: ImportRow, path: str | Path, now: str) -> dict[str, Any]:
    """The user attributes of the study of `head`'s central task (its first row)."""
    regime_attrs = {"encoder": schema.A_ENCODER, "stage": schema.A_STAGE,
                    "variant": schema.A_VARIANT}
    return {
        schema.A_STUDY: study, schema.A_CENTRAL: head.central_task,
        schema.A_TASK_TYPE: head.task_type, schema.A_TRAIN_SIZE: head.train_size,
        schema.A_PRIMARY: head.metric_name, schema.A_AUX_TASKS: [], schema.A_AUX_SIZES: {},
        schema.A_SOURCE: schema.SOURCE_IMPORTED, schema.A_CREATED: now,
        A_IMPORTED_FROM: str(path),
        **{regime_attrs[k]: v for k, v in head.regime.items() if k in regime_attrs},
        **({schema.A_DATASET: head.dataset} if head.dataset else {}),
        **({schema.A_GRAD_CLIP: head.clipping[0], schema.A_GRAD_CLIP_MODE: head.clipping[1]}
           if head.clipping else {}),
    }


def _trial(row: ImportRow, distribution: Any):
    """The COMPLETE Optuna trial of one row."""
    import optuna

    return optuna.trial.create_trial(
        params={schema.PARAM: row.weight}, distributions={schema.PARAM: distribution},
        value=row.metric,
        user_attrs={
            schema.T_SEED: row.seed, schema.T_CELL: schema.cell_key(row.weight, row.seed),
            schema.T_METRICS: {row.central_task: {row.metric_name: row.metric, **row.extra}},
            **({schema.T_CLIPPING: _clip_record(row)} if row.clipping else {}),
        },
    )


def _clip_record(row: ImportRow) -> dict[str, Any]:
    """The row's clipping as a launched trial records it (trainer.clipping.clip_summary),
    as far as the file gives it."""
    clip, mode = row.clipping  # type: ignore[misc]
    central: dict[str, Any] = {}
    if row.clip_share is not None:
        central["clip_share"] = row.clip_share
    if row.central_norm is not None:
        central["median_norm"] = row.central_norm
        central["acts_below"] = (clip / row.central_norm
                                 if mode == "global" and clip > 0 and row.central_norm > 0
                                 else None)
    for key, value in zip(("saturates_in_focus", "saturates_off_focus"), row.saturates,
                          strict=True):
        if value is not None:
            central[key] = value
    return {"grad_clip": clip, "grad_clip_mode": mode,
            "tasks": {row.central_task: central} if central else {},
            **({schema.WEIGHT_ACTS_ON: row.acts_on} if row.acts_on != "loss" else {})}


# --- writing: into hidden staging studies, published in one transaction ----------------------
# A killed import (SIGTERM, SIGKILL, a lost machine) must leave nothing a reader counts as
# evidence, and must not block importing the file again: every study is written under a
# staging name that readers skip (`reading.STAGING_PREFIX` + "<started>-<pid>-<host>-<token>/"),
# and one transaction renames them all at the end. The staging name says who writes it, so a
# later import can tell an abandoned staging study from one another import is writing.
STALE_S = 24 * 3600.0  # a staging study this old is abandoned, whoever wrote it
# The `study` of an import's lease in the claims table (no Optuna study has this name).
IMPORT_LEASES = ".weightsearch-import"
_LIVE: set[str] = set()  # the staging tokens this process is writing now


def _host_id() -> str:
    """Who can judge this process's pid: the host name, this boot of the machine (two
    machines with one host name differ) and the PID namespace (two containers on one machine
    differ). Another import sees a pid as this one does only where all three agree."""
    import hashlib
    import socket

    parts = [socket.gethostname()]
    for where in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"):
        with contextlib.suppress(OSError):
            parts.append(Path(where).read_text().strip() if "boot_id" in where
                         else os.readlink(where))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def _staging_tag() -> str:
    """This import's staging tag, `<started>-<pid>-<host>-<token>`: its studies are named
    `<STAGING_PREFIX><tag>/<study>/<task>` until published."""
    import secrets
    import time

    return f"{int(time.time())}-{os.getpid()}-{_host_id()}-{secrets.token_hex(6)}"


def _abandoned(name: str, now: float, leases: dict[str, bool]) -> bool:
    """Whether the staging study `name` is no live import's. An import holds a lease on its
    staging tag in the database (`Claims`, renewed while it writes): lapsed, the study is
    abandoned, whoever wrote it. Live, it is kept, unless its writer shares this process's
    machine boot and PID namespace (`_host_id`) and its pid is gone (killed: no need to wait
    out the lease). A tag without a lease row (from before leases) counts as abandoned when
    it is older than STALE_S, or when it is this namespace's and its process is gone."""
    from weightsearch.studies.reading import STAGING_PREFIX

    tag = name[len(STAGING_PREFIX):].split(schema.SEPARATOR, 1)[0]
    parts = tag.split("-")
    if len(parts) != 4 or not parts[0].isdigit() or not parts[1].isdigit():
        return True  # not a name this code writes
    started, pid, host = int(parts[0]), int(parts[1]), parts[2]
    if tag in leases and not leases[tag]:
        return True  # its writer stopped renewing: gone, or stalled past the lease
    if host == _host_id():  # its pid means here what it meant there
        if pid == os.getpid():
            return tag not in _LIVE
        return not _process_alive(pid)
    if tag in leases:
        return False  # a live lease from another machine, container or namespace
    return now - started > STALE_S  # no lease row (an import from before leases): its age


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: is there such a process (ours or another user's)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def drop_abandoned(storage: Any) -> list[str]:
    """Delete the staging studies that killed or failed imports left (best effort: one that
    cannot be deleted now is left to the next import); returns their names."""
    import time

    from weightsearch.studies.reading import is_staging

    now, dropped = time.time(), []
    leases = lease_states(engine_of(storage), IMPORT_LEASES) or {}
    for found in storage.get_all_studies():
        if is_staging(found.study_name) and _abandoned(found.study_name, now, leases):
            with contextlib.suppress(Exception):  # invisible to readers either way
                storage.delete_study(found._study_id)
                dropped.append(found.study_name)
    return dropped


def _stage(storage: Any, staging: str, study: str, rows: list[ImportRow], path: str | Path,
           now: str) -> int:
    """Write one task's study under its staging name; returns its study id."""
    import optuna
    from optuna.distributions import FloatDistribution

    from weightsearch.studies.bulk import write_trials

    st = optuna.create_study(study_name=staging, storage=storage, direction="maximize")
    with warnings.catch_warnings():  # "experimental" in Optuna
        warnings.simplefilter("ignore")
        st.set_metric_names([rows[0].metric_name])  # the dashboard's label
    distribution = FloatDistribution(schema.WEIGHT_LOW, schema.WEIGHT_HIGH)
    write_trials(storage, st._study_id, _study_attrs(study, rows[0], path, now),
                 [_trial(r, distribution) for r in rows])
    return st._study_id


def _exists_error(storage_url: str, study: str, existing: list[str]) -> StorageError:
    return StorageError(
        f"study {study!r} already exists in {shown_url(storage_url)} "
        f"({', '.join(existing)}); import under another --study name, or delete it first with "
        f"`optuna delete-study --study-name NAME --storage {shown_url(storage_url)}` for each "
        "name listed")


def _publish(storage: Any, storage_url: str, study: str, staged: dict[str, int]) -> None:
    """Rename every staged study to its final name in one transaction, unless a study of that
    base name appeared meanwhile (another import or launch)."""
    import sqlalchemy.exc

    from weightsearch.studies.bulk import RenameLost, rename_studies
    from weightsearch.studies.storage import schema_lock

    with schema_lock(storage_url):  # imports of one database publish one at a time
        try:
            clash = rename_studies(storage, {i: n for n, i in staged.items()},
                                   lambda n: schema.split_study_name(n)[0] == study)
        except sqlalchemy.exc.IntegrityError:  # a study name taken between check and rename
            clash = [n for n in staged]
        except RenameLost as exc:
            raise StorageError(
                f"the import's staged studies for {', '.join(exc.names)} were deleted from "
                f"{shown_url(storage_url)} before they could be published (another process "
                "removed them); nothing was published: run the import again") from None
    if clash:
        raise _exists_error(storage_url, study, clash)


def import_file(path: str | Path, study: str, storage_url: str) -> list[str]:
    """Validate `path`, then create `<study>/<task>` studies, all or none; returns their
    names."""
    from weightsearch.studies.reading import open_quiet, study_names

    if (problem := schema.study_name_problem(study, "--study")) is not None:
        raise DataError(problem)
    rows = parse_rows(path)
    storage = open_quiet(storage_url)
    drop_abandoned(storage)
    existing = [n for n in study_names(storage) if schema.split_study_name(n)[0] == study]
    if existing:
        raise _exists_error(storage_url, study, existing)
    by_task: dict[str, list[ImportRow]] = {}
    for r in rows:
        by_task.setdefault(r.central_task, []).append(r)
    tag = _staging_tag()
    _LIVE.add(tag)
    leases = Claims(engine_of(storage))  # the lease on this import's staging studies
    leases.claim(IMPORT_LEASES, tag)
    leases.start()
    try:
        return _stage_and_publish(storage, storage_url, study, by_task, path, tag, leases)
    finally:
        _LIVE.discard(tag)
        leases.stop()


def _stage_and_publish(storage: Any, storage_url: str, study: str,
                       by_task: dict[str, list[ImportRow]], path: str | Path,
                       tag: str, leases: Claims) -> list[str]:
    """Write every task's study under this import's staging `tag`, then publish them all;
    on any failure, drop what was staged (what cannot go now, the next import drops)."""
    from weightsearch.studies.reading import STAGING_PREFIX

    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    staged: dict[str, int] = {}
    try:
        for task, task_rows in by_task.items():
            name = schema.study_name(study, task)
            staged[name] = _stage(storage, f"{STAGING_PREFIX}{tag}/{name}", study, task_rows,
                                  path, now)
        _publish(storage, storage_url, study, staged)
    except BaseException as exc:  # Ctrl-C midway must not leave half a study behind either
        _LIVE.discard(tag)  # so that `drop_abandoned` takes this import's staging too
        with contextlib.suppress(Exception):  # the original error matters more
            leases.release(IMPORT_LEASES, tag)
        with contextlib.suppress(Exception):
            drop_abandoned(storage)
        failure = import_failure(exc, storage_url, path)
        if failure is None:
            raise
        raise failure from exc
    return list(staged)


def disk_full_message(exc: BaseException, storage_url: str, path: str | Path) -> str | None:
    """The message for an import stopped by a full disk (ENOSPC, or SQLite's "database or disk
    is full" anywhere in `exc`'s chain), naming the database, its folder and the space left
    there; None when `exc` is no such failure."""
    import errno
    import shutil

    from weightsearch.studies.dialects import sqlite_path

    chain = list(causes(exc))
    full = any(isinstance(e, OSError) and e.errno == errno.ENOSPC for e in chain) or any(
        w in str(e).lower() for e in chain for w in ("database or disk is full",
                                                     "no space left", "disk full"))
    if not full:
        return None
    file = sqlite_path(storage_url)
    where = "on the database server"
    if file is not None:
        folder = Path(file).expanduser().resolve().parent
        try:
            left = shutil.disk_usage(folder).free
            free = f"{left / 2**20:,.1f} MiB free" if left >= 2**20 else f"{left:,} bytes free"
        except OSError:
            free = "free space unknown"
        where = f"at {file} ({free} on the disk of {folder})"
    return (f"the study database {shown_url(storage_url)} is full: no space left {where}. "
            f"Nothing of {path} was imported: the import writes hidden staging studies and "
            "publishes them only at its end (what it staged is removed now, or by the next "
            "import). Free space there (or raise the database's size limit), then run the "
            "import again")


def import_failure(exc: BaseException, storage_url: str,
                   path: str | Path) -> WeightsearchError | None:
    """The error an import that failed midway ends with; None where `exc` must propagate as
    it is (Ctrl-C; a bug's traceback is wrapped, with its type named)."""
    if not isinstance(exc, Exception):
        return None
    if isinstance(exc, WeightsearchError):
        return exc
    full = disk_full_message(exc, storage_url, path)
    if full is not None:
        return DiskFull(full)
    from weightsearch.studies.storage_failures import storage_failure

    known = storage_failure(exc, storage_url)
    cause = str(known) if known is not None else f"{type(exc).__name__}: {exc}"
    return StorageError(f"import of {path} into {shown_url(storage_url)} failed ({cause}); "
                        "nothing was imported, fix the cause and run it again")
