"""Trial-epochs a weight search needs to reach one of the grid's two best weights, on synthetic
worlds with per-epoch learning curves (`weightsearch.recommender.synthetic`).

    python benchmarks/bench_search.py [--worlds 100] [--tasks 16] [--seeds 1 3]

Each world's tasks are searched over the grid 1, 3, 6, 9, 12, 15 with MT-DNN's 5 epochs by:
- grid: every weight, every epoch; the answer is the weight with the best mean last-epoch score;
- halving: the sweep's successive halving (`weightsearch.sweep.strategies`: rung_budgets,
  keep_count, promote, successive_halving) over every weight, promoting by the mean over seeds at
  each rung's epoch;
- seeded halving: the same, its first rung only the weights around the recommender's answer
  (`weightsearch.recommender.recommend.start_weights`: inside the 80% interval, at least the two
  nearest), learned from the world's other tasks (leave-one-task-out), as `search: {strategy:
  halving, start: recommend}` does; with min_epochs 1 and 3;
- the recommended weight alone (nearest grid weight, every epoch), for reference.
A trial-epoch is one seed's trial trained one epoch. Success: the answer is among the task's two
best grid weights by the noise-free curve (ties count: on a flat task every weight does);
"agrees with grid" counts answers among the two best the full grid measured with the same trials.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from weightsearch.recommender.recommend import recommend_from, start_weights
from weightsearch.recommender.synthetic import (
    EARLY_LEAD,
    EPOCHS,
    GRID,
    as_evidence,
    epoch_curves,
    make_task,
)
from weightsearch.sweep.strategies import rung_budgets, successive_halving

GOAL_SHARE, GOAL_SUCCESS = 0.30, 0.90


@dataclass
class Tally:
    success: int = 0
    agrees: int = 0
    epochs: float = 0.0
    runs: int = 0
    peaked_success: int = 0
    peaked: int = 0
    reachable: int = 0  # seeded: the start set holds one of the two best (the ceiling)

    def add(self, answer: float, cost: float, top: set[float], grid_top: set[float],
            flat: bool) -> None:
        ok = answer in top
        self.success += ok
        self.agrees += answer in grid_top
        self.epochs += cost
        self.runs += 1
        if not flat:
            self.peaked_success += ok
            self.peaked += 1


def halving(points: list[float], curves, min_epochs: int, factor: float,
            seeds: int) -> tuple[float, float]:
    """(winner, trial-epochs): successive halving over `points` (ties: the earlier point)."""
    budgets = rung_budgets(curves.epochs, min_epochs, factor)
    winner, cost = successive_halving([f"{w:g}" for w in points], budgets, factor,
                                      lambda p, e: curves.mean_at(float(p), e))
    return float(winner), cost * seeds


def run(worlds: int, tasks: int, seeds: int, factor: float, first_seed: int,
        early_lead: float) -> dict[str, Tally]:
    tallies: dict[str, Tally] = {}

    def tally(name: str) -> Tally:
        return tallies.setdefault(name, Tally())

    for k in range(worlds):
        rng = np.random.default_rng(first_seed + k)
        world = [make_task(rng, f"t{i}", seeds) for i in range(tasks)]
        curves = [epoch_curves(t, rng, EPOCHS, early_lead=early_lead) for t in world]
        evidence = [as_evidence(t) for t in world]
        for i, (task, curve) in enumerate(zip(world, curves, strict=True)):
            top = task.top2()
            means = {w: float(np.mean(v)) for w, v in task.values.items()}
            ranked = sorted(GRID, key=lambda w: (-means[w], w))
            grid_top = set(ranked[:2])
            tally("grid").add(ranked[0], len(GRID) * EPOCHS * seeds, top, grid_top, task.flat)
            w, cost = halving(list(GRID), curve, 1, factor, seeds)
            tally("halving").add(w, cost, top, grid_top, task.flat)
            rec = recommend_from(evidence[:i] + evidence[i + 1:], task.train_size)
            start = start_weights(GRID, rec.central_weight, rec.law_interval)
            tally("seeded halving, min_epochs 1").reachable += bool(top & set(start))
            for least in (1, 3):
                w, cost = halving(start, curve, least, factor, seeds)
                tally(f"seeded halving, min_epochs {least}").add(w, cost, top, grid_top,
                                                                 task.flat)
            tally("recommended weight alone").add(start[0], EPOCHS * seeds, top, grid_top,
                                                  task.flat)
    return tallies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--reduction-factor", type=float, default=2.0)
    parser.add_argument("--early-lead", type=float, default=EARLY_LEAD)
    parser.add_argument("--first-seed", type=int, default=10_000)
    args = parser.parse_args()
    start = time.perf_counter()
    print(f"{args.worlds} worlds x {args.tasks} tasks, grid {', '.join(f'{w:g}' for w in GRID)},"
          f" {EPOCHS} epochs, reduction factor {args.reduction_factor:g}, early lead "
          f"{args.early_lead:g} points")
    print(f"{'seeds':>5}  {'search':<34} {'success':>7} {'peaked':>7} {'agrees':>7} "
          f"{'trial-epochs':>12} {'of grid':>7}")
    verdicts = []
    for seeds in args.seeds:
        tallies = run(args.worlds, args.tasks, seeds, args.reduction_factor, args.first_seed,
                      args.early_lead)
        grid_cost = tallies["grid"].epochs / tallies["grid"].runs
        for name, t in tallies.items():
            share = t.epochs / t.runs / grid_cost
            print(f"{seeds:>5}  {name:<34} {t.success / t.runs:>7.3f} "
                  f"{t.peaked_success / max(t.peaked, 1):>7.3f} {t.agrees / t.runs:>7.3f} "
                  f"{t.epochs / t.runs:>12.2f} {share:>7.2f}")
            if name.startswith("seeded"):
                verdicts.append((seeds, name, t.success / t.runs, share,
                                 tallies["grid"].success / tallies["grid"].runs,
                                 tallies["seeded halving, min_epochs 1"].reachable / t.runs))
    n = args.worlds * args.tasks
    print(f"success: among the two best grid weights by the noise-free curve (sd of a rate "
          f"about {np.sqrt(0.8 * 0.2 / n):.3f}); peaked: the same on tasks whose curve has a "
          f"peak; agrees: among the full grid's two best measured weights")
    print(f"goal: seeded halving under {GOAL_SHARE:.0%} of the grid's trial-epochs at "
          f"{GOAL_SUCCESS:.0%} success")
    for seeds, name, rate, share, grid_rate, reachable in verdicts:
        met = rate >= GOAL_SUCCESS and share < GOAL_SHARE
        print(f"  {seeds} seed(s), {name}: {'met' if met else 'missed'}: {share:.0%} of the "
              f"trial-epochs at {rate:.1%} success (the full grid: {grid_rate:.1%}; the start "
              f"set held a top-2 weight for {reachable:.1%})")
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
