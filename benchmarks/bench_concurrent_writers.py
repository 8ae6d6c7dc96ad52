"""How fast N processes can write trials into one study, on SQLite and on PostgreSQL.

    python benchmarks/bench_concurrent_writers.py [--processes 8] [--trials 25]
        [--pg-admin postgresql+psycopg://postgres@127.0.0.1:5432/postgres] [--no-postgres]

Each process opens the storage, waits for a common start signal, then asks and tells its trials
(one param, three user attrs, one intermediate value each), as the sweep's driver does per
finished trial. Printed per backend: trials written, wall time from the start signal to the last
write, trials per second, and the errors and transient-error retries the writers met.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STUDY = "bench/rte"


def writer(url: str, worker: int, n_trials: int, ready, start, result_path: str) -> None:
    import logging
    import traceback
    import warnings

    import optuna

    from weightsearch.studies import schema
    from weightsearch.studies.storage import open_storage

    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    retries: list[str] = []

    class _Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            retries.append(record.getMessage())

    logging.getLogger("weightsearch.storage").addHandler(_Count(logging.WARNING))
    out = {"written": 0, "error": None, "first": None, "last": None}
    try:
        # Random sampling: the figure is the database's, not TPE's (which rereads all trials).
        study = optuna.load_study(study_name=STUDY, storage=open_storage(url),
                                  sampler=optuna.samplers.RandomSampler(seed=worker))
        dist = {schema.PARAM: optuna.distributions.FloatDistribution(1.0, 15.0)}
        ready.put(worker)
        start.wait()
        out["first"] = time.time()
        for i in range(n_trials):
            trial = study.ask(dist)
            seed = worker * 1000 + i
            trial.set_user_attr(schema.T_SEED, seed)
            trial.set_user_attr(schema.T_CELL, schema.cell_key(trial.params[schema.PARAM], seed))
            trial.set_user_attr(schema.T_METRICS, {"rte": {"accuracy": 0.5}})
            trial.report(0.5, 1)
            study.tell(trial, 0.5)
            out["written"] += 1
    except BaseException:
        out["error"] = traceback.format_exc()
    out["last"] = time.time()
    out["retries"] = len(retries)
    Path(result_path).write_text(json.dumps(out))


def run(url: str, processes: int, n_trials: int) -> dict:
    import optuna

    from weightsearch.studies.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    optuna.create_study(study_name=STUDY, storage=open_storage(url), direction="maximize")
    ctx = mp.get_context("spawn")
    ready, start = ctx.Queue(), ctx.Event()
    folder = Path(tempfile.mkdtemp(prefix="bench-writers-"))
    procs = []
    for w in range(processes):
        path = folder / f"{w}.json"
        proc = ctx.Process(target=writer, args=(url, w, n_trials, ready, start, str(path)))
        proc.start()
        procs.append((proc, path))
    # Every process has imported and opened the storage before the clock starts: writes count,
    # not interpreter start-up.
    for _ in procs:
        ready.get(timeout=300)
    started = time.time()
    start.set()
    for proc, _ in procs:
        proc.join(timeout=900)
    results = [json.loads(path.read_text()) for _, path in procs if path.exists()]
    wall = max((r["last"] for r in results), default=started) - started
    stored = optuna.load_study(study_name=STUDY, storage=open_storage(url)).get_trials()
    complete = sum(t.state == optuna.trial.TrialState.COMPLETE for t in stored)
    return {
        "written": sum(r["written"] for r in results),
        "stored_complete": complete,
        "wall_s": wall,
        "trials_per_s": complete / wall if wall > 0 else float("nan"),
        "errors": sum(r["error"] is not None for r in results) + (processes - len(results)),
        "retries": sum(r["retries"] for r in results),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--trials", type=int, default=25, help="trials per process")
    parser.add_argument("--pg-admin", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        rows.append(("sqlite", run(f"sqlite:///{folder}/bench.db", args.processes, args.trials)))
    if not args.no_postgres:
        from sqlalchemy import create_engine, text

        admin = create_engine(args.pg_admin, isolation_level="AUTOCOMMIT")
        name = f"ws_bench_{uuid.uuid4().hex[:10]}"
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            url = args.pg_admin.rsplit("/", 1)[0] + f"/{name}"
            rows.append(("postgresql", run(url, args.processes, args.trials)))
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()

    print(f"{args.processes} processes x {args.trials} trials into one study")
    print(f"{'backend':<11} {'complete':>8} {'wall_s':>8} {'trials/s':>9} {'errors':>7} "
          f"{'retries':>8}")
    for backend, r in rows:
        print(f"{backend:<11} {r['stored_complete']:>8} {r['wall_s']:>8.1f} "
              f"{r['trials_per_s']:>9.1f} {r['errors']:>7} {r['retries']:>8}")
    return 0 if all(r["errors"] == 0 for _, r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
