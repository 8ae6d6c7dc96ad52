"""Eight processes write trials into one study at once: every write lands, no worker fails."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import optuna
import pytest

from weightsearch.studies import schema
from weightsearch.studies.storage import open_storage

WORKERS = 8
TRIALS_EACH = 10  # 80 trials per backend; the benchmark writes 8 x 25
STUDY = schema.study_name("concurrent", "rte")


def write_trials(url: str, worker: int, n_trials: int, start, result_path: str) -> None:
    """One writer process: ask/tell `n_trials` trials with user attrs; report to a JSON file.

    Never raises: the parent reads the outcome (and any exception) from `result_path`, and the
    exit code is 1 when something went wrong.
    """
    import logging
    import sys
    import traceback
    import warnings

    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    retries: list[str] = []

    class _Count(logging.Handler):  # storage retries would hide lock errors: count them
        def emit(self, record: logging.LogRecord) -> None:
            retries.append(record.getMessage())

    logging.getLogger("weightsearch.storage").addHandler(_Count(logging.WARNING))
    outcome: dict = {"worker": worker, "written": 0, "error": None}
    try:
        # Random sampling: the figure is the database's, not TPE's (which rereads all trials).
        study = optuna.load_study(study_name=STUDY, storage=open_storage(url),
                                  sampler=optuna.samplers.RandomSampler(seed=worker))
        dist = {schema.PARAM: optuna.distributions.FloatDistribution(1.0, 15.0)}
        start.wait()  # all writers begin together
        for i in range(n_trials):
            trial = study.ask(dist)
            seed = worker * 1000 + i
            weight = trial.params[schema.PARAM]
            trial.set_user_attr(schema.T_SEED, seed)
            trial.set_user_attr(schema.T_CELL, schema.cell_key(weight, seed))
            trial.set_user_attr(schema.T_METRICS, {"rte": {"accuracy": 0.5 + i / 1000}})
            trial.report(0.5, 1)
            study.tell(trial, 0.5 + i / 1000)
            outcome["written"] += 1
    except BaseException:
        outcome["error"] = traceback.format_exc()
    outcome["retries"] = retries
    Path(result_path).write_text(json.dumps(outcome))
    sys.exit(1 if outcome["error"] else 0)


def run_writers(url: str, folder: Path, workers: int = WORKERS, n_trials: int = TRIALS_EACH):
    """Create the study, run the writer processes, return their outcomes."""
    optuna.create_study(study_name=STUDY, storage=open_storage(url), direction="maximize")
    ctx = mp.get_context("spawn")  # fresh interpreters, as separate trial drivers would be
    start = ctx.Event()
    procs, paths = [], []
    for w in range(workers):
        path = folder / f"writer-{w}.json"
        proc = ctx.Process(target=write_trials, args=(url, w, n_trials, start, str(path)))
        proc.start()
        procs.append(proc)
        paths.append(path)
    start.set()
    for proc in procs:
        proc.join(timeout=300)
        if proc.is_alive():
            proc.kill()
    codes = [proc.exitcode for proc in procs]
    outcomes = [json.loads(p.read_text()) if p.exists() else None for p in paths]
    return codes, outcomes


def _check(url: str, tmp_path: Path) -> None:
    codes, outcomes = run_writers(url, tmp_path)
    for w, (code, outcome) in enumerate(zip(codes, outcomes, strict=True)):
        assert outcome is not None, f"writer {w} left no result (exit code {code})"
        assert outcome["error"] is None, f"writer {w} failed:\n{outcome['error']}"
        assert code == 0
        assert outcome["written"] == TRIALS_EACH
        assert outcome["retries"] == [], f"writer {w} hit transient errors: {outcome['retries']}"

    trials = optuna.load_study(study_name=STUDY, storage=open_storage(url)).get_trials()
    total = WORKERS * TRIALS_EACH
    assert len(trials) == total
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert sorted(t.number for t in trials) == list(range(total))
    seeds = {t.user_attrs[schema.T_SEED] for t in trials}
    assert seeds == {w * 1000 + i for w in range(WORKERS) for i in range(TRIALS_EACH)}
    assert len({t.user_attrs[schema.T_CELL] for t in trials}) == total
    assert all(t.user_attrs[schema.T_METRICS]["rte"]["accuracy"] >= 0.5 for t in trials)
    assert all(t.intermediate_values == {1: 0.5} for t in trials)


@pytest.mark.integration
def test_concurrent_writers_sqlite(tmp_path: Path) -> None:
    _check(f"sqlite:///{tmp_path / 'study.db'}", tmp_path)


@pytest.mark.integration
@pytest.mark.postgres
def test_concurrent_writers_postgres(postgres_url: str, tmp_path: Path) -> None:
    _check(postgres_url, tmp_path)

