"""An import killed (SIGKILL) at each phase of its life leaves either nothing a reader counts
or the whole study, and the next import finishes the job: killed with its staging written (see
test_import_integrity.py), right after its publish (the study whole, nothing staged left), and
while cleaning another killed import's leftovers (a later import cleans the rest)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.helpers import ROOT
from weightsearch.studies.reading import STAGING_PREFIX

pytestmark = pytest.mark.slow

HEADER = "central_task,task_type,train_size,central_weight,seed,metric,metric_name\n"
TASKS, PER_TASK = 3, 40

# An import that kills itself at `phase`: after its publish, after its second staged study
# was written, or after the first study its cleanup dropped.
KILLED = """
import os, signal, sys
from weightsearch.studies import importer
phase = sys.argv[4]
def killed(real, after=1):
    calls = []
    def wrapper(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == after:
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    return wrapper
if phase == "published":
    importer._publish = killed(importer._publish)
elif phase == "staged":
    importer._stage = killed(importer._stage, after=2)
elif phase == "cleaning":
    from optuna.storages import RDBStorage
    RDBStorage.delete_study = killed(RDBStorage.delete_study)
importer.import_file(sys.argv[1], sys.argv[2], sys.argv[3])
"""


def _file(path: Path) -> Path:
    lines = [HEADER] + [f"t{t},classification,{1000 + t},{1 + i % 15},{i // 15},"
                        f"{0.5 + i % 7 / 100},accuracy\n"
                        for t in range(TASKS) for i in range(PER_TASK)]
    path.write_text("".join(lines))
    return path


def _killed_import(f: Path, study: str, url: str, phase: str) -> None:
    done = subprocess.run([sys.executable, "-c", KILLED, str(f), study, url, phase], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == -9, done.stderr[-2000:]


def _import(f: Path, study: str, url: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "weightsearch.cli", "import", str(f),
                           "--study", study, "--storage", url], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def _rows(url: str) -> dict[str, int]:
    storage = optuna.storages.RDBStorage(url)
    return {s.study_name: len(storage.get_all_trials(s._study_id, deepcopy=False))
            for s in storage.get_all_studies()}


def test_killed_right_after_its_publish_the_study_is_whole(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    f = _file(tmp_path / "a.csv")
    _killed_import(f, "a", url, "published")
    assert _rows(url) == {f"a/t{t}": PER_TASK for t in range(TASKS)}  # nothing staged left
    again = _import(f, "a", url)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_killed_while_cleaning_another_imports_leftovers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    f = _file(tmp_path / "a.csv")
    _killed_import(f, "a", url, "staged")  # leaves two staged studies behind
    assert sum(n.startswith(STAGING_PREFIX) for n in _rows(url)) == 2
    _killed_import(f, "c", url, "cleaning")  # killed after dropping one of them
    assert sum(n.startswith(STAGING_PREFIX) for n in _rows(url)) == 1
    done = _import(f, "a", url)
    assert done.returncode == 0, done.stderr
    assert _rows(url) == {f"a/t{t}": PER_TASK for t in range(TASKS)}
