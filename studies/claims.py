"""Leases on a study's units of work, kept in the study database so that any number of drivers
(two `launch`, a `resume`, the HTTP service) share one study and train each unit exactly once.

A unit is a grid cell (`"<point>|<seed>"`), a guided-search slot (`"slot:<seed>:<i>"`) or a
successive-halving stint (`"r<rung>:<cell>"`); a guided search also claims the cell its sampler
proposed, so two drivers never train one proposal. A driver claims a unit before it creates
the unit's Optuna trial: the claim is one row keyed by (study, unit), so two drivers racing
for it meet at the primary key and exactly one wins. The holder renews its leases from a
background thread while the trials train; a driver that dies stops renewing, and once the
lease has expired the next driver that asks takes the unit over (one UPDATE that matches only
an expired row), failing the dead driver's trial and continuing from its last epoch checkpoint.

Times are the database's clock, never a driver's: every expiry is computed and compared inside
the SQL statement (PostgreSQL's, MySQL's or SQLite's own `now`), so drivers on machines whose
clocks disagree still agree on who holds what. SQLite's `now` is the clock of the process that
runs the statement, so drivers sharing a SQLite study must share a clock (docs/studies.md says
what a clock step does). Other backends fall back to the driver's clock.

A driver that finds at renewal time that its lease is gone (it stalled past the expiry and
another driver took the unit over) records the unit as lost; the sweep then stops that trial
and writes nothing more to it. A released unit's row is deleted, so a renewal that raced the
release cannot bring the lease back.

The table lives beside Optuna's own; Optuna and optuna-dashboard ignore it.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from weightsearch.studies.dialects import dialect as backend
from weightsearch.studies.retries import call_retrying

ENV_TTL = "WEIGHTSEARCH_CLAIM_TTL"
DEFAULT_TTL_S = 120.0  # a lease lives this long unless renewed; renewed every TTL / 6
MAX_TTL_S = 86400.0  # a day: a dead driver's cells wait at most this long for another
# Readers find dead drivers' cells by it (studies/leases.py), imports their staging studies.
CLAIMS_TABLE = _TABLE = "weightsearch_claims"


def claim_ttl() -> float:
    """Lease length in seconds ($WEIGHTSEARCH_CLAIM_TTL, for tests and slow shared databases)."""
    text = os.environ.get(ENV_TTL)
    if not text:
        return DEFAULT_TTL_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (1 <= value <= MAX_TTL_S):  # also false for nan, which compares false to everything
        from weightsearch.core.errors import ConfigError

        raise ConfigError([f"${ENV_TTL}={text!r}: give the claim lease in seconds, from 1 to "
                           f"{MAX_TTL_S:.0f}"])
    return value


def _table(metadata: Any) -> Any:
    from sqlalchemy import Column, Double, String, Table

    return Table(
        _TABLE, metadata,
        Column("study", String(512), primary_key=True),
        Column("unit", String(128), primary_key=True),
        Column("holder", String(128), nullable=False),
        # Seconds since 1970 on the database's clock; double precision (MySQL's FLOAT is 4
        # bytes, which rounds today's times to minutes).
        Column("expires", Double, nullable=False),
    )


def db_now(dialect: str) -> Any:
    """A SQL expression for the database server's current time in Unix seconds."""
    from sqlalchemy import literal, literal_column

    now = backend(dialect).now_sql
    if now is not None:
        return literal_column(now)
    return literal(time.time())  # documented fallback: this driver's clock


class Claims:
    """This driver's leases in one study database."""

    def __init__(self, engine: Any, ttl: float | None = None) -> None:
        from sqlalchemy import MetaData

        self.engine = engine
        self.ttl = ttl if ttl is not None else claim_ttl()
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.table = _table(MetaData())
        self._held: set[tuple[str, str]] = set()
        self._lost: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        call_retrying("create claims table", create_once,
                      lambda: self.table.create(engine, checkfirst=True))

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its searcher (for its own restore, which we never use): leave out the
        # engine and the renewal thread.
        return {"ttl": self.ttl, "holder": self.holder, "table": self.table}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.engine, self._held, self._lost, self._thread = None, set(), set(), None
        self._lock, self._stop = threading.Lock(), threading.Event()

    def _now(self) -> Any:
        return db_now(self.engine.dialect.name)

    # --- claiming ---------------------------------------------------------------------
    def claim(self, study: str, unit: str) -> bool:
        """Take `unit` if nobody holds a live lease on it; atomic across drivers."""
        won = call_retrying("claim", self._claim, study, unit)
        if won:
            with self._lock:
                self._held.add((study, unit))
                self._lost.discard((study, unit))
        return won

    def _claim(self, study: str, unit: str) -> bool:
        from sqlalchemy import and_, insert, update
        from sqlalchemy.exc import IntegrityError

        t = self.table
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(t).values(study=study, unit=unit, holder=self.holder,
                                              expires=self._now() + self.ttl))
            return True
        except IntegrityError:
            pass
        # Taken over only if expired, judged by the database in the same statement: of
        # several drivers seeing the same expired lease, exactly one matches the row.
        with self.engine.begin() as conn:
            done = conn.execute(update(t).where(and_(
                t.c.study == study, t.c.unit == unit, t.c.expires < self._now(),
            )).values(holder=self.holder, expires=self._now() + self.ttl))
            return done.rowcount == 1

    def holds(self, study: str, unit: str) -> bool:
        """Whether this driver's lease on `unit` is still its own (not expired and taken over)."""
        if self.lost(study, unit):
            return False
        return call_retrying("check claim", self._holds, study, unit)

    def _holds(self, study: str, unit: str) -> bool:
        from sqlalchemy import and_, select

        t = self.table
        with self.engine.connect() as conn:
            holder = conn.execute(select(t.c.holder).where(
                and_(t.c.study == study, t.c.unit == unit))).scalar()
        return holder == self.holder

    def held_by_others(self, study: str) -> set[str]:
        """The units of `study` under another driver's live lease."""
        from sqlalchemy import and_, select

        t = self.table

        def run() -> set[str]:
            with self.engine.connect() as conn:
                return set(conn.execute(select(t.c.unit).where(and_(
                    t.c.study == study, t.c.holder != self.holder,
                    t.c.expires >= self._now()))).scalars())

        return call_retrying("read claims", run)

    def lost(self, study: str, unit: str) -> bool:
        """Whether a renewal found this driver's lease on `unit` taken over (no query)."""
        with self._lock:
            return (study, unit) in self._lost

    def release(self, study: str, unit: str) -> None:
        """Give `unit` back at once (finished or failed): the next driver may claim it now."""
        from sqlalchemy import and_, delete

        t = self.table
        with self._lock:
            self._held.discard((study, unit))
            self._lost.discard((study, unit))

        def run() -> None:
            with self.engine.begin() as conn:
                conn.execute(delete(t).where(and_(
                    t.c.study == study, t.c.unit == unit, t.c.holder == self.holder)))

        call_retrying("release claim", run)

    # --- renewal ----------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._renew_loop, name="claims", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop renewing and release every lease still held (a clean exit, Ctrl-C included)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            held = list(self._held)
        for study, unit in held:
            with contextlib.suppress(Exception):  # an unreleased lease simply expires
                self.release(study, unit)

    def renew(self) -> list[tuple[str, str]]:
        """Extend every held lease; returns the units found lost (taken over meanwhile)."""
        from sqlalchemy import and_, update

        t = self.table
        with self._lock:
            held = list(self._held)
        if not held:
            return []
        missing = []
        with self.engine.begin() as conn:
            for study, unit in held:
                done = conn.execute(update(t).where(and_(
                    t.c.study == study, t.c.unit == unit, t.c.holder == self.holder,
                )).values(expires=self._now() + self.ttl))
                if done.rowcount != 1:
                    missing.append((study, unit))
        lost = []
        with self._lock:
            for key in missing:
                if key in self._held:  # not released while we renewed: really lost
                    self._held.discard(key)
                    self._lost.add(key)
                    lost.append(key)
        return lost

    def _renew_loop(self) -> None:
        interval = self.ttl / 6
        while not self._stop.wait(interval):
            with contextlib.suppress(Exception):  # a database hiccup: the next round retries
                call_retrying("renew claims", self.renew)


def lease_states(engine: Any, study: str) -> dict[str, bool] | None:
    """Every unit of `study` with a lease row: whether that lease is live (the database's
    clock); None where no claims table exists yet (nothing was ever leased)."""
    from sqlalchemy import inspect, select

    if not inspect(engine).has_table(_TABLE):
        return None
    from sqlalchemy import MetaData

    t = _table(MetaData())
    now = db_now(engine.dialect.name)

    def run() -> dict[str, bool]:
        with engine.connect() as conn:
            return {unit: bool(live) for unit, live in conn.execute(
                select(t.c.unit, t.c.expires >= now).where(t.c.study == study))}

    return call_retrying("read leases", run)


def create_once(create: Callable[[], None]) -> None:
    """CREATE ... IF NOT EXISTS (a table, an index), which concurrent first writers can still
    race on (PostgreSQL reports the loser as a duplicate): the loser finds it on its next
    look."""
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    for attempt in range(10):
        try:
            create()
            return
        except (IntegrityError, OperationalError, ProgrammingError):
            if attempt == 9:
                raise
            time.sleep(0.1 * (attempt + 1))
