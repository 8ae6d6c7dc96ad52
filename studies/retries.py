"""Retrying the study database's operations through brief outages: a PostgreSQL restart or
failover drops every connection and refuses new ones for a few seconds, and a SQLite file stays
locked while another process writes it. pool_pre_ping only replaces connections that are dead
at checkout; an operation that meets the outage itself would otherwise raise and kill the
sweep's driver."""

from __future__ import annotations

import logging
import time

RETRY_DEADLINE_S = 90.0  # longer than a PostgreSQL restart; shorter than anyone waits for a hang
_log = logging.getLogger("weightsearch.storage")


def _is_transient(exc: BaseException | None) -> bool:
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
