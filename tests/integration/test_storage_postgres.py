"""The study database on a real PostgreSQL server: round trip, lost connections, bad URLs."""

from __future__ import annotations

import logging
import threading
import time

import optuna
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from weightsearch.core.errors import StorageError
from weightsearch.studies import schema
from weightsearch.studies.storage import open_storage

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

STUDY = schema.study_name("pg-test", "rte")


def _admin(url: str):
    """An AUTOCOMMIT engine on the server's `postgres` database, to act on the test database."""
    admin_url = make_url(url).set(database="postgres")
    return create_engine(admin_url, isolation_level="AUTOCOMMIT")


def _terminate_backends(url: str) -> int:
    """Kill every server process serving the test database, as a server restart would."""
    database = make_url(url).database
    engine = _admin(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = :db AND pid <> pg_backend_pid()"),
                {"db": database},
            ).fetchall()
    finally:
        engine.dispose()
    return len(rows)


def _write_trial(study: optuna.Study, weight: float, seed: int) -> None:
    study.enqueue_trial({schema.PARAM: weight})
    trial = study.ask({schema.PARAM: optuna.distributions.FloatDistribution(1.0, 15.0)})
    trial.set_user_attr(schema.T_SEED, seed)
    trial.set_user_attr(schema.T_CELL, schema.cell_key(weight, seed))
    history = []
    for epoch in (1, 2):
        score = 0.5 + 0.01 * weight + 0.001 * epoch
        trial.report(score, epoch)
        history.append({"epoch": epoch, "metrics": {"rte": {"accuracy": score}}})
    trial.set_user_attr(schema.T_HISTORY, history)
    trial.set_user_attr(schema.T_METRICS, history[-1]["metrics"])
    trial.set_user_attr(schema.T_WALL_TIME, 1.5)
    study.tell(trial, history[-1]["metrics"]["rte"]["accuracy"])


def _create_study(storage) -> optuna.Study:
    study = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize")
    attrs = {
        schema.A_STUDY: "pg-test", schema.A_CENTRAL: "rte", schema.A_TASK_TYPE: "classification",
        schema.A_TRAIN_SIZE: 2490, schema.A_AUX_TASKS: ["mrpc"], schema.A_AUX_SIZES: {"mrpc": 3668},
        schema.A_PRIMARY: "accuracy", schema.A_ENCODER: "tiny",
        schema.A_SOURCE: schema.SOURCE_SWEEP,
    }
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    return study


def test_round_trip_through_optuna_api(postgres_url: str) -> None:
    storage = open_storage(postgres_url)
    study = _create_study(storage)
    _write_trial(study, 1.0, 1)
    _write_trial(study, 9.0, 1)

    # A second, independent storage object sees everything (as `inspect` would).
    summaries = optuna.get_all_study_summaries(open_storage(postgres_url))
    assert [s.study_name for s in summaries] == [STUDY]
    loaded = optuna.load_study(study_name=STUDY, storage=open_storage(postgres_url))
    assert loaded.user_attrs[schema.A_CENTRAL] == "rte"
    assert loaded.user_attrs[schema.A_AUX_SIZES] == {"mrpc": 3668}
    trials = loaded.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert [t.user_attrs[schema.T_CELL] for t in trials] == ["1|1", "9|1"]
    assert [t.params[schema.PARAM] for t in trials] == [1.0, 9.0]
    assert trials[1].intermediate_values == {1: pytest.approx(0.591), 2: pytest.approx(0.592)}
    assert trials[1].user_attrs[schema.T_HISTORY][0]["metrics"]["rte"]["accuracy"] == (
        pytest.approx(0.591)
    )
    frame = loaded.trials_dataframe()
    assert len(frame) == 2 and f"user_attrs_{schema.T_CELL}" in frame.columns


def test_survives_killed_connections(postgres_url: str) -> None:
    storage = open_storage(postgres_url)
    study = _create_study(storage)
    _write_trial(study, 3.0, 1)
    assert _terminate_backends(postgres_url) >= 1  # the pooled connection is now dead
    # pool_pre_ping notices the dead connection at checkout and opens a new one.
    _write_trial(study, 6.0, 1)
    assert len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == 2


def test_retries_while_the_database_refuses_connections(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Like a restart: connections dropped, new ones refused for a while, then accepted again."""
    storage = open_storage(postgres_url)
    study = _create_study(storage)
    _write_trial(study, 3.0, 1)
    database = make_url(postgres_url).database
    admin = _admin(postgres_url)
    with admin.connect() as conn:
        conn.execute(text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false'))
    _terminate_backends(postgres_url)

    def reopen() -> None:
        time.sleep(2.0)
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true'))

    opener = threading.Thread(target=reopen)
    opener.start()
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="weightsearch.storage"):
            # Meets the refusal, retries, succeeds once the database is reopened.
            study.set_user_attr("note", "written during the outage")
        waited = time.monotonic() - started
        _write_trial(study, 6.0, 1)
    finally:
        opener.join()
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true'))
        admin.dispose()
    assert waited >= 1.5
    assert any("retrying" in r.getMessage() for r in caplog.records)
    assert study.user_attrs["note"] == "written during the outage"
    cells = [t.user_attrs[schema.T_CELL] for t in study.get_trials(deepcopy=False)]
    assert cells == ["3|1", "6|1"]


def test_unreachable_server_is_a_clear_storage_error() -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:5433/nothing_here"
    started = time.monotonic()
    with pytest.raises(StorageError) as info:
        open_storage(url)
    assert time.monotonic() - started < 15
    message = str(info.value)
    assert url in message and "database server is running" in message


def test_a_connection_killed_in_the_middle_of_reading_trials_is_retried(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Optuna's read of a study's trials catches the error of its first query and tries
    another in the same session, which fails differently (its transaction is gone): the
    first error is then only the context of the second. The read is retried whole."""
    from sqlalchemy import event

    storage = open_storage(postgres_url)
    study = _create_study(storage)
    _write_trial(study, 3.0, 1)
    _write_trial(study, 6.0, 1)
    admin = _admin(postgres_url)
    killed: list[int] = []

    def kill_once(conn, cursor, statement, parameters, context, executemany) -> None:
        if killed or "FROM trial_intermediate_values" not in statement:
            return
        pid = conn.connection.dbapi_connection.info.backend_pid
        killed.append(pid)
        with admin.connect() as a:  # as a server restart does, mid-read
            a.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            deadline = time.monotonic() + 10
            while a.execute(text("SELECT 1 FROM pg_stat_activity WHERE pid = :pid"),
                            {"pid": pid}).first() and time.monotonic() < deadline:
                time.sleep(0.05)

    event.listen(storage.engine, "before_cursor_execute", kill_once)
    try:
        with caplog.at_level(logging.WARNING, logger="weightsearch.storage"):
            trials = storage.get_all_trials(study._study_id)
    finally:
        event.remove(storage.engine, "before_cursor_execute", kill_once)
        admin.dispose()
    assert killed
    assert any("retrying" in r.getMessage() for r in caplog.records)
    assert [t.user_attrs[schema.T_CELL] for t in trials] == ["3|1", "6|1"]
    assert trials[1].intermediate_values == {1: pytest.approx(0.561), 2: pytest.approx(0.562)}
