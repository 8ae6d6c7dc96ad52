"""The REST service: read studies, recommend a weight, launch or resume a study.

Launch and resume run `weightsearch launch|resume` as background subprocesses, so the server
process never imports ray (or torch) and a crashed sweep cannot take the server down.
GET /recommend answers from evidence cached in memory; a background refresh re-reads the
database when a cheap fingerprint (studies and trial counts) changed, at most every `refresh_s`.
"""

from __future__ import annotations

import datetime as dt
import hmac
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Literal

from studies import schema
from studies.recommend import load_evidence, merge_evidence, prior_evidence, study_evidence
from weightsearch.errors import ConfigError, StorageError, WeightsearchError

log = logging.getLogger("weightsearch.service")
TaskType = Literal["classification", "regression", "ranking"]


class _Database:
    """The storage opened once (opening checks the schema: too slow per request), and the
    recommender's evidence, cached and refreshed in the background."""

    def __init__(self, url: str, refresh_s: float) -> None:
        self.url = url
        self.refresh_s = refresh_s
        self._storage = None
        self._lock = threading.Lock()
        self._evidence = None
        self._fingerprint: tuple | None = None
        self._checked = 0.0
        self._refreshing = False

    def storage(self):
        """The Optuna storage, or None while a SQLite file does not exist yet."""
        from studies.reading import open_quiet, sqlite_file_missing

        if self._storage is None:
            with self._lock:
                if self._storage is None and not sqlite_file_missing(self.url):
                    self._storage = open_quiet(self.url)
        return self._storage

    def evidence(self):
        if self._evidence is None:
            self._refresh()
        elif time.monotonic() - self._checked > self.refresh_s and not self._refreshing:
            self._refreshing = True
            threading.Thread(target=self._refresh, daemon=True).start()
        return self._evidence

    def _refresh(self) -> None:
        from studies.reading import fingerprint, read_all

        try:
            storage = self.storage()
            if storage is None:
                self._evidence = load_evidence(None)
            else:
                fp = fingerprint(storage)
                if fp != self._fingerprint or self._evidence is None:
                    measured = study_evidence(read_all(storage))
                    self._evidence = merge_evidence(prior_evidence(), measured)
                    self._fingerprint = fp
        except Exception:  # keep serving the last good evidence; the log says why
            log.exception("refreshing the recommender's evidence from %s failed", self.url)
            if self._evidence is None:
                self._evidence = load_evidence(None)
        finally:
            self._checked = time.monotonic()
            self._refreshing = False


def _redacted(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # a bad URL is reported by /studies; /health must answer anyway
        return "<invalid URL>"


def create_app(storage_url: str, token_env: str = "WEIGHTSEARCH_TOKEN",
               require_token: bool = False, refresh_s: float = 5.0,
               log_dir: str | os.PathLike | None = None):
    """The FastAPI app. `require_token`: POST routes need `Authorization: Bearer $<token_env>`
    (set it whenever the server listens beyond loopback)."""
    from fastapi import Depends, FastAPI, HTTPException, Query, Request
    from fastapi.responses import JSONResponse

    from weightsearch import __version__

    token = os.environ.get(token_env, "")
    if require_token and not token:
        raise ConfigError(f"the service requires a bearer token but ${token_env} is not set; "
                          f"export {token_env}=<secret>")
    db = _Database(storage_url, refresh_s)
    runs = Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / "weightsearch-service"
    app = FastAPI(title="weightsearch", version=__version__,
                  description="Weight-search studies of the central task (MT-DNN + SIWLM).")

    @app.exception_handler(WeightsearchError)
    async def _user_error(request: Request, exc: WeightsearchError):
        code = 503 if isinstance(exc, StorageError) else 400
        body = {"detail": str(exc)}
        if isinstance(exc, ConfigError):
            body["problems"] = exc.problems
        return JSONResponse(status_code=code, content=body)

    def authorized(request: Request) -> None:
        if not require_token:
            return
        header = request.headers.get("authorization", "")
        if not header.lower().startswith("bearer "):
            raise HTTPException(401, "send 'Authorization: Bearer <token>'",
                                headers={"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(header[7:].strip().encode(), token.encode()):
            raise HTTPException(403, "wrong bearer token")

    def read_studies():
        from studies.reading import read_all

        storage = db.storage()
        return [] if storage is None else read_all(storage)

    def base_exists(name: str) -> list[str]:
        from studies.reading import study_names

        storage = db.storage()
        names = [] if storage is None else study_names(storage)
        return [n for n in names if n == name or schema.split_study_name(n)[0] == name]

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "version": __version__, "storage": _redacted(storage_url)}

    @app.get("/studies")
    def list_studies() -> dict:
        from studies.inspection import overview

        return {"studies": overview(read_studies())}

    @app.get("/studies/{name:path}")
    def get_study(name: str) -> dict:
        from studies.inspection import cell_rows
        from studies.reading import read_central

        names = base_exists(name)
        if not names:
            raise HTTPException(404, f"no study named {name!r}; GET /studies lists them")
        storage = db.storage()
        studies = [read_central(storage, n) for n in (names if name not in names else [name])]
        cells = cell_rows(studies)
        return {"study": name, "central_tasks": [
            {**s.summary(), "curve": [vars(w) for w in s.curve],
             "cells": [c for c in cells if c["central_task"] == s.central_task]}
            for s in studies]}

    @app.get("/recommend")
    def recommend(train_size: int = Query(gt=0, description="training examples"),
                  task_type: TaskType | None = None) -> dict:
        from studies.recommend import recommend_from

        return recommend_from(db.evidence(), train_size, task_type).to_dict()

    def spawn(argv: list[str], label: str) -> dict:
        runs.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        log_path = runs / f"{label}-{stamp}.log"
        with open(log_path, "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "weightsearch.cli", *argv],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # survives the server's Ctrl-C
            )
        return {"pid": proc.pid, "log": str(log_path)}

    @app.post("/studies", status_code=202, dependencies=[Depends(authorized)])
    async def launch(request: Request) -> dict:
        """Body: the study file as YAML text or JSON. Starts `weightsearch launch`."""
        from sweep.spec import load_study_spec

        text = (await request.body()).decode("utf-8", errors="replace")
        try:
            source = json.loads(text)
        except ValueError:
            source = text
        if not isinstance(source, dict | str) or not str(source).strip():
            raise ConfigError("the body must be a study file (YAML text or a JSON object)")
        spec = load_study_spec(source)
        if base_exists(spec.study):
            raise HTTPException(409, f"study {spec.study!r} already exists; "
                                f"POST /studies/{spec.study}/resume continues it")
        runs.mkdir(parents=True, exist_ok=True)
        spec_file = runs / f"{spec.study}-{dt.datetime.now():%Y%m%d-%H%M%S-%f}.json"
        spec_file.write_text(json.dumps(spec.to_dict(), indent=2))
        started = spawn(["launch", str(spec_file), "--storage", storage_url], spec.study)
        return {"study": spec.study, **started}

    @app.post("/studies/{name:path}/resume", status_code=202, dependencies=[Depends(authorized)])
    def resume(name: str) -> dict:
        if not base_exists(name):
            raise HTTPException(404, f"no study named {name!r}; GET /studies lists them")
        started = spawn(["resume", name, "--storage", storage_url],
                        name.replace(schema.SEPARATOR, "_"))
        return {"study": name, **started}

    return app
