"""Calibration of the recommender on synthetic worlds with a known truth (`studies.synthetic`).

    python benchmarks/bench_recommend_calibration.py [--worlds 100] [--held-out 4]

For 1, 3 and 5 seeds per weight and 4, 8 and 16 tasks: in each generated world, fit on the tasks
and predict fresh tasks of the same world; prints how often the 80% interval holds the true best
weight (target 70-90%) and the mean absolute error of the recommended weight.
"""

from __future__ import annotations

import argparse
import time

from studies.synthetic import coverage_and_error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=100)
    parser.add_argument("--held-out", type=int, default=4)
    parser.add_argument("--first-seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    print(f"{'tasks':>5} {'seeds':>5} {'predictions':>11} {'80% coverage':>12} "
          f"{'mean |error|':>12}")
    worst = []
    for tasks in (4, 8, 16):
        for seeds in (1, 3, 5):
            r = coverage_and_error(args.worlds, tasks, seeds, args.held_out, args.first_seed)
            worst.append(r["coverage80"])
            print(f"{tasks:>5} {seeds:>5} {r['predictions']:>11} {r['coverage80']:>12.3f} "
                  f"{r['mean_abs_error']:>12.2f}")
    ok = all(0.7 <= c <= 0.9 for c in worst)
    print(f"coverage within 70-90% everywhere: {'yes' if ok else 'no'} "
          f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
