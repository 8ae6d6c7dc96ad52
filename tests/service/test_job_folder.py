"""The folder of a server's launched study files and job logs is private: a new temporary
folder of its own by default (never a fixed name another user could create first), a given one
refused where another user owns it or it is a link, and files in it always made fresh."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from weightsearch.core.errors import ConfigError
from weightsearch.service.jobs import JobTable
from weightsearch.service.launcher import Launcher, _write_private


def _launcher(runs: Path | None) -> Launcher:
    return Launcher("sqlite:///unused.db", ["true"], runs, JobTable())


def test_each_server_gets_a_private_folder_of_its_own():
    first, second = _launcher(None)._folder(), _launcher(None)._folder()
    assert first != second
    for folder in (first, second):
        found = os.lstat(folder)
        assert found.st_uid == os.getuid() and stat.S_IMODE(found.st_mode) == 0o700
        folder.rmdir()


def test_a_folder_made_open_by_its_owner_is_closed(tmp_path: Path):
    folder = tmp_path / "runs"
    folder.mkdir(mode=0o777)
    os.chmod(folder, 0o777)
    _launcher(folder)
    assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700


def test_a_link_or_another_users_folder_is_refused(tmp_path: Path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "runs"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match=r"log_dir: .*runs is a link"):
        _launcher(link)
    if os.getuid() == 0:  # only root can hand a folder to another user
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o777)
        os.chown(theirs, 65534, 65534)
        with pytest.raises(ConfigError, match="owned by another user"):
            _launcher(theirs)


def test_a_study_file_is_never_written_through_what_was_there(tmp_path: Path):
    planted = tmp_path / "study.json"
    elsewhere = tmp_path / "elsewhere.json"
    planted.symlink_to(elsewhere)
    with pytest.raises(FileExistsError):
        _write_private(planted, "{}")
    assert not elsewhere.exists()
    fresh = tmp_path / "fresh.json"
    _write_private(fresh, "{}")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600 and fresh.read_text() == "{}"
