"""How precisely one central task's trials locate its best central weight.

Input: every COMPLETE trial of the task, as scores per central weight (one per seed). Output: a
`Located` -- where the best weight probably is, and how uncertain that is.

Model: the mean score at weight w_j is Normal(true curve at w_j, sigma^2 / n_j), where sigma is
the seed-to-seed noise. sigma is the pooled within-weight standard deviation when any weight has
replicates; with one seed per weight there is nothing to pool, so sigma is the larger of the
residual spread around a quadratic fit of the curve (4+ weights) and a floor. The floor scales
with the score's magnitude and shrinks with the task's size (dev sets grow with training sets):
max(NOISE_FLOOR_MIN, NOISE_FLOOR_AT_1 / sqrt(train size)) of the mean |score|, about 0.8 points
at 80% for RTE's 2.5k examples and 0.24 points for MNLI's 393k, the order of the seed noise
reported on GLUE dev sets.

When the same seeds (two or more) finished at every weight, the comparison is paired: sigma is
the residual of the weight x seed table, so a seed that scores high at every weight does not
blur the comparison (`paired_noise`). When sigma rests on replicates, each draw takes its own
sigma from its posterior (scaled inverse chi-square on the degrees of freedom), which gives the
comparisons Student-t tails.

The best weight's distribution is that of the peak of the noisy means: drawn DRAWS times from a
generator with a fixed seed (deterministic). In each draw the peak is the vertex of the parabola
through the winning weight and its two neighbours (at an end of the grid, the last three
weights, so a curve still rising there points past its end), kept inside the winner's cell (the
weights closer to it than to any other grid weight). With two weights, a uniform over the
winner's cell. The end cells are censored: they reach to the end of the weight range and at
least half a grid step past the end weight, so a {1, 9} grid still rising at 9 says "5 or more".
The location is the mean of the draws, the uncertainty their variance plus what three points
blur; then the variance is divided by the task's informativeness, 1 - var / var_ignorant, where
var_ignorant is that of a uniform over all cells: a flat or tied curve carries almost no
information and gets a huge variance, a clear peak resting on several seeds a small one. When
one end weight wins at least CENSORED of the draws, and the task is informative (at least
CENSOR_MIN_INFO), the task is also marked censored there (`at_least` / `at_most`), and the law
treats its best as bounded (`weightsearch.recommender.hierarchy`).

A saturated top (`plateau_from`): under global clipping, a weight at which every central
update was clipped trains g/||g|| whatever its value, and so does every larger weight: the
weights from there up are one treatment, and their labels say nothing about where the best
lies. They enter as one point, the plateau, with the scores of its smallest weight. A draw
that the plateau wins says only that the best lies at or above the largest weight below it
that still acted (L), somewhere up to the range's end (uniform there), and a plateau that
wins most draws censors the task at L (`at_least` L). A draw that an acting weight wins is
located among the acting weights alone, its cell ending at L: no parabola reaches into the
plateau, whose position is no measurement. So relabelling a saturated weight (15 called 9)
moves nothing.

Alternatives considered: a quadratic fit of score over all the weights with the vertex's
delta-method variance (unstable when the curvature is near zero -- exactly the flat curves -- and
wrong for curves that peak at an end of the range); a full Bayesian posterior over a parametric
curve (slower, and its shape assumptions matter more than the handful of points it would fit);
the median of the draws as the location (less pulled inwards at the ends, but 10-20% larger
error in the middle of the range on the calibration benchmark).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from weightsearch.studies.schema import WEIGHT_HIGH, WEIGHT_LOW

NOISE_FLOOR_AT_1 = 0.5  # relative noise floor x sqrt(train size)
NOISE_FLOOR_MIN = 0.003  # relative to the mean |score|: the smallest seed noise assumed
DRAWS = 2000
MIN_INFORMATIVENESS = 0.02  # a flat curve: variance x50 (almost no say)
CENSORED = 0.5  # share of draws won by an end weight above which the task is censored there
CENSOR_MIN_INFO = 0.2  # a nearly flat curve is not censored: its bound would say too much


@dataclass(frozen=True)
class Located:
    location: float  # expected best weight
    variance: float  # of the location, informativeness included
    noise_sd: float  # seed noise used
    informativeness: float  # 0 (tells nothing) .. 1 (pins the best weight)
    pooled: bool  # sigma came from replicates
    # Censored: the grid's top (bottom) weight wins most draws, so all the trials say is that
    # the best lies at or above (below) where that weight's cell starts.
    at_least: float | None = None
    at_most: float | None = None


def noise_floor(scale: float, train_size: int | None) -> float:
    relative = NOISE_FLOOR_AT_1 / math.sqrt(train_size) if train_size else 0.01
    return max(NOISE_FLOOR_MIN, relative) * scale


def seed_noise(values: dict[float, list[float]],
               train_size: int | None = None) -> tuple[float, bool]:
    """(sigma, whether it was pooled from replicates)."""
    scale = float(np.mean([abs(v) for vs in values.values() for v in vs])) or 1.0
    floor = noise_floor(scale, train_size)
    ss, df = 0.0, 0
    for vs in values.values():
        if len(vs) > 1:
            ss += float(np.var(vs, ddof=1)) * (len(vs) - 1)
            df += len(vs) - 1
    if df:
        # Replicates measure the noise directly; a small floor keeps exact ties from looking
        # infinitely precise.
        return max(math.sqrt(ss / df), 0.1 * floor), True
    weights = sorted(values)
    if len(weights) >= 4:
        means = [values[w][0] for w in weights]
        coef = np.polyfit(weights, means, 2)
        resid = np.asarray(means) - np.polyval(coef, weights)
        return max(float(np.sqrt(np.sum(resid ** 2) / (len(weights) - 3))), floor), False
    return floor, False


def _cells(grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each grid weight's cell: the weights closer to it than to any other grid weight. A best
    weight seen at a grid weight lies somewhere in its cell. At an end of the grid the cell is
    censored: it reaches to the end of the weight range (a {1, 9} grid whose curve still rises
    at 9 says "5 or more", not "9"), and at least half a grid step beyond the end weight, so
    that a best at the range's end (15, or 1) is not read as lying inside it."""
    mids = (grid[1:] + grid[:-1]) / 2
    low = np.concatenate([[min(WEIGHT_LOW, grid[0] - (grid[1] - grid[0]) / 2)], mids])
    high = np.concatenate([mids, [max(WEIGHT_HIGH, grid[-1] + (grid[-1] - grid[-2]) / 2)]])
    return low, high


def _vertex(grid: np.ndarray, draws: np.ndarray, won: np.ndarray) -> np.ndarray:
    """Per draw, the peak of the parabola through the winning weight and its two neighbours
    (at an end of the grid: the last three weights, so a curve still rising there points past
    its end); the winner itself where the three points do not bend down."""
    mid = np.clip(won, 1, len(grid) - 2)
    rows = np.arange(len(won))
    x0, x1, x2 = grid[mid - 1], grid[mid], grid[mid + 1]
    y0, y1, y2 = draws[rows, mid - 1], draws[rows, mid], draws[rows, mid + 1]
    bend = (x1 - x0) * (y1 - y2) - (x1 - x2) * (y1 - y0)
    top = (x1 - x0) ** 2 * (y1 - y2) - (x1 - x2) ** 2 * (y1 - y0)
    # concave: the slopes fall from the left pair to the right pair
    concave = (y1 - y0) / (x1 - x0) > (y2 - y1) / (x2 - x1)
    with np.errstate(divide="ignore", invalid="ignore"):
        peak = x1 - 0.5 * top / bend
    return np.where(concave & np.isfinite(peak), peak, grid[won])


def paired_noise(values: dict[float, list[float]]) -> tuple[float, int]:
    """(sigma, degrees of freedom) of the scores once each seed's own level is taken out:
    the residual of the weight x seed table (lists aligned by seed). A seed that scores high at
    every weight does not blur the comparison between weights."""
    table = np.array([values[w] for w in sorted(values)])
    residual = (table - table.mean(axis=1, keepdims=True) - table.mean(axis=0, keepdims=True)
                + table.mean())
    df = (table.shape[0] - 1) * (table.shape[1] - 1)
    return math.sqrt(float((residual ** 2).sum()) / df), df


def saturated_top(saturated: dict[float, bool]) -> float | None:
    """The smallest weight from which every weight up is saturated (`saturated`: per weight,
    whether every central update of its cells was clipped under global clipping), or None
    when the grid's top weight still acted."""
    start = None
    for weight in sorted(saturated, reverse=True):
        if not saturated[weight]:
            break
        start = weight
    return start


def locate_best(values: dict[float, list[float]], maximize: bool = True,
                train_size: int | None = None, paired: bool = False,
                plateau_from: float | None = None) -> Located | None:
    """None with fewer than two weights (one weight has no best), or with no weight below a
    saturated top. `paired`: the lists are aligned by seed (the same seeds at every weight), so
    the comparison is paired. `plateau_from`: the weights from this one up trained one
    treatment (`saturated_top`); they count once, as the plateau (module docstring)."""
    values = {float(w): [float(v) for v in vs if math.isfinite(v)] for w, vs in values.items()}
    values = {w: vs for w, vs in values.items() if vs and math.isfinite(w)}
    if plateau_from is not None:
        inert = sorted(w for w in values if w >= plateau_from)
        acting = {w: vs for w, vs in values.items() if w < plateau_from}
        if not inert or not acting:
            return None if not acting else _locate(acting, maximize, train_size, paired, None)
        return _locate(acting, maximize, train_size, paired, values[inert[0]])
    if len(values) < 2:
        return None
    return _locate(values, maximize, train_size, paired, None)


def _locate(values: dict[float, list[float]], maximize: bool, train_size: int | None,
            paired: bool, plateau: list[float] | None) -> Located | None:
    """`locate_best` over the acting weights `values`, with the plateau's scores (or None)."""
    if len(values) + (plateau is not None) < 2:
        return None
    grid = np.array(sorted(values))
    if plateau is not None:
        return _locate_with_plateau(values, grid, plateau, maximize, train_size, paired)
    draws, sigma, pooled = _draws(values, maximize, train_size, paired, sigma_from=values)
    won = np.argmax(draws, axis=1)
    low, high = _cells(grid)
    if len(grid) >= 3:
        best = _vertex(grid, draws, won).clip(low[won], high[won])
        spread = np.full(DRAWS, float(np.min(np.diff(grid))) ** 2 / 48)  # what 3 points blur
    else:  # two weights: somewhere in the winner's cell, uniformly
        best, spread = (low + high)[won] / 2, (high - low)[won] ** 2 / 12
    var = float(np.var(best) + np.mean(spread))
    ignorant = (high[-1] - low[0]) ** 2 / 12
    info = max(1.0 - var / ignorant, MIN_INFORMATIVENESS)
    top, bottom = np.mean(won == len(grid) - 1), np.mean(won == 0)
    sure = info >= CENSOR_MIN_INFO and min(top, bottom) < CENSORED  # one end, clearly
    return Located(location=float(np.mean(best)), variance=var / info, noise_sd=sigma,
                   informativeness=round(info, 4), pooled=pooled,
                   at_least=float(low[-1]) if sure and top >= CENSORED else None,
                   at_most=float(high[0]) if sure and bottom >= CENSORED else None)


def _draws(values: dict[float, list[float]], maximize: bool, train_size: int | None,
           paired: bool, sigma_from: dict[float, list[float]]
           ) -> tuple[np.ndarray, float, bool]:
    """DRAWS draws of the mean score at each weight of `values` (sorted; negated for a loss),
    their seed noise (from `sigma_from`, or the paired residual), and whether it was pooled."""
    keys = sorted(values)
    means = np.array([np.mean(values[k]) for k in keys]) * (1 if maximize else -1)
    n = np.array([len(values[k]) for k in keys])
    sigma, pooled = seed_noise(sigma_from, train_size)
    df = int((n - 1).sum())
    if paired and min(n) == max(n) >= 2:
        within, df = paired_noise(values)
        sigma = max(within, 0.1 * noise_floor(float(np.mean(np.abs(means))) or 1.0,
                                              train_size))
    rng = np.random.default_rng(0)
    scale = np.full((DRAWS, 1), sigma)
    if pooled and df:
        # sigma rests on df degrees of freedom: draw it from its posterior (scaled inverse
        # chi-square), so that the comparisons carry Student-t tails, not normal ones.
        scale = sigma * np.sqrt(df / rng.chisquare(df, (DRAWS, 1)))
    return means + rng.standard_normal((DRAWS, len(keys))) * (scale / np.sqrt(n)), sigma, pooled


def _locate_with_plateau(values: dict[float, list[float]], grid: np.ndarray,
                         plateau: list[float], maximize: bool, train_size: int | None,
                         paired: bool) -> Located:
    """`locate_best` when the weights above `grid` are one saturated treatment: the plateau
    is a contender whose draws place the best at the top acting weight L, censored there."""
    everything = {**values, math.inf: plateau}  # the plateau sorts last, whatever its label
    # One seed per weight: the noise comes from the acting weights' curve (the plateau has no
    # position to fit it at).
    replicated = any(len(vs) > 1 for vs in everything.values())
    draws, sigma, pooled = _draws(everything, maximize, train_size, paired,
                                  sigma_from=everything if replicated else values)
    won = np.argmax(draws, axis=1)
    top = float(grid[-1])
    on_plateau = won == len(grid)
    acting = np.where(on_plateau, len(grid) - 1, won)  # a plateau draw counts at L
    if len(grid) >= 2:
        low, high = _cells(grid)
        high[-1] = top  # the acting weights' cells end at L: above it is the plateau
    else:
        low, high = np.array([min(WEIGHT_LOW, top)]), np.array([top])
    if len(grid) >= 3:
        best = _vertex(grid, draws[:, :len(grid)], acting).clip(low[acting], high[acting])
        spread = np.full(DRAWS, float(np.min(np.diff(grid))) ** 2 / 48)
    else:
        best, spread = (low + high)[acting] / 2, (high - low)[acting] ** 2 / 12
    # A plateau draw: the best is somewhere from L up to the range's end, the data cannot say
    # where (uniform there; the range's end, not the plateau's label).
    end = max(WEIGHT_HIGH, top)
    best = np.where(on_plateau, (top + end) / 2, best)
    spread = np.where(on_plateau, (end - top) ** 2 / 12, spread)
    var = float(np.var(best) + np.mean(spread))
    ignorant = (end - low[0]) ** 2 / 12
    info = max(1.0 - var / ignorant, MIN_INFORMATIVENESS)
    raised = float(np.mean(on_plateau))
    bottom = float(np.mean(won == 0))
    sure = info >= CENSOR_MIN_INFO and min(raised, bottom) < CENSORED
    return Located(location=float(np.mean(best)), variance=var / info, noise_sd=sigma,
                   informativeness=round(info, 4), pooled=pooled,
                   at_least=top if sure and raised >= CENSORED else None,
                   at_most=float(high[0]) if sure and bottom >= CENSORED else None)
