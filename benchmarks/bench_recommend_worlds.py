"""The recommender against the simple rules in worlds that break its assumptions.

    python benchmarks/bench_recommend_worlds.py [--worlds 200] [--tasks 8] [--seeds 3]
        [--held-out 4] [--first-seed 0] [--kinds smooth,step,...]

For every world kind of `weightsearch.recommender.synthetic.KINDS`: fit on `--tasks` studied tasks
of each world, predict `--held-out` fresh tasks of the same world; print the 80% interval's coverage
(with its standard error clustered by world), its coverage per cell (size inside / outside the
studied sizes; true best at an end, <= 3 or >= 13, or in the middle; with the count of
predictions in the cell), its mean width, and the mean absolute error of the recommender and
of the four simple rules (`weightsearch.recommender.baselines`). The targets: coverage 0.72-0.88
overall in every kind and >= 0.70 in every cell of the smooth and monotone worlds; mean error within
0.2 of the best simple rule in every kind, and below each of them on average over the kinds.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from weightsearch.recommender.baselines import BASELINES
from weightsearch.recommender.synthetic import KINDS, coverage_and_error

CELLS = ("size:inside", "size:outside", "best:middle", "best:end")
SHORT = {"constant": "const", "rule_of_thumb": "rule", "nearest_neighbour": "near",
         "random_grid": "random"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--held-out", type=int, default=4)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--kinds", default=",".join(KINDS))
    args = parser.parse_args()
    start = time.perf_counter()
    print(f"{args.worlds} worlds per kind, {args.tasks} studied tasks x {args.seeds} seeds, "
          f"{args.held_out} new tasks per world")
    print(f"{'kind':<13} {'cover':>5} {'se':>5} | " + " ".join(f"{c:>12}" for c in CELLS)
          + f" | {'width':>5} | {'mae':>5} " + " ".join(f"{SHORT[b]:>6}" for b in BASELINES)
          + "  gap")
    gaps, ours, rules = [], [], {b: [] for b in BASELINES}
    for kind in args.kinds.split(","):
        r = coverage_and_error(args.worlds, args.tasks, args.seeds, args.held_out,
                               args.first_seed, kind=kind)
        cells = " ".join(f"{r['cells'][c][0]:>6.2f} ({r['cells'][c][1]:>3})"
                         if c in r["cells"] else f"{'-':>12}" for c in CELLS)
        best_rule = min(r["baselines"].values())
        gap = r["mean_abs_error"] - best_rule
        gaps.append(gap)
        ours.append(r["mean_abs_error"])
        for b in BASELINES:
            rules[b].append(r["baselines"][b])
        print(f"{kind:<13} {r['coverage80']:>5.2f} {r['coverage_se']:>5.3f} | {cells} | "
              f"{r['width80']:>5.1f} | {r['mean_abs_error']:>5.2f} "
              + " ".join(f"{r['baselines'][b]:>6.2f}" for b in BASELINES) + f" {gap:+5.2f}")
    print(f"mean over kinds: recommender {np.mean(ours):.2f}; "
          + "; ".join(f"{b} {np.mean(v):.2f}" for b, v in rules.items()))
    print(f"largest gap to the best simple rule: {max(gaps):+.2f} weight units "
          f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
