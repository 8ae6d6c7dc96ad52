"""Imports that no neighbour can erase. Import A stages its studies and is held before its
publish; import B of another study starts in another PID namespace (a container on the same
host name), where A's pid means nothing, and cleans up abandoned staging studies first. A's
lease in the database keeps its staging alive: A then publishes every row. And where a
publish finds its staging gone anyway (deleted by hand), it fails loudly, exit 2, instead of
reporting rows that are not there. On SQLite and on PostgreSQL.

PID namespaces come from `unshare -p` where this machine allows it; elsewhere A's process
reports what a container's does to B: a pid that is no process here and a PID namespace of its
own (the two things a namespace changes for B's judgement)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.slow

HEADER = "central_task,task_type,train_size,central_weight,seed,metric,metric_name\n"
TASKS, PER_TASK = 3, 600  # 1,800 rows: A's rows, every one of which must be visible after

# Import A, held before its publish until GO exists; with EMULATE, its pid and PID namespace
# are another container's as B sees them.
HELD = """
import os, sys, time
from pathlib import Path
from weightsearch.studies import importer
go, emulate = Path(sys.argv[4]), sys.argv[5] == "1"
if emulate:
    real_host = importer._host_id
    importer._host_id = lambda: real_host() + "-ns2"  # another PID namespace
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    importer.os.getpid = lambda: dead  # a pid no process here has
publish = importer._publish
def held(*args, **kwargs):
    Path(str(go) + ".staged").touch()
    while not go.exists():
        time.sleep(0.05)
    return publish(*args, **kwargs)
importer._publish = held
from weightsearch.core.errors import WeightsearchError
try:
    print(importer.import_file(sys.argv[1], sys.argv[2], sys.argv[3]))
except WeightsearchError as exc:
    print(exc, file=sys.stderr)
    sys.exit(exc.exit_code)
"""


def _namespaces() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-p", "-f", "--mount-proc", "true"], capture_output=True).returncode == 0


def _file(path: Path, prefix: str) -> Path:
    lines = [HEADER]
    for t in range(TASKS):
        lines += [f"{prefix}{t},classification,{1000 + t},{1 + i % 15},{i // 15},"
                  f"{0.5 + i % 7 / 100},accuracy\n" for i in range(PER_TASK)]
    path.write_text("".join(lines))
    return path


def _start_held(tmp_path: Path, url: str, go: Path, real_namespace: bool) -> subprocess.Popen:
    a = _file(tmp_path / "a.csv", "a")
    cmd = [sys.executable, "-c", HELD, str(a), "a", url, str(go), "0" if real_namespace else "1"]
    if real_namespace:
        cmd = ["unshare", "-p", "-f", "--mount-proc", *cmd]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not Path(str(go) + ".staged").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "import A never staged its studies"
        time.sleep(0.05)
    return proc


def _rows(url: str, study: str) -> int:
    storage = optuna.storages.RDBStorage(url)
    return sum(len(storage.get_all_trials(s._study_id, deepcopy=False))
               for s in storage.get_all_studies()
               if s.study_name.startswith(f"{study}/"))


@pytest.fixture(params=["sqlite", "postgresql"])
def any_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'studies.db'}"
    return request.getfixturevalue("postgres_url")


def test_an_import_in_another_pid_namespace_cannot_erase_a_live_import(
        tmp_path: Path, any_url: str) -> None:
    real = _namespaces()
    go = tmp_path / "go"
    held = _start_held(tmp_path, any_url, go, real)
    try:
        b = _file(tmp_path / "b.csv", "b")
        cmd = [sys.executable, "-m", "weightsearch.cli", "import", str(b), "--study", "b",
               "--storage", any_url]
        if real:
            cmd = ["unshare", "-p", "-f", "--mount-proc", *cmd]
        other = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                               capture_output=True, text=True, timeout=300)
        assert other.returncode == 0, other.stderr
    finally:
        go.touch()
    _, err = held.communicate(timeout=300)
    assert held.returncode == 0, err
    assert _rows(any_url, "a") == TASKS * PER_TASK  # every row of A, none erased by B
    assert _rows(any_url, "b") == TASKS * PER_TASK


def test_a_publish_whose_staging_was_deleted_fails_loudly(tmp_path: Path, any_url: str) -> None:
    from weightsearch.studies.reading import STAGING_PREFIX

    go = tmp_path / "go"
    held = _start_held(tmp_path, any_url, go, real_namespace=False)
    try:
        storage = optuna.storages.RDBStorage(any_url)
        staged = [s for s in storage.get_all_studies()
                  if s.study_name.startswith(STAGING_PREFIX)]
        assert len(staged) == TASKS
        storage.delete_study(staged[0]._study_id)  # deleted by hand under the import
    finally:
        go.touch()
    out, err = held.communicate(timeout=300)
    assert held.returncode == 2, (out, err)
    assert "were deleted" in err and "nothing was published: run the import again" in err
    assert _rows(any_url, "a") == 0  # nothing half-published
