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

Every row is checked before the first write and every problem is reported at once; then one
Optuna study `<study>/<central_task>` per task gets one COMPLETE trial per row. If a write fails
midway, the studies this import created are deleted again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from weightsearch.core.errors import DataError, StorageError
from weightsearch.core.fields import Text, check_fields, setting
from weightsearch.studies import schema
from weightsearch.studies.storage import shown_url
from weightsearch.trainer import (
    task_types,  # NAMES is read when a row is checked: the registry is live
)
from weightsearch.trainer.clipping import GRAD_CLIP_MODES

A_IMPORTED_FROM = "imported_from"
MAX_LISTED = 50  # problems listed in one error; the count of the rest follows


def _number(text: Any) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


# --- the rules of a cell (every cell of an import file is read as text) --------------------
@dataclass(frozen=True)
class _Numeral:
    """A finite number written in a cell: a whole one where `whole`, above 0 where
    `positive`, within `bounds` where given."""

    whole: bool = False
    positive: bool = False
    bounds: tuple[float, float] | None = None

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        number = _number(value)
        if (number is None or (self.whole and not number.is_integer())
                or (self.positive and number <= 0)):
            kind = f"a {'positive ' * self.positive}{'whole ' * self.whole}number"
            return None, f"{key} {value!r} is not {kind}"
        if self.bounds is not None and not self.bounds[0] <= number <= self.bounds[1]:
            return None, f"{key} {number:g} is outside {self.bounds[0]:g}..{self.bounds[1]:g}"
        return (int(number) if self.whole else number), None


@dataclass(frozen=True)
class _OneOf:
    """One of the names `names()` gives when the cell is checked, in their letter case."""

    names: Callable[[], tuple[str, ...]]

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        text = str(value).strip()
        if text not in self.names():
            return None, f"{key} {text!r} is not one of {', '.join(self.names())}"
        return text, None


@dataclass(frozen=True)
class _StudyPart:
    """A name that becomes part of a study name: not blank, without the separator."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        text = str(value).strip()
        if not text or schema.SEPARATOR in text:
            return None, f"{key} {text!r} must be a non-empty name without {schema.SEPARATOR!r}"
        return text, None


@dataclass(frozen=True)
class ImportColumns:
    """The columns of an import file, in the order their problems are listed: the required
    ones, then the optional ones with the value a blank cell leaves."""

    central_task: str = setting(rule=_StudyPart())
    task_type: str = setting(rule=_OneOf(lambda: task_types.NAMES))
    train_size: int = setting(rule=_Numeral(whole=True, positive=True))
    central_weight: float = setting(rule=_Numeral(bounds=(schema.WEIGHT_LOW,
                                                          schema.WEIGHT_HIGH)))
    seed: int = setting(rule=_Numeral(whole=True))
    metric: float = setting(rule=_Numeral())
    metric_name: str = setting("metric", Text())  # the primary metric's name
    # The regime the results were measured in; absent: encoder "unknown", stage multitask.
    encoder: str | None = setting(None, Text())
    stage: str | None = setting(None, _OneOf(lambda: schema.STAGES))
    variant: str | None = setting(None, Text())
    dataset: str | None = setting(None, Text())  # the data the task is drawn from
    # The gradient clipping the scores were trained with (trainer.clipping), one per task;
    # absent: not recorded. grad_clip alone means the reference's global clipping.
    grad_clip: float | None = setting(None, _Numeral(bounds=(0.0, math.inf)))
    grad_clip_mode: str | None = setting(None, _OneOf(lambda: GRAD_CLIP_MODES))
    # Per row: the share of the central task's updates clipped, and the median norm of its
    # unweighted gradient (what `weightsearch export` writes from a run's record).
    clip_share: float | None = setting(None, _Numeral(bounds=(0.0, 1.0)))
    central_norm: float | None = setting(None, _Numeral(bounds=(0.0, math.inf)))


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


# --- reading and checking a file ---------------------------------------------------------
def _line_offset(path: Path) -> int:
    """Line number of the first data row: CSV/TSV have a header line, JSONL does not."""
    return 2 if path.suffix.lower() in (".csv", ".tsv") else 1


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


def _metric_columns(df) -> list[str]:
    """The further columns whose every cell is a number or blank: further metrics."""
    return [c for c in df.columns if c not in REQUIRED + OPTIONAL
            and all(v.strip() == "" or _number(v) is not None for v in df[c])]


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
    if len(problems) > before:
        return None
    extra = {c: float(rec[c]) for c in metric_columns if str(rec[c]).strip() != ""}
    regime = {k: getattr(cols, k) for k in REGIME if getattr(cols, k) is not None}
    if clipping is not None:
        regime["clipping"] = schema.clipping_label(*clipping)
    return ImportRow(line, cols.central_task, cols.task_type, cols.train_size,
                     cols.central_weight, cols.seed, cols.metric, cols.metric_name, extra,
                     regime, cols.dataset, clipping, cols.clip_share, cols.central_norm)


def _clipping(cols: ImportColumns, problems: list[str]) -> tuple[float, str] | None:
    """The row's clipping regime from its two columns, or None when not given."""
    if cols.grad_clip is None:
        given = [k for k in ("grad_clip_mode", "clip_share", "central_norm")
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


def _differs(row: ImportRow, first_of_task: dict[str, ImportRow]) -> str | None:
    """A row whose task type, train size, metric name or dataset differs from its task's first
    row."""
    first = first_of_task.setdefault(row.central_task, row)

    def meta(r: ImportRow) -> dict[str, Any]:
        return {"task_type": r.task_type, "train_size": r.train_size,
                "metric_name": r.metric_name, "dataset": r.dataset or r.central_task,
                **{k: r.regime.get(k, "(blank)") for k in (*REGIME, "clipping")}}

    now, was = meta(row), meta(first)
    keys = [k for k in now if now[k] != was[k]]
    if not keys:
        return None
    return (f"task {row.central_task}: {'/'.join(keys)} "
            f"{'/'.join(str(now[k]) for k in keys)} differ{'s' * (len(keys) == 1)} from line "
            f"{first.line} ({'/'.join(str(was[k]) for k in keys)}); one task has one of each"
            + ("; a task trained under two clipping regimes is two tasks: give each its own "
               "central_task name (e.g. sst2_700-clip1, sst2_700-noclip)"
               if "clipping" in keys else ""))


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
    for line, rec in enumerate(df.to_dict("records"), start=_line_offset(path)):
        bad: list[str] = []
        row = _check_row(rec, line, metric_columns, bad)
        if row is not None:
            bad = [p for p in (_duplicate(row, seen), _differs(row, first_of_task)) if p]
        problems.extend(f"line {line}: {b}" for b in bad)
        if row is not None and not bad:
            rows.append(row)
    if problems:
        raise _problems_error(path, problems)
    return rows


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


def _trial(row: ImportRow):
    """The COMPLETE Optuna trial of one row."""
    import optuna
    from optuna.distributions import FloatDistribution

    return optuna.trial.create_trial(
        params={schema.PARAM: row.weight},
        distributions={schema.PARAM: FloatDistribution(schema.WEIGHT_LOW, schema.WEIGHT_HIGH)},
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
    return {"grad_clip": clip, "grad_clip_mode": mode,
            "tasks": {row.central_task: central} if central else {}}


def import_file(path: str | Path, study: str, storage_url: str) -> list[str]:
    """Validate `path`, then create `<study>/<task>` studies; returns their names."""
    import optuna

    from weightsearch.studies.reading import open_quiet, study_names

    if (problem := schema.study_name_problem(study, "--study")) is not None:
        raise DataError(problem)
    rows = parse_rows(path)
    storage = open_quiet(storage_url)
    existing = [n for n in study_names(storage) if schema.split_study_name(n)[0] == study]
    if existing:
        raise StorageError(
            f"study {study!r} already exists in {shown_url(storage_url)} "
            f"({', '.join(existing)}); import "
            f"under another --study name, or delete it first with `optuna delete-study "
            f"--study-name NAME --storage {shown_url(storage_url)}` for each name listed"
        )
    by_task: dict[str, list[ImportRow]] = {}
    for r in rows:
        by_task.setdefault(r.central_task, []).append(r)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    created: list[str] = []
    try:
        for task, task_rows in by_task.items():
            name = schema.study_name(study, task)
            st = optuna.create_study(study_name=name, storage=storage, direction="maximize")
            created.append(name)
            for key, value in _study_attrs(study, task_rows[0], path, now).items():
                st.set_user_attr(key, value)
            with warnings.catch_warnings():  # "experimental" in Optuna
                warnings.simplefilter("ignore")
                st.set_metric_names([task_rows[0].metric_name])  # the dashboard's label
            st.add_trials([_trial(r) for r in task_rows])
    except BaseException as exc:  # Ctrl-C midway must not leave half a study behind either
        for name in created:
            with contextlib.suppress(Exception):  # best effort: the original error matters more
                optuna.delete_study(study_name=name, storage=storage)
        if isinstance(exc, StorageError) or not isinstance(exc, Exception):
            raise
        raise StorageError(
            f"import into {shown_url(storage_url)} failed ({type(exc).__name__}: {exc}); the "
            f"studies it had "
            "created were removed, fix the cause and run it again"
        ) from exc
    return created
