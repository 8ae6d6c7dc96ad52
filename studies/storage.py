"""Open the study database: one place that knows about SQLite locking and PostgreSQL idleness."""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import re
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from weightsearch.core.errors import StorageError, causes
from weightsearch.core.files import path_problem

DEFAULT_STORAGE = "sqlite:///weightsearch.db"
ENV_STORAGE = "WEIGHTSEARCH_STORAGE"


# Query parameters that carry a secret (libpq's `password`, `sslpassword`, a driver's token or
# key passphrase): matched by these parts of the name; `passfile` only names a file.
_SECRET_PARTS = ("pass", "pwd", "secret", "token", "key")
_NOT_SECRET = frozenset({"passfile"})
# A `name=value` pair with a secret-looking name inside a parameter's value.
_SECRET_PAIR = re.compile(r"(?i)(pass|pwd|secret|token|key)\w*\s*=")
_SENTINEL = "WSHIDDENSECRETWS"  # alphanumeric, so rendering the URL does not quote it
_UNPARSABLE = "<unparsable URL hidden>"


def _secret_param(name: str, value: object = "") -> bool:
    """A query parameter that carries a secret: by its name, or by a `pwd=...`-like pair inside
    its value (a whole connection string: ODBC's `odbc_connect`, libpq's `dsn`, `options`)."""
    lowered = name.lower()
    if lowered not in _NOT_SECRET and any(part in lowered for part in _SECRET_PARTS):
        return True
    values = [value] if isinstance(value, str) else list(value or ())  # type: ignore[call-overload]
    return any(_SECRET_PAIR.search(str(v)) for v in values)


def _parsed(url: str):
    """SQLAlchemy's reading of `url`, None when it cannot read it at all."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url)
    except Exception:  # ArgumentError, or a ValueError from a bad port
        return None


def shown_url(url: str) -> str:
    """The URL as printed or stored anywhere (messages, logs, follow-up commands, /health): its
    password and secret query parameters replaced by ***. Parsed as SQLAlchemy parses it, so a
    password holding '/', '@' or a space is hidden whole; a URL SQLAlchemy cannot parse shows
    only its scheme."""
    text = str(url)
    if text == DEFAULT_STORAGE:  # no secret; spares the help text an import of SQLAlchemy
        return text
    parsed = _parsed(text)
    if parsed is None:
        scheme, sep, _ = text.partition("://")
        plain = sep and scheme and scheme.replace("+", "").replace(".", "").replace(
            "-", "").isalnum() and scheme.isascii()
        return f"{scheme}://{_UNPARSABLE}" if plain else _UNPARSABLE
    secret_query = [k for k, v in parsed.query.items() if _secret_param(k, v)]
    # A host holding '@' is the tail of a password that held a raw '@'.
    odd_host = "@" in (parsed.host or "")
    if parsed.password is None and not secret_query and not odd_host:
        return text
    hidden = parsed.set(
        password=None if parsed.password is None else _SENTINEL,
        host=_SENTINEL if odd_host else parsed.host,
        query={k: (_SENTINEL if k in secret_query else v) for k, v in parsed.query.items()},
    )
    return hidden.render_as_string(hide_password=False).replace(_SENTINEL, "***")


def url_secrets(url: str) -> list[str]:
    """The secret values in `url` (its password, secret query parameters), as given and as
    URL-quoted: what `hide_secrets` removes from free text."""
    from urllib.parse import quote, quote_plus

    parsed = _parsed(str(url))
    if parsed is None:  # nothing can be told apart: hide whatever follows the scheme
        rest = str(url).partition("://")[2]
        return [rest] if rest else []
    values = [parsed.password] if parsed.password else []
    for key, value in parsed.query.items():
        if _secret_param(key, value):
            values += [value] if isinstance(value, str) else list(value)
    if "@" in (parsed.host or ""):
        values.append(parsed.host)
    found = {form for v in values if v for form in (v, quote(v, safe=""), quote_plus(v))}
    return sorted(found, key=len, reverse=True)  # longest first: no partial replacement


def hide_secrets(text: str, url: str | None) -> str:
    """`text` (a driver's error, a log line) with the URL shown as `shown_url` shows it and every
    secret of `url` replaced by ***. Secrets shorter than 3 characters are left (replacing every
    'p' of a message would garble it; a driver never echoes a password anyway)."""
    text = str(text)
    if not url:
        return text
    text = text.replace(str(url), shown_url(url))
    for secret in url_secrets(url):
        if len(secret) >= 3:
            text = text.replace(secret, "***")
    return text


def default_storage_url() -> str:
    return os.environ.get(ENV_STORAGE, DEFAULT_STORAGE)


# --- database backends ----------------------------------------------------------------------
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
    # `:k` the lock's name or number (`_SCHEMA_LOCK`); None: no lock (a file backend flocks).
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


def check_url(url: str, write: bool = False) -> None:
    """Reject a malformed URL, or a SQLite file in a missing folder, before connecting.
    `write` (launch, resume, import): also an in-memory database, whose results would be gone
    at exit, and a read-only SQLite file, before anything starts."""
    from sqlalchemy.exc import NoSuchModuleError

    parsed = _parsed(url)
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
    parsed = _parsed(url)
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
        conn = _connect_file(os.path.abspath(path), "mode=ro", timeout=timeout_s)
        try:
            conn.execute("SELECT 1").fetchone()
        finally:
            conn.close()
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


# --- Robustness additions (faults work, issue 5) --------------------------------------------
# 1. SQLite in WAL mode: readers (inspect, serve) no longer block the sweep's writes, and
#    concurrent writers queue on one lock instead of failing.
# 2. Transient database errors are retried: a PostgreSQL restart or failover drops every
#    connection and refuses new ones for a few seconds. pool_pre_ping only replaces connections
#    that are dead at checkout; an operation that meets the outage itself would otherwise raise
#    and kill the sweep's driver.

RETRY_DEADLINE_S = 90.0  # longer than a PostgreSQL restart; shorter than anyone waits for a hang
_log = logging.getLogger("weightsearch.storage")

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


def _is_transient(exc: BaseException) -> bool:
    """A lost or refused connection (OperationalError), possibly wrapped by Optuna, or met
    again by a session that lost it."""
    import sqlalchemy.exc

    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, sqlalchemy.exc.OperationalError):
            # SQLite reports lasting problems ("no such table", "unable to open") as
            # OperationalError too: only its lock contention is worth waiting out.
            if type(exc.orig).__module__.startswith("sqlite3"):
                return "locked" in str(exc.orig) or "busy" in str(exc.orig)
            return True
        if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.connection_invalidated:
            return True
        if isinstance(exc, sqlalchemy.exc.PendingRollbackError):
            # A session used again after its connection was lost (Optuna's trial read tries a
            # second query when the first fails): what lost it is only the context.
            exc, seen = exc.__cause__ or exc.__context__, seen + 1
            continue
        exc, seen = exc.__cause__, seen + 1
    return False


def call_retrying(what: str, fn, *args, **kwargs):
    """`fn(*args, **kwargs)`, retried with backoff while the database is briefly unreachable
    (or, for SQLite, locked) for up to RETRY_DEADLINE_S after the first failure; any other
    error is raised at once. The deadline starts at the failure, not at the call: a first try
    that waited out SQLite's busy timeout (120 s) would otherwise leave no retry at all."""
    deadline: float | None = None
    delay = 0.5
    while True:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if deadline is None:
                deadline = time.monotonic() + RETRY_DEADLINE_S
            if not _is_transient(exc) or time.monotonic() + delay > deadline:
                raise
            cause = exc.__cause__ or exc
            first = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
            _log.warning("study storage: %s failed (%s); retrying in %.1fs", what, first, delay)
            time.sleep(delay)
            delay = min(delay * 2, 8.0)


def _retrying(method):
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        return call_retrying(method.__name__, method, self, *args, **kwargs)

    return call


@functools.cache
def _resilient_class() -> type:
    import optuna

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


def sqlite_path(url: str) -> str | None:
    """The file of a SQLite study URL (`~` expanded), None for a server or in-memory one."""
    if not url_dialect(url).file:
        return None
    from sqlalchemy.engine import make_url

    database = make_url(url).database
    return None if database in (None, "", ":memory:") else os.path.expanduser(database)
