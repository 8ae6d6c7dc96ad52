"""Every error answers one shape, ErrorBody: {"detail": str, "problems": [str, ...]}.

A handler per kind of exception turns it into that body: the project's own errors (400, or 503
when the storage fails), invalid parameters (422), HTTP errors of the routes and of Starlette
(404, 405, ...), and anything unexpected (500, details only in the server's log).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from weightsearch.errors import ConfigError, StorageError, WeightsearchError

log = logging.getLogger("weightsearch.service")
MAX_PROBLEMS = 20  # listed in one answer; a hostile body can have thousands


def error_response(code: int, detail: str, problems: list[str] | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=code, headers=headers,
                        content={"detail": detail, "problems": problems or []})


async def _user_error(request: Request, exc: WeightsearchError) -> JSONResponse:
    code = 503 if isinstance(exc, StorageError) else 400
    if not isinstance(exc, ConfigError):
        return error_response(code, str(exc))
    problems = exc.problems[:MAX_PROBLEMS]
    if len(exc.problems) > MAX_PROBLEMS:
        problems.append(f"... and {len(exc.problems) - MAX_PROBLEMS} more")
    return error_response(code, str(ConfigError(problems, exc.source)), problems)


async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    problems = [f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}"
                for e in exc.errors()]
    return error_response(422, f"invalid request: {'; '.join(problems)}", problems)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    return error_response(exc.status_code, str(exc.detail), headers=exc.headers)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal error; the server's log has the details")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(WeightsearchError, _user_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)
