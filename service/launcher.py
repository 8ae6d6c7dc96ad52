"""Starting `weightsearch launch|resume` as background jobs of the server.

They run as subprocesses, so the server process never imports ray (or torch) and a crashed
sweep cannot take the server down.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from service.jobs import Job, JobTable
from studies import schema

if TYPE_CHECKING:  # only for the hint: sweep.spec loads in the background, after start-up
    from sweep.spec import StudySpec

# Study files read at once (each within milliseconds: YAML bodies are capped at 16 KiB); more
# get 429 with Retry-After, so a burst of bodies cannot hold the interpreter while /health waits.
PARSE_SLOTS = 1


class AlreadyLaunching(Exception):
    def __init__(self, study: str, job: int) -> None:
        super().__init__(f"study {study!r} is being launched by job {job}; GET /jobs/{job} "
                         "follows it")
        self.job = job


class Launcher:
    """Runs `program launch|resume ... --storage <storage_url>` as jobs of `jobs`; the study
    files it launches and the jobs' logs go to `runs`."""

    def __init__(self, storage_url: str, program: list[str], runs: Path, jobs: JobTable) -> None:
        self.storage_url = storage_url
        self.program = program
        self.runs = runs
        self.jobs = jobs
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
        with self._launching:  # the check and the start as one step: exactly once per name
            running = self.launching(spec.study)
            if running is not None:
                raise AlreadyLaunching(spec.study, running.id)
            return self._launch(spec)

    def _launch(self, spec: StudySpec) -> dict:
        self.runs.mkdir(parents=True, exist_ok=True)
        spec_file = self.runs / f"{spec.study}-{dt.datetime.now():%Y%m%d-%H%M%S-%f}.json"
        spec_file.write_text(json.dumps(spec.to_dict(), indent=2))
        started = self._spawn(["launch", str(spec_file), "--storage", self.storage_url],
                              spec.study, spec.study)
        return {"study": spec.study, **started}

    def resume(self, name: str) -> dict:
        started = self._spawn(["resume", name, "--storage", self.storage_url],
                              name.replace(schema.SEPARATOR, "_"), name)
        return {"study": name, **started}

    def _spawn(self, argv: list[str], label: str, study: str) -> dict:
        self.runs.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        log_path = self.runs / f"{label}-{stamp}.log"
        job = self.jobs.start(argv[0], study, [*self.program, *argv], log_path)
        return {"job": job.id, "pid": job.proc.pid, "log": str(log_path)}
