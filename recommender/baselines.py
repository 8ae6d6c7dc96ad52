"""The simple rules a recommendation has to beat: each guesses a task's best central weight.

- `constant`: the middle of the weight range (8 on 1-15), whatever the task.
- `rule_of_thumb`: the SIWLM paper's finding (Son et al. 2021, Applied Sciences 11(7):3095,
  sections 5-6): tasks with small training sets (CoLA, STS-B, MRPC, RTE: 2.5k-8.5k examples) did
  better with a central weight of 9 or more, large ones (SST-2 to MNLI: 67k-393k) with less than
  6. As a point: the middle of each range on the 1-15 scale, 12 below RULE_THRESHOLD examples
  and 3.5 from there on. The paper gives no threshold between 8.5k and 67k; 10,000 is where
  "small" ends in its own wording of the tasks.
- `nearest_neighbour`: the best grid weight of the measured task nearest in log training size
  (ties: the smaller size).
- `random_grid`: a grid weight drawn uniformly; not a point, so its error is the expected one,
  the mean distance of the grid's weights from the truth.
- `weight_1`: no upweighting at all (every task at weight 1): what a user who searches nothing
  trains.
- `size_rule_refit`: the rule of thumb's form with its two constants read from the other tasks
  (the mean best weight of the measured tasks on the same side of RULE_THRESHOLD): the paper's
  constants were read from its own tasks, so on those tasks `rule_of_thumb` is scored in
  sample, and this is its out-of-sample counterpart.

Regret compares the rules that are points (`POINT_RULES`): each one's weight is snapped to the
held-out task's grid and scored there, as the recommender's is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from weightsearch.studies.schema import WEIGHT_HIGH, WEIGHT_LOW

RULE_THRESHOLD = 10_000
RULE_SMALL, RULE_LARGE = 12.0, 3.5
BASELINES = ("constant", "rule_of_thumb", "nearest_neighbour", "random_grid")
POINT_RULES = ("weight_1", "constant", "rule_of_thumb", "size_rule_refit", "nearest_neighbour")


def rule_points(train_size: int, measured: Sequence[tuple[int, float]]) -> dict[str, float]:
    """The weight each point rule picks for a task of `train_size` (`nearest_neighbour` left
    out when nothing is measured)."""
    out = {"weight_1": 1.0, "constant": constant(), "rule_of_thumb": rule_of_thumb(train_size)}
    side = [w for n, w in measured if (n < RULE_THRESHOLD) == (train_size < RULE_THRESHOLD)]
    if side:
        out["size_rule_refit"] = sum(side) / len(side)
    near = nearest_neighbour(train_size, measured)
    if near is not None:
        out["nearest_neighbour"] = near
    return out


def constant() -> float:
    return (WEIGHT_LOW + WEIGHT_HIGH) / 2


def rule_of_thumb(train_size: int) -> float:
    return RULE_SMALL if train_size < RULE_THRESHOLD else RULE_LARGE


def nearest_neighbour(train_size: int, measured: Sequence[tuple[int, float]]) -> float | None:
    """`measured`: (training size, best weight) of the known tasks; None when there are none."""
    if not measured:
        return None
    x = math.log10(train_size)
    return min(measured, key=lambda m: (abs(math.log10(m[0]) - x), m[0]))[1]


def baseline_errors(train_size: int, truth: float, measured: Sequence[tuple[int, float]],
                    grid: Sequence[float]) -> dict[str, float]:
    """Each baseline's absolute error for a task of `train_size` whose best weight is `truth`
    (`nearest_neighbour` left out when nothing is measured)."""
    out = {"constant": abs(constant() - truth),
           "rule_of_thumb": abs(rule_of_thumb(train_size) - truth)}
    near = nearest_neighbour(train_size, measured)
    if near is not None:
        out["nearest_neighbour"] = abs(near - truth)
    out["random_grid"] = sum(abs(g - truth) for g in grid) / len(grid)
    return out


def cells(train_size: int, truth: float, studied: Sequence[int]) -> dict[str, str]:
    """Where a prediction lies: its size inside or outside the studied range of sizes, and its
    true best at an end of the range (<= 3 or >= 13) or in the middle."""
    inside = bool(studied) and min(studied) <= train_size <= max(studied)
    return {"size": "inside" if inside else "outside",
            "best": "end" if truth <= 3 or truth >= 13 else "middle"}
