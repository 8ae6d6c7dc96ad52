"""Reading and checking an import file (`weightsearch import`; its columns:
`weightsearch.studies.import_columns`) into rows.

Every row is checked before the first write and every problem is reported at once: each cell
by its column's rule, a further metric by its name's range, a task in one regime, one scale and
one of each of its type, train size, metric name and dataset, a cell once, a JSONL key once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from weightsearch.core.errors import DataError
from weightsearch.core.fields import check_fields
from weightsearch.studies import schema
from weightsearch.studies.import_columns import (
    OPTIONAL,
    REGIME,
    REQUIRED,
    ImportColumns,
    ImportRow,
    finite_number,
    metric_problem,
    metric_range,
)

MAX_LISTED = 50  # problems listed in one error; the count of the rest follows


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
        value = finite_number(text)
        problem = (f"{c} {text!r} is not a finite number" if value is None
                   else metric_problem(c, c, value))
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
    if (problem := metric_problem("metric", cols.metric_name, cols.metric)) is not None:
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
