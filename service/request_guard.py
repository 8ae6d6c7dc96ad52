"""ASGI middleware that refuses hostile requests before any route runs.

- Bodies beyond `max_body` bytes (`max_yaml_body` for YAML, which parses some ten times
  slower than JSON): 413, read no further (a Content-Length is checked first).
- URLs beyond `max_target` bytes: 414; headers beyond `MAX_HEADERS` bytes: 431 (heads that
  outgrow h11's buffer before they are complete are refused earlier, by `LimitedH11Protocol`).
- Writes (POST, PUT, PATCH, DELETE) from another origin: 403. A web page in the user's browser
  can send a POST to a loopback server; browsers name that page in `Origin` and
  `Sec-Fetch-Site`, which must then match the server's `Host`.
- Write bodies must be JSON or YAML (415): the content types a page can send without asking
  the server first (text/plain, forms) are refused.
- With `hosts` given (a server bound to loopback), any request whose `Host` is neither a
  loopback name nor one of `hosts`: 400. DNS rebinding points a name the attacker owns at
  127.0.0.1, so the user's browser sends that page's requests to this server as same-origin
  ones, with the attacker's name in `Host`.
- A write to a route that takes the token, without it (401) or with a wrong one (403), is
  answered from its headers: its body is never waited for.
- A body must arrive whole within BODY_TIMEOUT_S, and after BODY_GRACE_S at MIN_BODY_RATE on
  average; else 408 and the connection closes. A client that sends a head and then trickles
  its body would otherwise hold a connection (and a slot of the connection cap) for ever.
- One client address has at most MAX_WRITES_PER_ADDRESS writes open at once; beyond that,
  429 at once: slow bodies from one address cannot fill the connection cap.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

from weightsearch.service.safe_body import JSON_TYPES, YAML_TYPES, media_type

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MAX_BODY = 64 << 10  # a study file is a few hundred bytes
MAX_YAML_BODY = 16 << 10  # libyaml with our checks: 16 KiB in 10-40 ms (BENCHMARKS.md)
MAX_TARGET = 8192
MAX_HEADERS = 16 << 10  # h11 bounds only heads that arrive in several reads
BODY_TIMEOUT_S = 10.0  # the whole body; a study file is one packet
BODY_GRACE_S = 2.0  # before MIN_BODY_RATE applies
# Bytes per second on average after the grace: a byte every few seconds fails in ~2 s.
MIN_BODY_RATE = 1024
MAX_WRITES_PER_ADDRESS = 16  # above the 8 at once of a burst of real clients


def is_loopback(host: str) -> bool:
    """Only `localhost` and literal loopback addresses: `127.attacker.example` is a name that
    resolves wherever its owner wants."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(host_header: str) -> str | None:
    """The name in a `Host` header, without port or brackets; None when it is malformed."""
    try:
        parts = urlsplit(f"//{host_header}")
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        return None
    return parts.hostname


class RequestGuard:
    def __init__(self, app, max_body: int = MAX_BODY, max_target: int = MAX_TARGET,
                 hosts: Collection[str] | None = None, max_yaml_body: int = MAX_YAML_BODY
                 ) -> None:
        """hosts: None answers any `Host`; else only loopback names and these."""
        self.app = app
        self.max_body = max_body
        self.max_yaml_body = max_yaml_body
        self.max_target = max_target
        self.hosts = None if hosts is None else {h.lower().strip("[]") for h in hosts}
        self._writes: Counter[str] = Counter()  # open writes per client address

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        kind = media_type(headers.get("content-type", ""))
        limit = self.max_yaml_body if kind in YAML_TYPES else self.max_body
        # (status, detail) or, from the token check, (status, detail, extra headers)
        refusal: tuple[int, str] | tuple[int, str, tuple] | None = \
            self._refusal(scope, headers, limit)
        if refusal is None and scope["method"] in WRITES:
            refusal = _token_refusal(scope, headers)
        if refusal is not None:
            await _answer(send, *refusal)
        elif scope["method"] in WRITES:
            await self._write(scope, receive, send, kind, limit)
        else:
            await self.app(scope, receive, send)

    async def _write(self, scope, receive, send, kind: str, limit: int) -> None:
        """A write, counted against its client address while it is open."""
        address = (scope.get("client") or ("?",))[0]
        if self._writes[address] >= MAX_WRITES_PER_ADDRESS:
            await _answer(send, 429, f"{MAX_WRITES_PER_ADDRESS} requests from this address are "
                          "still sending their bodies or being answered; retry when one is "
                          "done", ((b"retry-after", b"1"),))
            return
        self._writes[address] += 1
        try:
            body, refusal = await self._read_body(receive, limit)
            if refusal is None and body.strip() and kind not in JSON_TYPES + YAML_TYPES:
                refusal = (415, "send the body as application/json or application/yaml")
            if refusal is not None:
                await _answer(send, *refusal)
                return
            await self.app(scope, _replay(body, receive), send)
        finally:
            self._writes[address] -= 1
            if not self._writes[address]:
                del self._writes[address]

    def _refusal(self, scope, headers: dict[str, str], limit: int) -> tuple[int, str] | None:
        target = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        if target > self.max_target:
            return 414, f"the URL is longer than {self.max_target} bytes"
        if sum(len(k) + len(v) for k, v in scope["headers"]) > MAX_HEADERS:
            return 431, f"the request headers are larger than {MAX_HEADERS} bytes"
        if self.hosts is not None and "host" in headers:
            name = host_name(headers["host"])
            if name is None or not (is_loopback(name) or name in self.hosts):
                return 400, (f"Host {headers['host']!r} is not served here: this server listens "
                             "on loopback and answers to localhost, 127.x.x.x and [::1] only "
                             "(`weightsearch serve --allow-host NAME` adds a reverse proxy's "
                             "name)")
        if sum(k.lower() == b"content-type" for k, _ in scope["headers"]) > 1:
            # The guard and the route could read different ones: the limits would not hold.
            return 400, "the request has more than one Content-Type header; send one"
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            return 413, _too_large(limit, limit == self.max_yaml_body)
        if scope["method"] in WRITES and not _same_origin(headers):
            return 403, "cross-origin writes are refused"
        return None

    async def _read_body(self, receive, limit: int) -> tuple[bytes, tuple[int, str] | None]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        chunks, size = [], 0
        while True:
            # The next byte is due when the average rate would fall below MIN_BODY_RATE.
            due = min(BODY_TIMEOUT_S, BODY_GRACE_S + (size + 1) / MIN_BODY_RATE)
            try:  # wait_for, not timeout_at: Python 3.10 has no timeout_at
                message = await asyncio.wait_for(receive(), max(0.0, start + due - loop.time()))
            except (asyncio.TimeoutError, TimeoutError):  # two classes before Python 3.11
                return b"", (408, f"the request body did not arrive in time: send it whole "
                             f"within {BODY_TIMEOUT_S:.0f} s, at {MIN_BODY_RATE} bytes/s at least")
            if message["type"] == "http.disconnect":
                return b"", (400, "the client disconnected")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return b"", (413, _too_large(limit, limit == self.max_yaml_body))
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None


def _too_large(limit: int, yaml_body: bool) -> str:
    if yaml_body:
        return (f"a YAML body may hold {limit} bytes (a study file holds a few hundred); send a "
                "larger one as application/json")
    return f"the body is larger than {limit} bytes"


def _same_origin(headers: dict[str, str]) -> bool:
    if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = headers.get("origin")
    if origin is None:  # not a browser, or a same-origin request of an old one
        return True
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc == headers.get("host", "")


def _replay(body: bytes, receive):
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _token_refusal(scope, headers: dict[str, str]) -> tuple[int, str, tuple] | None:
    """401 or 403 for a write to a route that takes the token, from the headers alone (the
    routes check again, through `weightsearch.service.deps.authorized`)."""
    app = scope.get("app")
    token = getattr(getattr(app, "state", None), "token", "")
    if not token or not _needs_token(app, scope):
        return None
    scheme, _, given = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return 401, "send 'Authorization: Bearer <token>'", ((b"www-authenticate", b"Bearer"),)
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        return 403, "wrong bearer token", ()
    return None


def _needs_token(app, scope) -> bool:
    """Whether the route this request reaches depends on the bearer check."""
    from starlette.routing import Match

    from weightsearch.service.deps import authorized

    for route in leaf_routes(getattr(app, "routes", ())):
        if route.matches(scope)[0] is Match.FULL:
            stack = list(getattr(getattr(route, "dependant", None), "dependencies", ()))
            while stack:
                dependant = stack.pop()
                if dependant.call is authorized:
                    return True
                stack.extend(dependant.dependencies)
            return False
    return False


def leaf_routes(routes: Iterable[Any]) -> Iterator[Any]:
    """The routes themselves, in matching order: FastAPI wraps each included router in one
    route (`original_router` holds its own). The service includes its routers unprefixed."""
    stack = [iter(routes)]
    while stack:
        route = next(stack[-1], None)
        if route is None:
            stack.pop()
        elif hasattr(route, "original_router"):
            stack.append(iter(route.original_router.routes))
        else:
            yield route


async def _answer(send, status: int, detail: str,
                  headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    body = json.dumps({"detail": detail, "problems": []}).encode()  # the service's error shape
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *headers]})
    await send({"type": "http.response.body", "body": body})
