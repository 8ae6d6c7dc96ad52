"""The study database's URL and file, handled safely: a password is never printed (in any URL
form SQLAlchemy accepts) nor put on a child's command line; an in-memory database is refused
where results are written; a read-only SQLite file can be read, and writing to it is refused
naming the cause."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, TABLE2
from weightsearch.cli import main

SECRET = "zz-s3cret"

# (URL, what of it must still show): every form in which SQLAlchemy and libpq take a password.
FORMS = [
    (f"postgresql://u:{SECRET}%40x@h/db", "postgresql://u:***@h/db"),
    (f"postgresql://u:pa/{SECRET}@h/db", "postgresql://u:***@h/db"),
    (f"postgresql://u:pa {SECRET}@h/db", "postgresql://u:***@h/db"),
    (f"postgresql://u@h/db?password={SECRET}", "postgresql://u@h/db?password=***"),
    (f"postgresql://h/db?sslpassword={SECRET}&password=x",
     "postgresql://h/db?password=***&sslpassword=***"),
    (f"postgresql://u:p@{SECRET}@h/db", "postgresql://u:***@***/db"),  # a raw '@' in it
    # Whole connection strings inside a parameter whose name says nothing:
    (f"mssql+pyodbc:///?odbc_connect=DRIVER%3Dx%3BPWD%3D{SECRET}", "mssql+pyodbc:///?odbc_connect=***"),
    (f"postgresql://h/db?dsn=host%3Dh+password%3D{SECRET}", "postgresql://h/db?dsn=***"),
    (f"postgresql://h/db?options=-c%20password%3D{SECRET}", "postgresql://h/db?options=***"),
]


@pytest.mark.parametrize(("url", "shown"), FORMS)
def test_every_password_form_is_hidden(url, shown):
    from weightsearch.service.database import redacted
    from weightsearch.studies.urls import hide_secrets, shown_url

    assert shown_url(url) == shown and redacted(url) == shown
    assert SECRET not in hide_secrets(f"cannot open {url}: boom", url)


def test_urls_without_secrets_show_as_given_and_unparsable_ones_show_only_the_scheme():
    from weightsearch.studies.urls import shown_url

    assert shown_url("sqlite:////tmp/a b.db") == "sqlite:////tmp/a b.db"
    assert shown_url("postgresql://h/db?passfile=/p") == "postgresql://h/db?passfile=/p"
    bad = f"postgresql+psycopg://u:{SECRET}@h:notaport/db"
    assert shown_url(bad) == "postgresql+psycopg://<unparsable URL hidden>"
    assert shown_url(f"no url {SECRET}") == "<unparsable URL hidden>"


def _pg_forms(postgres_url: str) -> list[str]:
    """Working URLs of the test server (it trusts any password) in each password form, and
    one it cannot parse."""
    head, _, db = postgres_url.partition("://postgres@")
    return [f"{head}://postgres:{SECRET}%40x@{db}", f"{head}://postgres:pa/{SECRET}@{db}",
            f"{head}://postgres:pa {SECRET}@{db}", f"{postgres_url}?password={SECRET}",
            f"{postgres_url}?sslpassword={SECRET}&password={SECRET}",
            f"{head}://postgres:{SECRET}@127.0.0.1:notaport/x"]


@pytest.mark.postgres
def test_inspect_and_recommend_errors_never_print_the_password(postgres_url, capsys):
    for url in _pg_forms(postgres_url):
        missing = url.replace("/ws_test_", "/no_such_ws_test_")  # an error naming the URL
        for argv in (["inspect", "--storage", missing],
                     ["inspect", "no-such-study", "--storage", url],
                     ["recommend", "--train-size", "900", "--storage", missing]):
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            assert "error:" in err and "Traceback" not in err, err
            assert SECRET not in err and "s3cret" not in err, err


def _wait_job(client, job: int, timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = client.get(f"/jobs/{job}").json()
        if record["state"] not in ("running", "cancelling"):
            return record
        time.sleep(0.2)
    raise AssertionError(f"job {job} still runs after {timeout}s")


@pytest.mark.postgres
def test_a_service_job_never_sees_the_password_on_argv_nor_writes_it(postgres_url, tmp_path,
                                                                     sample_data_dir):
    """An imported study's resume is refused (409) without the password; a launched one's job
    runs a real weightsearch CLI child, which fails naming the database: neither its argv, its
    log, its job record nor /health holds the password."""
    from fastapi.testclient import TestClient

    from tests.helpers import launched_study
    from weightsearch.service.app import create_app

    url = f"{postgres_url}?sslpassword={SECRET}&password={SECRET}"
    assert main(["import", str(TABLE2), "--study", "pw", "--storage", url]) == 0
    launched_study(url, "pw-launched", sample_data_dir, tmp_path / "work")
    # The child: the real CLI, asked about a study that is not there, so it fails at once
    # naming the storage it was handed through its environment.
    child = tmp_path / "child.py"
    child.write_text("import sys\nfrom weightsearch.cli import main\n"
                     "sys.exit(main(['inspect', 'no-such-' + sys.argv[2]]))\n")
    app = create_app(url, log_dir=tmp_path / "runs", command=[sys.executable, str(child)])
    client = TestClient(app)
    health = client.get("/health").json()
    assert health["storage"].endswith("?password=***&sslpassword=***"), health
    refused = client.post("/studies/pw/resume")
    assert refused.status_code == 409 and SECRET not in refused.text, refused.text
    started = client.post("/studies/pw-launched/resume").json()
    proc = app.state.jobs.get(started["job"]).proc
    try:
        argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()  # what ps lists
    except OSError:  # it finished already: its argv as given to exec
        argv = " ".join(proc.args)
    assert "child.py" in argv and SECRET not in argv and SECRET not in " ".join(proc.args)
    record = _wait_job(client, started["job"])
    log = Path(started["log"]).read_text()
    assert record["state"] == "failed" and "no study" in log, log
    assert "password=***" in log and SECRET not in log, log
    assert SECRET not in json.dumps(client.get("/jobs").json())


# --- in-memory databases --------------------------------------------------------------------
MEMORY = ["sqlite://", "sqlite:///:memory:"]


def _ray_started() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


@pytest.mark.parametrize("memory", MEMORY)
def test_an_in_memory_database_is_refused_wherever_results_are_written(
        memory, tmp_path, sample_data_dir, tiny_encoder, capsys):
    study = tmp_path / "s.yaml"
    study.write_text(f"study: mem\ntrain: {{encoder: {tiny_encoder}, data_dir: "
                     f"{sample_data_dir}, tasks: [rte, mrpc], epochs: 1, "
                     f"max_train_examples: 16}}\ncentral_tasks: [rte]\nweights: [1, 9]\n"
                     "allow_inert: true\n"
                     f"workdir: {tmp_path / 'work'}\n")
    for argv in (["launch", str(study)], ["resume", "mem"],
                 ["import", str(TABLE2), "--study", "mem"], ["serve", "--port", "1"]):
        assert main([*argv, "--storage", memory]) == 2, argv
        err = capsys.readouterr().err
        assert "in-memory" in err and "sqlite:///weightsearch.db" in err, err
        assert "Traceback" not in err
    assert not _ray_started() and not (tmp_path / "work").exists()
    assert main(["inspect", "--storage", memory]) == 0  # reading one just finds nothing


# --- read-only SQLite files -----------------------------------------------------------------
# Root writes any file whatever its mode: a child run as root without the capabilities that
# bypass file permissions meets them as any other user does.
_NO_OVERRIDE = ["setpriv", "--inh-caps=-dac_override,-dac_read_search,-fowner",
                "--bounding-set=-dac_override,-dac_read_search,-fowner"]


def _reader(argv: list[str]) -> subprocess.CompletedProcess:
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: file modes cannot stop root")
        prefix = _NO_OVERRIDE
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([*prefix, sys.executable, *argv], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


@pytest.fixture(params=["closed", "wal-left"])
def read_only_db(request, tmp_path):
    """A WAL-mode study database, then made read-only: file 0444, folder 0555. "closed": no
    -wal/-shm beside it (a reader cannot create them); "wal-left": a connection holds them."""
    import sqlite3

    folder = tmp_path / "ro"
    folder.mkdir()
    url = f"sqlite:///{folder / 'studies.db'}"
    # In a child: this process would keep its pooled connections, and with them the side files.
    subprocess.run([sys.executable, "-m", "weightsearch.cli", "import", str(TABLE2), "--study",
                    "paper", "--storage", url], check=True, capture_output=True, timeout=300)
    conn = sqlite3.connect(folder / "studies.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    if request.param == "closed":
        conn.close()
        assert sorted(p.name for p in folder.iterdir()) == ["studies.db"]
    else:
        conn.execute("SELECT count(*) FROM trials").fetchone()
    (folder / "studies.db").chmod(0o444)
    folder.chmod(0o555)
    yield url
    conn.close()
    folder.chmod(0o755)


@pytest.mark.slow  # six CLI processes, each importing the commands: about 10 s
def test_a_read_only_database_is_read_and_writing_it_is_refused(read_only_db, tmp_path):
    cli = ["-m", "weightsearch.cli"]
    shown = _reader([*cli, "inspect", "paper", "--storage", read_only_db])
    assert shown.returncode == 0 and "rte" in shown.stdout, shown.stderr
    rec = _reader([*cli, "recommend", "--train-size", "900", "--storage", read_only_db])
    assert rec.returncode == 0 and "recommended central weight" in rec.stdout, rec.stderr
    out = tmp_path / "rte.csv"
    done = _reader([*cli, "export", "paper/rte", "-o", str(out), "--storage", read_only_db])
    assert done.returncode == 0 and out.read_text().count("\n") > 1, done.stderr
    served = _reader(["-c", "from fastapi.testclient import TestClient\n"
                      "from weightsearch.service.app import create_app\n"
                      f"c = TestClient(create_app({read_only_db!r}))\n"
                      "r = c.get('/studies'); print(r.status_code, r.text)"])
    assert served.stdout.startswith("200") and '"study":"paper"' in served.stdout, served
    db = Path(read_only_db.removeprefix("sqlite:///"))
    before, files = db.read_bytes(), sorted(db.parent.iterdir())
    for argv in (["import", str(TABLE2), "--study", "more"], ["resume", "paper"]):
        refused = _reader([*cli, *argv, "--storage", read_only_db])
        assert refused.returncode == 2, refused.stderr
        assert f"the database {db} is read-only" in refused.stderr, refused.stderr
        assert "copy it somewhere writable" in refused.stderr
        assert "Traceback" not in refused.stderr
    assert db.read_bytes() == before and stat.S_IMODE(db.stat().st_mode) == 0o444
    assert sorted(db.parent.iterdir()) == files


def test_a_deleted_study_file_is_never_recreated_by_a_new_connection(tmp_path):
    """A connection opened after the file was deleted (a new thread, a pool refill) fails as
    "deleted" instead of making an empty file there, which would read as "replaced" and hold
    writes that nobody reads."""
    import optuna

    from weightsearch.studies.storage import open_storage
    from weightsearch.studies.storage_failures import (
        check_same_file,
        file_identity,
        storage_failure,
    )

    url = f"sqlite:///{tmp_path / 'gone.db'}"
    storage = open_storage(url)
    optuna.create_study(storage=storage, study_name="s")
    identity = file_identity(url)
    for path in tmp_path.glob("gone.db*"):
        path.unlink()
    storage.engine.dispose()  # the next query opens a new connection
    with pytest.raises(Exception) as raised:
        storage.get_all_studies()
    assert "was deleted while this command ran" in str(storage_failure(raised.value, url))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(Exception, match="was deleted while this command ran"):
        check_same_file(url, identity)
