"""The service's calls to the study database, bounded in time and in number, and /health's own
probe of it.

A database that hangs (a stopped server, a dead disk, a lock held forever) answers neither an
error nor a result, and a server-side statement timeout cannot fire on a stopped server. So
every route that reads the database does it in a daemon thread of its own and waits at most
CALL_TIMEOUT_S: past that it answers 503 with Retry-After, and the thread stays blocked until
the database answers. At most CALL_SLOTS such calls run at once: while that many are stuck, a
new request gets its 503 at once instead of adding a thread. /health never waits for them: it
probes with a fresh connection of its own (no shared pool), within PROBE_TIMEOUT_S, at most
one probe at a time, its answer reused for PROBE_REUSE_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import HTTPException

T = TypeVar("T")
CALL_TIMEOUT_S = 15.0
CALL_SLOTS = 8
PROBE_TIMEOUT_S = 2.0
PROBE_REUSE_S = 1.0
RETRY_AFTER_S = 5
_slots = threading.BoundedSemaphore(CALL_SLOTS)


def _unavailable(why: str) -> HTTPException:
    return HTTPException(503, f"the study database {why}; retry later",
                         headers={"Retry-After": str(RETRY_AFTER_S)})


async def in_thread(call: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
    """`call(*args)` in a daemon thread, answered within `timeout` (CALL_TIMEOUT_S) or 503."""
    limit = CALL_TIMEOUT_S if timeout is None else timeout
    return await in_daemon_thread(
        call, args, _slots, limit,
        _unavailable(f"is not answering: {CALL_SLOTS} requests are waiting on it"),
        _unavailable(f"did not answer within {limit:g} s"))


async def in_daemon_thread(call: Callable[..., T], args: tuple, slots: threading.Semaphore,
                           timeout: float, busy: HTTPException, late: HTTPException) -> T:
    """`call(*args)` in a daemon thread that holds one of `slots` until `call` returns (also
    after the request gave up on it: hung calls cannot pile up); `busy` when no slot is free,
    `late` past `timeout`. A daemon neither holds the answer nor the server's exit."""
    if not slots.acquire(blocking=False):
        raise busy
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (call(*args), None)
        except BaseException as exc:  # the request answers it (a 503 for storage failures)
            outcome = (None, exc)
        finally:
            slots.release()
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(_settle, future, *outcome)

    threading.Thread(target=run, name="weightsearch-worker", daemon=True).start()
    try:
        return await asyncio.wait_for(future, timeout)
    except (asyncio.TimeoutError, TimeoutError):  # two classes before Python 3.11
        raise late from None


def _settle(future: asyncio.Future, result: Any, exc: BaseException | None) -> None:
    if future.done():  # the request gave up on it
        return
    if exc is None:
        future.set_result(result)
    else:
        future.set_exception(exc)


class Probe:
    """/health's view of the database: reachable or not, from one fresh connection."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._last: tuple[float, dict[str, Any]] | None = None
        self._running = False

    async def state(self) -> dict[str, Any]:
        now = time.monotonic()
        if self._last is not None and now - self._last[0] < PROBE_REUSE_S:
            return self._last[1]
        with self._lock:
            if self._running:  # one probe at a time: a flood of /health opens no connections
                return self._last[1] if self._last else {"database": "unknown",
                                                         "database_detail": "being probed"}
            self._running = True
        try:
            found = await asyncio.wait_for(asyncio.to_thread(self._probe), PROBE_TIMEOUT_S)
        except (asyncio.TimeoutError, TimeoutError):
            found = {"database": "unreachable",
                     "database_detail": f"no answer within {PROBE_TIMEOUT_S:g} s"}
        finally:
            self._running = False
        self._last = (time.monotonic(), found)
        return found

    def _probe(self) -> dict[str, Any]:
        from weightsearch.studies.storage import probe_database
        from weightsearch.studies.urls import hide_secrets

        try:
            probe_database(self.url, PROBE_TIMEOUT_S)
        except Exception as exc:  # any failure: what /health reports, secrets hidden
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            return {"database": "unreachable",
                    "database_detail": hide_secrets(first, self.url)[:200]}
        return {"database": "ok", "database_detail": None}
