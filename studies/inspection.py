"""`weightsearch inspect`: progress of every study, or the cells and best weights of one."""

from __future__ import annotations

import json
from pathlib import Path

from studies import schema
from studies.reading import CentralStudy, read_all, read_central, resolve
from weightsearch.errors import ConfigError, StorageError

FORMATS = ("table", "csv", "json")


def overview(studies: list[CentralStudy]) -> list[dict]:
    """One row per base study: progress counts over its central tasks and each task's best."""
    groups: dict[str, list[CentralStudy]] = {}
    for s in studies:
        groups.setdefault(schema.split_study_name(s.name)[0] or s.name, []).append(s)
    rows = []
    for base, members in sorted(groups.items()):
        counts = {k: sum(m.counts.get(k, 0) for m in members)
                  for k in ("complete", "running", "failed", "pending", "pruned")}
        rows.append({
            "study": base, "source": members[0].source,
            "central_tasks": [m.central_task for m in members], **counts,
            "best_weights": {m.central_task: (m.best.weight if m.best else None) for m in members},
        })
    return rows


def cell_rows(studies: list[CentralStudy]) -> list[dict]:
    rows = []
    for s in studies:
        for c in sorted(s.cells, key=lambda c: (c.weight is None, c.weight or 0, c.seed or 0)):
            rows.append({"central_task": s.central_task, "central_weight": c.weight,
                         "seed": c.seed, "state": c.state, "value": c.value, **c.metrics})
    return rows


def best_rows(studies: list[CentralStudy]) -> list[dict]:
    rows = []
    for s in studies:
        b = s.best
        rows.append({
            "central_task": s.central_task, "train_size": s.train_size,
            "primary_metric": s.primary_metric, "stage": s.stage or "multitask",
            "best_weight": b.weight if b else None,
            "mean": b.mean if b else None, "sd": b.sd if b else None, "seeds": b.n if b else 0,
            "min": b.low if b else None, "max": b.high if b else None,
            "weights_done": len(s.curve),
        })
    return rows


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


def _compact(v) -> str:
    if isinstance(v, dict):
        return " ".join(f"{k}:{'-' if x is None else f'{x:g}'}" for k, x in v.items())
    if isinstance(v, list):
        return ",".join(map(str, v))
    return str(v)


def render(studies: list[CentralStudy], name: str | None, fmt: str) -> str:
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if name is None:
        rows = overview(studies)
        if fmt == "json":
            return json.dumps({"studies": rows}, indent=2)
        if fmt == "csv":
            df = _frame(rows)
            for col in ("central_tasks", "best_weights"):
                if col in df:
                    df[col] = df[col].map(_compact)
            return df.to_csv(index=False)
        return _table(rows) if rows else "no studies yet"
    cells, best = cell_rows(studies), best_rows(studies)
    if fmt == "json":
        out = [{**s.summary(), "curve": [vars(w) for w in s.curve],
                "cells": [r for r in cells if r["central_task"] == s.central_task]}
               for s in studies]
        return json.dumps({"study": name, "central_tasks": out}, indent=2)
    if fmt == "csv":
        return _frame(cells).to_csv(index=False)
    parts = [f"{s.name} ({s.source}, {s.counts['complete']} complete):\n"
             + _table([r for r in cells if r["central_task"] == s.central_task])
             for s in studies]
    parts.append("best weight per central task (mean over seeds, COMPLETE trials):\n"
                 + _table(best))
    return "\n\n".join(parts)


def plot(studies: list[CentralStudy], title: str, path: str | Path) -> Path:
    """Primary metric vs central weight, one panel per central task: every seed as a dot, the
    mean over seeds as a line, the min-max over seeds as a band (cf. the SIWLM paper's Fig. 3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [s for s in studies if s.curve]
    if not shown:
        raise ConfigError(f"--plot: {title} has no COMPLETE trials to plot yet")
    ncols = min(4, len(shown))
    nrows = -(-len(shown) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 3.0 * nrows), squeeze=False)
    for ax, s in zip(axes.flat, shown, strict=False):
        w = [c.weight for c in s.curve]
        ax.fill_between(w, [c.low for c in s.curve], [c.high for c in s.curve], alpha=0.2,
                        label="min-max over seeds")
        ax.plot(w, [c.mean for c in s.curve], marker="o", label="mean")
        pts = [(c.weight, c.value) for c in s.cells
               if c.state == "complete" and c.value is not None]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=10, color="black", alpha=0.5,
                   label="seeds")
        if s.best:
            ax.axvline(s.best.weight, color="grey", linestyle=":", label="best")
        ax.set_title(f"{s.central_task} (n={s.train_size or '?'})")
        ax.set_xlabel("central weight")
        ax.set_ylabel(f"{s.primary_metric or 'value'} ({s.stage or 'multitask'} stage)")
        ax.set_xticks(w)
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def inspect(storage_url: str, name: str | None = None, fmt: str = "table",
            plot_path: str | None = None) -> str:
    """The text `weightsearch inspect` prints (and the plot it writes, when asked)."""
    from studies.reading import open_quiet, sqlite_file_missing

    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if sqlite_file_missing(storage_url):
        raise StorageError(
            f"no study database at {storage_url}; pass --storage URL (or set "
            "$WEIGHTSEARCH_STORAGE), or create one with `weightsearch launch` or "
            "`weightsearch import`"
        )
    storage = open_quiet(storage_url)
    if name is None:
        studies = read_all(storage)
    else:
        studies = [read_central(storage, n) for n in resolve(storage, storage_url, name)]
    text = render(studies, name, fmt)
    if plot_path:
        plot(studies, name or "all studies", plot_path)
    return text
