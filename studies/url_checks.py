"""Checks a study URL passes before anything connects: a SQLAlchemy URL whose driver is
installed, a SQLite file in an existing folder, and, where a command writes, a database that
outlives the command and that this user may write."""

from __future__ import annotations

import os
from pathlib import Path

from weightsearch.core.errors import StorageError
from weightsearch.core.files import path_problem
from weightsearch.studies.dialects import dialect, sqlite_path
from weightsearch.studies.urls import hide_secrets, parsed_url, shown_url


def check_url(url: str, write: bool = False) -> None:
    """Reject a malformed URL, or a SQLite file in a missing folder, before connecting.
    `write` (launch, resume, import): also an in-memory database, whose results would be gone
    at exit, and a read-only SQLite file, before anything starts."""
    from sqlalchemy.exc import NoSuchModuleError

    parsed = parsed_url(url)
    if parsed is None:  # SQLAlchemy's own message would quote the URL, secret and all
        raise StorageError(
            f"storage URL {shown_url(url)!r} is not a SQLAlchemy URL; use e.g. "
            "sqlite:///weightsearch.db or postgresql+psycopg://user@host/db"
        )
    try:
        parsed.get_dialect().import_dbapi()
    except (ImportError, NoSuchModuleError) as exc:
        raise StorageError(
            f"storage URL {shown_url(url)!r}: the Python driver for {parsed.drivername!r} is "
            f"not installed ({hide_secrets(str(exc), url)}); install it into this environment "
            "(e.g. `pip install pymysql` and a mysql+pymysql:// URL, or `pip install psycopg` "
            "for postgresql+psycopg://)"
        ) from None
    if dialect(parsed.get_backend_name()).file and not in_memory(url):
        if (problem := path_problem(parsed.database, "storage (its SQLite file)")) is not None:
            raise StorageError(problem)
        folder = Path(os.path.realpath(Path(parsed.database).expanduser())).parent
        if not folder.is_dir():
            raise StorageError(
                f"storage URL {shown_url(url)!r}: folder {folder} does not exist; create it or "
                "point --storage at an existing folder"
            )
    if write:
        check_writable(url)


def in_memory(url: str) -> bool:
    """Whether `url` is an in-memory SQLite database (`sqlite://`, `sqlite:///:memory:`, a
    `file::memory:` or `mode=memory` URI): it vanishes when the process exits."""
    parsed = parsed_url(url)
    if parsed is None or not dialect(parsed.get_backend_name()).file:
        return False
    database = parsed.database or ""
    return (database in ("", ":memory:") or database.startswith("file::memory:")
            or "mode=memory" in database or parsed.query.get("mode") == "memory")


def check_persistent(url: str) -> None:
    """Refuse an in-memory database where results are written (launch, resume, import, serve):
    each would report success and lose everything at exit."""
    if in_memory(url):
        raise StorageError(
            f"--storage {shown_url(url)!r} is an in-memory database: it is gone when this "
            "command exits, and every result with it; give a file, e.g. --storage "
            "sqlite:///weightsearch.db (or a PostgreSQL URL)"
        )


def check_writable(url: str) -> None:
    """Refuse a database a command would write to but cannot keep: in memory, or read-only."""
    check_persistent(url)
    reason = sqlite_read_only(url)
    if reason is not None:
        raise StorageError(
            f"the database {sqlite_path(url)} is read-only ({reason}); copy it somewhere "
            "writable and pass --storage sqlite:///<the copy>, or make the file and its folder "
            "writable for this user (reading commands such as inspect, recommend and export "
            "work on it as it is)"
        )


def sqlite_read_only(url: str) -> str | None:
    """Why this process cannot write the SQLite file of `url` (or create it), None when it can
    (or `url` is no SQLite file). SQLite writes a journal (-journal, or -wal and -shm) beside
    the file, so its folder must be writable too."""
    path = sqlite_path(url)
    if path is None:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    exists = os.path.exists(path)
    try:
        mounted_ro = bool(os.statvfs(path if exists else folder).f_flag & os.ST_RDONLY)
    except OSError:  # a missing folder: check_url names it
        return None
    if mounted_ro:
        return "its file system is mounted read-only"
    if exists and not os.access(path, os.W_OK):
        return "this user may not write the file"
    if not os.access(folder, os.W_OK):
        return (f"this user may not write its folder {folder}, where SQLite keeps the "
                "file's journal")
    return None

