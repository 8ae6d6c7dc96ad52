"""Open the study database: one place that knows about SQLite locking and PostgreSQL idleness.

An Optuna RDBStorage whose operations retry brief outages (`weightsearch.studies.retries`), a
SQLite file in WAL mode, read-only where this process may not write it, and schema creation
serialised across processes."""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from weightsearch.core.errors import StorageError
from weightsearch.studies.dialects import dialect, engine_kwargs, sqlite_path, url_dialect
from weightsearch.studies.retries import call_retrying
from weightsearch.studies.storage_failures import storage_failure
from weightsearch.studies.url_checks import check_url, sqlite_read_only
from weightsearch.studies.urls import default_storage_url, hide_secrets, shown_url


def _read_only_engine(url: str) -> dict:
    """Engine options that open the SQLite file of `url` read-only: SQLite's `mode=ro` URI, so
    that no connection tries to create a journal. A WAL-mode reader also needs the -shm index;
    where it is missing and cannot be created, `immutable=1` reads the file as it stands. That
    is decided at each connection, and connections are not pooled: no -shm means no writer has
    the file open now, and a writer that opens it later makes one, which the next connection
    sees (an immutable connection held across writes could read a torn file)."""
    from sqlalchemy.pool import NullPool

    path = os.path.abspath(sqlite_path(url) or "")
    return {"creator": functools.partial(_connect_read_only, path), "poolclass": NullPool}


# The service's limits on a server database: statements and lock waits (enforced by the
# server), and waiting for a pooled connection (by SQLAlchemy).
SERVING_LIMITS = {"statement_timeout_ms": 10_000, "lock_timeout_ms": 5_000, "pool_timeout_s": 5}


def _serving(options: dict, url: str, serving: bool) -> dict:
    if not serving or url_dialect(url).file:
        return options
    out = {**options, "pool_timeout": SERVING_LIMITS["pool_timeout_s"]}
    if url_dialect(url).name == "postgresql":
        args = dict(out.get("connect_args", {}))
        args["options"] = (f"{args.get('options', '')} "
                           f"-c statement_timeout={SERVING_LIMITS['statement_timeout_ms']} "
                           f"-c lock_timeout={SERVING_LIMITS['lock_timeout_ms']}").strip()
        args["connect_timeout"] = min(int(args.get("connect_timeout", 10)), 5)
        out["connect_args"] = args
    return out


def _existing_file_engine(url: str) -> dict | None:
    """Engine options that open the SQLite file of `url` without ever creating it (SQLite's
    `mode=rw` URI), None for any other URL. `schema_lock` has made the file by then; a file
    deleted while a command runs must stay deleted, so that the command says so: a connection
    that silently made a new empty file would leave it writing where nobody reads."""
    path = sqlite_path(url)
    if path is None:
        return None
    options = engine_kwargs(url)
    timeout = options.pop("connect_args", {}).get("timeout", 120)
    return {**options, "creator": functools.partial(_connect_file, os.path.abspath(path),
                                                    "mode=rw", timeout)}


def _connect_read_only(path: str) -> sqlite3.Connection:
    """`immutable=1` only for a WAL-mode file (its header says so) whose -shm is missing and
    cannot be made: there no writer has it open now (a WAL writer keeps the -shm while
    connected), and a WAL writer's changes reach the file itself only at a checkpoint. A
    rollback-journal file (plain Optuna's, SQLite's default) never has a -shm, also while its
    owner writes in place: it is always read with shared locks (`mode=ro`), which a reader
    without write access to the folder can take on the file; a hot journal left by a crash
    then fails the read with SQLite's error instead of returning half a transaction."""
    immutable = (_wal_mode(path) and not os.access(os.path.dirname(path), os.W_OK)
                 and not os.path.exists(path + "-shm"))
    return _connect_file(path, "mode=ro" + ("&immutable=1" if immutable else ""))


def _wal_mode(path: str) -> bool:
    """Whether the SQLite file's header marks it WAL (bytes 18-19, the write and read format
    versions, are 2); False for a rollback-journal file or one that cannot be read."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    return len(header) == 20 and header[18] == 2 and header[19] == 2


def _connect_file(path: str, query: str, timeout: float = 120) -> sqlite3.Connection:
    """A connection to the SQLite file at `path` through a URI with `query` (its mode)."""
    from urllib.parse import quote

    # check_same_thread: threads share connections (the service reads from a thread pool), as
    # SQLAlchemy's own pool for a file lets them
    return sqlite3.connect(f"file:{quote(path)}?{query}", uri=True, timeout=timeout,
                           check_same_thread=False)


def probe_database(url: str, timeout_s: float) -> None:
    """Connect to `url` afresh (no pool) and run one trivial query, each step bounded by
    `timeout_s` where the driver allows it; raises what the driver raises. A SQLite file is
    opened read-only and never created."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    path = sqlite_path(url)
    if path is not None:
        if not os.path.exists(path):
            raise FileNotFoundError(f"no database file at {path}")
        sqlite_conn = _connect_file(os.path.abspath(path), "mode=ro", timeout=timeout_s)
        try:
            sqlite_conn.execute("SELECT 1").fetchone()
        finally:
            sqlite_conn.close()
        return
    options: dict[str, object] = {"poolclass": NullPool}
    if url_dialect(url).name == "postgresql":
        ms = int(timeout_s * 1000)
        options["connect_args"] = {"connect_timeout": max(1, int(timeout_s)),
                                   "options": f"-c statement_timeout={ms}"}
    engine = create_engine(url, **options)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1")).fetchone()
    finally:
        engine.dispose()


def open_storage(url: str | None = None, serving: bool = False):
    """An Optuna RDBStorage for `url` (default: $WEIGHTSEARCH_STORAGE or ./weightsearch.db).
    `serving` (the HTTP service): a server database's connections get a statement and lock
    timeout and the pool a checkout timeout (SERVING_LIMITS), so that a request waits on a slow
    database seconds, not forever.

    Raises StorageError with the URL and the fix when the database cannot be reached.
    """
    import sqlalchemy.exc

    url = url or default_storage_url()
    check_url(url)
    ours = _new_sqlite_file(url)
    # A SQLite file this process may not write (a read-only mount, a shared archive) is opened
    # read-only: reading works, and a write fails naming it instead of "unable to open".
    read_only = not ours and sqlite_read_only(url) is not None
    try:
        # Optuna creates its tables on first open; without the lock, processes opening a new
        # database together race on it ("table studies already exists").
        with schema_lock(url):
            storage = _resilient_class()(
                url,
                engine_kwargs=(_read_only_engine(url) if read_only
                               else _existing_file_engine(url)
                               or _serving(engine_kwargs(url), url, serving)),
                # A trial whose process died (SIGKILL, lost node) stops heartbeating; the next
                # launch or resume finds it and marks it FAIL instead of leaving it RUNNING.
                heartbeat_interval=60,
                grace_period=180,
            )
    except ImportError as exc:
        raise StorageError(
            f"cannot open study storage {shown_url(url)!r}: its database driver is not installed "
            f"({hide_secrets(str(exc), url)}); install it (e.g. pip install pymysql and use "
            "mysql+pymysql://), or use "
            "sqlite:/// or postgresql+psycopg://"
        ) from None
    except (sqlalchemy.exc.SQLAlchemyError, ValueError) as exc:
        failure = storage_failure(exc, url, opened=False)
        if failure is not None and "failed (" not in str(failure):  # a kind it names
            raise failure from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        first = hide_secrets(first, url)
        raise StorageError(
            f"cannot open study storage {shown_url(url)!r}: {first}. Check that the database "
            "server is running and the URL (driver, host, port, database name) is right"
        ) from None
    if dialect(storage.engine.dialect.name).file and not read_only and (ours or _in_wal(storage)):
        # A database file another tool made keeps its journal mode: WAL adds -wal/-shm files
        # beside it and stops older SQLite readers (or network file systems) from opening it.
        _use_sqlite_wal(storage)
    return storage


# Any fixed 64-bit number, the same in every weightsearch process: the key of the PostgreSQL
# advisory lock that serialises schema creation.
_SCHEMA_LOCK = 0x5745_4947_4854  # "WEIGHT"


@contextlib.contextmanager
def schema_lock(url: str) -> Iterator[None]:
    """Hold a lock, across processes and machines, while the study schema may be created.

    SQLite: an exclusive flock on the database file itself (created empty if missing, which
    SQLite reads as an empty database). PostgreSQL: a session advisory lock; MySQL and
    MariaDB: a named lock (`Dialect.lock_sql`). Other backends: no lock.
    """
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    backend = dialect(parsed.get_backend_name())
    if backend.file and parsed.database not in (None, "", ":memory:"):
        import fcntl

        try:
            handle = open(Path(parsed.database).expanduser(), "ab")  # noqa: SIM115
        except OSError:  # a read-only file: this process cannot create a schema there anyway
            yield
            return
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        return
    if backend.lock_sql is None:
        yield
        return
    take, give_back = backend.lock_sql
    # PostgreSQL's advisory locks take a number; named locks are server-wide, so the name
    # holds the database's.
    key = _SCHEMA_LOCK if backend.name == "postgresql" else f"weightsearch:{parsed.database}"
    engine = create_engine(url, poolclass=_null_pool(), **engine_kwargs(url))
    try:
        with engine.connect() as conn:
            conn.execute(text(take), {"k": key})
            try:
                yield
            finally:
                conn.execute(text(give_back), {"k": key})
    finally:
        engine.dispose()


def _null_pool():
    from sqlalchemy.pool import NullPool

    return NullPool


# --- SQLite in WAL mode ----------------------------------------------------------------------
# Readers (inspect, serve) do not block the sweep's writes, and concurrent writers queue on one
# lock instead of failing.


def _new_sqlite_file(url: str) -> bool:
    """Whether `url` names a SQLite file that does not exist yet (this call will create it)."""
    path = sqlite_path(url)
    return path is not None and (not os.path.exists(path) or os.path.getsize(path) == 0)


def _in_wal(storage) -> bool:
    from sqlalchemy import text

    with storage.engine.connect() as conn:
        return str(conn.execute(text("PRAGMA journal_mode")).scalar()).lower() == "wal"


def _set_wal(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
    finally:
        cursor.close()


def _use_sqlite_wal(storage) -> None:
    from sqlalchemy import event

    if storage.engine.url.database in (None, "", ":memory:"):
        return
    event.listen(storage.engine, "connect", _set_wal)
    # Connections opened while Optuna created the tables predate the listener: drop them.
    storage.engine.dispose()


# --- operations retried through brief outages (`weightsearch.studies.retries`) --------------
# RDBStorage methods that talk to the database (those Optuna's cached wrapper calls included).
# A retry after an error on commit could in principle repeat a write that did land (a new trial,
# a state change); the window is the instant of the commit itself, and each of these either
# tolerates a repeat or fails loudly instead of silently corrupting the study.
_RETRIED = (
    "create_new_study", "delete_study", "set_study_user_attr", "set_study_system_attr",
    "get_study_id_from_name", "get_study_name_from_id", "get_study_directions",
    "get_study_user_attrs", "get_study_system_attrs", "get_trial_user_attrs",
    "get_trial_system_attrs", "get_all_studies", "create_new_trial", "_create_new_trial",
    "set_trial_param", "_set_trial_param", "get_trial_param", "set_trial_state_values",
    "set_trial_intermediate_value", "set_trial_user_attr", "set_trial_system_attr",
    "get_trial_id_from_study_id_trial_number", "get_trial", "get_all_trials", "_get_trials",
    "get_best_trial", "_get_best_trial_id", "record_heartbeat", "_get_stale_trial_ids",
)


def _retrying(method):
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        return call_retrying(method.__name__, method, self, *args, **kwargs)

    return call


def _read_migrations_once() -> None:
    """Optuna reads its schema-migration scripts (alembic's, a dozen modules) afresh each time
    a storage checks or stamps its schema: three times for a new database, once for an
    existing one, 20 ms of CPU each. They ship with Optuna and do not change while a process
    runs, so this process reads them once and shares what it read (alembic only reads it)."""
    import threading

    from alembic.script import ScriptDirectory
    from optuna.storages._rdb import storage as rdb

    manager = getattr(rdb, "_VersionManager", None)
    read = getattr(manager, "_create_alembic_script", None)
    if read is None or getattr(read, "read_once", False):  # another Optuna, or done already
        return
    lock = threading.Lock()
    scripts: list[ScriptDirectory] = []

    def read_once(self) -> ScriptDirectory:
        with lock:
            if not scripts:
                script = read(self)
                script.get_current_head()  # loads every revision now, under the lock
                scripts.append(script)
        return scripts[0]

    read_once.read_once = True  # type: ignore[attr-defined]
    manager._create_alembic_script = read_once  # type: ignore[union-attr]


@functools.cache
def _resilient_class() -> type:
    import optuna

    _read_migrations_once()
    namespace = {name: _retrying(getattr(optuna.storages.RDBStorage, name)) for name in _RETRIED}
    namespace["__module__"] = __name__
    namespace["__doc__"] = "Optuna's RDBStorage whose operations retry transient connection loss."
    return type("_ResilientRDBStorage", (optuna.storages.RDBStorage,), namespace)


def __getattr__(name: str):
    # Built on first use so that importing this module does not import Optuna; reachable by
    # name so that pickle (Ray, multiprocessing) finds the class.
    if name == "_ResilientRDBStorage":
        return _resilient_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

