"""Claims in the study database (SQLite and PostgreSQL, no Ray): leases on the database's
clock, a lost lease noticed at renewal, a release that stays released, double-precision
expiries, and the second launch that meets a study another launch just created."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from weightsearch.studies.claims import Claims, db_now


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request, tmp_path: Path):
    from sqlalchemy import create_engine

    from weightsearch.studies.dialects import engine_kwargs

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'claims.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    eng = create_engine(url, **engine_kwargs(url))
    yield eng
    eng.dispose()


def _server_now(engine) -> float:
    from sqlalchemy import select

    with engine.connect() as conn:
        return float(conn.execute(select(db_now(engine.dialect.name))).scalar())


def _expires(engine, claims: Claims, unit: str) -> float | None:
    from sqlalchemy import select

    t = claims.table
    with engine.connect() as conn:
        return conn.execute(select(t.c.expires).where(t.c.unit == unit)).scalar()


def test_one_winner_and_expired_leases_are_taken_over(engine) -> None:
    a, b = Claims(engine, ttl=1.0), Claims(engine, ttl=60.0)
    assert a.claim("s/rte", "9|1") and not b.claim("s/rte", "9|1")
    time.sleep(1.3)  # a never renews: its lease expires
    assert b.claim("s/rte", "9|1")
    assert b.holds("s/rte", "9|1") and not a.holds("s/rte", "9|1")
    # The stalled driver notices at its next renewal, and only then: it must stop that trial.
    assert not a.lost("s/rte", "9|1")
    assert a.renew() == [("s/rte", "9|1")]
    assert a.lost("s/rte", "9|1") and a.renew() == []
    # Releasing what it lost deletes nothing of the new holder's.
    a.release("s/rte", "9|1")
    assert b.holds("s/rte", "9|1")
    assert a.held_by_others("s/rte") == {"9|1"} and b.held_by_others("s/rte") == set()


def test_leases_run_on_the_database_clock(engine, monkeypatch) -> None:
    """A driver whose clock is an hour ahead writes the same expiry as one on time."""
    import weightsearch.studies.claims as claims_module

    skewed = Claims(engine, ttl=30.0)
    monkeypatch.setattr(claims_module.time, "time", lambda: 1e9 + 3600.0)
    assert skewed.claim("s/rte", "1|1")
    now = _server_now(engine)
    assert now + 25 < _expires(engine, skewed, "1|1") < now + 35
    # The expiry is stored in double precision (MySQL's FLOAT would round it to minutes).
    assert abs(_expires(engine, skewed, "1|1") - (now + 30)) < 2.0
    assert not Claims(engine, ttl=30.0).claim("s/rte", "1|1")  # still live for everyone


def test_a_release_racing_a_renewal_stays_released(engine) -> None:
    driver, other = Claims(engine, ttl=60.0), Claims(engine, ttl=60.0)
    stop = threading.Event()

    def renew_forever() -> None:
        while not stop.is_set():
            driver.renew()

    thread = threading.Thread(target=renew_forever)
    thread.start()
    try:
        units = [f"{w}|1" for w in range(20)]
        for unit in units:
            assert driver.claim("s/rte", unit)
            driver.release("s/rte", unit)
    finally:
        stop.set()
        thread.join()
    # Every released unit is free at once: no renewal brought a lease back.
    assert all(other.claim("s/rte", unit) for unit in units)
    assert not any(driver.lost("s/rte", unit) for unit in units)


def test_transient_errors_are_retried() -> None:
    import sqlite3

    import sqlalchemy.exc

    from weightsearch.studies.retries import call_retrying

    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise sqlalchemy.exc.OperationalError("UPDATE", {},
                                                  sqlite3.OperationalError("database is locked"))
        return "ok"

    assert call_retrying("claim", flaky) == "ok" and len(calls) == 3
    with pytest.raises(ValueError):
        call_retrying("claim", lambda: (_ for _ in ()).throw(ValueError("a real bug")))


def test_a_study_created_meanwhile_with_another_configuration_is_refused(
        tmp_path: Path, sample_data_dir: Path) -> None:
    """Two launches of different study files with one name: the one that finds the study
    created by the other between its look and its create is refused, not merged."""
    from weightsearch.core.errors import ConfigError
    from weightsearch.studies import schema as S
    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep.spec import load_study_spec
    from weightsearch.sweep.study_db import Central, create_studies

    url = f"sqlite:///{tmp_path / 's.db'}"
    storage = open_storage(url)
    train = {"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc"], "epochs": 1}
    specs = [load_study_spec({"study": "race", "train": train, "weights": w,
                              "central_tasks": ["rte", "mrpc"]}) for w in ([1, 9], [3])]

    def centrals(spec):
        attrs = {S.A_PRIMARY: "accuracy", S.A_DIGEST: spec.digest(), S.A_SPEC: spec.to_dict(),
                 S.A_SOURCE: S.SOURCE_SWEEP}
        return [Central(c, None, {}, dict(attrs)) for c in ("rte", "mrpc")]

    first = create_studies(specs[0], storage, url, centrals(specs[0])[:1], {})
    assert list(first) == ["rte"]
    # The second launch looked before `rte` existed, so it believes nothing exists.
    with pytest.raises(ConfigError, match="different configuration"):
        create_studies(specs[1], storage, url, centrals(specs[1]), {})
    import optuna

    assert optuna.get_all_study_names(storage) == ["race/rte"]  # the refused launch left none
    # The same configuration joins the study instead.
    both = create_studies(specs[0], storage, url, centrals(specs[0]), {})
    assert sorted(both) == ["mrpc", "rte"]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def study_url(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'study.db'}"
    return request.getfixturevalue("postgres_url")


def test_a_claim_reads_its_units_trials_not_the_study(study_url, sample_data_dir,
                                                      monkeypatch) -> None:
    """After the queue is filled, each claim finds what the study holds of its unit through
    the lookup indexes (a finished unit is skipped, an earlier attempt counted, a trial a dead
    driver left RUNNING failed), and never reads every trial: its cost does not grow with the
    study."""
    import json

    import optuna
    from optuna.trial import TrialState, create_trial
    from sqlalchemy import event, text

    from weightsearch.studies import schema as S
    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep import lookup, study_db
    from weightsearch.sweep.driver_state import CentralPlan
    from weightsearch.sweep.progress import Progress
    from weightsearch.sweep.searcher import CellSearcher
    from weightsearch.sweep.spec import load_study_spec
    from weightsearch.sweep.trainable import SUMMARY_JSON

    spec = load_study_spec({
        "study": "lookup", "storage": study_url, "workdir": str(sample_data_dir.parent / "x"),
        "train": {"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc"], "epochs": 1},
        "central_tasks": ["rte"], "weights": [1, 3, 6, 9], "seeds": [1]})
    storage = open_storage(study_url)
    study = study_db.create_studies(spec, storage, study_url,
                                    [study_db.describe(spec, "rte")], {})["rte"]
    lookup.ensure_indexes(storage.engine)
    catalog = ("SELECT name FROM sqlite_master WHERE type = 'index'"
               if storage.engine.dialect.name == "sqlite" else
               "SELECT indexname FROM pg_indexes WHERE tablename = 'trial_user_attributes'")
    with storage.engine.connect() as connection:  # expression indexes: not reflected
        names = {row[0] for row in connection.execute(text(catalog))}
    assert {f"ix_weightsearch_trial_{k}" for k in ("unit", "cell", "slot")} <= names
    strategy = spec.strategy("rte")
    space = strategy.space
    units = strategy.units([])
    done, failed, stale = units[0], units[1], units[2]

    def add(of, state, named: bool):
        cell = space.cell_key(of.point, of.seed)
        attrs = {S.T_SEED: of.seed, S.T_CELL: cell, S.T_ATTEMPT: 0}
        study.add_trial(create_trial(
            state=state, value=0.5 if state == TrialState.COMPLETE else None,
            params=space.params(of.point, "rte"), distributions=space.distributions("rte"),
            user_attrs={**attrs, S.T_UNIT: of.key} if named else attrs))

    add(done, TrialState.COMPLETE, named=True)
    add(failed, TrialState.FAIL, named=False)  # an older trial: named by its cell alone
    add(stale, TrialState.RUNNING, named=True)
    other = optuna.create_study(study_name="other/rte", storage=storage)
    other.add_trial(create_trial(state=TrialState.COMPLETE, value=1.0, user_attrs={
        S.T_UNIT: failed.key, S.T_CELL: failed.key}))  # another study's: never counted

    plan = CentralPlan("rte", study, strategy, "accuracy")
    searcher = CellSearcher(spec, [plan], Progress("lookup", 0, 1, enabled=False), set(),
                            Claims(storage.engine, ttl=60))
    plan.queue.extend(units)  # as a filled queue holds them (the done one too: stale)
    plan.dirty = False
    reads = []
    real = study_db.records
    monkeypatch.setattr(study_db, "records", lambda *a, **k: reads.append(1) or real(*a, **k))
    statements: list[tuple[str, object]] = []

    def seen(conn, cursor, statement, parameters, context, executemany) -> None:
        if "substr(value_json" in statement:
            statements.append((statement, parameters))

    event.listen(storage.engine, "before_cursor_execute", seen)
    first = searcher.suggest("t1")
    second = searcher.suggest("t2")
    event.remove(storage.engine, "before_cursor_execute", seen)
    assert not reads and statements
    if storage.engine.dialect.name == "sqlite":  # each lookup is an index search, not a scan
        with storage.engine.connect() as connection:
            for statement, parameters in statements:
                plan_rows = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}",
                                                       parameters).fetchall()
                assert "SEARCH trial_user_attributes USING INDEX ix_weightsearch_trial_" in \
                    str(plan_rows), plan_rows
    # The finished unit was skipped; the failed one is its cell's second attempt; the stale
    # RUNNING trial was failed before its unit started again.
    assert (first["cell"], first["attempt"]) == (failed.key, 1)
    assert (second["cell"], second["attempt"]) == (stale.key, 1)
    states = {t.user_attrs.get(S.T_UNIT): t.state for t in study.get_trials()
              if t.number < 3}
    assert states[stale.key] == TrialState.FAIL and states[done.key] == TrialState.COMPLETE
    summary = {"best_epoch": {"rte": 1}, "history": [{"epoch": 1, "metrics": {
        "rte": {"accuracy": 0.6}}}], "best": {"rte": {"accuracy": 0.6}}, "final": {}}
    searcher.on_trial_complete("t1", {SUMMARY_JSON: json.dumps(summary)})
    searcher.claims.stop()
    assert study.get_trials()[-2].state == TrialState.COMPLETE


def _searcher_with_two_trials(url: str, sample_data_dir: Path):
    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep import study_db
    from weightsearch.sweep.driver_state import CentralPlan
    from weightsearch.sweep.progress import Progress
    from weightsearch.sweep.searcher import CellSearcher
    from weightsearch.sweep.spec import load_study_spec

    spec = load_study_spec({
        "study": "gone", "storage": url, "workdir": str(sample_data_dir.parent / "x"),
        "train": {"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc"], "epochs": 2},
        "central_tasks": ["rte"], "weights": [1, 3, 6], "seeds": [1]})
    storage = open_storage(url)
    study = study_db.create_studies(spec, storage, url, [study_db.describe(spec, "rte")],
                                    {})["rte"]
    plan = CentralPlan("rte", study, spec.strategy("rte"), "accuracy")
    searcher = CellSearcher(spec, [plan], Progress("gone", 0, 3, enabled=False), set(),
                            Claims(storage.engine, ttl=60))
    assert isinstance(searcher.suggest("t1"), dict)
    assert isinstance(searcher.suggest("t2"), dict)
    return searcher


def test_a_study_file_deleted_under_tune_hooks_stops_the_searcher(tmp_path: Path,
                                                                  sample_data_dir) -> None:
    """Tune logs and swallows what its searcher hooks raise: a study file deleted between two
    epochs must still stop the run, not let it go on writing into an unlinked file."""
    from weightsearch.core.errors import StorageError
    from weightsearch.sweep.searcher import Searcher
    from weightsearch.sweep.trainable import EPOCH, OBJECTIVE

    db = tmp_path / "gone.db"
    searcher = _searcher_with_two_trials(f"sqlite:///{db}", sample_data_dir)
    searcher.claims.stop()
    for path in tmp_path.glob("gone.db*"):
        path.unlink()
    searcher.on_trial_result("t1", {EPOCH: 1, OBJECTIVE: 0.5})  # raises nothing into Tune
    assert isinstance(searcher.must_stop, StorageError)
    assert "was deleted while this command ran" in str(searcher.must_stop)
    assert searcher.should_stop("t2")  # the scheduler stops the other trial
    assert searcher.suggest("t3") == Searcher.FINISHED
    searcher.on_trial_complete("t2", {EPOCH: 1, OBJECTIVE: 0.5})  # nothing written or raised
    assert searcher.abandon_live() == 0  # not mistaken for Ctrl-C: `run_round` raises the error


def test_a_write_refused_under_tune_hooks_is_kept_and_other_errors_propagate(
        tmp_path: Path, sample_data_dir) -> None:
    """A write that fails in a hook (the file removed between the check and the write, as
    SQLite's readonly error reports it) is kept with its cause; a bug is no storage failure and
    propagates as before."""
    import sqlite3

    from weightsearch.core.errors import StorageError

    db = tmp_path / "ro.db"
    searcher = _searcher_with_two_trials(f"sqlite:///{db}", sample_data_dir)
    searcher.claims.stop()

    def refused_write(_trial_id: str) -> None:
        connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            connection.execute("CREATE TABLE probe (x)")  # sqlite3.OperationalError: readonly
        finally:
            connection.close()

    def bug(_trial_id: str) -> None:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        searcher._guarded(bug, "t1")
    assert searcher.must_stop is None
    searcher._guarded(refused_write, "t1")
    assert isinstance(searcher.must_stop, StorageError)
    assert "cannot be written" in str(searcher.must_stop)


def test_tunes_pickle_of_the_searcher_holds_no_database_url(tmp_path: Path,
                                                           sample_data_dir) -> None:
    """Tune pickles its search algorithm into the experiment folder (tuner.pkl, for its own
    restore): the study database's URL, which may hold a password, is not in it."""
    import ray.cloudpickle

    from weightsearch.sweep.gpu_gate import GpuGate

    searcher = _searcher_with_two_trials(f"sqlite:///{tmp_path / 'named-db.db'}",
                                         sample_data_dir)
    searcher.claims.stop()
    gate = GpuGate(searcher, 2, gpu=0.0, gpus=0.0, shares=None,
                   studies={"rte": searcher.plans[0].study}, tell=print)
    written = ray.cloudpickle.dumps(gate)
    assert b"named-db" not in written and str(tmp_path).encode() not in written
    copy = ray.cloudpickle.loads(written)
    assert copy.max_concurrent == 2 and copy.searcher.ran == searcher.ran
