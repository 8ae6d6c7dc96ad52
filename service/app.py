"""The REST service: read studies, recommend a weight, launch or resume a study; and the
results site over the same data (`weightsearch.service.ui`).

`create_app` builds the app: the shared objects on `app.state` (`weightsearch.service.deps` hands
them to the routes), the request guard, the offline docs, one error shape, and a router per resource
(`weightsearch.service.routes`). Launch and resume run `weightsearch launch|resume` as background
subprocesses (`weightsearch.service.launcher`), so the server never imports ray or torch.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from weightsearch.core.errors import ConfigError
from weightsearch.service.database import StudyDatabase, warm_up
from weightsearch.service.docs import add_offline_docs
from weightsearch.service.jobs import JobTable
from weightsearch.service.launcher import Launcher
from weightsearch.service.request_guard import RequestGuard

if TYPE_CHECKING:  # fastapi is the serve extra's: imported when an app is built
    from fastapi import FastAPI


def create_app(storage_url: str, token_env: str = "WEIGHTSEARCH_TOKEN",
               require_token: bool = False, refresh_s: float = 5.0,
               log_dir: str | os.PathLike | None = None, command: list[str] | None = None,
               hosts: Sequence[str] | None = None) -> FastAPI:
    """The FastAPI app.

    Whenever $<token_env> is set, every write route needs `Authorization: Bearer <token>`
    (a reverse proxy may front a loopback server); require_token: refuse to start without it
    (the server listens beyond loopback). refresh_s: how stale the recommender's evidence may get.
    log_dir: where launched runs write their study file and log. command: the program that
    launch/resume run, `weightsearch` by default (the same interpreter, `-m weightsearch.cli`).
    hosts: None answers any `Host` header; a list (a server bound to loopback) answers only
    loopback names and these, against DNS rebinding.
    """
    from fastapi import FastAPI

    from weightsearch import __version__
    from weightsearch.service.db_calls import Probe
    from weightsearch.service.deps import describe_bearer
    from weightsearch.service.error_handlers import install_error_handlers
    from weightsearch.service.routes import health, jobs, recommend, runs, studies
    from weightsearch.service.ui import routes as site

    token = os.environ.get(token_env, "")
    if require_token and not token:
        raise ConfigError(f"the service requires a bearer token but ${token_env} is not set; "
                          f"export {token_env}=<secret>")
    if token and not (token.isascii() and token.isprintable() and token == token.strip()
                      and " " not in token):
        # A client's header value is ASCII and stripped: such a token could never match.
        raise ConfigError(f"${token_env} must be printable ASCII without spaces (a client "
                          "sends it in an HTTP header, where it could never match); set it "
                          "to e.g. the output of `python -c 'import secrets; "
                          "print(secrets.token_urlsafe())'`")
    database = StudyDatabase(storage_url, refresh_s)
    threading.Thread(target=warm_up, args=(database,), daemon=True).start()
    app = FastAPI(title="weightsearch", version=__version__,
                  description="Weight-search studies of the central task (MT-DNN + SIWLM).",
                  docs_url=None, redoc_url=None)
    app.state.token = token
    app.state.database = database
    app.state.probe = Probe(storage_url)
    app.state.jobs = JobTable()
    app.state.launcher = Launcher(
        storage_url, list(command or [sys.executable, "-m", "weightsearch.cli"]),
        Path(log_dir) if log_dir else None,
        app.state.jobs)
    app.add_middleware(RequestGuard, hosts=hosts)
    add_offline_docs(app)
    install_error_handlers(app)
    describe_bearer(app, token_env)
    # In this order (the order of the paths in the schema; the first route whose path matches
    # names the methods of a 405): reads, then the writes that start runs.
    for router in (health.router, studies.router, recommend.make_router(), jobs.router,
                   runs.router, site.router):
        app.include_router(router)
    return app
