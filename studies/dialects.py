"""What the study code knows about each database backend (SQLite, PostgreSQL, MySQL,
MariaDB): engine options, schema locks, the server's clock, and a SQLite URL's file."""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

# A server database: `pool_pre_ping` replaces connections that died while a trial trained for an
# hour; `pool_recycle` retires them before server-side idle timeouts.
_SERVER_ENGINE = {"pool_pre_ping": True, "pool_recycle": 1800}


@dataclass(frozen=True)
class Dialect:
    """What the study code needs to know about one database backend (SQLAlchemy's backend
    name: `sqlite`, `postgresql`, ...); every backend-specific branch reads it from here."""

    name: str
    engine: Mapping = field(default_factory=lambda: dict(_SERVER_ENGINE))  # engine options
    # The database is a local file (SQLite): its folder must exist, a flock on it serialises
    # schema creation, and a new file is put in WAL mode.
    file: bool = False
    # Schema creation serialised by a server-side lock: (take, give back) SQL on one connection,
    # `:k` the lock's name or number (`storage.schema_lock`); None: no lock (a file backend flocks).
    lock_sql: tuple[str, str] | None = None
    now_sql: str | None = None  # the server's clock in Unix seconds (None: the driver's clock)
    # Partial indexes (`CREATE INDEX ... WHERE`): the trials of one cell are then found by an
    # index lookup (`sweep/lookup.py`); without them, by a scan of the attribute table.
    partial_indexes: bool = False

    def engine_kwargs(self) -> dict:
        return copy.deepcopy(dict(self.engine))


# A named lock, waited for up to 10 minutes (a schema is created in seconds).
_MYSQL_LOCK = ("SELECT GET_LOCK(:k, 600)", "SELECT RELEASE_LOCK(:k)")

DIALECTS: dict[str, Dialect] = {d.name: d for d in (
    # A long busy timeout, so that concurrent writers wait for the lock instead of failing
    # with 'database is locked'.
    Dialect("sqlite", engine={"connect_args": {"timeout": 120}}, file=True,
            now_sql="((julianday('now') - 2440587.5) * 86400.0)", partial_indexes=True),
    # connect_timeout (faults work): fail within seconds on an unreachable host instead of
    # waiting for the OS's TCP timeout (minutes).
    Dialect("postgresql", engine={**_SERVER_ENGINE, "connect_args": {"connect_timeout": 10}},
            lock_sql=("SELECT pg_advisory_lock(:k)", "SELECT pg_advisory_unlock(:k)"),
            now_sql="CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)",
            partial_indexes=True),
    Dialect("mysql", now_sql="UNIX_TIMESTAMP(NOW(6))", lock_sql=_MYSQL_LOCK),
    Dialect("mariadb", now_sql="UNIX_TIMESTAMP(NOW(6))", lock_sql=_MYSQL_LOCK),
)}


def dialect(name: str) -> Dialect:
    """The backend named `name` (SQLAlchemy's `get_backend_name()` or `engine.dialect.name`);
    any other backend gets the server defaults."""
    return DIALECTS.get(name) or Dialect(name)


def url_dialect(url: str) -> Dialect:
    """The backend of a study URL by its prefix (`sqlite:///...`, `postgresql+psycopg://...`),
    without parsing it: works on any string, a malformed URL included."""
    return next((d for d in DIALECTS.values() if url.startswith(d.name)), Dialect(""))


def engine_kwargs(url: str) -> dict:
    """SQLAlchemy engine options for a study URL (see `DIALECTS`)."""
    return url_dialect(url).engine_kwargs()


def sqlite_path(url: str) -> str | None:
    """The file of a SQLite study URL (`~` expanded), None for a server or in-memory one."""
    if not url_dialect(url).file:
        return None
    from sqlalchemy.engine import make_url

    database = make_url(url).database
    return None if database in (None, "", ":memory:") else os.path.expanduser(database)
