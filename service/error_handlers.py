"""Every error answers one shape, ErrorBody: {"detail": str, "problems": [str, ...]}.

`detail` is one line saying what is wrong: the problem itself, or, when there are several
(validation of a study file or of query parameters), how many and of what; `problems` then
lists them one by one. A single problem is not repeated in `problems` (it is empty), so a
client reads `detail` always and `problems` when it has entries.

A handler per kind of exception turns it into that body: the project's own errors (400, or 503
when the storage fails), invalid parameters (422), HTTP errors of the routes and of Starlette
(404, 405, ...), and anything unexpected (500, details only in the server's log).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from weightsearch.core.errors import ConfigError, StorageError, WeightsearchError

log = logging.getLogger("weightsearch.service")
MAX_PROBLEMS = 20  # listed in one answer; a hostile body can have thousands


def error_response(code: int, detail: str, problems: list[str] | None = None,
                   headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=code, headers=headers,
                        content={"detail": detail, "problems": problems or []})


async def _user_error(request: Request, exc: WeightsearchError) -> JSONResponse:
    code = 503 if isinstance(exc, StorageError) else 400
    if not isinstance(exc, ConfigError):
        return error_response(code, str(exc))
    where = f" in {exc.source}" if exc.source else ""
    return _listed(code, f"invalid configuration{where}", exc.problems)


async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    problems = [f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}"
                for e in exc.errors()]
    return _listed(422, "invalid request", problems)


def _listed(code: int, what: str, problems: list[str]) -> JSONResponse:
    """One problem: it is the detail. Several: the detail counts them, `problems` lists them
    (at most MAX_PROBLEMS, then how many more)."""
    if len(problems) == 1:
        return error_response(code, f"{what}: {problems[0]}")
    shown = problems[:MAX_PROBLEMS]
    if len(problems) > MAX_PROBLEMS:
        shown.append(f"... and {len(problems) - MAX_PROBLEMS} more")
    return error_response(code, f"{what}: {len(problems)} problems, each in `problems`", shown)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    headers = exc.headers
    if exc.status_code == 405:
        headers = {**(headers or {}), **_allow(request)}
    return error_response(exc.status_code, str(exc.detail), headers=headers)


def _allow(request: Request) -> dict[str, str]:
    """`Allow` listing every method of every route whose path matches: Starlette names only
    the first such route's (OPTIONS /studies would say GET alone, without POST)."""
    from starlette.routing import Match

    from weightsearch.service.request_guard import leaf_routes

    methods: set[str] = set()
    for route in leaf_routes(request.app.routes):
        route_methods = getattr(route, "methods", None)
        if route_methods and route.matches(request.scope)[0] is not Match.NONE:
            methods |= route_methods
    return {"Allow": ", ".join(sorted(methods))} if methods else {}


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    from weightsearch.studies.storage_failures import storage_failure

    failure = storage_failure(exc, request.app.state.database.url)
    if failure is not None:  # the study database failed: the service is unavailable, not buggy
        log.warning("%s %s: %s", request.method, request.url.path, failure)
        return error_response(503, str(failure))
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal error; the server's log has the details")


def install_error_handlers(app: FastAPI) -> None:
    # FastAPI's decorator, which calls add_exception_handler: Starlette's annotation of that
    # wants handlers of any Exception, though it calls each with its class only.
    app.exception_handler(WeightsearchError)(_user_error)
    app.exception_handler(RequestValidationError)(_invalid_request)
    app.exception_handler(StarletteHTTPException)(_http_error)
    app.exception_handler(Exception)(_internal_error)
