"""Relative paths in a run-config file start at the file's own folder.

So a config works from any working directory, and a copied example keeps pointing at its data.
Values given with `--set` or in a mapping (a sweep's trial config) are not touched here: they
start at the working directory, as paths on a command line do. Task files (`train_file`,
`dev_files`) stay relative to `data_dir`, which is itself anchored.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# Run-level settings that hold a path (the encoder only when written as one: ./ or ../).
PATH_KEYS = ("data_dir", "output_dir", "cache_dir", "init_from")


def anchored(value: Any, base: Path) -> Any:
    """`value` joined to `base` when it is a relative path; anything else as it is."""
    if not isinstance(value, str) or not value.strip():
        return value
    path = Path(value).expanduser()
    if path.is_absolute():
        return str(path)
    return os.path.normpath(base / path)


def absolute(value: Any) -> Any:
    """A path setting as an absolute path (from the working directory), so that the config
    saved in the output folder reads back the same from anywhere."""
    return anchored(value, Path.cwd())


def anchor_paths(raw: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """`raw` (a config file's settings) with its relative paths joined to `base`."""
    out = dict(raw)
    for key in PATH_KEYS:
        if key in out:
            out[key] = anchored(out[key], base)
    encoder = out.get("encoder")
    if isinstance(encoder, str) and encoder.startswith(("./", "../")):
        out["encoder"] = anchored(encoder, base)
    tasks = out.get("tasks")
    if isinstance(tasks, list):  # a task's own data_dir
        out["tasks"] = [{**t, "data_dir": anchored(t["data_dir"], base)}
                        if isinstance(t, Mapping) and "data_dir" in t else t for t in tasks]
    if "distill" in out:
        out["distill"] = anchor_teachers(out["distill"], base)
    if "tracking" in out:
        out["tracking"] = anchor_mlflow(out["tracking"], base)
    return out


def anchor_teachers(distill: Any, base: Path,
                    join: Callable[[str, Path], str] = anchored) -> Any:
    """A `distill` setting with its teacher runs (or soft-target files) joined to `base`."""
    teachers = distill.get("teachers") if isinstance(distill, Mapping) else None
    if not isinstance(teachers, Mapping):
        return distill

    def one(path: Any) -> Any:
        return join(path, base) if isinstance(path, str) and path.strip() else path

    return {**distill, "teachers": {
        task: [one(p) for p in paths] if isinstance(paths, list) else one(paths)
        for task, paths in teachers.items()}}


def anchor_mlflow(tracking: Any, base: Path,
                  join: Callable[[str, Path], str] = anchored) -> Any:
    """A `tracking` setting with its MLflow folder joined to `base`; a server URI stays."""
    uri = tracking.get("mlflow") if isinstance(tracking, Mapping) else None
    # A one-letter scheme is a Windows drive, i.e. a folder.
    if not isinstance(uri, str) or not uri.strip() or len(urlsplit(uri).scheme) > 1:
        return tracking
    return {**tracking, "mlflow": join(uri, base)}

