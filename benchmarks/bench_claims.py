"""What one claim costs the driver as a study grows: the searcher's whole cycle for one cell.

For each study size N (finished trials of one central task), a fresh SQLite study is filled
with N COMPLETE trials (each with a five-epoch history, as trials carry), and then the driver's
own path is timed for `--cycles` cells, one at a time: `suggest` (pick the next pending unit,
claim it, read what the study knows of it, create its RUNNING trial) and `on_trial_complete`
(write the trial's attributes and value, release the claim). No training runs: this is the
bookkeeping a real study pays per trial on top of it. The study is a grid over the central
weight (1-15, up to 1,000 points) with as many seeds as the size needs, so that cells remain
pending at every size.

    python benchmarks/bench_claims.py [--sizes 100,1000,10000] [--cycles 40]

Prints, per size, the median and mean milliseconds per cycle and the ratio to the smallest
size; the target is a ratio within 1.5x at 10,000 trials. Each size is timed twice on the
same study, cycles interleaved: `lookup` is the searcher as it is (a claimed unit's trials
found by index); `full read` makes it read every trial of the study after each claim, as it
did before `sweep/lookup.py`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

POINTS = 1000  # central weights at most, spread over 1-15


def build(work: Path, size: int, cycles: int):
    import optuna
    from optuna.trial import TrialState, create_trial

    from weightsearch.studies import schema as S
    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep import lookup, study_db
    from weightsearch.sweep.claims import Claims
    from weightsearch.sweep.driver_state import CentralPlan
    from weightsearch.sweep.progress import Progress
    from weightsearch.sweep.searcher import CellSearcher
    from weightsearch.sweep.spec import load_study_spec

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seeds = (size + cycles) // POINTS + 2
    points = min(POINTS, (size + cycles) // seeds + 2)
    weights = [round(1 + 14 * i / (POINTS - 1), 3) for i in range(points)]
    url = f"sqlite:///{work / f'claims-{size}.db'}"
    spec = load_study_spec({
        "study": f"claims{size}", "storage": url, "workdir": str(work / "runs"),
        "train": {"data_dir": str(ROOT / "data" / "glue_sample"), "tasks": ["rte", "mrpc"],
                  "epochs": 5},
        "central_tasks": ["rte"], "weights": weights, "seeds": list(range(1, seeds + 1)),
    })
    storage = open_storage(url)
    central = study_db.describe(spec, "rte")
    study = study_db.create_studies(spec, storage, url, [central], {})["rte"]
    lookup.ensure_indexes(storage.engine)  # as `launch` does
    strategy = spec.strategy("rte")
    units = strategy.units([])[:size]
    history = [{"epoch": e, "metrics": {"rte": {"accuracy": 0.5 + e / 100},
                                        "mrpc": {"accuracy": 0.6, "f1": 0.7}}}
               for e in range(1, 6)]
    trials = []
    space = strategy.space
    for unit in units:
        point = unit.point
        cell = space.cell_key(point, unit.seed)
        trials.append(create_trial(
            state=TrialState.COMPLETE, value=0.55,
            params=space.params(point, "rte"), distributions=space.distributions("rte"),
            user_attrs={S.T_SEED: unit.seed, S.T_CELL: cell, S.T_ATTEMPT: 0,
                        S.T_UNIT: unit.key, S.T_HISTORY: history,
                        S.T_METRICS: history[-1]["metrics"], S.T_BEST_EPOCH: 5,
                        S.T_WALL_TIME: 60.0},
            intermediate_values={e: 0.5 + e / 100 for e in range(1, 6)}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study.add_trials(trials)
    plan = CentralPlan("rte", study, strategy, "accuracy")
    claims = Claims(storage.engine, ttl=600)
    searcher = CellSearcher(spec, [plan], Progress(spec.study, 0, 1, enabled=False),
                            set(), claims)
    return searcher, history


def cycle(searcher, history, number: int) -> float:
    from weightsearch.sweep.trainable import SUMMARY_JSON

    summary = {"best_epoch": {"rte": 5}, "history": history,
               "best": history[-1]["metrics"], "final": history[-1]["metrics"],
               "wall_time_s": 60.0, "train_examples_per_s": 100.0, "output_dir": "x"}
    trial_id = f"t{number}"
    started = time.perf_counter()
    config = searcher.suggest(trial_id)
    assert isinstance(config, dict), config
    searcher.on_trial_complete(trial_id, {SUMMARY_JSON: json.dumps(summary)})
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--cycles", type=int, default=40)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    modes = ("lookup", "full read")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            t0 = time.perf_counter()
            searcher, history = build(Path(tmp), size, 2 * args.cycles + 2)
            built = time.perf_counter() - t0
            plan = searcher.plans[0]
            cycle(searcher, history, -1)  # the first fills the driver's queue: not a claim
            times: dict[str, list[float]] = {m: [] for m in modes}
            for i in range(args.cycles):
                for mode in modes if i % 2 == 0 else modes[::-1]:
                    if mode == "full read":
                        plan.unit_records = lambda unit, plan=plan: plan.records()
                    else:
                        plan.__dict__.pop("unit_records", None)
                    times[mode].append(cycle(searcher, history, 2 * i + modes.index(mode)))
            searcher.claims.stop()
            medians = {m: statistics.median(v) * 1e3 for m, v in times.items()}
            rows.append((size, medians))
            print(f"{size:>6} trials: " + ", ".join(f"{m} {v:.1f} ms" for m, v in
                                                    medians.items())
                  + f" per cycle (median of {args.cycles}; study built in {built:.0f} s)",
                  flush=True)
    print("\nsize    " + "".join(f"{m + ' ms':>14} {'ratio':>6}" for m in modes))
    for size, medians in rows:
        print(f"{size:>6}  " + "".join(f"{medians[m]:14.1f} {medians[m] / rows[0][1][m]:5.2f}x"
                                      for m in modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
