"""`weightsearch import` and the readers of stored studies under hostile input: values that
overflow, a file that mixes regimes, an import killed midway or stopped by a full disk.

Real SQLite files in tmp_path, the real command line (`weightsearch.cli.main` or a
subprocess); nothing of SQLite or Optuna is mocked."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from weightsearch.cli import main
from weightsearch.studies import reading, schema
from weightsearch.studies.reading import open_quiet, study_names
from weightsearch.studies.stored_values import USABLE_LIMIT

ROOT = Path(__file__).resolve().parents[2]
HEADER = "central_task,task_type,train_size,central_weight,seed,metric,metric_name\n"


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'studies.db'}"


def _names(url: str) -> list[str]:
    """Every study name in the database, staging ones included (plain Optuna)."""
    return optuna.get_all_study_names(url) if Path(url[len("sqlite:///"):]).exists() else []


def _import(path: Path, study: str, url: str, capsys) -> tuple[int, str]:
    code = main(["import", str(path), "--study", study, "--storage", url])
    return code, capsys.readouterr().err


# --- 1a: every row is checked in full before the first write --------------------------------
def _row(**cells) -> str:
    row = {"central_task": "rte", "task_type": "classification", "train_size": "2490",
           "central_weight": "1", "seed": "0", "metric": "0.7", "metric_name": "accuracy",
           **cells}
    return ",".join(row[c] for c in HEADER.strip().split(",")) + "\n"


@pytest.mark.parametrize("row,message", [
    (_row(metric="1e308", metric_name="metric"), r"line 3: metric 1e\+308 is outside"),
    (_row(metric="1e308"), r"metric 1e\+308 is outside 0..100, the range of accuracy"),
    (_row(metric="170"), r"metric 170 is outside 0..100, the range of accuracy"),
    (_row(metric="-0.2"), r"metric -0.2 is outside 0..100"),
    (_row(metric="-150", metric_name="mcc"), r"metric -150 is outside -100..100.*correlation"),
    (_row(metric="-0.5", metric_name="eval_loss"), r"metric -0.5 is outside 0..1e\+09.*loss"),
    (_row(metric="inf"), r"metric 'inf' is not a number"),
    (_row(train_size="1e300"), r"train_size 1e\+300 is outside 1..999999999999"),
    (_row(train_size="1000000000000"), r"train_size 1000000000000 is outside"),
    (_row(seed="18446744073709551617"), r"seed 18446744073709551617 is outside 0..2147483647"),
    (_row(seed="1.8446744073709552e19"), r"seed 18446744073709551616 is outside 0..2147483647"),
    (_row(seed="-1"), r"seed -1 is outside 0..2147483647"),
    (_row(central_task='"rte\nx"'), r"central_task 'rte\\nx' holds the control character"),
    (_row(central_task="t" * 201), r"has 201 characters; shorten it to 200"),
    (_row(metric_name="acc\u0007"), r"metric_name 'acc\\x07' holds the control character"),
])
def test_a_bad_cell_is_refused_with_its_line_and_nothing_is_written(tmp_path, url, capsys,
                                                                     row, message):
    import re

    f = tmp_path / "bad.csv"
    f.write_text(HEADER + _row(central_weight="9") + row)
    code, err = _import(f, "bad", url, capsys)
    assert code == 2, err
    assert re.search(message, err), err
    assert "Traceback" not in err and _names(url) == []


def test_a_further_metric_column_is_checked_by_its_name(tmp_path, url, capsys):
    f = tmp_path / "extra.csv"
    f.write_text(HEADER.rstrip("\n") + ",f1,spearman\n"
                 + _row().rstrip("\n") + ",0.8,0.5\n"
                 + _row(central_weight="9").rstrip("\n") + ",1e308,-3\n")
    code, err = _import(f, "extra", url, capsys)
    assert code == 2
    assert "line 3: f1 1e+308 is outside 0..100" in err
    assert "line 3: spearman -3 is outside" not in err  # -3 is a fine percentage
    assert _names(url) == []


def test_fractions_and_percentages_both_import(tmp_path, url, capsys):
    f = tmp_path / "ok.csv"
    f.write_text(HEADER + _row(metric="0.71") + _row(central_weight="9", metric="0.715")
                 + _row(central_task="cola", metric="-12.5", metric_name="mcc")
                 + _row(central_task="cola", central_weight="9", metric="30",
                        metric_name="mcc"))  # one scale per task; a mix is refused
    code, err = _import(f, "ok", url, capsys)
    assert code == 0, err
    assert study_names(open_quiet(url)) == ["ok/cola", "ok/rte"]


JSONL_ROW = ('{"central_task": "rte", "task_type": "classification", "train_size": 2490, '
             '"central_weight": %s, "seed": %s, "metric": %s}')


@pytest.mark.parametrize("lines,message", [
    ([JSONL_ROW % (1, 0, 0.7), JSONL_ROW.replace('"metric": %s', '"metric": %s, "metric": 9')
      % (9, 0, 0.7)], r"line 2 gives the key 'metric' more than once"),
    ([JSONL_ROW % (1, 18446744073709551617, 0.7)], r"seed 18446744073709551617 is outside"),
    ([JSONL_ROW % (1, 0, "1e400")], r"metric 'inf' is not a number"),
    ([JSONL_ROW.replace('"rte"', '"rte\\u0000"') % (1, 0, 0.7)],
     r"central_task 'rte\\x00' holds the control character"),
    ([JSONL_ROW.replace("2490", "1e300") % (1, 0, 0.7)], r"train_size 1e\+300 is outside"),
])
def test_jsonl_rows_are_checked_as_strictly(tmp_path, url, capsys, lines, message):
    import re

    f = tmp_path / "rows.jsonl"
    f.write_text("\n".join(lines) + "\n")
    code, err = _import(f, "j", url, capsys)
    assert code == 2 and re.search(message, err), err
    assert _names(url) == []


def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path, url, capsys):
    f = tmp_path / "twice.csv"
    f.write_text(HEADER.rstrip("\n") + ",metric\n" + _row().rstrip("\n") + ",1e308\n")
    code, err = _import(f, "twice", url, capsys)
    assert code == 2 and "names the column(s) metric more than once" in err, err
    assert _names(url) == []


# --- 1b: stored values no reader can use are left out with a note -----------------------------
def _foreign_writer_study(url: str) -> None:
    """What another tool (plain Optuna) may leave in the database: a weightsearch-looking study
    with values at 1e308 and infinity, a metric at 1e308, and a study whose train_size is
    infinite."""
    from optuna.distributions import FloatDistribution

    dist = {schema.PARAM: FloatDistribution(1, 15)}
    attrs = {schema.A_SOURCE: schema.SOURCE_IMPORTED, schema.A_CENTRAL: "rte",
             schema.A_TASK_TYPE: "classification", schema.A_TRAIN_SIZE: 2490,
             schema.A_PRIMARY: "accuracy"}
    for name, size, values in (("odd/rte", 2490, [1e308, 1e308, 0.7, 0.72, float("inf")]),
                               ("odd/mrpc", float("inf"), [0.8, 0.81])):
        st = optuna.create_study(study_name=name, storage=url, direction="maximize")
        for k, v in {**attrs, schema.A_TRAIN_SIZE: size}.items():
            st.set_user_attr(k, v)
        for i, v in enumerate(values):
            st.add_trial(optuna.trial.create_trial(
                params={schema.PARAM: 1.0 + 8 * (i % 2)}, distributions=dist, value=v,
                user_attrs={schema.T_SEED: i // 2,
                            schema.T_METRICS: {"rte": {"accuracy": v, "f1": 1e308}}}))


def test_readers_skip_values_that_overflow_and_say_so(url, capsys):
    _foreign_writer_study(url)
    assert main(["inspect", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert "note: study odd/rte: 3 complete trial(s) left out" in out
    assert main(["inspect", "odd", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert "1e+308" in out and "inf" in out and "rte.f1" in out
    assert "study odd/mrpc: its train_size inf is no number of examples" in out
    assert main(["inspect", "odd/rte", "--format", "json", "--storage", url]) == 0
    shown = json.loads(capsys.readouterr().out)["central_tasks"][0]
    assert shown["notes"] and shown["curve"][0]["mean"] == pytest.approx(0.7)
    assert main(["recommend", "--train-size", "1000", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert "study odd/rte: 3 complete trial(s) left out" in out
    assert "study odd/mrpc contributes nothing: it records no training size" in out


def test_the_service_answers_despite_values_that_overflow(url, tmp_path):
    from fastapi.testclient import TestClient

    from weightsearch.service.app import create_app

    _foreign_writer_study(url)
    client = TestClient(create_app(url, log_dir=tmp_path))
    for path in ("/studies", "/studies/odd", "/studies/odd/rte",
                 "/recommend?train_size=1000"):
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.text)
    detail = client.get("/studies/odd/rte").json()["central_tasks"][0]
    assert any("left out" in n for n in detail["notes"])
    assert all(c["value"] is None or abs(c["value"]) <= USABLE_LIMIT
               for c in detail["cells"])


# --- 2: an import killed at any point leaves nothing a reader sees ---------------------------
def _big_file(path: Path, tasks: int, per_task: int) -> int:
    lines = [HEADER]
    for t in range(tasks):
        lines += [f"task{t},classification,{1000 + t},{1 + i % 15},{i // 15},"
                  f"{0.5 + i % 7 / 100},accuracy\n" for i in range(per_task)]
    path.write_text("".join(lines))
    return tasks * per_task


def _wait_for_a_study(db: Path, proc: subprocess.Popen, within: float = 60.0) -> None:
    """Until the import has made its first study (of any name)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if db.exists():
            try:
                with sqlite3.connect(db, timeout=1) as conn:
                    if conn.execute("SELECT count(*) FROM studies").fetchone()[0]:
                        return
            except sqlite3.OperationalError:  # the tables are not made yet
                pass
        time.sleep(0.005)
    raise AssertionError("the import made no study")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_an_import_killed_midway_leaves_no_study_and_can_run_again(tmp_path, url, capsys, sig):
    f = tmp_path / "big.csv"
    rows = _big_file(f, tasks=40, per_task=450)
    db = tmp_path / "studies.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "weightsearch.cli", "import", str(f), "--study", "big",
         "--storage", url], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for_a_study(db, proc)
    # Hold SQLite's write lock: the import stops at its next write, with some of its studies
    # written, and is killed there.
    holder = sqlite3.connect(db, timeout=60, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        assert proc.poll() is None, "the import ended before it could be stopped"
        proc.send_signal(sig)
        proc.wait(timeout=30)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert proc.returncode == -sig
    assert any(n.startswith(reading.STAGING_PREFIX) for n in _names(url))  # it began writing
    assert main(["inspect", "--storage", url]) == 0
    assert capsys.readouterr().out.strip() == "no studies yet"
    assert main(["inspect", "big", "--storage", url]) == 2
    assert "no study named 'big'" in capsys.readouterr().err
    assert main(["recommend", "--train-size", "1000", "--format", "json",
                 "--storage", url]) == 0
    assert '"big/' not in capsys.readouterr().out
    code, err = _import(f, "big", url, capsys)
    assert code == 0, err
    names = _names(url)
    assert not any(n.startswith(reading.STAGING_PREFIX) for n in names)  # the killed one's
    assert sorted(names) == sorted(f"big/task{t}" for t in range(40))
    storage = open_quiet(url)
    cells = [(n, t.params[schema.PARAM], t.user_attrs[schema.T_SEED])
             for n in names for t in optuna.load_study(study_name=n, storage=storage).trials]
    assert len(cells) == len(set(cells)) == rows


def test_bulk_written_trials_read_back_as_optuna_writes_them(tmp_path, url, capsys):
    """The import writes its trials in bulk: what Optuna's own API reads back is what
    `add_trial` would have written, and Optuna numbers the next trial after them."""
    f = tmp_path / "two.csv"
    f.write_text(HEADER + _row() + _row(central_weight="9", metric="0.75", seed="3"))
    assert _import(f, "two", url, capsys)[0] == 0
    study = optuna.load_study(study_name="two/rte", storage=url)
    first, second = study.trials
    assert (first.number, second.number) == (0, 1)
    assert (first.value, second.value) == (0.7, 0.75)
    assert second.params == {schema.PARAM: 9.0} and second.state.name == "COMPLETE"
    assert second.user_attrs[schema.T_CELL] == "9|3" and second.user_attrs[schema.T_SEED] == 3
    assert second.datetime_complete is not None and study.metric_names == ["accuracy"]
    assert study.user_attrs[schema.A_TRAIN_SIZE] == 2490
    assert study.best_trial.number == 1
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=0.1))
    assert study.trials[-1].number == 2


def test_an_import_racing_another_under_the_same_name_is_refused(tmp_path, url):
    """The publishing transaction checks the name again: a study of that base name made after
    the import's first check (here: before its staging and publishing step is called) refuses
    the import, which then drops what it staged."""
    from weightsearch.core.errors import StorageError
    from weightsearch.studies.bulk import engine_of
    from weightsearch.studies.claims import Claims
    from weightsearch.studies.import_rows import parse_rows
    from weightsearch.studies.importer import IMPORT_LEASES, _stage_and_publish, _staging_tag

    f = tmp_path / "one.csv"
    f.write_text(HEADER + _row() + _row(central_weight="9"))
    storage = open_quiet(url)
    optuna.create_study(study_name="race/mrpc", storage=storage)
    tag, leases = _staging_tag(), Claims(engine_of(storage))
    assert leases.claim(IMPORT_LEASES, tag)
    with pytest.raises(StorageError, match=r"already exists.*race/mrpc"):
        _stage_and_publish(storage, url, "race", {"rte": parse_rows(f)}, f, tag, leases)
    assert _names(url) == ["race/mrpc"]


# --- 3: one task, two regimes ----------------------------------------------------------------
@pytest.mark.parametrize("column,first,second", [
    ("encoder", "bert-base-uncased", "roberta-base"),
    ("stage", "multitask", "finetuned"),
])
def test_a_task_measured_in_two_regimes_is_refused_once(tmp_path, url, capsys, column, first,
                                                        second):
    f = tmp_path / "mixed.csv"
    f.write_text(HEADER.rstrip("\n") + f",{column}\n" + "".join(
        _row(central_weight=str(w), seed=str(s)).rstrip("\n") + f",{first if s < 2 else second}\n"
        for w in (1, 9) for s in range(4)))
    code, err = _import(f, "mixed", url, capsys)
    assert code == 2
    problems = [line for line in err.splitlines() if line.startswith("  - ")]
    assert len(problems) == 1, err
    assert "1 problem(s), nothing was imported" in err
    text = problems[0]
    assert "task rte" in text and first in text and second in text
    assert "two regimes in one task" in text and "split the file" in text
    assert "own --study name" in text and "own central_task name" in text
    assert _names(url) == []


# --- 4: a full disk --------------------------------------------------------------------------
def test_the_disk_full_message_names_the_cause_the_path_and_the_free_space(tmp_path):
    from weightsearch.core.errors import DiskFull
    from weightsearch.studies.importer import disk_full_message, import_failure

    url = f"sqlite:///{tmp_path / 'studies.db'}"
    try:
        sqlite3.connect(":memory:").execute("SELECT 1").fetchone()
        raise sqlite3.OperationalError("database or disk is full")
    except sqlite3.OperationalError as exc:
        full = exc
    text = disk_full_message(full, url, "rows.csv")
    assert text is not None and "is full: no space left at" in text
    assert str(tmp_path / "studies.db") in text and "free on the disk of" in text
    assert "Nothing of rows.csv was imported" in text
    assert isinstance(import_failure(full, url, "rows.csv"), DiskFull)
    assert disk_full_message(ValueError("other"), url, "rows.csv") is None


SMALL_DISK = """
set -u
mount -t tmpfs -o size=1m tmpfs "$1" || exit 77
url="sqlite:///$1/studies.db"
"$2" -m weightsearch.cli import "$3" --study big --storage "$url"; echo "import=$?"
"$2" -m weightsearch.cli inspect --storage "$url"; echo "inspect=$?"
mount -o remount,size=64m "$1"
"$2" -m weightsearch.cli import "$3" --study big --storage "$url"; echo "again=$?"
"$2" -c "import optuna, sys; print(sorted(optuna.get_all_study_names(sys.argv[1])))" "$url"
"""


@pytest.mark.slow
def test_an_import_that_fills_a_real_small_disk_leaves_nothing(tmp_path):
    """A 1 MiB tmpfs, mounted in a user and mount namespace of its own (no root needed where
    unprivileged namespaces are allowed; skipped where they are not)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare for a small real filesystem")
    f = tmp_path / "big.csv"
    _big_file(f, tasks=4, per_task=5000)
    small = tmp_path / "small"
    small.mkdir()
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", SMALL_DISK, "sh", str(small),
                           sys.executable, str(f)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode == 77 or "unshare:" in done.stderr:
        pytest.skip(f"cannot mount a small filesystem here: {done.stderr.strip()[:200]}")
    out, err = done.stdout, done.stderr
    assert "import=1" in out, (out, err)
    assert "is full: no space left at" in err and f"{small}/studies.db" in err
    assert "free on the disk of" in err and "Traceback" not in err
    assert "no studies yet" in out and "inspect=0" in out
    assert "again=0" in out, (out, err)
    assert out.strip().splitlines()[-1] == str([f"big/task{t}" for t in range(4)])
