"""`weightsearch import`: external weight-search results (e.g. a paper's table) into the study DB.

File format (CSV, TSV or JSONL), one row per (central task, central weight, seed):
    central_task, task_type, train_size, central_weight, seed, metric
Optional: `metric_name` (the primary metric's name, one per task; default "metric"), and the
regime the results were measured in, one per task: `encoder`, `stage` (multitask | finetuned) and
`variant` (the weighting variant); without them the recommender counts the task as encoder
"unknown", stage multitask. Any other
column with numbers is kept as a further metric of the central task (e.g. f1); others are ignored.

Every row is checked before the first write and every problem is reported at once; then one
Optuna study `<study>/<central_task>` per task gets one COMPLETE trial per row. If a write fails
midway, the studies this import created are deleted again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
from dataclasses import dataclass, field
from pathlib import Path

from studies import schema
from trainer.task_types import TASK_TYPES  # a live view: registered types count at once
from weightsearch.errors import DataError, StorageError

REQUIRED = ("central_task", "task_type", "train_size", "central_weight", "seed", "metric")
OPTIONAL = ("metric_name", "encoder", "stage", "variant")
A_IMPORTED_FROM = "imported_from"
MAX_LISTED = 50  # problems listed in one error; the count of the rest follows


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


def _number(text: str) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _line_offset(path: Path) -> int:
    """Line number of the first data row: CSV/TSV have a header line, JSONL does not."""
    return 2 if path.suffix.lower() in (".csv", ".tsv") else 1


def parse_rows(path: str | Path) -> list[ImportRow]:
    """Read and validate the whole file; raise one DataError listing every problem."""
    from studies.tables import read_table

    path = Path(path)
    df = read_table(path, as_text=True)
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise DataError(
            f"{path}: missing column(s) {', '.join(missing)}; an import file needs the columns "
            f"{', '.join(REQUIRED)} (optional: metric_name, and further metric columns)"
        )
    if df.empty:
        raise DataError(f"{path}: no data rows")
    extra_cols = [c for c in df.columns if c not in REQUIRED + OPTIONAL]
    numeric_extra = [c for c in extra_cols
                     if all(v.strip() == "" or _number(v) is not None for v in df[c])]
    first = _line_offset(path)
    problems: list[str] = []
    rows: list[ImportRow] = []
    seen: dict[tuple, int] = {}
    per_task: dict[str, tuple[str, int, str, int]] = {}
    for i, rec in enumerate(df.to_dict("records")):
        line = first + i
        bad = []
        task = str(rec["central_task"]).strip()
        if not task or schema.SEPARATOR in task:
            bad.append(f"central_task {task!r} must be a non-empty name without "
                       f"{schema.SEPARATOR!r}")
        ttype = str(rec["task_type"]).strip()
        if ttype not in TASK_TYPES:
            bad.append(f"task_type {ttype!r} is not one of {', '.join(TASK_TYPES)}")
        size = _number(rec["train_size"])
        if size is None or size != int(size) or size <= 0:
            bad.append(f"train_size {rec['train_size']!r} is not a positive whole number")
        weight = _number(rec["central_weight"])
        if weight is None:
            bad.append(f"central_weight {rec['central_weight']!r} is not a number")
        elif not schema.WEIGHT_LOW <= weight <= schema.WEIGHT_HIGH:
            bad.append(f"central_weight {weight:g} is outside "
                       f"{schema.WEIGHT_LOW:g}..{schema.WEIGHT_HIGH:g}")
        seed = _number(rec["seed"])
        if seed is None or seed != int(seed):
            bad.append(f"seed {rec['seed']!r} is not a whole number")
        metric = _number(rec["metric"])
        if metric is None:
            bad.append(f"metric {rec['metric']!r} is not a number")
        name = str(rec.get("metric_name", "")).strip() or "metric"
        regime = {k: str(rec.get(k, "")).strip() for k in ("encoder", "stage", "variant")}
        regime = {k: v for k, v in regime.items() if v and v.lower() != "nan"}
        if regime.get("stage") not in (None, *schema.STAGES):
            bad.append(f"stage {regime['stage']!r} is not one of {', '.join(schema.STAGES)}")
        if not bad:
            key = (task, weight, int(seed))
            if key in seen:
                bad.append(f"duplicate of line {seen[key]} (central_task {task}, central_weight "
                           f"{weight:g}, seed {int(seed)})")
            else:
                seen[key] = line
            meta = (ttype, int(size), name, line)
            if task in per_task and per_task[task][:3] != meta[:3]:
                t, s, n, at = per_task[task]
                bad.append(f"task {task}: task_type/train_size/metric_name {ttype}/{int(size)}/"
                           f"{name} differ from line {at} ({t}/{s}/{n})")
            per_task.setdefault(task, meta)
        if bad:
            problems.extend(f"line {line}: {b}" for b in bad)
            continue
        extra = {c: float(rec[c]) for c in numeric_extra if str(rec[c]).strip() != ""}
        rows.append(ImportRow(line, task, ttype, int(size), float(weight), int(seed),
                              float(metric), name, extra, regime))
    if problems:
        shown = problems[:MAX_LISTED]
        rest = len(problems) - MAX_LISTED
        more = f"\n  ... and {rest} more" if rest > 0 else ""
        raise DataError(
            f"{path}: {len(problems)} problem(s), nothing was imported:\n"
            + "\n".join(f"  - {p}" for p in shown) + more
        )
    return rows


def import_file(path: str | Path, study: str, storage_url: str) -> list[str]:
    """Validate `path`, then create `<study>/<task>` studies; returns their names."""
    import optuna
    from optuna.distributions import FloatDistribution

    from studies.reading import open_quiet, study_names

    if not study or schema.SEPARATOR in study:
        raise DataError(f"--study {study!r} must be a non-empty name without {schema.SEPARATOR!r}")
    rows = parse_rows(path)
    storage = open_quiet(storage_url)
    existing = [n for n in study_names(storage) if schema.split_study_name(n)[0] == study]
    if existing:
        raise StorageError(
            f"study {study!r} already exists in {storage_url} ({', '.join(existing)}); import "
            f"under another --study name, or delete it first with `optuna delete-study "
            f"--study-name NAME --storage {storage_url}` for each name listed"
        )
    by_task: dict[str, list[ImportRow]] = {}
    for r in rows:
        by_task.setdefault(r.central_task, []).append(r)
    dist = {schema.PARAM: FloatDistribution(schema.WEIGHT_LOW, schema.WEIGHT_HIGH)}
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    created: list[str] = []
    try:
        for task, task_rows in by_task.items():
            name = schema.study_name(study, task)
            st = optuna.create_study(study_name=name, storage=storage, direction="maximize")
            created.append(name)
            head = task_rows[0]
            for key, value in {
                schema.A_STUDY: study, schema.A_CENTRAL: task, schema.A_TASK_TYPE: head.task_type,
                schema.A_TRAIN_SIZE: head.train_size, schema.A_PRIMARY: head.metric_name,
                schema.A_AUX_TASKS: [], schema.A_AUX_SIZES: {},
                schema.A_SOURCE: schema.SOURCE_IMPORTED, schema.A_CREATED: now,
                A_IMPORTED_FROM: str(path),
                **{{"encoder": schema.A_ENCODER, "stage": schema.A_STAGE,
                    "variant": schema.A_VARIANT}[k]: v for k, v in head.regime.items()},
            }.items():
                st.set_user_attr(key, value)
            st.add_trials([
                optuna.trial.create_trial(
                    params={schema.PARAM: r.weight}, distributions=dist, value=r.metric,
                    user_attrs={
                        schema.T_SEED: r.seed, schema.T_CELL: schema.cell_key(r.weight, r.seed),
                        schema.T_METRICS: {task: {r.metric_name: r.metric, **r.extra}},
                    },
                )
                for r in task_rows
            ])
    except BaseException as exc:  # Ctrl-C midway must not leave half a study behind either
        for name in created:
            with contextlib.suppress(Exception):  # best effort: the original error matters more
                optuna.delete_study(study_name=name, storage=storage)
        if isinstance(exc, StorageError) or not isinstance(exc, Exception):
            raise
        raise StorageError(
            f"import into {storage_url} failed ({type(exc).__name__}: {exc}); the studies it had "
            "created were removed, fix the cause and run it again"
        ) from exc
    return created
