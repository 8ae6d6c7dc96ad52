"""A SQLite study file deleted or replaced under a running launch, at each point of its life.

A process keeps writing to an unlinked file without an error, so a driver that did not look
would summarise results that exist nowhere and exit 0. The file is removed (or replaced) at a
chosen moment of a real in-process launch on local Ray: before the first trial is written,
after the last trial's end is written (before the summary is read), and after the summary was
read. Each time the launch must stop with the one StorageError, name the cells whose results
were written to the lost file, and never return a summary. The deletion between epochs is
covered by tests/integration/test_faults.py (a driver process on a multi-node cluster).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from weightsearch.core.errors import StorageError

pytestmark = pytest.mark.integration


def _spec(tmp_path: Path, encoder: str, data: Path) -> Any:
    from weightsearch.sweep.spec import load_study_spec

    return load_study_spec({
        "study": "lost", "allow_inert": True,
        "storage": f"sqlite:///{tmp_path / 'lost.db'}",
        "train": {"encoder": encoder, "data_dir": str(data), "tasks": ["rte", "mrpc"],
                  "epochs": 1, "batch_size": 16, "max_train_examples": 32,
                  "max_eval_examples": 32, "num_threads": 1,
                  "cache_dir": str(tmp_path / "cache")},
        "central_tasks": ["rte"],
        "weights": [1, 9],
        "seeds": [1],
        "resources": {"cpu": 1, "gpu": 0},
        "max_concurrent": 2,
        "workdir": str(tmp_path / "runs"),
    })


def _delete(db: Path) -> None:
    for path in db.parent.glob(db.name + "*"):  # the file and its WAL companions
        path.unlink()


def _replace(db: Path) -> None:
    """A copy put in the file's place (a backup restored over it): same content, new file."""
    copy = db.with_suffix(".copy")
    shutil.copyfile(db, copy)
    copy.replace(db)


def _after(real: Callable, act: Callable[[], None]) -> Callable:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        act()
        return out
    return wrapped


def _before(real: Callable, act: Callable[[], None]) -> Callable:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        act()
        return real(*args, **kwargs)
    return wrapped


@pytest.mark.parametrize(("when", "how", "trained"), [
    ("before_first_write", "deleted", 0),
    ("after_last_write", "deleted", 2),
    ("after_last_write", "replaced", 2),
    ("after_summary", "deleted", 2),
])
def test_a_lost_study_file_stops_the_launch_naming_the_lost_cells(
        local_ray: None, tiny_encoder: str, sample_data_dir: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, when: str, how: str, trained: int) -> None:
    from weightsearch.sweep import launch as launching
    from weightsearch.sweep import tuning

    spec = _spec(tmp_path, tiny_encoder, sample_data_dir)
    db = tmp_path / "lost.db"

    def lose() -> None:
        (_delete if how == "deleted" else _replace)(db)

    if when == "before_first_write":  # the studies are created, no trial yet
        monkeypatch.setattr(tuning, "run_round", _before(tuning.run_round, lose))
    elif when == "after_last_write":  # every trial's end written, nothing summarised yet
        monkeypatch.setattr(launching, "_rounds", _after(launching._rounds, lose))
    else:  # the summary was read from the file, then it went
        monkeypatch.setattr(launching, "summarise", _after(launching.summarise, lose))

    with pytest.raises(StorageError) as caught:
        launching.launch(spec, progress=False)
    text = str(caught.value)
    assert f"was {'deleted' if how == 'deleted' else 'replaced by another file'}" in text
    assert "while this command ran" in text
    if trained:
        assert f"The results of the {trained} cell(s) this command finished" in text
        assert "rte w=1 seed 1" in text and "rte w=9 seed 1" in text
    else:
        assert "cell(s) this command finished" not in text
    assert "\n" not in text  # one message
