"""The figures and tables of a training-size ladder study, from its evidence file.

    python scripts/ladder_report.py recommender/data/sst2_ladder_minilm.csv \
        --plot results/sst2_ladder_curves.svg --majority 0.5092 > results/sst2_ladder_tables.md

Input: an import-format file (`weightsearch export`) whose central tasks are sizes of one
dataset, with the same seeds at every weight. Output: the per-size curves (each seed, and the
mean with its 95% t-interval over seeds), and as Markdown on stdout
  - per size: the best weight of the mean, how often each weight is best over bootstrap
    resamples of seeds (seeds drawn with replacement, the same draw at every weight), and the
    bootstrap's 80% interval of the best weight;
  - per size and weight: the seed-paired difference from the best weight, with its 95%
    t-interval, and the difference a paired t-test with these seeds would detect with 80%
    power at the 5% level;
  - the trend of the best weight against log10 size: Spearman's rho and the least-squares
    slope per decade, over bootstrap resamples of seeds (drawn independently per size).
Deterministic: one fixed seed for every resample.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

RESAMPLES = 4000
SEED = 20261124


def read_ladder(path: Path) -> tuple[dict[int, pd.DataFrame], str]:
    """Per training size: a weights x seeds table of the metric; and the metric's name."""
    sep = "\t" if path.suffix.lower() == ".tsv" else ","
    rows = pd.read_csv(path, sep=sep)
    if rows.duplicated(["train_size", "central_weight", "seed"]).any():
        sys.exit(f"{path}: a (train_size, central_weight, seed) cell appears twice; one ladder "
                 "per file, one score per cell")
    out = {}
    for size, part in rows.groupby("train_size"):
        table = part.pivot(index="central_weight", columns="seed", values="metric")
        if table.isna().any().any():
            sys.exit(f"{path}: size {size} lacks some (weight, seed) cells; a paired analysis "
                     "needs every seed at every weight")
        if table.shape[1] < 2:
            sys.exit(f"{path}: size {size} has one seed; intervals over seeds need two or more")
        out[int(size)] = table.sort_index()
    metric = str(rows["metric_name"].iloc[0]) if "metric_name" in rows else "metric"
    return out, metric


def best_weight(table: np.ndarray, weights: np.ndarray) -> float:
    """The weight with the highest mean (the smaller weight on a tie)."""
    return float(weights[int(np.argmax(table.mean(axis=1)))])


def bootstrap_best(table: pd.DataFrame, rng: np.random.Generator) -> np.ndarray:
    values, weights = table.to_numpy(), table.index.to_numpy(dtype=float)
    n = values.shape[1]
    draws = rng.integers(0, n, size=(RESAMPLES, n))
    return np.array([best_weight(values[:, d], weights) for d in draws])


def t_interval(x: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    mean = float(np.mean(x))
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf(0.5 + level / 2, len(x) - 1) * np.std(x, ddof=1) / math.sqrt(len(x))
    return mean, mean - half, mean + half


def detectable(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The paired difference a two-sided t-test over n seeds detects with `power`."""
    df = n - 1
    return (stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * sd / math.sqrt(n)


def plot(ladder: dict[int, pd.DataFrame], path: Path, majority: float | None,
         metric: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ladder), figsize=(4.2 * len(ladder), 3.6), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, (size, table) in zip(axes, sorted(ladder.items()), strict=True):
        weights = table.index.to_numpy(dtype=float)
        for seed in table.columns:
            ax.plot(weights, table[seed], color="0.6", lw=0.8, marker=".", ms=4,
                    label="one seed" if seed == table.columns[0] else None)
        ci = [t_interval(table.loc[w].to_numpy()) for w in weights]
        mean = np.array([c[0] for c in ci])
        ax.fill_between(weights, [c[1] for c in ci], [c[2] for c in ci], color="C0",
                        alpha=0.2, lw=0, label="95% t-interval of the mean")
        ax.plot(weights, mean, color="C0", lw=2, marker="o", ms=5, label="mean over seeds")
        if majority is not None:
            ax.axhline(majority, color="C3", ls="--", lw=1, label="majority class")
        ax.set_title(f"{size:,} training examples, {table.shape[1]} seeds")
        ax.set_xlabel("central weight")
        ax.set_xticks(weights)
    axes[0].set_ylabel(f"dev {metric}")
    axes[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)


def report(ladder: dict[int, pd.DataFrame]) -> str:
    rng = np.random.default_rng(SEED)
    lines = ["### Best weight per size", "",
             "| train size | seeds | best weight (mean) | best mean | bootstrap 80% interval "
             "of the best weight | share of resamples where each weight is best |",
             "|---:|---:|---:|---:|:---:|:---|"]
    boot = {}
    for size, table in sorted(ladder.items()):
        weights = table.index.to_numpy(dtype=float)
        best = best_weight(table.to_numpy(), weights)
        boot[size] = bootstrap_best(table, rng)
        low, high = np.percentile(boot[size], [10, 90])
        shares = ", ".join(f"{w:g}: {np.mean(boot[size] == w):.2f}" for w in weights)
        lines.append(f"| {size:,} | {table.shape[1]} | {best:g} | "
                     f"{table.loc[best].mean():.4f} | [{low:g}, {high:g}] | {shares} |")
    lines += ["", "### Each weight against the best, seed by seed", "",
              "| train size | weight | mean difference from the best | 95% t-interval | "
              "seeds better than the best |", "|---:|---:|---:|:---:|---:|"]
    for size, table in sorted(ladder.items()):
        weights = table.index.to_numpy(dtype=float)
        best = best_weight(table.to_numpy(), weights)
        sds = []
        for w in weights:
            if w == best:
                continue
            d = (table.loc[w] - table.loc[best]).to_numpy()
            mean, low, high = t_interval(d)
            sds.append(np.std(d, ddof=1))
            lines.append(f"| {size:,} | {w:g} | {mean:+.4f} | [{low:+.4f}, {high:+.4f}] | "
                         f"{int(np.sum(d > 0))} of {len(d)} |")
        n = table.shape[1]
        sd = float(np.sqrt(np.mean(np.square(sds))))
        lines.append(f"| {size:,} | (power) | paired sd {sd:.4f}: a difference of "
                     f"{detectable(sd, n):.4f} is detected with 80% power | | |")
    sizes = np.array(sorted(ladder), dtype=float)
    x = np.log10(sizes)
    resampled = np.array([[boot[int(s)][i] for s in sizes] for i in range(RESAMPLES)])
    rho = np.array([stats.spearmanr(x, r)[0] if np.ptp(r) > 0 else 0.0 for r in resampled])
    slope = np.array([np.polyfit(x, r, 1)[0] for r in resampled])
    point = [best_weight(ladder[int(s)].to_numpy(), ladder[int(s)].index.to_numpy(float))
             for s in sizes]
    point_rho = stats.spearmanr(x, point)[0] if np.ptp(point) > 0 else 0.0
    lines += ["", "### Trend of the best weight against log10 size", "",
              "| statistic | on the data | bootstrap median | bootstrap 95% interval | "
              "share of resamples below 0 |", "|:---|---:|---:|:---:|---:|",
              f"| Spearman's rho | {point_rho:+.2f} | {np.median(rho):+.2f} | "
              f"[{np.percentile(rho, 2.5):+.2f}, {np.percentile(rho, 97.5):+.2f}] | "
              f"{np.mean(rho < 0):.2f} |",
              f"| slope (weight units per decade) | {np.polyfit(x, point, 1)[0]:+.2f} | "
              f"{np.median(slope):+.2f} | [{np.percentile(slope, 2.5):+.2f}, "
              f"{np.percentile(slope, 97.5):+.2f}] | {np.mean(slope < 0):.2f} |",
              "", f"Bootstrap: {RESAMPLES} resamples of seeds, numpy seed {SEED}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("evidence", type=Path, help="the ladder's import-format file")
    p.add_argument("--plot", type=Path, help="write the curves here (.svg or .pdf: vector)")
    p.add_argument("--majority", type=float, help="the majority-class score, drawn as a line")
    args = p.parse_args(argv)
    ladder, metric = read_ladder(args.evidence)
    if args.plot:
        plot(ladder, args.plot, args.majority, metric)
    sys.stdout.write(report(ladder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
