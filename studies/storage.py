"""Open the study database: one place that knows about SQLite locking and PostgreSQL idleness."""

from __future__ import annotations

import os
from pathlib import Path

from weightsearch.errors import StorageError

DEFAULT_STORAGE = "sqlite:///weightsearch.db"
ENV_STORAGE = "WEIGHTSEARCH_STORAGE"


def default_storage_url() -> str:
    return os.environ.get(ENV_STORAGE, DEFAULT_STORAGE)


def engine_kwargs(url: str) -> dict:
    """SQLAlchemy engine options for a study URL.

    PostgreSQL: `pool_pre_ping` replaces connections that died while a trial trained for an hour;
    `pool_recycle` retires them before server-side idle timeouts. SQLite: a long busy timeout so
    concurrent writers wait for the lock instead of failing with 'database is locked'.
    """
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 120}}
    return {"pool_pre_ping": True, "pool_recycle": 1800}


def check_url(url: str) -> None:
    """Reject a malformed URL, or a SQLite file in a missing folder, before connecting."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise StorageError(
            f"storage URL {url!r} is not a SQLAlchemy URL ({exc}); "
            "use e.g. sqlite:///weightsearch.db or postgresql+psycopg://user@host/db"
        ) from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        folder = Path(parsed.database).expanduser().resolve().parent
        if not folder.is_dir():
            raise StorageError(
                f"storage URL {url!r}: folder {folder} does not exist; create it or point "
                "--storage at an existing folder"
            )


def open_storage(url: str | None = None):
    """An Optuna RDBStorage for `url` (default: $WEIGHTSEARCH_STORAGE or ./weightsearch.db).

    Raises StorageError with the URL and the fix when the database cannot be reached.
    """
    import optuna
    import sqlalchemy.exc

    url = url or default_storage_url()
    check_url(url)
    try:
        return optuna.storages.RDBStorage(
            url,
            engine_kwargs=engine_kwargs(url),
            # A trial whose process died (SIGKILL, lost node) stops heartbeating; the next
            # launch or resume finds it and marks it FAIL instead of leaving it RUNNING.
            heartbeat_interval=60,
            grace_period=180,
        )
    except (sqlalchemy.exc.SQLAlchemyError, ImportError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StorageError(
            f"cannot open study storage {url!r}: {first}. Check that the database server is "
            "running and the URL (driver, host, port, database name) is right"
        ) from None
