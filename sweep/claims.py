"""Leases on a study's units of work, kept in the study database so that any number of drivers
(two `launch`, a `resume`, the HTTP service) share one study and train each unit exactly once.

A unit is a grid cell (`"<weight>|<seed>"`) or a guided-search slot (`"slot:<seed>:<i>"`).
A driver claims a unit before it creates the unit's Optuna trial: the claim is one row keyed by
(study, unit), so two drivers racing for it meet at the primary key and exactly one wins. The
holder renews its leases from a background thread while the trials train; a driver that dies
stops renewing, and once the lease has expired the next driver that asks takes the unit over
(compare-and-set on the old holder and expiry), failing the dead driver's trial and continuing
from its last epoch checkpoint.

The table lives beside Optuna's own; Optuna and optuna-dashboard ignore it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from typing import Any

ENV_TTL = "WEIGHTSEARCH_CLAIM_TTL"
DEFAULT_TTL_S = 120.0  # a lease lives this long unless renewed; renewed every TTL / 6
_TABLE = "weightsearch_claims"


def claim_ttl() -> float:
    """Lease length in seconds ($WEIGHTSEARCH_CLAIM_TTL, for tests and slow shared databases)."""
    text = os.environ.get(ENV_TTL)
    if not text:
        return DEFAULT_TTL_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 1:
        from weightsearch.errors import ConfigError

        raise ConfigError([f"${ENV_TTL}={text!r}: give the claim lease in seconds (>= 1)"])
    return value


def _table(metadata: Any) -> Any:
    from sqlalchemy import Column, Float, String, Table

    return Table(
        _TABLE, metadata,
        Column("study", String(512), primary_key=True),
        Column("unit", String(128), primary_key=True),
        Column("holder", String(128), nullable=False),
        Column("expires", Float, nullable=False),
    )


class Claims:
    """This driver's leases in one study database."""

    def __init__(self, engine: Any, ttl: float | None = None) -> None:
        from sqlalchemy import MetaData

        self.engine = engine
        self.ttl = ttl if ttl is not None else claim_ttl()
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.table = _table(MetaData())
        self._held: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        _create_table(engine, self.table)

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its searcher (for its own restore, which we never use): leave out the
        # engine and the renewal thread.
        return {"ttl": self.ttl, "holder": self.holder, "table": self.table}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.engine, self._held, self._thread = None, set(), None
        self._lock, self._stop = threading.Lock(), threading.Event()

    # --- claiming ---------------------------------------------------------------------
    def claim(self, study: str, unit: str) -> bool:
        """Take `unit` if nobody holds a live lease on it; atomic across drivers."""
        from sqlalchemy import and_, select, update
        from sqlalchemy.exc import IntegrityError

        t = self.table
        now = time.time()
        try:
            with self.engine.begin() as conn:
                conn.execute(t.insert().values(study=study, unit=unit, holder=self.holder,
                                               expires=now + self.ttl))
        except IntegrityError:
            with self.engine.begin() as conn:
                row = conn.execute(select(t.c.holder, t.c.expires).where(
                    and_(t.c.study == study, t.c.unit == unit))).first()
                if row is None or row.expires > now:
                    return False
                # Compare-and-set: only one of several drivers seeing the same expired lease wins.
                done = conn.execute(update(t).where(and_(
                    t.c.study == study, t.c.unit == unit, t.c.holder == row.holder,
                    t.c.expires == row.expires,
                )).values(holder=self.holder, expires=now + self.ttl))
                if done.rowcount != 1:
                    return False
        with self._lock:
            self._held.add((study, unit))
        return True

    def holds(self, study: str, unit: str) -> bool:
        """Whether this driver's lease on `unit` is still its own (not expired and taken over)."""
        from sqlalchemy import and_, select

        t = self.table
        with self.engine.connect() as conn:
            holder = conn.execute(select(t.c.holder).where(
                and_(t.c.study == study, t.c.unit == unit))).scalar()
        return holder == self.holder

    def release(self, study: str, unit: str) -> None:
        """Give `unit` back at once (finished or failed): the next driver may claim it now."""
        from sqlalchemy import and_, update

        t = self.table
        with self._lock:
            self._held.discard((study, unit))
        with self.engine.begin() as conn:
            conn.execute(update(t).where(and_(
                t.c.study == study, t.c.unit == unit, t.c.holder == self.holder,
            )).values(expires=0.0))

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

    def renew(self) -> None:
        from sqlalchemy import and_, update

        t = self.table
        with self._lock:
            held = list(self._held)
        if not held:
            return
        expires = time.time() + self.ttl
        with self.engine.begin() as conn:
            for study, unit in held:
                conn.execute(update(t).where(and_(
                    t.c.study == study, t.c.unit == unit, t.c.holder == self.holder,
                )).values(expires=expires))

    def _renew_loop(self) -> None:
        interval = self.ttl / 6
        while not self._stop.wait(interval):
            with contextlib.suppress(Exception):  # a database hiccup: the next round retries
                self.renew()


def _create_table(engine: Any, table: Any) -> None:
    """CREATE TABLE IF NOT EXISTS, which concurrent first writers can still race on (PostgreSQL
    reports the loser as a duplicate type): the loser finds the table on its next look."""
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    for attempt in range(10):
        try:
            table.create(engine, checkfirst=True)
            return
        except (IntegrityError, OperationalError, ProgrammingError):
            if attempt == 9:
                raise
            time.sleep(0.1 * (attempt + 1))
