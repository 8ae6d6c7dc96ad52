"""What the routes need, as FastAPI dependencies: the study database, the job table, the
launcher, and the bearer-token check on writes.

`create_app` puts one of each on `app.state`; the dependencies read them from the request's
app, so the routers are plain module-level objects and several apps can share a process (the
tests build one per case).
"""

# No `from __future__ import annotations`: FastAPI reads these signatures at runtime.
import hmac
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from weightsearch.service.database import StudyDatabase
from weightsearch.service.jobs import JobTable
from weightsearch.service.launcher import Launcher

BEARER_DESCRIPTION = ("the value of ${token_env}; needed by every write route whenever it is "
                      "set on the server")
DEFAULT_TOKEN_ENV = "WEIGHTSEARCH_TOKEN"

# One scheme object for every app; `describe_bearer` names each app's own variable in its schema.
bearer = HTTPBearer(auto_error=False,
                    description=BEARER_DESCRIPTION.format(token_env=DEFAULT_TOKEN_ENV))


async def database(request: Request) -> StudyDatabase:
    return request.app.state.database


async def job_table(request: Request) -> JobTable:
    return request.app.state.jobs


async def launcher(request: Request) -> Launcher:
    return request.app.state.launcher


Database = Annotated[StudyDatabase, Depends(database)]
Jobs = Annotated[JobTable, Depends(job_table)]
Launching = Annotated[Launcher, Depends(launcher)]


def authorized(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> None:
    """Write routes depend on this: with a token set on the server, the request must bear it."""
    token: str = request.app.state.token
    if not token:
        return
    if credentials is None:
        raise HTTPException(401, "send 'Authorization: Bearer <token>'",
                            headers={"WWW-Authenticate": "Bearer"})
    if not hmac.compare_digest(credentials.credentials.strip().encode(), token.encode()):
        raise HTTPException(403, "wrong bearer token")


def describe_bearer(app: FastAPI, token_env: str) -> None:
    """Makes the app's OpenAPI schema name `token_env` in the bearer scheme's description."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()  # which FastAPI also keeps in app.openapi_schema
        schemes = schema.get("components", {}).get("securitySchemes", {})
        if bearer.scheme_name in schemes:
            schemes[bearer.scheme_name]["description"] = \
                BEARER_DESCRIPTION.format(token_env=token_env)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI documents this override
