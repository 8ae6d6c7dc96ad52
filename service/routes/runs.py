"""Starting runs: POST /studies launches a study file, POST /studies/{name}/resume continues a
stored study. Both make the checks the command makes before its first write, answering its
message as a 4xx, then answer 202 with the job that runs `weightsearch launch|resume`."""

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from weightsearch.core.errors import ConfigError
from weightsearch.service.database import StudyDatabase
from weightsearch.service.deps import Database, Launching, authorized
from weightsearch.service.launcher import RETRY_AFTER_S, AlreadyLaunching, Launcher, TooManyJobs
from weightsearch.service.models import STUDY_FILE_BODY, Started, errors
from weightsearch.service.preflight import bounded, check_launch, check_resume
from weightsearch.service.safe_body import parse_body
from weightsearch.studies.schema import study_name_problem

if TYPE_CHECKING:  # only for hints: the spec module loads in the background at start-up
    from weightsearch.sweep.spec import StudySpec

router = APIRouter()


@router.post("/studies", status_code=202, dependencies=[Depends(authorized)],
             response_model=Started, openapi_extra=STUDY_FILE_BODY,
             responses=errors(400, 401, 403, 408, 409, 413, 415, 429, 503))
async def launch(request: Request, database: Database, launcher: Launching) -> dict:
    """Body: the study file, as application/yaml or application/json (aliases refused,
    nesting bounded). Checks what `weightsearch launch` checks before it writes (the data
    included), then starts it."""
    text = (await request.body()).decode("utf-8", errors="replace")
    # Parsing, the data checks and the database lookup run in worker threads: the event loop
    # keeps answering other requests (/health) meanwhile.
    spec = await run_in_threadpool(_read_study, text, request.headers.get("content-type", ""),
                                   database, launcher)
    await bounded(check_launch, spec, launcher.storage_url)
    return await run_in_threadpool(_start_study, spec, database, launcher)


def _read_study(text: str, content_type: str, database: StudyDatabase,
                launcher: Launcher) -> "StudySpec":
    if not launcher.parse_slots.acquire(blocking=False):
        raise HTTPException(429, "the server is reading other study files; retry in a "
                            "second", headers={"Retry-After": "1"})
    try:
        spec = _parse_study(text, content_type)
    finally:
        launcher.parse_slots.release()
    _refuse_existing(spec.study, database, launcher)
    return spec


def _parse_study(text: str, content_type: str) -> "StudySpec":
    from weightsearch.sweep.spec import load_study_spec

    source = parse_body(text, content_type) if text.strip() else None
    if not isinstance(source, dict) or not source:
        raise ConfigError("the body must be a study file (a YAML or JSON mapping)")
    try:
        return load_study_spec(source)
    except ConfigError as exc:
        raise _with_path_hint(exc) from None


def _refuse_existing(study: str, database: StudyDatabase, launcher: Launcher) -> None:
    # A launch job of this name runs until its driver has written the study: it counts as
    # the study existing, whatever the timing of the second request.
    if launcher.launching(study) is None and database.exists(study):
        raise HTTPException(409, f"study {study!r} already exists; "
                            f"POST /studies/{study}/resume continues it")


def _start_study(spec: "StudySpec", database: StudyDatabase, launcher: Launcher) -> dict:
    try:
        _refuse_existing(spec.study, database, launcher)  # again: the checks took a while
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
    from weightsearch.trainer.config import RELATIVE_PATHS

    # The trainer's rule for files (a file's folder) is not a POST's: said once, below.
    problems = [p.replace(f" {RELATIVE_PATHS}", "") for p in exc.problems]
    return ConfigError([*problems, "paths in a POSTed study file that are not absolute "
                        "start at the server's working directory, not at the client's; send "
                        "absolute paths (data_dir, workdir, cache_dir, encoder)"], exc.source)


# {name:path}, not {name}: a name with '/' (a central-task study's) gets a 404 that says what
# resume takes, rather than the bare one of no route.
@router.post("/studies/{name:path}/resume", status_code=202, dependencies=[Depends(authorized)],
             response_model=Started,
             responses=errors(400, 401, 403, 404, 409, 422, 429, 503))
async def resume(name: str, database: Database, launcher: Launching) -> dict:
    # Checks what `weightsearch resume` checks before it writes, then starts it. (No
    # docstring: FastAPI would publish it as the operation's description.)
    problem = study_name_problem(name, "name")
    if problem:  # 404: no study can have this name (a schema-valid string, so not a 400)
        raise HTTPException(404, f"no study named {name!r} can be resumed: {problem}; resume "
                            "takes the name a study was launched with, without /<central task>")
    storage = await run_in_threadpool(_stored, name, database)
    await bounded(check_resume, name, storage, launcher.storage_url)
    return await run_in_threadpool(_resume, name, launcher)


def _stored(name: str, database: StudyDatabase) -> Any:
    """The storage holding study `name`; 404 without one."""
    if not database.exists(name):
        raise HTTPException(404, f"no study named {name!r}; GET /studies lists them")
    return database.storage()


def _resume(name: str, launcher: Launcher) -> dict:
    try:
        return launcher.resume(name)
    except TooManyJobs as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": str(RETRY_AFTER_S)}) from None
