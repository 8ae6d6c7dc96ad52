"""`weightsearch import`: external weight-search results (e.g. a paper's table) into the study DB.

The file is read and checked whole first (`weightsearch.studies.import_rows`; its format:
`weightsearch.studies.import_columns`). Then one Optuna study `<study>/<central_task>` per task
gets one COMPLETE trial per row, all of them written under hidden staging names and published
by one rename at the end, so an import that fails or is killed at any point leaves no study a
reader sees (`drop_abandoned`: the next import removes what it staged).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import warnings
from pathlib import Path
from typing import Any

from weightsearch.core.errors import (
    DataError,
    DiskFull,
    StorageError,
    WeightsearchError,
    causes,
)
from weightsearch.studies import schema
from weightsearch.studies.bulk import engine_of
from weightsearch.studies.claims import Claims, lease_states
from weightsearch.studies.import_columns import ImportRow
from weightsearch.studies.import_rows import parse_rows
from weightsearch.studies.urls import shown_url

A_IMPORTED_FROM = "imported_from"


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
