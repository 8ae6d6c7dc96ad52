"""Files named by a user: a config or study file that is not a regular file, or is far too
large, is refused at once (no hang on a FIFO, no machine-wide read of /dev/zero); output paths
that cannot be written are refused before any work, with one message and exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from weightsearch.cli import main
from weightsearch.core.errors import ConfigError
from weightsearch.core.files import check_output_file, read_text_bounded


@pytest.mark.parametrize("command", [["train", "--config"], ["launch"]])
def test_a_never_ending_file_is_refused_at_once(tmp_path: Path, command: list[str], capsys):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)  # no writer: reading it would block forever
    for source in (str(fifo), "/dev/zero"):
        assert main([*command, source]) == 2
        err = capsys.readouterr().err
        assert "is not a regular file" in err and "Traceback" not in err


def test_an_oversized_config_is_refused_unread(tmp_path: Path):
    big = tmp_path / "run.yaml"
    with big.open("wb") as f:
        f.truncate((16 << 20) + 1)
    with pytest.raises(ConfigError, match="larger than 16 MiB"):
        read_text_bounded(big, "run config")


@pytest.mark.parametrize(("target", "expected"), [
    ("/proc/weightsearch.png", "cannot write in '/proc'"),
    ("{tmp}/" + "x" * 300 + ".png", "more than the 255 its file system allows"),
    ("{tmp}/a-file/plot.png", "is a file, not a folder"),
    ("{tmp}/missing/plot.png", "does not exist; create it first"),
    ("{tmp}", "is a folder"),
])
def test_unwritable_output_paths_are_named_before_any_work(tmp_path: Path, target: str,
                                                           expected: str, capsys):
    (tmp_path / "a-file").write_text("")
    path = target.format(tmp=tmp_path)
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(")):
        check_output_file(path, "--plot")
    db = tmp_path / "s.db"
    out = path if not path.endswith(".png") else path[:-4] + ".csv"
    assert main(["export", "glue", "--output", out, "--storage", f"sqlite:///{db}"]) == 2
    assert expected in capsys.readouterr().err
    assert not db.exists()
