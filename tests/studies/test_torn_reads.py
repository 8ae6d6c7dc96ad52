"""Reads that are never torn. A study file in a folder the reader may not write is opened
read-only; a writer (here with the rights the reader lacks) rewrites every row of a table in
one transaction after another, each keeping all rows equal. The reader, through the project's
read-only opening, must never see two values at once, in a rollback-journal file (what plain
Optuna makes, and which never has a -shm file) as in a WAL file."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.slow

ROWS, WIDTH = 200, 600  # values wide enough that a table spans many pages
NO_OVERRIDE = ["setpriv", "--inh-caps=-dac_override,-dac_read_search,-fowner",
               "--bounding-set=-dac_override,-dac_read_search,-fowner"]

READER = """
import sys, time
from sqlalchemy import text
from weightsearch.studies.storage import open_storage
from weightsearch.studies.url_checks import sqlite_read_only
url = sys.argv[1]
assert sqlite_read_only(url) is not None, "the reader could write: the test tests nothing"
engine = open_storage(url).engine
seen = torn = failed = 0
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    try:
        with engine.connect() as conn:
            distinct = conn.execute(text("SELECT count(DISTINCT v) FROM torn")).scalar()
    except Exception as exc:  # an error is no torn read; counted, shown
        failed += 1
        last = str(exc).splitlines()[0]
        continue
    seen += 1
    torn += distinct != 1
print(seen, torn, failed)
"""


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_a_read_only_reader_never_sees_two_transactions_at_once(tmp_path: Path,
                                                               journal: str) -> None:
    import optuna

    if os.geteuid() == 0 and subprocess.run(["setpriv", "--help"],
                                            capture_output=True).returncode != 0:
        pytest.skip("running as root without setpriv: file modes cannot stop root")
    folder = tmp_path / "shared"
    folder.mkdir()
    db = folder / "studies.db"
    url = f"sqlite:///{db}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.create_study(study_name="plain", storage=url)  # the file as Optuna makes it
    writer = sqlite3.connect(db, isolation_level=None, timeout=60, check_same_thread=False)
    writer.execute(f"PRAGMA journal_mode={journal}")
    writer.execute("CREATE TABLE torn (k INTEGER PRIMARY KEY, v TEXT)")
    writer.executemany("INSERT INTO torn VALUES (?, ?)", [(k, "0" * WIDTH) for k in range(ROWS)])
    db.chmod(0o644)
    folder.chmod(0o755 if os.geteuid() != 0 else 0o555)  # root writes anyway; the reader not
    stop = threading.Event()
    written = []

    def rewrite() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            writer.execute("BEGIN IMMEDIATE")
            writer.execute("UPDATE torn SET v = ?", (str(n % 10) * WIDTH,))
            writer.execute("COMMIT")
            written.append(n)

    thread = threading.Thread(target=rewrite)
    thread.start()
    try:
        prefix = NO_OVERRIDE if os.geteuid() == 0 else []
        read = subprocess.run([*prefix, sys.executable, "-c", READER, url, "8"],
                              capture_output=True, text=True, timeout=300, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        stop.set()
        thread.join()
        writer.close()
        folder.chmod(0o755)
    assert read.returncode == 0, read.stderr[-2000:]
    seen, torn, failed = map(int, read.stdout.split())
    assert len(written) >= 100, len(written)  # the writer rewrote the table all along
    assert torn == 0, (seen, torn, failed)
    assert seen >= 20, (seen, torn, failed, read.stderr[-1000:])  # it did read, many times
