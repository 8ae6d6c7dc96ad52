"""Answers oversized request heads with 414/431 instead of uvicorn's bare 400.

h11 refuses a request head longer than its buffer limit; uvicorn then answers 400 and closes
the socket at once, which resets the connection while the client is still sending (a 1 MB URL
looks like a network error). This protocol names the problem and reads the rest of the request
into nothing for a moment before closing, so the client receives the answer.
"""

from __future__ import annotations

import json

from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
from uvicorn.protocols.http.h11_impl import H11Protocol

DRAIN_S = 1.0  # how long a refused connection keeps swallowing what the client still sends


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
    """uvicorn's h11 protocol with 414/431 for request heads beyond the h11 buffer limit."""

    _draining = False

    def data_received(self, data: bytes) -> None:
        if self._draining:
            return
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        limit = self.config.h11_max_incomplete_event_size or DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
        status = refused_head_status(self.conn.trailing_data[0], limit)
        body = json.dumps({"detail": _MESSAGES[status], "problems": []}).encode()
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, _REASONS[status], len(body), body))
        self._draining = True
        self.loop.call_later(DRAIN_S, self.transport.close)
