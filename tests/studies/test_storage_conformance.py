"""The storage conformance suite: one contract, run over every database backend registered in
`weightsearch.studies.dialects.DIALECTS`, through the project's own code paths (no mocks).

What the study code needs from a backend:
- the registry names it: `dialect(name)`, `url_dialect(url)` and the live engine's backend name
  all give the registered record, and `open_storage` opens the engine with its options;
- `check_url` accepts its URLs and names a missing driver;
- several drivers opening a fresh database at once create the schema once, none fails;
- trials written as the sweep writes them (and by `weightsearch import`) read back through
  `weightsearch.studies.reading`, exactly, from another connection, and a reader's cache sees later
  writes;
- `db_now` is the server's clock in Unix seconds, with sub-second resolution;
- a cell claimed by one claimant is no one else's until it is released or its lease expires.

Each backend has a case in `CASES` that makes a fresh database: SQLite a file under tmp_path,
PostgreSQL the conftest's `postgres_url` (a failure instead of a skip in CI), MySQL and MariaDB a
database on the server at $WEIGHTSEARCH_TEST_MYSQL / $WEIGHTSEARCH_TEST_MARIADB (default: root
on 127.0.0.1:3306, through PyMySQL; skipped, with the reason, without the driver or the server).
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState
from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from weightsearch.core.errors import StorageError
from weightsearch.studies import reading
from weightsearch.studies import schema as S
from weightsearch.studies.claims import Claims, db_now
from weightsearch.studies.dialects import DIALECTS, dialect, engine_kwargs, url_dialect
from weightsearch.studies.importer import import_file
from weightsearch.studies.storage import open_storage
from weightsearch.studies.url_checks import check_url

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")

STUDY = S.study_name("conformance", "rte")
OPENERS = 8  # drivers opening a fresh database at once
CELLS = [S.cell_key(w, 1) for w in S.DEFAULT_GRID]


# --- one fresh database per backend ----------------------------------------------------------
@contextlib.contextmanager
def _sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'studies.db'}"  # not created yet: the first open makes it


@contextlib.contextmanager
def _postgresql(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield request.getfixturevalue("postgres_url")  # skips, or fails in CI, without a server


def _mysql_server(name: str, default: str) -> Callable[..., contextlib.AbstractContextManager]:
    """A case on a MySQL-family server: a fresh database made (and dropped) by its admin URL."""
    env = f"WEIGHTSEARCH_TEST_{name.upper()}"

    @contextlib.contextmanager
    def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
        admin_url = os.environ.get(env, default)
        try:
            check_url(admin_url)  # the project's own check names the missing driver
        except StorageError as exc:
            pytest.skip(f"{name} case: {exc} (set ${env} to another admin URL)")
        admin = create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=_null_pool(),
                              connect_args={"connect_timeout": 5})
        try:
            with admin.connect() as conn:
                conn.execute(text("SELECT 1"))
        except SQLAlchemyError as exc:
            admin.dispose()
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            pytest.skip(f"{name} case: no {name} server answers at {admin_url} ({first}); start "
                        f"one or set ${env} to a server's admin URL")
        database = f"ws_test_{uuid.uuid4().hex[:12]}"
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE `{database}`"))
        try:
            yield make_url(admin_url).set(database=database).render_as_string(
                hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f"DROP DATABASE IF EXISTS `{database}`"))
            admin.dispose()

    return case


def _null_pool():
    from sqlalchemy.pool import NullPool

    return NullPool


# Every registered dialect needs one (see the first test).
CASES: dict[str, Callable[..., contextlib.AbstractContextManager]] = {
    "sqlite": _sqlite,
    "postgresql": _postgresql,
    "mysql": _mysql_server("mysql", "mysql+pymysql://root@127.0.0.1:3306/test"),
    "mariadb": _mysql_server("mariadb", "mariadb+pymysql://root@127.0.0.1:3306/test"),
}
# Server databases are integration tests (the fast tier runs the SQLite case alone).
MARKS = {"postgresql": [pytest.mark.postgres, pytest.mark.integration],
         "mysql": [pytest.mark.integration], "mariadb": [pytest.mark.integration]}


@dataclass
class Case:
    """A registered backend's fresh database, and the storages opened on it (closed after)."""

    name: str
    url: str
    engines: list[Any] = field(default_factory=list)

    def open(self):
        storage = open_storage(self.url)
        self.engines.append(storage.engine)
        return storage

    def open_reader(self):
        """A second, independent storage, as `inspect` and the service open it."""
        storage = reading.open_quiet(self.url)
        self.engines.append(storage.engine)
        return storage


@pytest.fixture(params=[pytest.param(n, marks=MARKS.get(n, []), id=n) for n in sorted(DIALECTS)])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    name = request.param
    if name not in CASES:
        pytest.fail(f"dialect {name!r} is registered but has no conformance case in CASES")
    with CASES[name](request, tmp_path) as url:
        made = Case(name, url)
        try:
            yield made
        finally:
            for engine in made.engines:
                engine.dispose()


def _server_now(engine) -> float:
    with engine.connect() as conn:
        return float(conn.execute(select(db_now(engine.dialect.name))).scalar())


# --- writers, as the study code writes ---------------------------------------------------------
ATTRS = {
    S.A_STUDY: "conformance", S.A_CENTRAL: "rte", S.A_TASK_TYPE: "classification",
    S.A_TRAIN_SIZE: 2490, S.A_AUX_TASKS: ["mrpc", "stsb"], S.A_AUX_SIZES: {"mrpc": 3668},
    S.A_PRIMARY: "accuracy", S.A_ENCODER: "tiny", S.A_ENCODER_SIZE: "32x2",
    S.A_SOURCE: S.SOURCE_SWEEP,
}


def _sweep_trial(study: optuna.Study, weight: float, seed: int, value: float | str | None) -> None:
    """A trial as the sweep's searcher writes it: created RUNNING with its labels in one insert,
    an intermediate value per epoch, its metrics, then told (`value`: its score, "fail", or None
    to leave it running)."""
    cell = S.cell_key(weight, seed)
    template = optuna.trial.create_trial(
        state=TrialState.RUNNING, params={S.PARAM: weight},
        distributions={S.PARAM: FloatDistribution(S.WEIGHT_LOW, S.WEIGHT_HIGH)},
        user_attrs={S.T_SEED: seed, S.T_CELL: cell, S.T_UNIT: cell, S.T_ATTEMPT: 0},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trial_id = study._storage.create_new_trial(study._study_id, template_trial=template)
    trial = optuna.Trial(study, trial_id)
    if value is None:
        return
    if value == "fail":
        trial.set_user_attr("error", "the trial raised an error")
        study.tell(trial, state=TrialState.FAIL)
        return
    history = []
    for epoch in (1, 2):
        score = value - 0.01 * (2 - epoch)
        trial.report(score, epoch)
        history.append({"epoch": epoch, "metrics": {"rte": {"accuracy": score},
                                                     "mrpc": {"f1": 0.8, "accuracy": 0.75}}})
    trial.set_user_attr(S.T_HISTORY, history)
    trial.set_user_attr(S.T_METRICS, history[-1]["metrics"])
    trial.set_user_attr(S.T_WALL_TIME, 1.5)
    study.tell(trial, value)


# Exact doubles: a backend that stores them in single precision fails the read-back.
SCORES = {(1.0, 1): 0.6123456789012345, (1.0, 2): 0.65, (9.0, 1): 0.7123456789012345,
          (9.0, 2): 0.69}


# --- the contract ----------------------------------------------------------------------------
def test_every_registered_dialect_has_a_conformance_case() -> None:
    assert set(CASES) == set(DIALECTS)


def test_the_registry_names_the_backend_and_opens_it_with_its_options(case: Case) -> None:
    registered = DIALECTS[case.name]
    assert dialect(case.name) is registered
    assert url_dialect(case.url) is registered
    check_url(case.url)
    with pytest.raises(StorageError, match="driver"):
        check_url(f"{case.name}+nosuchdriver://someone@localhost/studies")
    # Options are a copy: a caller that changes them changes nothing for the next one.
    options = engine_kwargs(case.url)
    assert options == registered.engine_kwargs()
    options.setdefault("connect_args", {})["changed"] = True
    assert engine_kwargs(case.url) == registered.engine_kwargs()

    # A fresh database: only a file backend's file is missing before the first open.
    assert reading.sqlite_file_missing(case.url) is registered.file
    storage = case.open()
    assert not reading.sqlite_file_missing(case.url)
    # The live engine's backend name finds the same record (the claims read it from there).
    assert dialect(storage.engine.dialect.name) is registered
    assert storage.engine.pool._pre_ping is bool(registered.engine.get("pool_pre_ping"))
    assert storage.get_current_version() == storage.get_head_version()
    assert reading.study_names(storage) == []


def test_first_opens_at_once_create_the_schema_once(case: Case) -> None:
    """Eight drivers open the fresh database at the same moment, create the study and claim
    the grid's cells: none fails, the study exists once, and each cell has one holder."""
    start = threading.Barrier(OPENERS)

    def first_open() -> list[str]:
        start.wait(timeout=60)
        storage = open_storage(case.url)
        try:
            optuna.create_study(study_name=STUDY, storage=storage, direction="maximize",
                                load_if_exists=True)
            claims = Claims(storage.engine, ttl=600)
            return [cell for cell in CELLS if claims.claim(STUDY, cell)]
        finally:
            storage.engine.dispose()

    with ThreadPoolExecutor(OPENERS) as pool:
        futures = [pool.submit(first_open) for _ in range(OPENERS)]
        errors = [f.exception(timeout=120) for f in futures]
    failed = [f"{type(e).__name__}: {e}" for e in errors if e is not None]
    assert not failed, f"{len(failed)} of {OPENERS} first opens failed; first: {failed[0]}"
    claimed = [cell for f in futures for cell in f.result()]
    assert sorted(claimed) == sorted(CELLS)  # every cell claimed, each by exactly one opener

    storage = case.open()
    assert storage.get_current_version() == storage.get_head_version()
    assert reading.study_names(storage) == [STUDY]
    assert Claims(storage.engine, ttl=600).held_by_others(STUDY) == set(CELLS)


def test_trials_read_back_exactly_through_the_study_reader(case: Case, tmp_path: Path) -> None:
    storage = case.open()
    study = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize")
    for key, value in ATTRS.items():
        study.set_user_attr(key, value)
    for (weight, seed), score in SCORES.items():
        _sweep_trial(study, weight, seed, score)
    _sweep_trial(study, 12.0, 1, None)  # still training
    _sweep_trial(study, 15.0, 1, "fail")
    table = tmp_path / "paper.csv"
    table.write_text("central_task,task_type,train_size,central_weight,seed,metric,encoder\n"
                     "rte,classification,2490,1,0,70.1,bert-base-uncased\n"
                     "rte,classification,2490,9,0,71.5,bert-base-uncased\n"
                     "mrpc,classification,3668,3,0,84.25,bert-base-uncased\n")
    assert sorted(import_file(table, "paper", case.url)) == ["paper/mrpc", "paper/rte"]

    reader = case.open_reader()
    assert reading.study_names(reader) == sorted([STUDY, "paper/mrpc", "paper/rte"])
    assert reading.resolve(reader, case.url, "paper") == ["paper/mrpc", "paper/rte"]
    central = reading.read_central(reader, STUDY)
    assert central.counts == {"complete": 4, "running": 1, "failed": 1, "pending": 0,
                              "pruned": 0, "superseded": 0, "interrupted": 0}
    assert (central.central_task, central.train_size, central.task_type) == (
        "rte", 2490, "classification")
    assert (central.source, central.maximize, central.encoder_size) == ("sweep", True, "32x2")
    assert [(s.weight, s.n) for s in central.curve] == [(1.0, 2), (9.0, 2)]
    for stats in central.curve:
        scores = [v for (w, _), v in SCORES.items() if w == stats.weight]
        assert stats.mean == pytest.approx(statistics.fmean(scores), abs=1e-15)
        assert stats.sd == pytest.approx(statistics.stdev(scores), abs=1e-15)
    assert central.best is not None and central.best.weight == 9.0
    done = {(c.weight, c.seed): c for c in central.cells if c.state == "complete"}
    assert {k: c.value for k, c in done.items()} == SCORES  # bit for bit
    assert done[(9.0, 1)].metrics == {"rte.accuracy": SCORES[(9.0, 1)], "mrpc.f1": 0.8,
                                      "mrpc.accuracy": 0.75}
    assert {(c.weight, c.state) for c in central.cells if c.state != "complete"} == {
        (12.0, "running"), (15.0, "failed")}

    # What the reader built on: attributes and per-epoch values, through Optuna's API.
    loaded = optuna.load_study(study_name=STUDY, storage=reader)
    assert {k: loaded.user_attrs[k] for k in ATTRS} == ATTRS
    trial = next(t for t in loaded.get_trials() if t.user_attrs[S.T_CELL] == "9|1")
    assert trial.intermediate_values == {1: SCORES[(9.0, 1)] - 0.01, 2: SCORES[(9.0, 1)]}
    assert trial.user_attrs[S.T_HISTORY][0]["metrics"]["mrpc"] == {"f1": 0.8, "accuracy": 0.75}

    imported = {c.name: c for c in reading.read_all(reader)}
    assert imported["paper/rte"].source == S.SOURCE_IMPORTED
    assert [(s.weight, s.mean) for s in imported["paper/rte"].curve] == [(1.0, 70.1),
                                                                          (9.0, 71.5)]
    assert imported["paper/mrpc"].encoder == "bert-base-uncased"


def test_a_readers_cache_sees_what_another_connection_writes(case: Case) -> None:
    writer = optuna.create_study(study_name=STUDY, storage=case.open(), direction="maximize")
    writer.set_user_attr(S.A_SOURCE, S.SOURCE_SWEEP)
    _sweep_trial(writer, 3.0, 1, 0.5)
    cache = reading.StudyCache(case.open_reader())
    changed, studies = cache.refresh()
    assert changed and [s.counts["complete"] for s in studies] == [1]
    assert cache.refresh()[0] is False  # nothing new
    _sweep_trial(writer, 6.0, 1, None)
    changed, studies = cache.refresh()
    assert changed and (studies[0].counts["complete"], studies[0].counts["running"]) == (1, 1)
    writer.tell(next(t.number for t in writer.get_trials() if t.state == TrialState.RUNNING),
                0.75)
    changed, studies = cache.refresh()
    assert changed and [(s.weight, s.mean) for s in studies[0].curve] == [(3.0, 0.5),
                                                                           (6.0, 0.75)]


def test_db_now_is_the_servers_clock_in_unix_seconds(case: Case) -> None:
    assert DIALECTS[case.name].now_sql is not None  # a registered backend never uses a driver's
    engine = case.open().engine
    before = time.time()
    first = _server_now(engine)
    time.sleep(0.05)
    second = _server_now(engine)
    after = time.time()
    assert math.isfinite(first) and before - 5 < first <= second < after + 5
    assert 0.03 < second - first < 2  # moves on, below a second's resolution


def test_a_claimed_cell_is_no_one_elses_until_released_or_expired(case: Case) -> None:
    engine = case.open().engine
    a, b = Claims(engine, ttl=60.0), Claims(engine, ttl=60.0)
    assert a.claim(STUDY, "9|1") and not b.claim(STUDY, "9|1")
    assert a.holds(STUDY, "9|1") and not b.holds(STUDY, "9|1")
    assert b.held_by_others(STUDY) == {"9|1"} and a.held_by_others(STUDY) == set()
    # The lease runs on the database's clock, stored in double precision.
    with engine.connect() as conn:
        expires = conn.execute(select(a.table.c.expires)).scalar()
    assert abs(float(expires) - (_server_now(engine) + 60.0)) < 2.0
    assert a.renew() == []  # still its own
    a.release(STUDY, "9|1")
    assert b.claim(STUDY, "9|1") and not a.claim(STUDY, "9|1")

    # A lease nobody renews expires on the database's clock: one claimant takes it over, and
    # the stalled holder finds it lost at its next renewal.
    stalled = Claims(engine, ttl=1.0)
    assert stalled.claim(STUDY, "1|1") and not b.claim(STUDY, "1|1")
    time.sleep(1.2)
    assert b.claim(STUDY, "1|1") and not a.claim(STUDY, "1|1")
    assert stalled.renew() == [(STUDY, "1|1")] and stalled.lost(STUDY, "1|1")
    assert b.holds(STUDY, "1|1") and b.held_by_others(STUDY) == set()
