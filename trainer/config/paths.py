"""Relative paths in a run config start at a folder the reader names, once, in one function.

A run-config file's paths start at the file's own folder, so a config works from any working
directory and a copied example keeps pointing at its data. A study file's `train:` template
starts at the study file's folder, except for values given with `--set`, which start at the
working directory as paths on a command line do (the sweep passes a per-setting base). Values
given in a mapping (a sweep's trial config) are not touched. Task files (`train_file`,
`dev_files`) stay relative to `data_dir`, which is itself anchored.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from weightsearch.core.files import path_problem

# Run-level settings that hold a path; the encoder too when it names a local folder.
PATH_KEYS = ("data_dir", "output_dir", "cache_dir", "init_from")

Join = Callable[[str, Path], str]
Base = Path | Callable[[str], Path]  # one folder, or the folder for a setting's dotted key


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


def local_encoder(encoder: Any, base: Path) -> bool:
    """Whether an `encoder` value names a folder rather than a model id such as `org/name`:
    written as a path (`./`, `../`, `~`, `/`, any leading dot) or an existing folder."""
    if not isinstance(encoder, str) or not encoder.strip():
        return False
    return encoder.startswith((".", "~", "/")) or (base / Path(encoder).expanduser()).is_dir()


def anchor_paths(raw: Mapping[str, Any], base: Base, join: Join = anchored) -> dict[str, Any]:
    """`raw` (a run config's settings) with its relative paths joined by `join` to `base`, or
    to `base(key)` for each setting (`data_dir`, `encoder`, `tasks`, `distill`,
    `tracking.mlflow`, ...)."""
    at: Callable[[str], Path] = base if callable(base) else (lambda _key: base)

    def one(value: Any, key: str) -> Any:
        return join(value, at(key)) if isinstance(value, str) and value.strip() else value

    out = dict(raw)
    for key in PATH_KEYS:
        if key in out:
            out[key] = one(out[key], key)
    if local_encoder(out.get("encoder"), at("encoder")):
        out["encoder"] = one(out["encoder"], "encoder")
    tasks = out.get("tasks")
    if isinstance(tasks, list):  # a task's own data_dir
        out["tasks"] = [{**t, "data_dir": one(t["data_dir"], "tasks")}
                        if isinstance(t, Mapping) and "data_dir" in t else t for t in tasks]
    if "distill" in out:
        out["distill"] = _anchor_teachers(out["distill"], lambda p: one(p, "distill"))
    if "tracking" in out:
        out["tracking"] = _anchor_mlflow(out["tracking"], lambda p: one(p, "tracking.mlflow"))
    return out


def _anchor_teachers(distill: Any, one: Callable[[Any], Any]) -> Any:
    """A `distill` setting with its teacher runs (or soft-target files) anchored."""
    teachers = distill.get("teachers") if isinstance(distill, Mapping) else None
    if not isinstance(teachers, Mapping):
        return distill
    return {**distill, "teachers": {
        task: [one(p) for p in paths] if isinstance(paths, list) else one(paths)
        for task, paths in teachers.items()}}


def _anchor_mlflow(tracking: Any, one: Callable[[Any], Any]) -> Any:
    """A `tracking` setting with its MLflow folder anchored; a server URI stays."""
    uri = tracking.get("mlflow") if isinstance(tracking, Mapping) else None
    # A one-letter scheme is a Windows drive, i.e. a folder.
    if not isinstance(uri, str) or not uri.strip() or len(urlsplit(uri).scheme) > 1:
        return tracking
    return {**tracking, "mlflow": one(uri)}


def unusable_paths(raw: Mapping[str, Any], prefix: str = "") -> list[str]:
    """`path_problem` of every path a run config's settings hold (those `anchor_paths`
    anchors, the encoder too), each named by its setting (`prefix` before it, e.g. "train.")."""
    found: list[tuple[str, Any]] = [(key, raw.get(key)) for key in (*PATH_KEYS, "encoder")]
    tasks = raw.get("tasks")
    if isinstance(tasks, list):
        found += [(f"tasks[{i}].data_dir", t.get("data_dir")) for i, t in enumerate(tasks)
                  if isinstance(t, Mapping)]
    distill = raw.get("distill")
    teachers = distill.get("teachers") if isinstance(distill, Mapping) else None
    if isinstance(teachers, Mapping):
        for task, paths in teachers.items():
            for i, path in enumerate(paths if isinstance(paths, list) else [paths]):
                found.append((f"distill.teachers.{task}[{i}]", path))
    tracking = raw.get("tracking")
    if isinstance(tracking, Mapping):
        found.append(("tracking.mlflow", tracking.get("mlflow")))
    return [problem for key, value in found
            if (problem := path_problem(value, prefix + key)) is not None]


def writable_folder_problem(path: str | os.PathLike, key: str) -> str | None:
    """Why `path` cannot be a folder this run writes (None when it can): it is a file, lies
    under a file, or its nearest existing folder refuses a new entry. Probed with a temporary
    folder that is removed at once, so nothing is left when another setting is refused."""
    target = Path(path).expanduser()
    if target.exists() and not target.is_dir():
        return f"{key}: {target} is a file, not a folder; choose a folder path"
    existing = target
    while not existing.exists():
        if existing.is_symlink():  # it does not resolve: dangling, or a loop of links
            return (f"{key}: {existing} is a symbolic link that leads nowhere (a dangling link "
                    "or a loop of links); point it at a folder or choose another path")
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        return f"{key}: {existing} is a file, so {target} cannot be a folder; choose another path"
    import tempfile

    try:
        os.rmdir(tempfile.mkdtemp(prefix=".weightsearch-probe-", dir=existing))
    except OSError as exc:
        return (f"{key}: cannot create folders in {existing} ({exc.strerror or exc}); choose a "
                "folder you can write")
    return None
