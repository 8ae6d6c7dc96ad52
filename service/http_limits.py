"""uvicorn's h11 protocol with bounds on what a client can hold: request heads and connections.

- An oversized request head gets 414/431 instead of uvicorn's bare 400. h11 refuses a head
  longer than its buffer limit; uvicorn then answers 400 and closes the socket at once, which
  resets the connection while the client is still sending (a 1 MB URL looks like a network
  error). This protocol names the problem and reads the rest of the request into nothing for a
  moment before closing, so the client receives the answer.
- A request head must arrive whole within HEAD_TIMEOUT_S of the connection (or of the previous
  response, on a kept-alive connection); else 408 and the connection closes. A slow client can
  otherwise hold a connection, and a file descriptor, forever.
- At most `connection_cap()` connections are open: MAX_CONNECTIONS, or fewer where the
  process's limit on open files leaves less room (the descriptors open when serving starts and
  FD_RESERVE for the database, logs and jobs stay free). Had the sockets used the last
  descriptors, the kernel would refuse every new accept (EMFILE), asyncio would log each
  refusal and wait before accepting again, and /health would time out with the rest. A new
  connection from an address that holds half of the cap closes that address's connection that
  has waited longest for its request head (its active ones stay: behind a proxy every client
  shares one address); beyond the cap, the one anywhere that has waited longest, or, with none
  waiting, the new one is refused: stalled clients cannot lock others out.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os

from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
from uvicorn.protocols.http.h11_impl import H11Protocol

DRAIN_S = 1.0  # how long a refused connection keeps swallowing what the client still sends
HEAD_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 256  # well below the usual 1024 open files
FD_RESERVE = 64  # descriptors kept free for the database pool, logs and jobs
# The listening socket's backlog, which is also how many connections asyncio accepts in one go
# before any of them reaches `connection_made` (uvicorn's default is 2,048): kept small, so a
# burst cannot take the descriptors the cap leaves free.
ACCEPT_BURST = 32
MIN_CONNECTIONS = 8


@functools.cache
def connection_cap() -> int:
    """How many client connections this process may hold: MAX_CONNECTIONS, or what its open
    file limit leaves beside the descriptors open now (read once, at the first connection,
    when the server's own files are open) and FD_RESERVE."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        open_now = len(os.listdir("/proc/self/fd"))
    except (ImportError, OSError):  # no resource module or no /proc: the fixed cap
        return MAX_CONNECTIONS
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(MIN_CONNECTIONS,
               min(MAX_CONNECTIONS, soft - open_now - FD_RESERVE - 3 * ACCEPT_BURST))


def _peer(transport: asyncio.BaseTransport) -> str | None:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else None


def refused_head_status(buffered: bytes, limit: int) -> int:
    """414 when the request line alone outgrew the buffer, 431 when the headers did, else 400."""
    if len(buffered) <= limit:
        return 400
    return 431 if b"\r\n" in buffered else 414


_MESSAGES = {
    400: "invalid HTTP request",
    414: "the request line (method and URL) is too long",
    431: "the request headers are too large",
}
_REASONS = {400: b"Bad Request", 414: b"URI Too Long", 431: b"Request Header Fields Too Large"}


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with 414/431 for oversized heads, a head timeout and a cap on
    connections (see the module docstring)."""

    _draining = False
    _head_timer: asyncio.TimerHandle | None = None
    _waiting_since = 0.0
    _cycle_seen: object = None

    _address: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._address = _peer(transport)
        cap = connection_cap()
        mine = [c for c in self.connections if c is not self
                and isinstance(c, LimitedH11Protocol) and c._address == self._address]
        if len(mine) >= cap // 2:  # an address over its share makes room from its own
            self._evict_a_stalled_one(mine)  # stalled heads (its active ones stay)
        if len(self.connections) > cap and \
                not self._evict_a_stalled_one(list(self.connections)):
            self.connections.discard(self)
            transport.close()
            return
        self._wait_for_head()

    def data_received(self, data: bytes) -> None:
        if self._draining:
            return
        super().data_received(data)
        if self.cycle is not self._cycle_seen:  # a whole request head arrived
            self._cycle_seen = self.cycle
            self._stop_waiting()

    def on_response_complete(self) -> None:
        answered = self.cycle
        super().on_response_complete()  # may start the next, pipelined, request's cycle
        if self.transport.is_closing():
            return
        if self.cycle is answered:
            self._wait_for_head()  # the next request's head, on a kept-alive connection
        else:
            self._cycle_seen = self.cycle  # its head had already arrived whole

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _wait_for_head(self) -> None:
        self._stop_waiting()
        self._waiting_since = self.loop.time()
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_too_late)

    def _stop_waiting(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_late(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self._refuse(408, b"Request Timeout",
                         f"the request head did not arrive within {HEAD_TIMEOUT_S:.0f} s")

    def _evict_a_stalled_one(self, among: list) -> bool:
        """Close the connection of `among` that has waited longest for its request head;
        False when none is waiting."""
        stalled = [c for c in among if c is not self
                   and isinstance(c, LimitedH11Protocol) and c._head_timer is not None]
        if not stalled:
            return False
        oldest = min(stalled, key=lambda c: c._waiting_since)
        oldest._stop_waiting()
        oldest.transport.close()
        oldest.connections.discard(oldest)
        return True

    def _refuse(self, status: int, reason: bytes, detail: str) -> None:
        body = json.dumps({"detail": detail, "problems": []}).encode()
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, reason, len(body), body))
        self._draining = True
        self.loop.call_later(DRAIN_S, self.transport.close)

    def send_400_response(self, msg: str) -> None:
        limit = self.config.h11_max_incomplete_event_size or DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
        status = refused_head_status(self.conn.trailing_data[0], limit)
        self._stop_waiting()
        self._refuse(status, _REASONS[status], _MESSAGES[status])
