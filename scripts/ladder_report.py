"""The figures and tables of a training-size ladder study, from its evidence file.

    python scripts/ladder_report.py recommender/data/sst2_ladder_minilm.csv \
        --plot results/sst2_ladder_curves.svg --majority 0.5092 > results/sst2_ladder_tables.md

Input: an import-format file (`weightsearch export`) whose central tasks are sizes of one
dataset, with the same seeds at every weight of a size, scored by a share of one dev set
(accuracy). Every score is read as a whole number of correct dev examples, so that ties are
exact and no float rounding decides between weights. Output: the per-size curves (each seed,
and the mean with its 95% t-interval over seeds; the best weights starred), and as Markdown on
stdout
  - per size, weight and seed: the correct count;
  - per size: the best weight (the highest sum of counts over seeds; every weight sharing that
    sum is tied with it), the weights whose seed-paired difference from the best has a 95%
    t-interval that contains 0 (not separated from it), and every exact tie of sums;
  - per size and weight: the seed-paired difference from the best, its 95% and 90% t-intervals,
    its paired sd, and the difference that a two-sided paired t-test at 5% over these seeds
    detects with 80% power at that sd (noncentral t);
  - per size and weight: the share of bootstrap resamples of seeds (drawn with replacement, the
    same draw at every weight) in which the weight is the sole best and in which it ties for
    the best; with few seeds every ordered draw is enumerated, else a fixed-seed sample;
  - the weight x size interaction: F test in the two-way model with seeds as blocks within
    size (score ~ size * weight + size:seed);
  - equivalence (two one-sided t-tests, 5% each): per size, the smallest symmetric bound within
    which every weight from a given one up is shown equivalent to the best;
  - the best weight against log10 size (Spearman's rho, least-squares slope), descriptive only.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import optimize, stats

RESAMPLES = 4000
SEED = 20261124
EXACT_BOOTSTRAP = 50_000  # every ordered draw of seeds is enumerated up to this many
MAX_DEV_SIZE = 100_000


def dev_size(scores: np.ndarray) -> int | None:
    """The smallest dev-set size at which every score is a whole count, or None."""
    for n in range(1, MAX_DEV_SIZE + 1):
        counts = scores * n
        if np.all(np.abs(counts - np.round(counts)) < 1e-6):
            return n
    return None


def read_ladder(path: Path, dev: int | None = None) -> tuple[dict[int, pd.DataFrame], str, int]:
    """Per training size: a weights x seeds table of correct dev counts; the metric's name; the
    dev-set size (given, or the smallest at which every score is a whole count)."""
    sep = "\t" if path.suffix.lower() == ".tsv" else ","
    rows = pd.read_csv(path, sep=sep)
    if rows.duplicated(["train_size", "central_weight", "seed"]).any():
        sys.exit(f"{path}: a (train_size, central_weight, seed) cell appears twice; one ladder "
                 "per file, one score per cell")
    scores = rows["metric"].to_numpy(dtype=float)
    if np.any(scores < 0) or np.any(scores > 1):
        sys.exit(f"{path}: the scores are not shares of a dev set (outside 0-1)")
    if dev is None:
        dev = dev_size(scores)
        if dev is None:
            sys.exit(f"{path}: no dev-set size up to {MAX_DEV_SIZE:,} makes every score a whole "
                     "count; give it with --dev-size")
    counts = scores * dev
    if np.any(np.abs(counts - np.round(counts)) > 1e-6):
        sys.exit(f"{path}: the scores are not whole counts of {dev} dev examples")
    rows = rows.assign(count=np.round(counts).astype(int))
    out = {}
    for size, part in rows.groupby("train_size"):
        table = part.pivot(index="central_weight", columns="seed", values="count")
        if table.isna().any().any():
            sys.exit(f"{path}: size {size} lacks some (weight, seed) cells; a paired analysis "
                     "needs every seed at every weight")
        if table.shape[1] < 2:
            sys.exit(f"{path}: size {size} has one seed; intervals over seeds need two or more")
        out[int(size)] = table.sort_index().astype(int)
    metric = str(rows["metric_name"].iloc[0]) if "metric_name" in rows else "metric"
    return out, metric, dev


def best_weights(sums: np.ndarray, weights: np.ndarray) -> list[float]:
    """Every weight whose sum of counts is the highest (exact integer comparison)."""
    return [float(w) for w in weights[sums == sums.max()]]


def tie_groups(table: pd.DataFrame) -> list[tuple[int, list[float], list[list[float]]]]:
    """Groups of two or more weights with equal sums of counts, highest sum first: (sum,
    weights, the groups among them whose counts are equal seed by seed too)."""
    sums = table.sum(axis=1)
    out = []
    for total, group in sums.groupby(sums):
        if len(group) > 1:
            same: dict[tuple, list[float]] = {}
            for w in group.index:
                same.setdefault(tuple(table.loc[w]), []).append(float(w))
            out.append((int(total), [float(w) for w in group.index],
                        [ws for ws in same.values() if len(ws) > 1]))
    return sorted(out, key=lambda g: -g[0])


def _fmt_tie(total: int, weights: list[float], same: list[list[float]], of: int) -> str:
    text = f"{' = '.join(f'{w:g}' for w in weights)} ({total:,} of {of:,}"
    if same == [weights]:
        return text + ", equal seed by seed)"
    return text + "".join(f"; {' and '.join(f'{w:g}' for w in ws)} equal seed by seed"
                          for ws in same) + ")"


def t_interval(x: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    mean = float(np.mean(x))
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf(0.5 + level / 2, len(x) - 1) * np.std(x, ddof=1) / math.sqrt(len(x))
    return mean, mean - half, mean + half


def power(delta: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """Power of a two-sided paired t-test over n seeds for a true difference delta at sd."""
    df = n - 1
    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = delta * math.sqrt(n) / sd
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def detectable(sd: float, n: int, alpha: float = 0.05, target: float = 0.8) -> float:
    """The difference a two-sided paired t-test over n seeds detects with `target` power at
    paired sd `sd` (exact, noncentral t)."""
    if sd == 0:
        return 0.0
    hi = sd
    while power(hi, sd, n, alpha) < target:
        hi *= 2
    return float(optimize.brentq(lambda d: power(d, sd, n, alpha) - target, 0.0, hi,
                                 xtol=1e-12 * sd))


def bootstrap_draws(n: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """Ordered draws of n seeds with replacement: all of them when few, else a sample."""
    if n ** n <= EXACT_BOOTSTRAP:
        return (np.array(list(itertools.product(range(n), repeat=n))),
                f"all {n ** n} ordered draws of {n} seeds, equally likely")
    return (rng.integers(0, n, size=(RESAMPLES, n)),
            f"{RESAMPLES} draws of {n} seeds, numpy seed {SEED}")


def bootstrap_best(table: pd.DataFrame, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray, str]:
    """Per weight: the share of resamples in which it alone is best, and in which it ties for
    the best with another weight; and how the resamples were drawn."""
    counts = table.to_numpy()
    draws, how = bootstrap_draws(counts.shape[1], rng)
    sums = counts[:, draws].sum(axis=2)  # weights x resamples, integers
    top = sums == sums.max(axis=0)
    tied = top.sum(axis=0) > 1
    return (top & ~tied).mean(axis=1), (top & tied).mean(axis=1), how


class Pair(NamedTuple):
    size: int
    best: float
    weight: float
    diffs: np.ndarray  # per seed, weight minus best, in counts
    dev: int

    @property
    def points(self) -> np.ndarray:
        return self.diffs / self.dev * 100

    @property
    def sd(self) -> float:
        return float(np.std(self.points, ddof=1))

    def interval(self, level: float) -> tuple[float, float, float]:
        return t_interval(self.points, level)

    @property
    def separated(self) -> bool:
        _, low, high = self.interval(0.95)
        return not low <= 0 <= high

    @property
    def equivalence_bound(self) -> float:
        """The smallest symmetric bound within which TOST (5% each side) shows equivalence."""
        _, low, high = self.interval(0.90)
        return max(abs(low), abs(high))


def pairs(ladder: dict[int, pd.DataFrame], dev: int) -> dict[int, list[Pair]]:
    """Per size: each weight against each weight tied for the best (a pair of tied weights
    once, the larger against the smaller)."""
    out = {}
    for size, table in sorted(ladder.items()):
        weights = table.index.to_numpy(dtype=float)
        bests = best_weights(table.sum(axis=1).to_numpy(), weights)
        out[size] = [Pair(size, b, float(w), (table.loc[w] - table.loc[b]).to_numpy(), dev)
                     for b in bests for w in weights if w != b and not (w in bests and w < b)]
    return out


def _dummies(frame: pd.DataFrame, terms: list[tuple[str, ...]]) -> np.ndarray:
    cols = [np.ones((len(frame), 1))]
    for term in terms:
        label = frame[list(term)].astype(str).agg("|".join, axis=1)
        cols.append(pd.get_dummies(label).to_numpy(dtype=float))
    return np.hstack(cols)


def _fit(y: np.ndarray, design: np.ndarray) -> tuple[float, int]:
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ coef
    return float(resid @ resid), int(np.linalg.matrix_rank(design))


def interaction_anova(ladder: dict[int, pd.DataFrame], dev: int) -> list[tuple]:
    """score ~ size + size:seed + weight + size:weight, in accuracy points, by nested
    least-squares fits: rows (source, df, sum of squares, F, p); F against the residual."""
    frame = pd.DataFrame(
        [(size, w, seed, table.loc[w, seed] / dev * 100)
         for size, table in ladder.items() for w in table.index for seed in table.columns],
        columns=["size", "weight", "seed", "score"])
    y = frame["score"].to_numpy()
    steps = [("train size", [("size",)]),
             ("seeds within size", [("size",), ("size", "seed")]),
             ("weight", [("size",), ("size", "seed"), ("weight",)]),
             ("weight x size", [("size",), ("size", "seed"), ("weight",), ("size", "weight")])]
    previous = (float(((y - y.mean()) ** 2).sum()), 1)
    fits = []
    for name, terms in steps:
        rss, rank = _fit(y, _dummies(frame, terms))
        fits.append((name, rank - previous[1], previous[0] - rss))
        previous = (rss, rank)
    resid_ss, resid_df = previous[0], len(y) - previous[1]
    rows = []
    for name, df, ss in fits:
        if name in ("weight", "weight x size") and resid_df > 0 and resid_ss > 0:
            f = (ss / df) / (resid_ss / resid_df)
            rows.append((name, df, ss, f, float(stats.f.sf(f, df, resid_df))))
        else:
            rows.append((name, df, ss, math.nan, math.nan))
    rows.append(("residual (weight x seed within size)", resid_df, resid_ss, math.nan, math.nan))
    return rows


def slope_pattern(sizes: int, weights: list[float], delta: float) -> np.ndarray:
    """The paper's claim as scores (points, sizes x weights): at the smallest size the score
    rises linearly in log2(weight) by `delta` from the smallest weight to the largest, at the
    largest size it is flat, and the sizes between lie evenly in between."""
    x = np.log2(np.asarray(weights, dtype=float))
    x = (x - x[0]) / (x[-1] - x[0])
    gains = np.linspace(delta, 0.0, sizes)
    return gains[:, None] * x[None, :]


def interaction_power(resid_sd: float, delta: float, weights: list[float], sizes: int = 3,
                      seeds: int = 4, alpha: float = 0.05) -> float:
    """The power of the weight x size F test (`interaction_anova`) when the truth is
    `slope_pattern` and the residual sd is `resid_sd`: noncentral F, noncentrality seeds x
    (sum of squared interaction effects) / sd^2, with the design's degrees of freedom."""
    cells = slope_pattern(sizes, weights, delta)
    effects = cells - cells.mean(axis=1, keepdims=True) - cells.mean(axis=0, keepdims=True) \
        + cells.mean()
    df1 = (sizes - 1) * (len(weights) - 1)
    df2 = sizes * (len(weights) - 1) * (seeds - 1)
    nc = seeds * float((effects ** 2).sum()) / resid_sd ** 2
    crit = stats.f.isf(alpha, df1, df2)
    return float(stats.ncf.sf(crit, df1, df2, nc))


def power_report(resid_sd: float, weights: list[float], sizes: int = 3, seeds: int = 4) -> str:
    """The interaction test's power over a range of effects, as Markdown."""
    lines = [f"Power of the weight x size F test ({sizes} sizes x weights "
             f"{', '.join(f'{w:g}' for w in weights)} x {seeds} seeds, residual sd "
             f"{resid_sd:.2f} points, 5%), when the smallest size gains delta points from the "
             "smallest weight to the largest (linear in log weight), the largest size none:", "",
             "| delta (points) | power |", "|---:|---:|"]
    for delta in (0.5, 1.0, 1.5, 2.0, 3.0):
        power = interaction_power(resid_sd, delta, weights, sizes, seeds)
        lines.append(f"| {delta:g} | {power:.2f} |")
    return "\n".join(lines) + "\n"


def equivalence_bounds(ladder: dict[int, pd.DataFrame], by_size: dict[int, list[Pair]]
                       ) -> tuple[list[float], dict[int, dict[float, float]]]:
    """Per size and weight w: the smallest symmetric bound (points) within which every weight
    from w up is shown equivalent to every weight tied for the best (TOST, 5% each side)."""
    all_weights = sorted({float(w) for t in ladder.values() for w in t.index})
    out: dict[int, dict[float, float]] = {}
    for size, ps in by_size.items():
        out[size] = {}
        for start in all_weights:
            # two tied bests are one pair, the larger against the smaller: it counts when the
            # larger is from `start` up
            chosen = [p for p in ps if p.weight >= start]
            out[size][start] = max((p.equivalence_bound for p in chosen), default=math.nan)
    return all_weights, out


def _fmt_weights(ws: list[float]) -> str:
    return ", ".join(f"{w:g}" for w in ws) if ws else "none"


def _fmt_p(p: float) -> str:
    return f"{p:.2f}" if p >= 0.01 else f"{p:.1e}"


def report(ladder: dict[int, pd.DataFrame], dev: int, inferred: bool = False) -> str:
    rng = np.random.default_rng(SEED)
    by_size = pairs(ladder, dev)
    seeds = {size: list(table.columns) for size, table in ladder.items()}
    same_seeds = len({tuple(s) for s in seeds.values()}) == 1
    lines = [f"Scores as correct counts of {dev:,} dev examples"
             + (" (the smallest dev size at which every score is a whole count)" if inferred
                else "") + "; accuracy and differences in points (percent).", ""]
    lines += _per_seed_section(ladder, dev, seeds, same_seeds)
    lines += _best_section(ladder, dev, by_size)
    lines += _pairs_section(by_size)
    lines += _bootstrap_section(ladder, rng)
    lines += _interaction_section(ladder, dev)
    lines += _equivalence_section(ladder, by_size)
    lines += _trend_section(ladder)
    return "\n".join(lines) + "\n"


def _per_seed_section(ladder: dict[int, pd.DataFrame], dev: int, seeds: dict[int, list],
                      same_seeds: bool) -> list[str]:
    """Correct dev examples per seed, with each weight's mean and interval."""
    lines = ["### Correct dev examples per seed", ""]
    head = [f"seed {s}" for s in next(iter(seeds.values()))] if same_seeds else ["per seed"]
    lines += ["| train size | weight | " + " | ".join(head) + " | sum | mean accuracy | "
              "95% t-interval |", "|---:|---:|" + "---:|" * (len(head) + 2) + ":---:|"]
    for size, table in sorted(ladder.items()):
        for w in table.index:
            row = table.loc[w].to_numpy()
            cells = [str(c) for c in row] if same_seeds else [", ".join(map(str, row))]
            mean, low, high = t_interval(row / dev * 100)
            lines.append(f"| {size:,} | {w:g} | " + " | ".join(cells)
                         + f" | {row.sum():,} | {mean:.2f} | [{low:.2f}, {high:.2f}] |")
    return lines


def _best_section(ladder: dict[int, pd.DataFrame], dev: int, by_size: dict) -> list[str]:
    """The best weight per size and the weights not separated from it."""
    lines = ["", "### The best weight and the weights not separated from it", "",
              "Best: the highest sum of correct counts over the seeds. Not separated: the "
              "seed-paired difference from the best has a 95% t-interval that contains 0 (from "
              "every weight tied for the best).", "",
              "| train size | seeds | best (sum of correct) | not separated from the best | "
              "below the best, separated | exact ties of sums |",
              "|---:|---:|:---|:---|:---|:---|"]
    for size, table in sorted(ladder.items()):
        sums = table.sum(axis=1)
        bests = best_weights(sums.to_numpy(), table.index.to_numpy(dtype=float))
        separated = sorted({p.weight for p in by_size[size] if p.separated} - set(bests))
        rest = sorted({float(w) for w in table.index} - set(bests) - set(separated))
        ties = "; ".join(_fmt_tie(*group, dev * table.shape[1])
                         for group in tie_groups(table)) or "none"
        named = (f"{' and '.join(f'{w:g}' for w in bests)}, tied" if len(bests) > 1
                 else f"{bests[0]:g}")
        lines.append(f"| {size:,} | {table.shape[1]} | {named} ({int(sums.max()):,} of "
                     f"{dev * table.shape[1]:,}{' each' if len(bests) > 1 else ''}) | "
                     f"{_fmt_weights(rest)} | {_fmt_weights(separated)} | {ties} |")
    return lines


def _pairs_section(by_size: dict) -> list[str]:
    """Each weight against the best, seed by seed."""
    lines = ["", "### Each weight against the best, seed by seed", "",
              "Differences are weight minus best. Detectable: the true difference that a "
              "two-sided paired t-test at 5% over these seeds detects with 80% power if the "
              "paired sd is the one measured (noncentral t); the measured sd is itself rough "
              "with few seeds.", "",
              "| train size | best | weight | per seed (correct) | mean (points) | 95% "
              "t-interval | 90% t-interval | paired sd | detectable with 80% power |",
              "|---:|---:|---:|:---|---:|:---:|:---:|---:|---:|"]
    for size, ps in by_size.items():
        for p in ps:
            mean, low, high = p.interval(0.95)
            _, low90, high90 = p.interval(0.90)
            lines.append(f"| {size:,} | {p.best:g} | {p.weight:g} | "
                         f"{', '.join(f'{int(d):+d}' for d in p.diffs)} | {mean:+.2f} | "
                         f"[{low:+.2f}, {high:+.2f}] | [{low90:+.2f}, {high90:+.2f}] | "
                         f"{p.sd:.2f} | {detectable(p.sd, len(p.diffs)):.2f} |")
    return lines


def _bootstrap_section(ladder: dict[int, pd.DataFrame], rng: np.random.Generator) -> list[str]:
    """How often each weight is the sole or a tied best over resampled seeds."""
    lines = ["", "### Bootstrap over seeds", "",
              "Seeds drawn with replacement, the same draw at every weight; sums of integer "
              "counts compared exactly, so a tie stays a tie.", "",
              "| train size | resamples | weight | sole best | tied for the best |",
              "|---:|:---|---:|---:|---:|"]
    for size, table in sorted(ladder.items()):
        sole, tied, how = bootstrap_best(table, rng)
        for i, w in enumerate(table.index):
            lines.append(f"| {size:,} | {how + ' ' if i == 0 else ''}| {w:g} | {sole[i]:.2f} | "
                         f"{tied[i]:.2f} |")
        lines.append(f"| {size:,} | | (a tie for the best) | | {1 - sole.sum():.2f} |")
    return lines


def _interaction_section(ladder: dict[int, pd.DataFrame], dev: int) -> list[str]:
    """The weight x size analysis of variance."""
    lines = ["", "### Weight x size: does the effect of the weight change with size?", ""]
    if len(ladder) < 2:
        lines.append("One size: no interaction to test.")
    else:
        rows = interaction_anova(ladder, dev)
        resid_df = rows[-1][1]
        lines += ["Two-way model with seeds as blocks within size, on accuracy points: score ~ "
                  "size + size:seed + weight + size:weight; each row's sum of squares is what "
                  "it adds to the rows above; F against the residual.", "",
                  "| source | df | sum of squares | F | p |", "|:---|---:|---:|---:|---:|"]
        for name, df, ss, f, p in rows:
            test = (f"F({df}, {resid_df}) = {f:.2f}", _fmt_p(p)) if not math.isnan(f) \
                else ("", "")
            lines.append(f"| {name} | {df} | {ss:.2f} | {test[0]} | {test[1]} |")
    return lines


def _equivalence_section(ladder: dict[int, pd.DataFrame], by_size: dict) -> list[str]:
    """The smallest bound within which every weight is equivalent to the best."""
    lines: list[str] = []
    weights, bounds = equivalence_bounds(ladder, by_size)
    lines += ["", "### Equivalence to the best", "",
              "Per size, the smallest symmetric bound (points) within which two one-sided "
              "paired t-tests (5% each) show every weight from the column's on (against every "
              "weight tied for the best) equivalent to the best: the largest end, in absolute "
              "value, of their 90% t-intervals.", "",
              "| train size | " + " | ".join(f"weights >= {w:g}" for w in weights) + " |",
              "|---:|" + "---:|" * len(weights)]
    for size, row in sorted(bounds.items()):
        lines.append(f"| {size:,} | " + " | ".join(
            "" if math.isnan(row[w]) else f"{row[w]:.2f}" for w in weights) + " |")
    return lines


def _trend_section(ladder: dict[int, pd.DataFrame]) -> list[str]:
    """The best weight's trend over sizes, descriptive only."""
    lines: list[str] = []
    if len(ladder) >= 2:
        sizes = sorted(ladder)
        x = np.log10(np.array(sizes, dtype=float))
        bests = [best_weights(ladder[s].sum(axis=1).to_numpy(),
                              ladder[s].index.to_numpy(dtype=float)) for s in sizes]
        picks = {"the smaller": [min(b) for b in bests], "the larger": [max(b) for b in bests]}
        if picks["the smaller"] == picks["the larger"]:
            picks = {"": picks["the smaller"]}
        parts = []
        for name, y in picks.items():
            rho = stats.spearmanr(x, y)[0] if np.ptp(y) > 0 else 0.0
            slope = np.polyfit(x, y, 1)[0]
            parts.append(f"{'taking ' + name + ' of tied weights, ' if name else ''}"
                         f"best weight {', '.join(f'{v:g}' for v in y)}: Spearman's rho "
                         f"{rho:+.2f}, slope {slope:+.2f} weight units per decade")
        lines += ["", "Descriptive only, not a test (one best weight per size, no account of "
                  "seed noise or ties): " + "; ".join(parts) + "."]
    return lines

def plot(ladder: dict[int, pd.DataFrame], dev: int, path: Path, majority: float | None,
         metric: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ladder), figsize=(4.2 * len(ladder), 3.6), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, (size, table) in zip(axes, sorted(ladder.items()), strict=True):
        weights = table.index.to_numpy(dtype=float)
        scores = table / dev
        for seed in table.columns:
            ax.plot(weights, scores[seed], color="0.6", lw=0.8, marker=".", ms=4,
                    label="one seed" if seed == table.columns[0] else None)
        ci = [t_interval(scores.loc[w].to_numpy()) for w in weights]
        mean = np.array([c[0] for c in ci])
        ax.fill_between(weights, [c[1] for c in ci], [c[2] for c in ci], color="C0",
                        alpha=0.2, lw=0, label="95% t-interval of the mean")
        ax.plot(weights, mean, color="C0", lw=2, marker="o", ms=5, label="mean over seeds")
        bests = best_weights(table.sum(axis=1).to_numpy(), weights)
        ax.plot(bests, [mean[list(weights).index(b)] for b in bests], ls="none", marker="*",
                ms=12, color="C1", label="best (each tied weight)")
        if majority is not None:
            ax.axhline(majority, color="C3", ls="--", lw=1, label="majority class")
        ax.set_title(f"{size:,} training examples, {table.shape[1]} seeds")
        ax.set_xlabel("central weight")
        ax.set_xticks(weights)
    axes[0].set_ylabel(f"dev {metric}")
    axes[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("evidence", type=Path, help="the ladder's import-format file")
    p.add_argument("--plot", type=Path, help="write the curves here (.svg or .pdf: vector)")
    p.add_argument("--majority", type=float, help="the majority-class score, drawn as a line")
    p.add_argument("--dev-size", type=int, help="examples in the dev set (default: the "
                   "smallest size at which every score is a whole count)")
    p.add_argument("--power", type=float, metavar="WEIGHTS", nargs="+",
                   help="print the interaction test's power for a design of these weights "
                        "(the residual sd read from EVIDENCE's interaction model) and stop")
    p.add_argument("--seeds", type=int, default=4, help="seeds per cell of that design")
    args = p.parse_args(argv)
    if args.power:
        ladder, _, dev = read_ladder(args.evidence, args.dev_size)
        resid = interaction_anova(ladder, dev)[-1]
        sys.stdout.write(power_report(math.sqrt(resid[2] / resid[1]), args.power,
                                      len(ladder), args.seeds))
        return 0
    ladder, metric, dev = read_ladder(args.evidence, args.dev_size)
    if args.plot:
        plot(ladder, dev, args.plot, args.majority, metric)
    sys.stdout.write(report(ladder, dev, inferred=args.dev_size is None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
