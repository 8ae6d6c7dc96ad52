"""Files read and written on a user's word: reads bounded (a regular file, a size cap), so a
FIFO or /dev/zero named as a config cannot hang or exhaust the machine; output paths checked
before any work, so a bad one costs one message instead of a traceback after the work."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from weightsearch.core.errors import ConfigError

MAX_CONFIG_BYTES = 16 << 20  # a run config or study file; real ones are a few KiB


NAME_MAX = 255  # bytes in one folder or file name (Linux, macOS, Windows alike)
PATH_MAX = 4095  # bytes in a whole path (Linux)


def path_problem(value: Any, key: str) -> str | None:
    """Why the string `value` cannot name a file or folder (None when it can): a NUL byte (the
    operating system's end of a name), text the file system cannot encode (a lone surrogate),
    a folder or file name longer than NAME_MAX bytes, or a path longer than PATH_MAX. Checked
    before the path is used, so that such a value gets one message naming its setting instead
    of a traceback."""
    if not isinstance(value, str):
        return None
    if "\x00" in value:
        return (f"{key}: {value.split(chr(0))[0][:60]!r}... holds a NUL byte (\\x00), which no "
                "file name can hold; remove it")
    try:
        encoded = os.fsencode(value)
    except UnicodeEncodeError as exc:
        return (f"{key}: {value[:60]!r} holds {value[exc.start:exc.end]!r}, which the file "
                "system cannot encode; remove it")
    if len(encoded) > PATH_MAX:
        return (f"{key}: the path is {len(encoded):,} bytes long, over the {PATH_MAX:,} a path "
                "may have; choose a shorter path")
    for part in Path(value).parts:
        if len(os.fsencode(part)) > NAME_MAX:
            return (f"{key}: the name {part[:40]!r}... is {len(os.fsencode(part))} bytes long, "
                    f"over the {NAME_MAX} a folder or file name may have; choose a shorter one")
    return None


def file_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of a file, read in blocks of 1 MiB."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_text_bounded(path: Path, noun: str = "file", limit: int = MAX_CONFIG_BYTES) -> str:
    """The UTF-8 text of the regular file `path`, at most `limit` bytes; ConfigError naming the
    file otherwise. Opened without blocking, so a FIFO without a writer is refused at once."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ConfigError([f"{noun} {path} does not exist"], str(path)) from None
    except OSError as exc:
        raise ConfigError([f"cannot read {noun} {path}: {exc.strerror}"], str(path)) from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError([f"{noun} {path} is not a regular file (a folder, a device or a "
                               "pipe); give the path of a file"], str(path))
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ConfigError([f"{noun} {path} is larger than {limit >> 20} MiB, far beyond any "
                           "config; give the right file"], str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([f"cannot read {noun} {path}: not UTF-8 ({exc.reason} at byte "
                           f"{exc.start}); save it as UTF-8"], str(path)) from None


def check_output_file(path: str | os.PathLike, flag: str) -> Path:
    """`path` as a file the command may write once it has done its work: its folder exists, the
    name fits the file system, it is not a folder, and a file can be made there (probed with a
    temporary file, removed at once). ConfigError naming `flag` otherwise."""
    target = Path(path)
    folder = target.parent
    if not folder.is_dir():
        what = ("is a file, not a folder; give a path in a folder" if folder.exists()
                else "does not exist; create it first")
        raise ConfigError([f"{flag} {path}: folder {str(folder)!r} {what}"])
    try:
        longest = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        longest = 255
    if len(os.fsencode(target.name)) > longest:
        raise ConfigError([f"{flag}: the file name is {len(os.fsencode(target.name))} bytes, "
                           f"more than the {longest} its file system allows; use a shorter "
                           "name"])
    if target.is_dir():
        raise ConfigError([f"{flag} {path}: is a folder; name a file in it"])
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-probe-"):
            pass
    except OSError as exc:
        reason = "no space left" if exc.errno == errno.ENOSPC else exc.strerror
        raise ConfigError([f"{flag} {path}: cannot write in {str(folder)!r} ({reason}); give "
                           "a path in a folder you can write"]) from None
    return target
