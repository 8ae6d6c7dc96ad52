"""Whether a study's trials separate one central weight (or search point) from the others, and
the words for it.

A best weight is the weight with the highest mean score. It is *clear* only when the trials
separate it from every other weight: for each other weight, the 95% Student-t interval of the
difference of means lies above zero. When the same seeds ran at both weights the difference is
taken seed by seed (paired: seed-to-seed variation that moves both weights alike cancels);
otherwise Welch's interval for two independent samples. Where three or more weights share
the same seeds, five or more, the intervals use the pooled residual variance of the weight x
seed table instead (the two-way additive model's mean square, (k-1)(n-1) degrees of freedom:
every pair gains the other weights' evidence about the noise), as long as the weights' noise
allows pooling: each weight's own noise variance (Grubbs' estimate from the paired
differences) above zero, the largest no more than a two-sided F test at 5% allows over the
smallest (a weight that moved wildly must not borrow calm from the others; weights that
trained the same updates are one arm before they get here, studies.treatments).
`Verdict.noise` says which was used. With fewer than two seeds at a weight, or no spread at
all between seeds (two seeds that moved in lockstep on a dev set whose scores come in steps),
the seed noise is unknown and nothing is clear; an exact tie is a tie (sums compared, so float
rounding never breaks one); a non-finite score separates nothing. Besides the best, a verdict
names the exact ties, every weight not separated from the best, and the weights whose trials
were all pruned. Every place that names a best weight (launch summary, inspect, plots, the
HTTP service) says it through `Verdict.text`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

LEVEL = 0.95
# Fewer seeds and a test of equal variances has no power to see that one weight's noise
# differs from the others': each pair then keeps its own paired interval.
POOL_MIN_SEEDS = 5


@dataclass(frozen=True)
class Verdict:
    best: Any  # the weight (or point label) with the highest mean (the smallest on a tie)
    clear: bool  # separated from every other weight at LEVEL
    rival: Any = None  # the other weight it is least separated from
    lead: float | None = None  # best mean minus the rival's (the metric's units)
    interval: tuple[float, float] | None = None  # LEVEL interval of that difference
    seeds: int = 0  # fewest seeds at any weight
    paired: bool = False
    reason: str = ""  # why it is not clear ("" when it is)
    kind: str = "weight"  # what is compared: central weights, or search points (their labels)
    # The others that the trials do not separate from the best (their LEVEL interval of the
    # difference reaches 0, or seed noise is unknown), best first; those of them whose mean
    # equals the best's exactly; and weights whose every trial was pruned (no score).
    not_separated: tuple = ()
    ties: tuple = ()
    left_out: tuple = ()
    # Display names of keys that stand for more: an arm of weights that trained the same
    # updates is one key, its smallest weight, shown as "6=9=12=15" (studies.treatments).
    names: dict = field(default_factory=dict)
    noise: str = ""  # "pooled", "paired" or "welch": how the intervals' noise was estimated

    def text(self, metric: str = "score") -> str:
        main = self._main(metric)
        extra = []
        if self.ties:
            extra.append(f"tied exactly with {self.show(self.best)}: "
                         f"{', '.join(map(self.show, self.ties))}")
        others = [k for k in self.not_separated if k not in self.ties]
        if others and self.rival is not None:
            extra.append(f"not separated from {self.show(self.best)} at {LEVEL:.0%}: "
                         f"{', '.join(map(self.show, others))}")
        if self.left_out:
            extra.append(f"left out, every trial pruned: {', '.join(map(_show, self.left_out))}")
        return main + "".join(f"; {e}" for e in extra)

    def show(self, key: Any) -> str:
        return self.names.get(key) or _show(key)

    def _main(self, metric: str) -> str:
        kind, best, rival = self.kind, self.show(self.best), self.show(self.rival)
        if self.best is None:
            return "no finished trial yet"
        if self.rival is None:
            if self.best in self.names:  # an arm: every weight finished trained one treatment
                return (f"every {kind} finished ({best}) trained the same treatment; nothing "
                        "to compare it with")
            return f"one {kind} finished ({best}); nothing to compare it with"
        how = (f"{self.seeds} paired seed{'s' * (self.seeds != 1)}" if self.paired
               else f"{self.seeds} seed{'s' * (self.seeds != 1)} per {kind}")
        if self.noise == "pooled":
            how += ", pooled weight x seed residual variance"
        gap = f"{best} leads {rival} by {self.lead:.4f} {metric}"
        if self.interval is not None:
            gap += f", {LEVEL:.0%} interval [{self.interval[0]:+.4f}, {self.interval[1]:+.4f}]"
        if self.clear:
            what = "central weight" if kind == "weight" else kind
            return f"best {what} {best} ({gap}, {how})"
        return f"no {kind} is clearly better ({self.reason}: {gap}, {how})"

    def to_dict(self) -> dict:
        return {"best_weight": self.best, "clear": self.clear, "rival": self.rival,
                "lead": self.lead, "interval": list(self.interval) if self.interval else None,
                "seeds": self.seeds, "paired": self.paired,
                "not_separated": list(self.not_separated), "ties": list(self.ties),
                "left_out": list(self.left_out), "noise": self.noise,
                "names": {_show(k): v for k, v in self.names.items()}, "verdict": self.text()}


def _show(key: Any) -> str:
    return f"{key:g}" if isinstance(key, float | int) else str(key)


def by_seed(scores: list[tuple[Any, int | None, float]]) -> tuple[dict[Any, list[float]], bool]:
    """Each weight's (or point label's) finite scores from (weight, seed, score) triples, and
    whether they pair: the same seeds (two or more, each once) at every weight, then each list
    in seed order."""
    cells: dict[Any, dict[int | None, list[float]]] = {}
    for weight, seed, score in scores:
        if math.isfinite(score):
            cells.setdefault(weight, {}).setdefault(seed, []).append(score)
    seeds = {frozenset(v) for v in cells.values()}
    order = sorted(s for s in next(iter(seeds)) if s is not None) \
        if len(seeds) == 1 and None not in next(iter(seeds)) else []
    once = all(len(s) == 1 for v in cells.values() for s in v.values())
    if len(order) >= 2 and once:
        return {w: [v[s][0] for s in order] for w, v in cells.items()}, True
    return {w: [x for s in v.values() for x in s] for w, v in cells.items()}, False


def judge(values: dict[Any, list[float]], paired: bool = False,
          maximize: bool = True, kind: str = "weight", names: dict | None = None,
          left_out: tuple = ()) -> Verdict:
    """`values`: each weight's (or point's) scores (with `paired`, each list in one seed
    order); `names`: display names of keys that stand for an arm; `left_out`: weights whose
    trials were all pruned."""
    import dataclasses

    verdict = _judge({w: v for w, v in values.items() if v}, paired, maximize, kind)
    return dataclasses.replace(verdict, names=dict(names or {}), left_out=tuple(left_out))


def _judge(values: dict[Any, list[float]], paired: bool, maximize: bool, kind: str) -> Verdict:
    if not values:
        return Verdict(None, False, kind=kind)
    sign = 1.0 if maximize else -1.0
    means = {w: statistics.fmean(v) for w, v in values.items()}
    best = min(means, key=lambda w: (-sign * means[w], w))
    seeds = min(len(v) for v in values.values())
    if len(values) == 1:
        return Verdict(best, False, seeds=seeds, reason=f"one {kind}", kind=kind)
    pooled = _pooled_mean_square(values) if paired else None
    intervals: dict[Any, tuple[float, float] | None]
    if pooled is not None:
        intervals = {w: _pooled_interval(values[best], values[w], pooled, sign)
                     for w in values if w != best}
    else:
        intervals = {w: _interval(values[best], values[w], paired, sign)
                     for w in values if w != best}
    # The rival: the weight whose interval reaches lowest (the least separated one).
    def low_end(w: Any) -> float:
        interval = intervals[w]
        return interval[0] if interval else -math.inf

    rival = min(intervals, key=lambda w: (low_end(w), -sign * means[w]))
    lead = sign * (means[best] - means[rival])
    interval = intervals[rival]
    if not all(math.isfinite(x) for v in values.values() for x in v):
        reason = "a score that is not a number"
    elif lead == 0:
        reason = "a tie"
    elif seeds < 2:
        reason = (f"one seed per {kind}" if max(len(v) for v in values.values()) < 2
                  else f"a {kind} with a single seed") + ", so seed noise is unknown"
    elif interval is not None and interval[0] == interval[1]:
        reason = "no spread between seeds, so seed noise is unknown"
    elif interval is None or not interval[0] > 0:
        reason = "within seed noise"
    else:
        reason = ""
    # Exact ties compare sums: a mean of the same counts in another order may differ in the
    # last bit, which must not break a tie.
    ties = tuple(w for w in intervals if (
        math.isclose(sum(values[w]), sum(values[best]), rel_tol=1e-12, abs_tol=0)
        if len(values[w]) == len(values[best]) else means[w] == means[best]))
    apart = [w for w in intervals if intervals[w] is None or not low_end(w) > 0 or w in ties]
    not_separated = tuple(sorted(apart, key=lambda w: (-sign * means[w], w)))
    noise = "pooled" if pooled is not None else "paired" if paired else "welch"
    return Verdict(best, not reason, rival, lead, interval, seeds, paired, reason, kind,
                   not_separated, ties, noise=noise)


def _pooled_mean_square(values: dict[Any, list[float]]) -> tuple[float, int] | None:
    """The residual mean square of the additive weight x seed model and its degrees of freedom,
    where pooling is sound (see the module docstring); else None."""
    from scipy import stats

    k, n = len(values), min(len(v) for v in values.values())
    if k < 3 or n < POOL_MIN_SEEDS or any(len(v) != n for v in values.values()):
        return None
    rows = list(values.values())
    if not all(math.isfinite(x) for row in rows for x in row):
        return None
    own = _own_noise(rows)
    # The extreme weights' own variances may differ no more than a two-sided F test at 5%
    # allows (checking the extremes of k makes pooling rarer, not commoner).
    if min(own) <= 0 or max(own) / min(own) > stats.f.ppf(0.5 + LEVEL / 2, n - 1, n - 1):
        return None
    grand = statistics.fmean(x for row in rows for x in row)
    seed_means = [statistics.fmean(row[j] for row in rows) for j in range(n)]
    df = (k - 1) * (n - 1)
    square = sum((x - statistics.fmean(row) - seed_means[j] + grand) ** 2
                 for row in rows for j, x in enumerate(row))
    return square / df, df


def _own_noise(rows: list[list[float]]) -> list[float]:
    """Each weight's own seed-noise variance, from the variances of its paired differences
    (Grubbs: var(a - b) = s_a + s_b, so s_a = [var(a - b) + var(a - c) - var(b - c)] / 2,
    averaged over every pair b, c of the other weights)."""
    k = len(rows)
    diff = {(i, j): statistics.variance([x - y for x, y in zip(rows[i], rows[j], strict=True)])
            for i in range(k) for j in range(k) if i != j}
    return [statistics.fmean((diff[i, j] + diff[i, m] - diff[j, m]) / 2
                             for j in range(k) for m in range(k) if len({i, j, m}) == 3)
            for i in range(k)]


def _pooled_interval(a: list[float], b: list[float], pooled: tuple[float, int],
                     sign: float) -> tuple[float, float]:
    """The LEVEL interval of mean(a) - mean(b) (times sign) with the pooled residual variance."""
    from scipy import stats

    mean_square, df = pooled
    diff = sign * (statistics.fmean(a) - statistics.fmean(b))
    half = stats.t.ppf(0.5 + LEVEL / 2, df) * math.sqrt(2 * mean_square / len(a))
    return diff - half, diff + half


def mean_interval(values: list[float]) -> tuple[float, float] | None:
    """The LEVEL Student-t interval of the mean of `values`; None with fewer than two."""
    from scipy import stats

    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = stats.t.ppf(0.5 + LEVEL / 2, len(values) - 1) * statistics.stdev(values) \
        / math.sqrt(len(values))
    return mean - half, mean + half


def _interval(a: list[float], b: list[float], paired: bool,
              sign: float) -> tuple[float, float] | None:
    """The LEVEL interval of mean(a) - mean(b) (times sign); None without two seeds each."""
    from scipy import stats

    if paired and len(a) == len(b) and len(a) >= 2:
        return mean_interval([sign * (x - y) for x, y in zip(a, b, strict=True)])
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = sign * (statistics.fmean(a) - statistics.fmean(b))
    if va + vb == 0:
        return diff, diff
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = stats.t.ppf(0.5 + LEVEL / 2, df) * math.sqrt(va + vb)
    return diff - half, diff + half
