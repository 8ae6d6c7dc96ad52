"""`weightsearch inspect`: progress of every study, or the cells and best weights of one."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from weightsearch.core.errors import ConfigError, StorageError
from weightsearch.studies import schema
from weightsearch.studies.budget import BudgetReport, budget_report, unusable_text
from weightsearch.studies.budget import rows as budget_rows
from weightsearch.studies.budget import to_dict as budget_dict
from weightsearch.studies.central import CentralStudy
from weightsearch.studies.leases import mark_driver_gone
from weightsearch.studies.methods import (
    comparison,
    conclusion,
    is_methods_study,
    method_rows,
    study_epochs_note,
)
from weightsearch.studies.reading import read_all, read_central, resolve
from weightsearch.studies.urls import shown_url
from weightsearch.studies.verdict import by_seed, judge

FORMATS = ("table", "csv", "json")
COUNT_KEYS = ("complete", "running", "driver_gone", "interrupted", "failed", "pending",
              "pruned", "superseded")


def overview(studies: list[CentralStudy]) -> list[dict]:
    """One row per base study: progress counts over its central tasks and each task's best."""
    groups: dict[str, list[CentralStudy]] = {}
    for s in studies:
        groups.setdefault(schema.split_study_name(s.name)[0] or s.name, []).append(s)
    rows = []
    for base, members in sorted(groups.items()):
        keys = list(COUNT_KEYS)
        if all("not_started" in m.counts for m in members):  # known for launched grids
            keys.append("not_started")
        counts = {k: sum(m.counts.get(k, 0) for m in members) for k in keys}
        rows.append({
            "study": base, "source": members[0].source,
            "central_tasks": [m.central_task for m in members], **counts,
            "best_weights": {m.central_task: (m.best.weight if m.best else None) for m in members},
            # a best weight is a finding only where the trials separate it (studies.verdict)
            "best_clear": {m.central_task: m.verdict.clear for m in members},
        })
    return rows


# A trial's GPU as `gpu_use` reads it: {"gpu_share": fraction given, "gpu_peak_mib": the peak
# PyTorch's caching allocator reserved}, by (Optuna study name, trial number).
GpuUse = Mapping[tuple[str, int], Mapping[str, float]]


def cell_rows(studies: list[CentralStudy], gpu: GpuUse | None = None,
              full: bool = False) -> list[dict]:
    """One row per cell; with `gpu` (`gpu_use`), where any trial had a GPU share, its share
    and measured peak (empty for a trial that had none). `full` (the CSV): also the regime it
    trained in, its clipping and central updates clipped, and its study's verdict, so that a
    row read alone says what it measured."""
    rows = []
    fused = any(c.fused for s in studies for c in s.cells)
    followed = any(c.trained_by is not None for s in studies for c in s.cells)
    gpu = gpu or {}
    on_gpu = any((s.name, c.number) in gpu for s in studies for c in s.cells)
    for s in studies:
        for c in sorted(s.cells, key=lambda c: (c.weight is None, c.weight or 0,
                                                _point_text(c.point), c.seed or 0)):
            shown = {k: _value_text(k, v) for k, v in c.point.items()
                     if k != schema.T_CENTRAL_WEIGHT_PATH}
            used = gpu.get((s.name, c.number), {})
            rows.append({"central_task": s.central_task, "central_weight": c.weight, **shown,
                         "seed": c.seed, "state": c.state, "value": c.value,
                         # the points it trained with as one stacked model (`fuse_cells`)
                         **({"fused_with": _fused_text(c.fused)} if fused else {}),
                         **({"trained_by": c.trained_by} if followed else {}),
                         **({key: used.get(key) for key in GPU_COLUMNS} if on_gpu else {}),
                         **(_regime_columns(s, c) if full else {}),
                         **_stage_metrics(s, c)})
    return rows


def _regime_columns(s: CentralStudy, c) -> dict:
    return {"encoder": s.encoder, "stage": s.stage or "multitask", "variant": s.variant,
            "clipping": s.cell_regime(c), "clip_share": c.task_clipping().get("clip_share"),
            "verdict": _verdict_text(s)}


GPU_COLUMNS = ("gpu_share", "gpu_peak_mib")


def gpu_use(storage, studies: list[CentralStudy]) -> dict[tuple[str, int], dict[str, float]]:
    """Each trial's GPU share and measured peak (`GpuUse`), one query per study; trials that
    recorded neither (CPU trials, imports, older releases) are absent."""
    from weightsearch.studies.retries import call_retrying

    return call_retrying("read GPU use", _gpu_use, storage, studies)


def _gpu_use(storage, studies: list[CentralStudy]) -> dict[tuple[str, int], dict[str, float]]:
    from sqlalchemy import select

    from weightsearch.studies.bulk import engine_of, optuna_tables

    columns = {schema.T_GPU_SHARE: "gpu_share", schema.T_PEAK_GPU_RESERVED: "gpu_peak_mib"}
    t = optuna_tables()
    trials, attrs = t["trials"], t["attrs"]
    out: dict[tuple[str, int], dict[str, float]] = {}
    with engine_of(storage).connect() as connection:
        for s in studies:
            study_id = storage.get_study_id_from_name(s.name)
            query = (select(trials.c.number, attrs.c.key, attrs.c.value_json)
                     .join(trials, trials.c.trial_id == attrs.c.trial_id)
                     .where(trials.c.study_id == study_id, attrs.c.key.in_(list(columns))))
            for number, key, text in connection.execute(query):
                value = _gpu_figure(text)
                if value is not None:
                    out.setdefault((s.name, number), {})[columns[key]] = value
    return out


def _gpu_figure(text: str) -> float | None:
    """A stored share or peak; anything else (another tool's value) is none."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok and value >= 0 else None


def _fused_text(cells: tuple[str, ...]) -> str:
    """A fused unit's points from its cell keys (`<point>|<seed>`, one seed per unit), e.g.
    `1; 5; 9`; empty for a cell trained alone."""
    return "; ".join(key.rpartition("|")[0] for key in cells)


def _stage_metrics(s: CentralStudy, c) -> dict[str, float]:
    """A cell's metrics; in a study scored on the fine-tuned stage each says its stage, since
    the value is a fine-tuned score and the multi-task stage's sit beside it."""
    if (s.stage or "multitask") == "multitask" and not c.finetuned:
        return c.metrics
    return {**{f"multitask.{k}": v for k, v in c.metrics.items()},
            **{f"finetuned.{k}": v for k, v in c.finetuned.items()}}


def value_note(s: CentralStudy) -> str:
    """What a study's `value` column is."""
    stage, metric = s.stage or "multitask", s.primary_metric or "score"
    if s.source != schema.SOURCE_SWEEP:
        return f"value: {s.central_task} {metric}, {stage} stage"
    return (f"value: {s.central_task} {metric} at the best epoch of the {stage} stage"
            + ("; multitask.* and finetuned.*: each stage's own scores"
               if stage == "finetuned" else ""))


def _value_text(path: str, value) -> str:
    if isinstance(value, list):  # a task group: the auxiliary tasks trained with the central
        return "+".join(value) if value else "(alone)"
    return value if isinstance(value, str) else f"{value:g}" if isinstance(value, float) \
        else str(value)


def _point_text(point: dict) -> str:
    return " ".join(f"{'group' if k == schema.T_GROUP_PATH else k}={_value_text(k, v)}"
                    for k, v in point.items())


def point_rows(studies: list[CentralStudy]) -> list[dict]:
    """Studies that search more than the central weight: each central task's best point (mean
    over seeds of COMPLETE trials) and, for task grouping, its gain over the central task
    trained alone (the same point otherwise)."""
    import statistics

    rows = []
    for s in studies:
        values: dict[str, list[float]] = {}
        points: dict[str, dict] = {}
        for c in s.cells:
            if c.point and c.state == "complete" and c.value is not None:
                key = json.dumps(c.point, sort_keys=True)
                values.setdefault(key, []).append(c.value)
                points[key] = c.point
        if not values:
            continue
        arm_scores, names = _arm_scores(s)
        scores, paired = by_seed(arm_scores)
        verdict = judge(scores, paired, maximize=s.maximize, kind="point", names=names)
        # The verdict's best (its tie-break too), so that every line names the same point.
        best = next(k for k in values if _point_text(points[k]) == verdict.best)
        mean = statistics.fmean(values[best])
        row = {"central_task": s.central_task, "primary_metric": s.primary_metric,
               "best": verdict.show(verdict.best), "mean": mean,
               "sd": statistics.stdev(values[best]) if len(values[best]) > 1 else None,
               "seeds": len(values[best]), "points_done": len(values),
               "clear": "yes" if verdict.clear else "no",
               "verdict": verdict.text(s.primary_metric or "score")}
        group = schema.T_GROUP_PATH
        if group in points[best]:
            alone = {**points[best], group: []}
            key = json.dumps(alone, sort_keys=True)
            row["best_group"] = _value_text(group, points[best][group])
            if key in values:
                alone_mean = statistics.fmean(values[key])
                row["alone"], row["gain"] = alone_mean, mean - alone_mean
        rows.append(row)
    return rows


def _arm_scores(s: CentralStudy) -> tuple[list[tuple[str, int | None, float]], dict]:
    """(point label, seed, score) of the COMPLETE cells with a point, each arm of weights that
    trained the same updates counted once, under its smallest weight; and the arms' names."""
    from weightsearch.studies.treatments import rest_of

    stand_ins = {(a.rest, a.weights[0]): a for a in s.arms}
    members = {(a.rest, w) for a in s.arms for w in a.weights[1:]}
    scores, names = [], {}
    for c in s.cells:
        if not c.point or c.state != "complete" or c.value is None:
            continue
        where = (rest_of(c.point), c.weight)
        if where in members:
            continue
        label = _point_text(c.point)
        scores.append((label, c.seed, c.value))
        if where in stand_ins:
            shown = {**c.point, schema.T_CENTRAL_WEIGHT_PATH: stand_ins[where].label}
            names[label] = _point_text(shown)
    return scores, names


def best_rows(studies: list[CentralStudy]) -> list[dict]:
    rows = []
    for s in studies:
        b, verdict = s.best, s.verdict
        rows.append({
            "central_task": s.central_task, "train_size": s.train_size,
            "primary_metric": s.primary_metric, "stage": s.stage or "multitask",
            "best_weight": b.weight if b else None,
            "mean": b.mean if b else None, "sd": b.sd if b else None, "seeds": b.n if b else 0,
            "min": b.low if b else None, "max": b.high if b else None,
            "weights_done": len(s.curve), "clear": "yes" if verdict.clear else "no",
            # the weights the best stands for, where clipping made them one treatment
            **({"same_updates": verdict.names[verdict.best]}
               if verdict.best in verdict.names else {}),
        })
    return rows


def _verdict_text(s: CentralStudy) -> str:
    return "; ".join(filter(None, [s.majority_text(),
                                  s.verdict.text(s.primary_metric or "score")]))


def _frame(rows: list[dict]):
    import pandas as pd

    return pd.DataFrame(rows)


def _table(rows: list[dict]) -> str:
    if not rows:
        return "(none)"
    df = _frame(rows).dropna(axis="columns", how="all")
    for col in df.columns:  # lists and dicts print compactly
        if df[col].map(lambda v: isinstance(v, list | dict)).any():
            df[col] = df[col].map(_compact)
    df = df.astype(object).where(df.notna(), "-")
    return df.to_string(index=False, formatters={
        c: (lambda v: v if isinstance(v, str) else f"{v:.6g}") for c in df.columns
        if c not in ("central_weight", "seed", "train_size")})


def _cell(x) -> str:
    if x is None:
        return "-"
    return ("yes" if x else "no") if isinstance(x, bool) else f"{x:g}"


def _compact(v) -> str:
    if isinstance(v, dict):
        return " ".join(f"{k}:{_cell(x)}" for k, x in v.items())
    if isinstance(v, list):
        return ",".join(map(str, v))
    return str(v)


def render(studies: list[CentralStudy], name: str | None, fmt: str,
           budget: int | None = None, gpu: GpuUse | None = None) -> str:
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    grouped = {s.name: budget_report(s, budget) for s in studies if s.grouping and name}
    if budget is not None and not grouped:
        raise ConfigError("--budget: applies to a grouping study (search.space.tasks: "
                          "{groups_of: [...]}) given by name; leave it out here")
    if grouped:
        return _render_grouped(studies, name or "", fmt, grouped)
    if name is None:
        return _render_overview(studies, fmt)
    methods = {s.name: method_rows(s) for s in studies if is_methods_study(s)}
    # A study that compares methods: its methods table says which is best, not a best point.
    # The best-weight table pools every point of a weight: only where the weight is all that
    # varies (other searches have the best-point table).
    from weightsearch.studies.treatments import rest_of

    plain = [s for s in studies if all(not rest_of(c.point) for c in s.cells)]
    cells, best = cell_rows(studies, gpu), best_rows(plain)
    points = point_rows([s for s in studies if s.name not in methods])
    if fmt == "json":
        best_point = {r["central_task"]: r for r in points}
        out = [{**s.summary(), "curve": [vars(w) for w in s.curve],
                "cells": [r for r in cells if r["central_task"] == s.central_task],
                **({"best_point": best_point[s.central_task]}
                   if s.central_task in best_point else {}),
                **(comparison(s, methods[s.name]) if s.name in methods else {})}
               for s in studies]
        return json.dumps({"study": name, "central_tasks": out}, indent=2)
    if fmt == "csv":
        compared = [r for rows in methods.values() for r in rows]
        if compared:  # a comparison of methods: its rows (`export` writes the cells)
            return _frame(compared).to_csv(index=False)
        return _frame(cell_rows(studies, gpu, full=True)).to_csv(index=False)
    return _render_text(studies, plain, methods, cells, best, points)


def _render_overview(studies: list[CentralStudy], fmt: str) -> str:
    """Every study in the database, one row per study."""
    rows = overview(studies)
    if fmt == "json":
        return json.dumps({"studies": rows}, indent=2)
    if fmt == "csv":
        df = _frame(rows)
        for col in ("central_tasks", "best_weights", "best_clear"):
            if col in df:
                df[col] = df[col].map(_compact)
        # Counts stay whole numbers: a study without `not_started` (an import, an adaptive
        # search) would make the column float (0.0) for every row; it is left empty instead.
        for col in (*COUNT_KEYS, "not_started"):
            if col in df:
                df[col] = df[col].astype("Int64")
        return df.to_csv(index=False)
    return (_table(rows) + _notes_text(studies)) if rows else "no studies yet"


def _notes_text(studies: list[CentralStudy]) -> str:
    """The studies' notes on stored values left out (`CentralStudy.notes`), one a line."""
    return "".join(f"\nnote: {n}" for s in studies for n in s.notes)


RATE_NOTE = ("its searched weight is its sampling rate (weight_acts_on: sampling): the clip "
             "cuts SIWLM's loss weight of 1, never the rate, so acts_below and saturates_* "
             "describe the loss weight and no weight of this grid is one treatment by them")


def _render_text(studies: list[CentralStudy], plain: list[CentralStudy],
                 methods: dict[str, list[dict]], cells: list[dict], best: list[dict],
                 points: list[dict]) -> str:
    """One study as text: its cells, the best weight (where the weight alone varies), the
    clipping, the treatments, the best point, the methods and the groups."""
    from weightsearch.studies.treatments import clip_rows, partial_text

    parts = [f"{s.name} ({s.source}, {s.counts['complete']} complete; {value_note(s)}):\n"
             + _table([r for r in cells if r["central_task"] == s.central_task])
             + _notes_text([s]) for s in studies]
    if any(s.curve for s in plain) or not points:
        parts.append("best weight per central task (mean over seeds, COMPLETE trials; clear: "
                     "separated from every other weight, 95% t-interval):\n" + _table(best)
                     + "".join(f"\n{s.central_task}: {_verdict_text(s)}"
                               for s in plain if s.curve))
    clipping = [r for s in studies for r in clip_rows(s)]
    if clipping:
        parts.append("gradient clipping of the central task (clip_share: its updates clipped, "
                     "all seeds; median_norm: of its unweighted gradient; acts_below: the "
                     "weight above which its median update is clipped; saturates_in_focus, "
                     "saturates_off_focus: the weight above which every in-focus, every "
                     "off-focus update is clipped, median over seeds):\n"
                     + _table(clipping)
                     + "".join(f"\n{s.central_task}: {RATE_NOTE}" for s in studies
                               if s.clipping.startswith("rate-"))
                     + "".join(f"\n{s.central_task}: {text}" for s in studies
                               if (text := partial_text(s))))
    parts.extend(f"{s.central_task}: {a.text()}" for s in studies for a in s.arms)
    if points:
        parts.append("best point per central task (mean over seeds, COMPLETE trials; clear: "
                     "separated from every other point, 95% t-interval):\n"
                     + _table([{k: v for k, v in r.items() if k != "verdict"} for r in points])
                     + "".join(f"\n{r['central_task']}: {r['verdict']}" for r in points))
    for s in studies:
        if s.name in methods:
            parts.append(_methods_text(s, methods[s.name]))
    for r in points:
        if "best_group" in r:
            gain = (f", {r['gain']:+.4f} over {r['central_task']} alone" if "gain" in r
                    else "")
            word = "best group" if r["clear"] == "yes" else "highest-scoring group (not separated)"
            parts.append(f"{word} for {r['central_task']}: {r['best_group']} "
                         f"({r['primary_metric']} {r['mean']:.4f}{gain})")
    return "\n\n".join(parts)


def _methods_text(s: CentralStudy, rows: list[dict]) -> str:
    shown = [{**{k: v for k, v in r.items() if k not in ("central_task", "primary_metric")},
              "best": "yes" if r["best"] else ""} for r in rows]
    return (f"methods for {s.central_task}, compute-fair ({s.primary_metric or 'score'}: mean "
            "and 95% t-interval over seeds; diff: seed-paired difference from the best method "
            f"with its 95% interval; {study_epochs_note(s)}; best w: chosen on the same seeds, "
            "optimistic; search: the weight chosen on the other seeds):\n"
            + _table(shown) + f"\n{conclusion(rows, s.maximize)}")


def _render_grouped(studies: list[CentralStudy], name: str, fmt: str,
                    grouped: dict[str, BudgetReport]) -> str:
    """A budgeted grouping study: its networks (cells), then per budget the groups chosen."""
    cells = cell_rows(studies)
    if fmt == "json":
        # no central weight: the summary's best-weight fields would say "no finished trial"
        out = [{**{k: v for k, v in s.summary().items() if not k.startswith("best")
                   and k != "verdict"},
                "cells": [r for r in cells if r["central_task"] == s.central_task],
                **({"grouping": budget_dict(grouped[s.name])} if s.name in grouped else {})}
               for s in studies]
        return json.dumps({"study": name, "central_tasks": out}, indent=2)
    if fmt == "csv":
        return _frame([{"study": n, **r} for n, rep in grouped.items()
                       for r in budget_rows(rep)]).to_csv(index=False)
    parts = []
    for s in studies:
        rep = grouped[s.name]
        mine = [{k: v for k, v in r.items() if k not in ("central_task", "central_weight")}
                for r in cells if r["central_task"] == s.central_task]
        parts.append(f"{s.name} ({s.source}, {s.counts['complete']} complete; one network "
                     "per group, value: the mean of its tasks' primary metrics):\n"
                     + _table(mine))
        unusable = unusable_text(rep)
        parts.append("networks per budget (the groups that serve every task with the highest "
                     "total; singles: one network per task; all: one network for every task):\n"
                     + _table(budget_rows(rep)) + "".join(f"\n{n}" for n in rep.notes)
                     + (f"\n{unusable}" if unusable else ""))
    return "\n\n".join(parts)


def plot(studies: list[CentralStudy], title: str, path: str | Path) -> Path:
    """Primary metric vs central weight, one panel per central task: every seed as a dot, mean
    +- 1 sd over seeds, the best weight marked (cf. the SIWLM paper's Fig. 3); studies.plots
    has the figure itself."""
    from weightsearch.studies.plots import plot_budget, plot_methods, plot_study

    grouped = [s for s in studies if s.grouping]
    if grouped:
        return plot_budget([budget_report(s) for s in grouped], title, path)
    if studies and all(is_methods_study(s) for s in studies):
        compared = [(s, rows) for s in studies if (rows := method_rows(s))]
        if not compared:
            raise ConfigError(f"--plot: {title} has no COMPLETE trials to plot yet")
        return plot_methods(compared, title, path)
    shown = [s for s in studies if s.curve]
    if not shown:
        raise ConfigError(f"--plot: {title} has no COMPLETE trials to plot yet")
    return plot_study(shown, title, path)


def inspect(storage_url: str, name: str | None = None, fmt: str = "table",
            plot_path: str | None = None, budget: int | None = None) -> str:
    """The text `weightsearch inspect` prints (and the plot it writes, when asked)."""
    from weightsearch.studies.reading import open_quiet, sqlite_file_missing

    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if sqlite_file_missing(storage_url):
        raise StorageError(
            f"no study database at {shown_url(storage_url)}; pass --storage URL (or set "
            "$WEIGHTSEARCH_STORAGE), or create one with `weightsearch launch` or "
            "`weightsearch import`"
        )
    storage = open_quiet(storage_url)
    gpu = None
    if name is None:
        studies = read_all(storage)
    else:
        studies = [read_central(storage, n) for n in resolve(storage, storage_url, name)]
        gpu = gpu_use(storage, studies)
    studies = mark_driver_gone(storage, studies)
    text = render(studies, name, fmt, budget, gpu)
    gone: dict[str, int] = {}
    for s in studies:
        if s.counts.get("driver_gone"):
            gone[s.study] = gone.get(s.study, 0) + s.counts["driver_gone"]
    if gone and fmt == "table":
        text += "".join(
            f"\nnote: {n} cell(s) of {study} show driver_gone: they are RUNNING in the database "
            "but no driver holds their lease (it stopped, or lost its Ray cluster or machine); "
            f"`weightsearch resume {study}` continues them from their last checkpoints"
            for study, n in sorted(gone.items()))
    if plot_path:
        plot(studies, name or "all studies", plot_path)
    return text
