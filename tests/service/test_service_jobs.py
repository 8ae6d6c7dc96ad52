"""The job table: cancelling falls back to SIGKILL, and finished jobs do not pile up."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from weightsearch.service.jobs import JobTable

# Ignores SIGTERM, as a driver stuck in a native call would.
STUBBORN = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
            "signal.SIG_IGN); print('ready', flush=True); time.sleep(120)"]
QUICK = [sys.executable, "-c", "print('done')"]


def _until(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path: Path):
    jobs = JobTable(grace_s=0.5)
    job = jobs.start("launch", "s", STUBBORN, tmp_path / "job.log")
    _until(lambda: "ready" in job.tail())
    jobs.cancel(job)
    assert job.state == "cancelling"
    time.sleep(0.2)
    assert job.proc.poll() is None, "SIGTERM should have been ignored"
    _until(lambda: job.state == "cancelled")
    assert job.proc.returncode == -9
    info = job.to_dict()
    assert info["state"] == "cancelled" and info["progress"] == "ready"
    _until(lambda: job.ended is not None)
    assert job.to_dict()["ended"] >= info["started"]


def test_the_table_keeps_running_jobs_and_the_newest_finished_ones(tmp_path: Path):
    jobs = JobTable(keep_finished=2)
    stubborn = jobs.start("launch", "long", STUBBORN, tmp_path / "long.log")
    try:
        quick = [jobs.start("resume", f"q{i}", QUICK, tmp_path / f"q{i}.log") for i in range(4)]
        _until(lambda: all(j.proc.poll() is not None for j in quick))
        last = jobs.start("resume", "last", QUICK, tmp_path / "last.log")
        kept = {j.id for j in jobs.all()}
        assert stubborn.id in kept and last.id in kept
        assert kept - {stubborn.id, last.id} == {quick[2].id, quick[3].id}
        assert jobs.get(quick[0].id) is None and (tmp_path / "q0.log").read_text() == "done\n"
    finally:
        stubborn.proc.kill()
        stubborn.proc.wait()


# The end of a driver's log after a cancel: its own last event, then what Ray's C++ runtime
# and its Python logging print while the process group goes down.
CANCELLED_LOG = """\
[sample] started rte w9 s1 | 0/4 done, 1 running
[sample] epoch 1 rte w9 s1: accuracy 0.5200 | 0/4 done, 1 running, ETA 3m
*** SIGTERM received at time=1764012345 on cpu 1 ***
PC: @     0x7f3c2a1b2c3d  (unknown)  pthread_cond_wait
    @     0x7f3c2a000000        208  absl::AbslFailureSignalHandler()
[2026-11-24 23:59:01,123 E 4242 4242] logging.cc:440: *** SIGTERM received at time=1764012345
2026-11-24 23:59:01,200\tINFO worker.py:1800 -- shutting down
(pid=4343) Traceback (most recent call last):
"""


def test_progress_is_the_drivers_own_last_line_not_ray_noise(tmp_path: Path):
    from weightsearch.service.jobs import progress_line

    assert progress_line(CANCELLED_LOG) == \
        "[sample] epoch 1 rte w9 s1: accuracy 0.5200 | 0/4 done, 1 running, ETA 3m"
    failed = CANCELLED_LOG + "weightsearch launch: error: storage sqlite:///x.db is locked\n"
    assert progress_line(failed).startswith("weightsearch launch: error: storage")
    assert progress_line("") == ""
    assert progress_line("*** SIGTERM received\n") == "*** SIGTERM received"  # nothing better
    jobs = JobTable(grace_s=0.5)
    script = f"import sys, time; sys.stdout.write({CANCELLED_LOG!r}); sys.stdout.flush()"
    job = jobs.start("launch", "sample", [sys.executable, "-c", script], tmp_path / "job.log")
    _until(lambda: job.proc.poll() is not None)
    assert job.to_dict()["progress"].startswith("[sample] epoch 1")
