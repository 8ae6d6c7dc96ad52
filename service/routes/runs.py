"""Starting runs: POST /studies launches a study file, POST /studies/{name}/resume continues a
stored study. Both answer 202 with the job that runs `weightsearch launch|resume`."""

from fastapi import APIRouter, Depends, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from weightsearch.core.errors import ConfigError
from weightsearch.service.database import StudyDatabase
from weightsearch.service.deps import Database, Launching, authorized
from weightsearch.service.launcher import RETRY_AFTER_S, AlreadyLaunching, Launcher, TooManyJobs
from weightsearch.service.models import STUDY_FILE_BODY, Started, errors
from weightsearch.service.safe_body import parse_body

router = APIRouter()


@router.post("/studies", status_code=202, dependencies=[Depends(authorized)],
             response_model=Started, openapi_extra=STUDY_FILE_BODY,
             responses=errors(400, 401, 403, 409, 413, 415, 429, 503))
async def launch(request: Request, database: Database, launcher: Launching) -> dict:
    """Body: the study file, as application/yaml or application/json (aliases refused,
    nesting bounded). Starts `weightsearch launch`."""
    text = (await request.body()).decode("utf-8", errors="replace")
    # Parsing and the database lookup run in a worker thread: the event loop keeps
    # answering other requests (/health) meanwhile.
    return await run_in_threadpool(_start_study, text, request.headers.get("content-type", ""),
                                   database, launcher)


def _start_study(text: str, content_type: str, database: StudyDatabase,
                 launcher: Launcher) -> dict:
    if not launcher.parse_slots.acquire(blocking=False):
        raise HTTPException(429, "the server is reading other study files; retry in a "
                            "second", headers={"Retry-After": "1"})
    try:
        return _read_and_start(text, content_type, database, launcher)
    finally:
        launcher.parse_slots.release()


def _read_and_start(text: str, content_type: str, database: StudyDatabase,
                    launcher: Launcher) -> dict:
    from weightsearch.sweep.spec import load_study_spec

    source = parse_body(text, content_type) if text.strip() else None
    if not isinstance(source, dict) or not source:
        raise ConfigError("the body must be a study file (a YAML or JSON mapping)")
    try:
        spec = load_study_spec(source)
    except ConfigError as exc:
        raise _with_path_hint(exc) from None
    try:
        # A launch job of this name runs until its driver has written the study: it counts
        # as the study existing, whatever the timing of the second request.
        if launcher.launching(spec.study) is None and database.exists(spec.study):
            raise HTTPException(409, f"study {spec.study!r} already exists; "
                                f"POST /studies/{spec.study}/resume continues it")
        return launcher.launch(spec)
    except AlreadyLaunching as exc:
        raise HTTPException(409, str(exc)) from None
    except TooManyJobs as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": str(RETRY_AFTER_S)}) from None


def _with_path_hint(exc: ConfigError) -> ConfigError:
    """A POSTed study file has no folder of its own: its relative paths start at the server's
    working directory, which the client cannot see. Say so where a path was not found."""
    if not any("does not exist" in p or "not found" in p for p in exc.problems):
        return exc
    return ConfigError([*exc.problems, "paths in a POSTed study file that are not absolute "
                        "start at the server's working directory, not at the client's; send "
                        "absolute paths (data_dir, workdir, cache_dir, encoder)"], exc.source)


@router.post("/studies/{name:path}/resume", status_code=202, dependencies=[Depends(authorized)],
             response_model=Started, responses=errors(401, 403, 404, 422, 429, 503))
def resume(name: str, database: Database, launcher: Launching) -> dict:
    if not database.exists(name):
        raise HTTPException(404, f"no study named {name!r}; GET /studies lists them")
    try:
        return launcher.resume(name)
    except TooManyJobs as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": str(RETRY_AFTER_S)}) from None
