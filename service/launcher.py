"""Starting `weightsearch launch|resume` as background jobs of the server.

They run as subprocesses, so the server process never imports ray (or torch) and a crashed
sweep cannot take the server down.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from weightsearch.core.errors import ConfigError
from weightsearch.service.jobs import Job, JobTable
from weightsearch.studies import schema
from weightsearch.studies.urls import ENV_STORAGE

if TYPE_CHECKING:  # only for the hint: sweep.spec loads in the background, after start-up
    from weightsearch.sweep.spec import StudySpec

# Study files read at once (each within milliseconds: YAML bodies are capped at 16 KiB); more
# get 429 with Retry-After, so a burst of bodies cannot hold the interpreter while /health waits.
PARSE_SLOTS = 1


MAX_JOBS = 4  # launches and resumes running at once; each starts its own Ray and trains
RETRY_AFTER_S = 60


class TooManyJobs(Exception):
    def __init__(self, running: int) -> None:
        super().__init__(f"{running} jobs are running, the most this server starts at once; "
                         "retry when one has finished (GET /jobs lists them)")


class AlreadyLaunching(Exception):
    def __init__(self, study: str, job: int) -> None:
        super().__init__(f"study {study!r} is being launched by job {job}; GET /jobs/{job} "
                         "follows it")
        self.job = job


class Launcher:
    """Runs `program launch|resume ...` as jobs of `jobs`, with `storage_url` in the child's
    environment ($WEIGHTSEARCH_STORAGE), never on its command line; the study files it
    launches and the jobs' logs go to `runs`, a folder only this user can enter (None: a new
    private temporary folder of this server's own)."""

    def __init__(self, storage_url: str, program: list[str], runs: Path | None, jobs: JobTable,
                 max_jobs: int = MAX_JOBS) -> None:
        self.storage_url = storage_url
        self.program = program
        self.runs = None if runs is None else private_folder(runs)
        self.jobs = jobs
        self.max_jobs = max_jobs
        self.parse_slots = threading.BoundedSemaphore(PARSE_SLOTS)
        self._launching = threading.Lock()

    def launching(self, study: str) -> Job | None:
        """The running launch job of `study`, if this server started one: until its driver has
        created the study in the database, only the job table knows the name is taken."""
        return next((j for j in self.jobs.all() if j.kind == "launch" and j.study == study
                     and j.proc.poll() is None), None)

    def launch(self, spec: StudySpec) -> dict:
        """Writes the validated study file where the job can read it, and launches it; raises
        AlreadyLaunching when a launch of the same study name is running."""
        with self._launching:  # the checks and the start as one step: exactly once per name
            running = self.launching(spec.study)
            if running is not None:
                raise AlreadyLaunching(spec.study, running.id)
            self._check_capacity()
            return self._launch(spec)

    def _launch(self, spec: StudySpec) -> dict:
        folder = self._folder()
        spec_file = folder / f"{spec.study}-{dt.datetime.now():%Y%m%d-%H%M%S-%f}.json"
        _write_private(spec_file, json.dumps(spec.to_dict(), indent=2))
        started = self._spawn(["launch", str(spec_file)], spec.study, spec.study)
        return {"study": spec.study, **started}

    def resume(self, name: str) -> dict:
        with self._launching:
            self._check_capacity()
            started = self._spawn(["resume", name], name.replace(schema.SEPARATOR, "_"), name)
        return {"study": name, **started}

    def _check_capacity(self) -> None:
        running = sum(1 for j in self.jobs.all() if j.proc.poll() is None)
        if running >= self.max_jobs:
            raise TooManyJobs(running)

    def _folder(self) -> Path:
        """The folder of the jobs' study files and logs: only this user may enter it (a log can
        name the storage, a study file the data, and a user who could rename files there could
        swap the study file a launch is about to read)."""
        if self.runs is None:
            self.runs = Path(tempfile.mkdtemp(prefix="weightsearch-service-"))  # 0700, ours
        return private_folder(self.runs)

    def _spawn(self, argv: list[str], label: str, study: str) -> dict:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        log_path = self._folder() / f"{label}-{stamp}.log"
        # The storage URL (and its password) reaches the child through its environment, not
        # its argv, which every user of the machine can list.
        job = self.jobs.start(argv[0], study, [*self.program, *argv], log_path,
                              env={**os.environ, ENV_STORAGE: self.storage_url})
        return {"job": job.id, "pid": job.proc.pid, "log": str(log_path)}


def private_folder(path: Path) -> Path:
    """`path`, made if missing, as a folder of this user's that no one else can enter; refused
    (ConfigError) where another user owns it or it is a link, which this user cannot make
    private."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    found = os.lstat(path)
    if stat.S_ISLNK(found.st_mode) or found.st_uid != os.getuid():
        what = "a link" if stat.S_ISLNK(found.st_mode) else "owned by another user"
        raise ConfigError([f"log_dir: {path} is {what}, so its files could be read or swapped "
                           "by others; give a folder of your own, or leave log_dir out for a "
                           "private temporary folder"])
    if stat.S_IMODE(found.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def _write_private(path: Path, text: str) -> None:
    # O_EXCL: a fresh file, never one (or a link) that was there before.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
