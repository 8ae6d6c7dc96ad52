"""How long the budgeted task-grouping selection (studies/grouping.py) takes as the task set
grows: every non-empty group trained (2^n - 1 networks, random scores), the best choice for
every budget of 1..n networks in one pass, then one budget with a cost per network (an encoder
pass plus a quarter of one per task head: 1 + 0.25 (size - 1); the budget is half the cost of
the single-task networks), solved by branch and bound.

    python benchmarks/bench_grouping.py [--tasks 4,6,8,10] [--repeats 3]

Prints, per task count, the groups, the median seconds for every network budget, and for the
cost budget; the target is 10 tasks (1,023 groups) in seconds.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from weightsearch.studies.grouping import ScoreTable, all_groups, select, select_each

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="4,6,8,10")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'tasks':>5} {'groups':>6} {'every budget (s)':>16} {'cost budget (s)':>15}")
    for n in (int(x) for x in args.tasks.split(",")):
        rng = random.Random(n)
        tasks = tuple(f"t{i}" for i in range(n))
        table = ScoreTable(tasks, {g: {t: rng.uniform(0.3, 0.9) for t in g}
                                   for g in all_groups(tasks)})
        costs = {g: 1 + 0.25 * (len(g) - 1) for g in table.scores}
        each, costed = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            answers = select_each(table)
            each.append(time.perf_counter() - start)
            assert all(a is not None for a in answers.values())
            start = time.perf_counter()
            assert select(table, n / 2, costs) is not None
            costed.append(time.perf_counter() - start)
        print(f"{n:>5} {len(table.scores):>6} {statistics.median(each):>16.3f} "
              f"{statistics.median(costed):>15.3f}")


if __name__ == "__main__":
    main()
