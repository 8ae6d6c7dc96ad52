"""What writing a trial's end costs: one transaction against a commit per piece.

    python benchmarks/bench_trial_end.py [--storage URL] [--trials 60]

A study's driver ends every trial with its user attributes (metrics at the best epoch, final
metrics, the per-epoch history, best epoch, wall time, speed, run folder) and its value. Before,
each went through the public API: a commit per attribute and one for `tell`; now
`weightsearch.sweep.trial_end.finish_trial` writes them in one transaction. The two are interleaved
trial by trial on the same study (a 5-epoch history of three tasks' metrics, as a study of three
tasks records it); the table gives the median and 90th percentile wall time per trial end and the
commits each takes. Default storage: a fresh SQLite file in WAL mode, as `launch` makes it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def _attrs(i: int) -> dict:
    metrics = {t: {"accuracy": 0.6 + i * 1e-4, "f1": 0.7, "mcc": 0.3} for t in ("rte", "mrpc",
                                                                                "stsb")}
    return {
        "metrics": metrics, "final_metrics": metrics,
        "history": [{"epoch": e, "metrics": metrics, "primary": {"rte": 0.6}} for e in range(1, 6)],
        "best_epoch": 3, "wall_time_s": 812.5, "train_examples_per_s": 41.2,
        "output_dir": f"/runs/study/rte/w9-s{i}",
    }


def main() -> None:
    import optuna
    from optuna.trial import TrialState
    from sqlalchemy import event

    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep.trial_end import _piece_by_piece, finish_trial

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage")
    parser.add_argument("--trials", type=int, default=60)
    args = parser.parse_args()
    url = args.storage or f"sqlite:///{Path(tempfile.mkdtemp()) / 'end.db'}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(url)
    commits = [0]
    event.listen(storage.engine, "commit", lambda conn: commits.__setitem__(0, commits[0] + 1))
    study = optuna.create_study(study_name=f"bench-end-{time.time_ns()}", storage=storage,
                                direction="maximize")
    ways = {"commit per piece": lambda t, i: _piece_by_piece(
                study, t, TrialState.COMPLETE, 0.6, _attrs(i), {}),
            "one transaction": lambda t, i: finish_trial(
                study, t, TrialState.COMPLETE, 0.6, _attrs(i), {})}
    times: dict[str, list[float]] = {k: [] for k in ways}
    counts: dict[str, list[int]] = {k: [] for k in ways}
    for i in range(args.trials):
        for name, end in ways.items():
            trial_id = study.ask()._trial_id
            before, start = commits[0], time.perf_counter()
            end(trial_id, i)
            times[name].append((time.perf_counter() - start) * 1e3)
            counts[name].append(commits[0] - before)
    print(f"{url.split(':')[0]}, {args.trials} trial ends each, interleaved")
    print(f"{'way':<18} {'median ms':>10} {'p90 ms':>8} {'commits':>8}")
    for name in ways:
        q = statistics.quantiles(times[name], n=10)
        print(f"{name:<18} {statistics.median(times[name]):>10.1f} {q[-1]:>8.1f} "
              f"{statistics.median(counts[name]):>8.0f}")


if __name__ == "__main__":
    main()
