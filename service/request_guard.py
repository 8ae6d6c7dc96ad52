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
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Collection
from urllib.parse import urlsplit

from weightsearch.service.safe_body import JSON_TYPES, YAML_TYPES, media_type

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MAX_BODY = 64 << 10  # a study file is a few hundred bytes
MAX_YAML_BODY = 16 << 10  # libyaml with our checks: 16 KiB in 10-40 ms (BENCHMARKS.md)
MAX_TARGET = 8192
MAX_HEADERS = 16 << 10  # h11 bounds only heads that arrive in several reads


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

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        kind = media_type(headers.get("content-type", ""))
        limit = self.max_yaml_body if kind in YAML_TYPES else self.max_body
        refusal = self._refusal(scope, headers, limit)
        if refusal is None and scope["method"] in WRITES:
            body, refusal = await self._read_body(receive, limit)
            if refusal is None and body.strip() and kind not in JSON_TYPES + YAML_TYPES:
                refusal = (415, "send the body as application/json or application/yaml")
            if refusal is None:
                receive = _replay(body, receive)
        if refusal is not None:
            await _answer(send, *refusal)
            return
        await self.app(scope, receive, send)

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
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            return 413, _too_large(limit, limit == self.max_yaml_body)
        if scope["method"] in WRITES and not _same_origin(headers):
            return 403, "cross-origin writes are refused"
        return None

    async def _read_body(self, receive, limit: int) -> tuple[bytes, tuple[int, str] | None]:
        chunks, size = [], 0
        while True:
            message = await receive()
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


async def _answer(send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail, "problems": []}).encode()  # the service's error shape
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
