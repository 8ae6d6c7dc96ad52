"""The checks `weightsearch launch|resume` make before their first write, made by the POST
routes before they answer: a study the command would refuse (a missing train file, a label
outside its task's set, an imported study to resume) gets its message as a 4xx at once,
instead of a 202 and a job slot for a job that fails a second later.

They are the command's own functions (`weightsearch.sweep.study_db`), run in a worker thread
so that the event loop keeps answering, within CHECK_TIMEOUT_S, and at most CHECK_SLOTS at
once: a check that outlives its answer still holds its slot, so hung reads cannot pile up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import HTTPException

from weightsearch.core.errors import StorageError
from weightsearch.service.db_calls import in_daemon_thread

if TYPE_CHECKING:
    from weightsearch.sweep.spec import StudySpec

CHECK_TIMEOUT_S = 60.0  # reading a GLUE-sized train file takes a few seconds
CHECK_SLOTS = 2
_slots = threading.BoundedSemaphore(CHECK_SLOTS)
T = TypeVar("T")


def check_launch(spec: StudySpec, url: str) -> None:
    """What `launch` checks before its first write, past the study file itself: the storage
    takes writes, and every central task's data reads (files present, labels in the set)."""
    from weightsearch.studies.url_checks import check_url
    from weightsearch.sweep import study_db

    _storage_checked(check_url, url, write=True)
    for central in spec.central_tasks:
        study_db.describe(spec, central)


def check_resume(name: str, storage: Any, url: str) -> None:
    """What `resume` checks before its first write: the study holds the study file it was
    launched with (an imported study, or one another tool made, holds none), that file is
    still valid here, its data reads, and its stored studies match it."""
    from weightsearch.studies.url_checks import check_url
    from weightsearch.sweep import study_db
    from weightsearch.sweep.spec import load_study_spec

    _storage_checked(check_url, url, write=True)
    spec = load_study_spec(_storage_checked(study_db.stored_spec, name, storage, url))
    centrals = [study_db.describe(spec, c) for c in spec.central_tasks]
    study_db.existing_studies(spec, storage, url, centrals)


def _storage_checked(check: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """The command's storage checks raise StorageError (a 503 elsewhere: the database
    failed); here they mean this study or database cannot take the run: 409."""
    try:
        return check(*args, **kwargs)
    except StorageError as exc:
        raise HTTPException(409, str(exc)) from None


async def bounded(check: Callable[..., T], *args: Any) -> T:
    """`check(*args)` in a worker thread, within CHECK_TIMEOUT_S; 429 while CHECK_SLOTS
    checks run, 503 past the time (`db_calls.in_daemon_thread`)."""
    busy = HTTPException(429, "the server is checking other studies' data; retry in a few "
                         "seconds", headers={"Retry-After": "5"})
    late = HTTPException(503, f"checking the study's data took over {CHECK_TIMEOUT_S:.0f} s "
                         "(its files are very large, or their disk is slow); run `weightsearch "
                         "launch` (or resume) on the server instead")
    return await in_daemon_thread(check, args, _slots, CHECK_TIMEOUT_S, busy, late)
