"""Eight processes are the first to write to a new study database at once (SQLite and
PostgreSQL): none loses to a schema-creation race, and the cell claims stay exclusive."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import pytest

from weightsearch.studies import schema

WRITERS = 8
CELLS = [schema.cell_key(w, 1) for w in (1, 3, 5, 7, 9, 11)]


def first_write(url: str, worker: int, start, result_path: str) -> None:
    """Open the storage, create the study, claim every cell it can; report as JSON."""
    import traceback
    import warnings

    warnings.filterwarnings("ignore")
    outcome: dict = {"worker": worker, "error": None, "claimed": []}
    try:
        import optuna

        from weightsearch.studies.claims import Claims
        from weightsearch.studies.storage import open_storage

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        start.wait()  # all writers hit the empty database together
        storage = open_storage(url)
        optuna.create_study(study_name=schema.study_name("first", "rte"), storage=storage,
                            direction="maximize", load_if_exists=True)
        claims = Claims(storage.engine, ttl=600)
        outcome["claimed"] = [c for c in CELLS if claims.claim("first/rte", c)]
    except BaseException:
        outcome["error"] = traceback.format_exc()
    Path(result_path).write_text(json.dumps(outcome))


def _run_writers(url: str, tmp_path: Path) -> list[dict]:
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    paths = [str(tmp_path / f"w{i}.json") for i in range(WRITERS)]
    procs = [ctx.Process(target=first_write, args=(url, i, start, paths[i]))
             for i in range(WRITERS)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=180)
    return [json.loads(Path(p).read_text()) for p in paths]


def _check(outcomes: list[dict]) -> None:
    errors = [o["error"] for o in outcomes if o["error"]]
    assert not errors, errors[0]
    claimed = [c for o in outcomes for c in o["claimed"]]
    assert sorted(claimed) == sorted(CELLS)  # every cell claimed, and by exactly one writer


@pytest.mark.integration
def test_eight_first_writers_sqlite(tmp_path: Path) -> None:
    _check(_run_writers(f"sqlite:///{tmp_path / 'new.db'}", tmp_path))


@pytest.mark.integration
@pytest.mark.postgres
def test_eight_first_writers_postgres(tmp_path: Path, postgres_url: str) -> None:
    _check(_run_writers(postgres_url, tmp_path))
