"""The REST service: read studies, recommend a weight, launch or resume a study.

Launch and resume run `weightsearch launch|resume` as background subprocesses, so the server
process never imports ray (or torch) and a crashed sweep cannot take the server down.
GET /recommend answers from evidence cached in memory; a background refresh, at most every
`refresh_s`, reads only new and unfinished trials (Optuna caches finished ones per study).
"""

# No `from __future__ import annotations` here: FastAPI reads the route signatures at runtime,
# and their types (Request, ...) are imported inside create_app, out of reach of string lookups.
import datetime as dt
import hmac
import json
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from recommender.recommend import (
    ENCODER_PATTERN,
    load_evidence,
    merge_evidence,
    prior_evidence,
    study_evidence,
)
from service.docs import add_offline_docs
from service.jobs import Job, JobTable
from service.models import (
    STUDY_FILE_BODY,
    Health,
    JobInfo,
    JobList,
    Recommendation,
    Started,
    StudyDetail,
    StudyList,
    errors,
)
from service.request_guard import RequestGuard
from service.safe_body import parse_body
from studies import schema
from trainer.task_types import NAMES as TASK_TYPE_NAMES
from weightsearch.errors import ConfigError, StorageError, WeightsearchError

log = logging.getLogger("weightsearch.service")
TaskType = Literal[TASK_TYPE_NAMES]  # type: ignore[valid-type]  (from the registry)


class _Database:
    """The storage, opened once (opening checks the schema: too slow per request); every study,
    kept loaded (`StudyCache`: a refresh reads only new and unfinished trials); and the
    recommender's evidence, refreshed in the background when older than `refresh_s`."""

    def __init__(self, url: str, refresh_s: float) -> None:
        self.url = url
        self.refresh_s = refresh_s
        self._storage = None
        self._cache = None
        self._open_lock = threading.Lock()
        self._lock = threading.Lock()  # the StudyCache is not thread-safe
        self._evidence = None
        self._checked = 0.0
        self._refreshing = False

    def storage(self):
        """The Optuna storage, or None while a SQLite file does not exist yet."""
        from studies.reading import open_quiet, sqlite_file_missing

        if self._storage is None:
            with self._open_lock:
                if self._storage is None and not sqlite_file_missing(self.url):
                    self._storage = open_quiet(self.url)
        return self._storage

    def studies(self):
        """Every study, up to date (a cheap refresh); updates the evidence when they changed."""
        from studies.reading import StudyCache

        storage = self.storage()
        if storage is None:
            if self._evidence is None:
                self._evidence = load_evidence(None)
            return []
        with self._lock:
            if self._cache is None:
                self._cache = StudyCache(storage)
            changed, studies = self._cache.refresh()
            if changed or self._evidence is None:
                self._evidence = merge_evidence(prior_evidence(), study_evidence(studies))
            self._checked = time.monotonic()
        return studies

    def evidence(self):
        if self._evidence is None:
            self.refresh()
        elif time.monotonic() - self._checked > self.refresh_s and not self._refreshing:
            self._refreshing = True
            threading.Thread(target=self.refresh, daemon=True).start()
        return self._evidence

    def refresh(self) -> None:
        try:
            self.studies()
        except Exception:  # keep serving the last good evidence; the log says why
            log.exception("refreshing the recommender's evidence from %s failed", self.url)
            if self._evidence is None:
                self._evidence = load_evidence(None)
        finally:
            self._checked = time.monotonic()
            self._refreshing = False


def _warm_up(db: _Database) -> None:
    """Before the first request: read the studies, and import what reading a study file needs
    (a third of a second), so that no request pays for it."""
    import importlib

    db.refresh()
    for module in ("sweep.spec", "trainer.config"):  # sweep.spec imports the second on first use
        importlib.import_module(module)


MAX_PROBLEMS = 20  # listed in one answer; a hostile body can have thousands


def _redacted(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # a bad URL is reported by /studies; /health must answer anyway
        return "<invalid URL>"


# Study files read at once (each within milliseconds: YAML bodies are capped at 16 KiB); more
# get 429 with Retry-After, so a burst of bodies cannot hold the interpreter while /health waits.
PARSE_SLOTS = 1


def create_app(storage_url: str, token_env: str = "WEIGHTSEARCH_TOKEN",
               require_token: bool = False, refresh_s: float = 5.0,
               log_dir: str | os.PathLike | None = None, command: list[str] | None = None,
               hosts: Sequence[str] | None = None):
    """The FastAPI app.

    Whenever $<token_env> is set, every write route needs `Authorization: Bearer <token>`
    (a reverse proxy may front a loopback server); require_token: refuse to start without it
    (the server listens beyond loopback). refresh_s: how stale the recommender's evidence may get.
    log_dir: where launched runs write their study file and log. command: the program that
    launch/resume run, `weightsearch` by default (the same interpreter, `-m weightsearch.cli`).
    hosts: None answers any `Host` header; a list (a server bound to loopback) answers only
    loopback names and these, against DNS rebinding.
    """
    from fastapi import Depends, FastAPI, HTTPException, Query, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse
    from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from weightsearch import __version__

    token = os.environ.get(token_env, "")
    if require_token and not token:
        raise ConfigError(f"the service requires a bearer token but ${token_env} is not set; "
                          f"export {token_env}=<secret>")
    db = _Database(storage_url, refresh_s)
    threading.Thread(target=_warm_up, args=(db,), daemon=True).start()
    program = list(command or [sys.executable, "-m", "weightsearch.cli"])
    jobs = JobTable()
    runs = Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / "weightsearch-service"
    app = FastAPI(title="weightsearch", version=__version__,
                  description="Weight-search studies of the central task (MT-DNN + SIWLM).",
                  docs_url=None, redoc_url=None)
    app.add_middleware(RequestGuard, hosts=hosts)
    add_offline_docs(app)
    parse_slots = threading.BoundedSemaphore(PARSE_SLOTS)

    # Every error answers one shape, ErrorBody: {"detail": str, "problems": [str, ...]}.
    def error(code: int, detail: str, problems: list[str] | None = None,
              headers: dict[str, str] | None = None):
        return JSONResponse(status_code=code, headers=headers,
                            content={"detail": detail, "problems": problems or []})

    @app.exception_handler(WeightsearchError)
    async def _user_error(request: Request, exc: WeightsearchError):
        code = 503 if isinstance(exc, StorageError) else 400
        if not isinstance(exc, ConfigError):
            return error(code, str(exc))
        problems = exc.problems[:MAX_PROBLEMS]
        if len(exc.problems) > MAX_PROBLEMS:
            problems.append(f"... and {len(exc.problems) - MAX_PROBLEMS} more")
        return error(code, str(ConfigError(problems, exc.source)), problems)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError):
        problems = [f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}"
                    for e in exc.errors()]
        return error(422, f"invalid request: {'; '.join(problems)}", problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        return error(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception):
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error(500, "internal error; the server's log has the details")

    bearer = HTTPBearer(auto_error=False, description=f"the value of ${token_env}; needed by "
                        "every write route whenever it is set on the server")

    def authorized(
            credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        if not token:
            return
        if credentials is None:
            raise HTTPException(401, "send 'Authorization: Bearer <token>'",
                                headers={"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(credentials.credentials.strip().encode(), token.encode()):
            raise HTTPException(403, "wrong bearer token")

    def base_exists(name: str) -> list[str]:
        from studies.reading import study_names

        storage = db.storage()
        names = [] if storage is None else study_names(storage)
        return [n for n in names if n == name or schema.split_study_name(n)[0] == name]

    @app.get("/health", response_model=Health)
    def health() -> dict:
        return {"status": "ok", "version": __version__, "storage": _redacted(storage_url)}

    @app.get("/studies", response_model=StudyList, responses=errors(503))
    def list_studies() -> dict:
        from studies.inspection import overview

        return {"studies": overview(db.studies())}

    @app.get("/studies/{name:path}", response_model=StudyDetail,
             responses=errors(404, 422, 503))
    def get_study(name: str) -> dict:
        from studies.inspection import cell_rows

        every = db.studies()
        studies = [s for s in every if s.name == name] or \
            [s for s in every if schema.split_study_name(s.name)[0] == name]
        if not studies:
            raise HTTPException(404, f"no study named {name!r}; GET /studies lists them")
        cells = cell_rows(studies)
        return {"study": name, "central_tasks": [
            {**s.summary(), "curve": [vars(w) for w in s.curve],
             "cells": [c for c in cells if c["central_task"] == s.central_task]}
            for s in studies]}

    @app.get("/recommend", response_model=Recommendation, responses=errors(400, 422, 503))
    def recommend(train_size: int = Query(gt=0, le=10**12, description="training examples"),
                  task_type: TaskType | None = None,
                  encoder: str | None = Query(None, pattern=ENCODER_PATTERN, max_length=200),
                  stage: Literal["multitask", "finetuned"] | None = None) -> dict:
        from recommender.recommend import recommend_from

        return recommend_from(db.evidence(), train_size, task_type, encoder, stage).to_dict()

    def spawn(argv: list[str], label: str, study: str) -> dict:
        runs.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        log_path = runs / f"{label}-{stamp}.log"
        job = jobs.start(argv[0], study, [*program, *argv], log_path)
        return {"job": job.id, "pid": job.proc.pid, "log": str(log_path)}

    def find_job(job_id: int) -> Job:
        job = jobs.get(job_id)
        if job is None:
            raise HTTPException(404, f"no job {job_id}; GET /jobs lists them")
        return job

    @app.get("/jobs", response_model=JobList)
    def list_jobs() -> dict:
        return {"jobs": [j.to_dict() for j in jobs.all()]}

    @app.get("/jobs/{job_id}", response_model=JobInfo, responses=errors(404, 422))
    def get_job(job_id: int) -> dict:
        return find_job(job_id).to_dict()

    @app.get("/jobs/{job_id}/log", response_class=PlainTextResponse,
             responses=errors(404, 422))
    def job_log(job_id: int) -> str:
        """The last 64 KiB of the job's log."""
        return find_job(job_id).tail()

    @app.delete("/jobs/{job_id}", response_model=JobInfo, dependencies=[Depends(authorized)],
                responses=errors(401, 403, 404, 422))
    def cancel_job(job_id: int) -> dict:
        """Stops the job: SIGTERM to its process group, SIGKILL if it still runs after a grace
        period (state `cancelling` meanwhile); a finished job is left as it is."""
        job = find_job(job_id)
        jobs.cancel(job)
        return job.to_dict()

    @app.post("/studies", status_code=202, dependencies=[Depends(authorized)],
              response_model=Started, openapi_extra=STUDY_FILE_BODY,
              responses=errors(400, 401, 403, 409, 413, 415, 429, 503))
    async def launch(request: Request) -> dict:
        """Body: the study file, as application/yaml or application/json (aliases refused,
        nesting bounded). Starts `weightsearch launch`."""
        text = (await request.body()).decode("utf-8", errors="replace")
        # Parsing and the database lookup run in a worker thread: the event loop keeps
        # answering other requests (/health) meanwhile.
        return await run_in_threadpool(start_study, text, request.headers.get("content-type", ""))

    def start_study(text: str, content_type: str) -> dict:
        if not parse_slots.acquire(blocking=False):
            raise HTTPException(429, "the server is reading other study files; retry in a "
                                "second", headers={"Retry-After": "1"})
        try:
            return read_and_start(text, content_type)
        finally:
            parse_slots.release()

    def read_and_start(text: str, content_type: str) -> dict:
        from sweep.spec import load_study_spec

        source = parse_body(text, content_type) if text.strip() else None
        if not isinstance(source, dict) or not source:
            raise ConfigError("the body must be a study file (a YAML or JSON mapping)")
        spec = load_study_spec(source)
        if base_exists(spec.study):
            raise HTTPException(409, f"study {spec.study!r} already exists; "
                                f"POST /studies/{spec.study}/resume continues it")
        runs.mkdir(parents=True, exist_ok=True)
        spec_file = runs / f"{spec.study}-{dt.datetime.now():%Y%m%d-%H%M%S-%f}.json"
        spec_file.write_text(json.dumps(spec.to_dict(), indent=2))
        started = spawn(["launch", str(spec_file), "--storage", storage_url], spec.study,
                        spec.study)
        return {"study": spec.study, **started}

    @app.post("/studies/{name:path}/resume", status_code=202, dependencies=[Depends(authorized)],
              response_model=Started, responses=errors(401, 403, 404, 422, 503))
    def resume(name: str) -> dict:
        if not base_exists(name):
            raise HTTPException(404, f"no study named {name!r}; GET /studies lists them")
        started = spawn(["resume", name, "--storage", storage_url],
                        name.replace(schema.SEPARATOR, "_"), name)
        return {"study": name, **started}

    return app
