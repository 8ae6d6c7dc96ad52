"""Calibration of the recommender on synthetic worlds with a known truth
(`weightsearch.recommender.synthetic`).

    python benchmarks/bench_recommend_calibration.py [--worlds 100] [--held-out 4]

For 1, 3 and 5 seeds per weight and 4, 8 and 16 tasks: in each generated world, fit on the tasks
and predict fresh tasks of the same world; prints how often the 80% interval holds the true best
weight (target 70-90%), with its standard error from the spread between worlds (predictions of
one world share its fit, so they are not independent), and the mean absolute error of the
recommended weight. The settings are paired (the same worlds, tasks and first seeds), so the
second table's differences in error between neighbouring settings are the settings' own; it
gives each with its paired standard error.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

import numpy as np

from weightsearch.recommender.synthetic import coverage_and_error

TASKS, SEEDS = (4, 8, 16), (1, 3, 5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=100)
    parser.add_argument("--held-out", type=int, default=4)
    parser.add_argument("--first-seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    print(f"{'tasks':>5} {'seeds':>5} {'predictions':>11} {'80% coverage':>12} {'se':>6} "
          f"{'mean |error|':>12}")
    results = {}
    for tasks in TASKS:
        for seeds in SEEDS:
            r = coverage_and_error(args.worlds, tasks, seeds, args.held_out, args.first_seed)
            results[tasks, seeds] = r
            print(f"{tasks:>5} {seeds:>5} {r['predictions']:>11} {r['coverage80']:>12.3f} "
                  f"{r['coverage_se']:>6.3f} {r['mean_abs_error']:>12.2f}")
    ok = all(0.7 <= r["coverage80"] <= 0.9 for r in results.values())
    print(f"coverage within 70-90% everywhere: {'yes' if ok else 'no'}")
    print("\nchange in mean |error| (paired: the same predictions; negative = smaller error)")
    steps = [((t, a), (t, b), f"{t} tasks, seeds {a} -> {b}")
             for t in TASKS for a, b in itertools.pairwise(SEEDS)]
    steps += [((a, s), (b, s), f"{s} seed(s), tasks {a} -> {b}")
              for s in SEEDS for a, b in itertools.pairwise(TASKS)]
    for before, after, label in steps:
        d = np.subtract(results[after]["errors"], results[before]["errors"])
        world = d.reshape(args.worlds, args.held_out).mean(axis=1)  # clustered by world
        se = float(np.std(world, ddof=1) / math.sqrt(args.worlds))
        print(f"  {label:<28} {d.mean():+.3f} +- {se:.3f}")
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
