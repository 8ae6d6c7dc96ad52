"""Latency of GET /recommend on a real uvicorn with 10,000 trials in a SQLite study database.

    python benchmarks/bench_recommend.py [--trials 10000] [--requests 1000] [--db PATH]
        [--launched] [--inspect]

Fills the database through `weightsearch import` (8 central tasks x 6 weights x ~209 seeds),
starts `weightsearch serve` on a free loopback port, sends the requests one after another
(httpx, one keep-alive connection, varying train sizes) and prints p50/p95/p99 in ms.

`--launched` fills it instead with trials as a launched study writes them (4 central tasks of
the shipped sample x 6 weights x seeds; each trial with its per-epoch history, metrics and
cell), which are heavier to read than imported rows. `--inspect` also times
`weightsearch inspect` (all studies, then one) on the database, wall clock, before serving.
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASKS = {  # task: (type, train size, best weight)
    "mnli": ("classification", 392702, 1), "qqp": ("classification", 363846, 3),
    "qnli": ("ranking", 104743, 6), "sst2": ("classification", 67349, 6),
    "cola": ("classification", 8551, 12), "stsb": ("regression", 5749, 9),
    "mrpc": ("classification", 3668, 12), "rte": ("classification", 2490, 15),
}
GRID = (1, 3, 6, 9, 12, 15)


def write_results(path: Path, n_trials: int) -> int:
    rng = random.Random(0)
    seeds = math.ceil(n_trials / (len(TASKS) * len(GRID)))
    rows = 0
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["central_task", "task_type", "train_size", "central_weight", "seed",
                      "metric"])
        for task, (ttype, size, best) in TASKS.items():
            for w in GRID:
                for seed in range(seeds):
                    score = 80 - 0.05 * (w - best) ** 2 + rng.gauss(0, 1.5)
                    out.writerow([task, ttype, size, w, seed, f"{score:.3f}"])
                    rows += 1
    return rows


def fill_launched(url: str, n_trials: int) -> int:
    """Studies as `launch` creates them, and trials as its searcher completes them."""
    import warnings

    import optuna
    from optuna.trial import TrialState, create_trial

    from weightsearch.studies import schema as S
    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep import study_db
    from weightsearch.sweep.spec import load_study_spec

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    centrals = ["rte", "mrpc", "stsb", "sst2"]
    seeds = math.ceil(n_trials / (len(centrals) * len(GRID)))
    root = Path(__file__).resolve().parents[1]
    spec = load_study_spec({
        "study": "bench", "storage": url, "workdir": tempfile.mkdtemp(),
        "train": {"data_dir": str(root / "data" / "glue_sample"), "tasks": centrals},
        "weights": list(GRID), "seeds": list(range(1, seeds + 1))})
    storage = open_storage(url)
    described = [study_db.describe(spec, c) for c in centrals]
    studies = study_db.create_studies(spec, storage, url, described, {})
    rng = random.Random(0)
    rows = 0
    for c in centrals:
        space = spec.space
        trials = []
        for w in GRID:
            for seed in range(1, seeds + 1):
                point = {space.paths[0]: float(w)}
                cell = space.cell_key(point, seed)
                history = [{"epoch": e, "metrics": {t: {"accuracy": rng.random(), "f1": 0.5}
                                                    for t in centrals}} for e in range(1, 6)]
                trials.append(create_trial(
                    state=TrialState.COMPLETE, value=rng.random(),
                    params=space.params(point, c), distributions=space.distributions(c),
                    user_attrs={S.T_SEED: seed, S.T_CELL: cell, S.T_UNIT: cell,
                                S.T_ATTEMPT: 0, S.T_METRICS: history[-1]["metrics"],
                                S.T_FINAL_METRICS: history[-1]["metrics"],
                                S.T_HISTORY: history, S.T_BEST_EPOCH: 5,
                                S.T_WALL_TIME: 60.0},
                    intermediate_values={e: rng.random() for e in range(1, 6)}))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            studies[c].add_trials(trials)
        rows += len(trials)
    return rows


def time_inspect(url: str) -> None:
    for args in ([], ["bench/rte"]):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "weightsearch.cli", "inspect", *args,
                        "--storage", url], check=True, stdout=subprocess.DEVNULL)
        what = "one study" if args else "all studies"
        print(f"weightsearch inspect ({what}): {time.perf_counter() - t0:.2f} s wall")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    import httpx

    from weightsearch.studies.importer import import_file

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=1_000)
    parser.add_argument("--db", type=Path, help="SQLite file (default: a temporary one)")
    parser.add_argument("--launched", action="store_true",
                        help="fill with launched-study trials (per-epoch histories)")
    parser.add_argument("--inspect", action="store_true", help="time weightsearch inspect too")
    args = parser.parse_args()

    # tmpfs when there is one: Optuna commits every added trial, and the fill is not what we time.
    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="bench-recommend-", dir=shm if shm.is_dir() else None))
    db = args.db or folder / "studies.db"
    url = f"sqlite:///{db}"
    if not db.exists():
        t0 = time.perf_counter()
        if args.launched:
            n = fill_launched(url, args.trials)
        else:
            results = folder / "results.csv"
            n = write_results(results, args.trials)
            import_file(results, "bench", url)
        print(f"filled {db} with {n} trials in {time.perf_counter() - t0:.1f} s")
    if args.inspect:
        time_inspect(url)

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "weightsearch.cli", "serve", "--port", str(port), "--storage", url],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=600) as client:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    sys.exit("the server did not start")
                time.sleep(0.2)
            t0 = time.perf_counter()
            first = client.get("/recommend", params={"train_size": 2500})
            first.raise_for_status()
            print(f"first request (reads every study into the cache): "
                  f"{(time.perf_counter() - t0) * 1000:.0f} ms")
            rng = random.Random(1)
            latencies = []
            for _ in range(args.requests):
                size = int(10 ** rng.uniform(3, 6))
                t0 = time.perf_counter()
                r = client.get("/recommend", params={"train_size": size})
                latencies.append((time.perf_counter() - t0) * 1000)
                r.raise_for_status()
    finally:
        server.terminate()
        server.wait(timeout=20)
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, math.ceil(p / 100 * len(latencies)) - 1)]

    print(f"{len(latencies)} sequential GET /recommend: p50 {pct(50):.1f} ms, "
          f"p95 {pct(95):.1f} ms, p99 {pct(99):.1f} ms, max {latencies[-1]:.1f} ms")


if __name__ == "__main__":
    main()
