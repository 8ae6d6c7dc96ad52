"""Failures of the study database, each in one message with its fix: a driver's error
(a damaged file, a full disk, a lock held too long, a server gone), and a SQLite file deleted
or replaced while a command wrote to it."""

from __future__ import annotations

import os
from collections.abc import Sequence

from weightsearch.core.errors import StorageError, causes
from weightsearch.studies.dialects import sqlite_path
from weightsearch.studies.urls import hide_secrets, shown_url

# What a storage failure is, by the words its driver uses, and what to do about it.
_FAILURES = (
    (("malformed", "not a database", "corrupt"),
     "is damaged ({cause})",
     "check it with `sqlite3 FILE 'PRAGMA integrity_check'` and restore it from a backup, or "
     "recover it into a new file with `sqlite3 FILE .recover | sqlite3 NEW`"),
    (("database or disk is full", "no space left", "disk full"),
     "cannot be written: its disk is full ({cause})",
     "free space on that disk, then run the command again (`weightsearch resume` continues a "
     "study)"),
    (("readonly", "read-only", "permission denied"),
     "cannot be written ({cause})",
     "make the file and its folder writable for this user, then run the command again"),
    (("locked", "busy"),
     "is locked by another process ({cause})",
     "wait for it to finish or stop it, then run the command again"),
    (("could not connect", "connection refused", "server closed", "timeout expired",
      "connection to server", "terminating connection", "name or service not known"),
     "cannot be reached ({cause})",
     "check that the database server is running and answers at that address, then run "
     "the command again"),
)


def storage_failure(exc: BaseException, url: str | None,
                    opened: bool = True) -> StorageError | None:
    """The one message for a failure of the study database anywhere in `exc`'s chain (a
    damaged file, a full disk, a lock held too long, a server gone), or None when `exc` is no
    storage failure. `opened=False`: the database was being opened, so a missing SQLite file
    was never there (not "deleted")."""
    import sqlite3

    import sqlalchemy.exc
    from optuna.exceptions import StorageInternalError

    kinds = (sqlite3.DatabaseError, sqlalchemy.exc.DatabaseError,
             sqlalchemy.exc.OperationalError, sqlalchemy.exc.TimeoutError, StorageInternalError)
    chain = list(causes(exc))
    if not any(isinstance(e, kinds) for e in chain):
        return None
    root = next((e for e in reversed(chain) if isinstance(e, sqlite3.Error | OSError)),
                chain[-1])
    # Secrets hidden before the cut, which could leave half of one unrecognised.
    cause = hide_secrets((str(getattr(root, "orig", None) or root).strip().splitlines()
                          or [""])[0], url)[:200]
    where = f"the study database {shown_url(url)}" if url else "the study database"
    path = sqlite_path(url) if url else None
    if opened and path is not None and not os.path.exists(path):  # SQLite says "readonly"
        return StorageError(f"{where} was deleted while this command ran ({cause}); restore "
                            "the file (the trials finished before are in it)")
    words = " ".join(str(e).lower() for e in chain)
    for needles, what, fix in _FAILURES:
        if any(n in words for n in needles):
            return StorageError(f"{where} {what.format(cause=cause)}; {fix}")
    return StorageError(f"{where} failed ({cause}); check it and run the command again")


def file_identity(url: str) -> tuple[int, int] | None:
    """(device, inode) of a SQLite study file, None for a server database or a missing file:
    what `check_same_file` compares against."""
    path = sqlite_path(url)
    try:
        found = os.stat(path) if path else None
    except OSError:
        return None
    return None if found is None else (found.st_dev, found.st_ino)


def check_same_file(url: str, identity: tuple[int, int] | None,
                    written: Sequence[str] = ()) -> None:
    """Raise StorageError when the SQLite file opened as `identity` is no longer the file at
    its path: deleted, or replaced. A process keeps writing to an unlinked file without an
    error, so its results would exist nowhere. `written`: the cells this command wrote
    results of, which the message names as lost."""
    path = sqlite_path(url)
    if identity is None or path is None:
        return
    try:
        found = os.stat(path)
    except FileNotFoundError:
        now = "was deleted"
    else:
        if (found.st_dev, found.st_ino) == identity:
            return
        now = "was replaced by another file"
    lost = ""
    if written:
        shown = ", ".join(written[:10]) + (f" and {len(written) - 10} more"
                                           if len(written) > 10 else "")
        lost = (f" The results of the {len(written)} cell(s) this command finished ({shown}) "
                "were written to the file that was there and may be missing from the one at "
                "the path now: a resume or a new launch trains whatever is missing.")
    raise StorageError(f"the study database {shown_url(url)} {now} while this command ran, "
                       f"so it stopped: no result is written where nobody can read it.{lost} "
                       "Restore the file if you have a copy (the trials finished before this "
                       "command are in it), then `weightsearch resume` the study; without one, "
                       "`weightsearch launch` the study file again")
