"""The launches and resumes this server started, as resources: list, follow, cancel.

Each child runs in its own session (a Ctrl-C of the server does not stop it), so cancelling
signals the whole process group: `weightsearch launch` and the Ray workers it starts. SIGTERM
first, so the sweep can mark its trials; SIGKILL after `grace_s` if the group is still there.
A thread per child waits on it, so a finished child is reaped at once instead of staying
defunct. The table keeps every running job and the newest `keep_finished` finished ones.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

LOG_TAIL_BYTES = 64 << 10
GRACE_S = 30.0  # Ray's driver takes several seconds to stop its workers on SIGTERM
KEEP_FINISHED = 200


@dataclass
class Job:
    id: int
    kind: str  # "launch" | "resume"
    study: str
    log: Path
    proc: subprocess.Popen
    started: float = field(default_factory=time.time)
    ended: float | None = None
    cancelled: bool = False

    @property
    def state(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "cancelling" if self.cancelled else "running"
        if self.cancelled:
            return "cancelled"
        return "succeeded" if code == 0 else "failed"

    def last_line(self) -> str:
        """The log's last line the driver itself wrote: what the run reports about its progress
        (Ray's and the C++ runtime's lines, stack frames above all, are skipped)."""
        return progress_line(self.tail(16384))

    def tail(self, size: int = LOG_TAIL_BYTES) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(max(0, self.log.stat().st_size - size))
                return f.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def updated(self) -> float | None:
        try:
            return self.log.stat().st_mtime
        except FileNotFoundError:
            return None

    def to_dict(self) -> dict:
        return {"id": self.id, "kind": self.kind, "study": self.study, "state": self.state,
                "pid": self.proc.pid, "returncode": self.proc.poll(), "log": str(self.log),
                "started": _utc(self.started), "ended": _utc(self.ended),
                "updated": _utc(self.updated()),
                "progress": self.last_line()}


# Lines a driver's log holds that are not the driver's own words: indented stack frames, the
# C++ runtime's failure-signal dump ("*** SIGTERM received", "PC: @ 0x..."), glog and Python
# logging stamps, worker output Ray prefixes with "(pid=...)", Tune's boxed tables.
_NOISE = re.compile(r"^(\s|\*\*\*|PC: |@ |\(|\[\d{4}-\d\d-\d\d|\d{4}-\d\d-\d\d[ T]\d"
                    r"|[EWIF]\d{4} |[│╭╰├┌└─+|])|\.cc:\d+\]|^Traceback ")


def progress_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    own = [line for line in lines if not _NOISE.search(line)]
    return (own or lines or [""])[-1]


def _utc(stamp: float | None) -> dt.datetime | None:
    return None if stamp is None else dt.datetime.fromtimestamp(stamp, tz=dt.timezone.utc)


class JobTable:
    def __init__(self, grace_s: float = GRACE_S, keep_finished: int = KEEP_FINISHED) -> None:
        self._jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.grace_s = grace_s
        self.keep_finished = keep_finished

    def start(self, kind: str, study: str, argv: list[str], log: Path,
              env: dict[str, str] | None = None) -> Job:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the owner's alone
        with os.fdopen(fd, "w") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        with self._lock:
            job = Job(next(self._ids), kind, study, log, proc)
            self._jobs[job.id] = job
            self._prune()
        threading.Thread(target=self._reap, args=(job,), daemon=True).start()
        return job

    def _reap(self, job: Job) -> None:
        job.proc.wait()
        job.ended = time.time()

    def _prune(self) -> None:
        """Forget the oldest finished jobs beyond `keep_finished` (their logs stay on disk)."""
        finished = [j for j in self._jobs.values() if j.proc.poll() is not None]
        for job in finished[:max(0, len(finished) - self.keep_finished)]:
            del self._jobs[job.id]

    def all(self) -> list[Job]:
        with self._lock:
            return list(self._jobs.values())

    def get(self, job_id: int) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def cancel(self, job: Job) -> None:
        """SIGTERM to the job's process group, SIGKILL `grace_s` later if it still runs; a
        finished job is left as it is."""
        if job.proc.poll() is not None or job.cancelled:
            return
        job.cancelled = True
        _signal_group(job, signal.SIGTERM)
        threading.Thread(target=self._kill_after_grace, args=(job,), daemon=True).start()

    def _kill_after_grace(self, job: Job) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            job.proc.wait(timeout=self.grace_s)
            return
        _signal_group(job, signal.SIGKILL)


def _signal_group(job: Job, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.killpg(job.proc.pid, sig)
