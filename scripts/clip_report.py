"""The tests of the clipping study, from its evidence file.

    python scripts/clip_report.py recommender/data/sst2_clip_minilm.csv \
        > results/sst2_clip_tables.md
    python scripts/clip_report.py --power     # the power computed before the run

Input: `weightsearch export` of `examples/study-clip-weight.yaml`: one task per clipping regime
(`<task>-clip1`, `<task>-noclip`, and `<task>-uclip1` if that arm ran), central weights 1, 3
and 15, the same seeds in every cell, accuracy on one dev set (read as whole counts of correct
sentences, so ties are exact). Only seeds that finished in every cell are used, and the report
says how many. The tests, fixed before the run (RESULTS.md):

  H1  with clipping, weights 3 and 15 are equivalent within +-BOUND accuracy points: two
      one-sided paired t-tests at 5% (TOST; equivalent when the 90% interval lies inside);
  H2  without clipping, weight 15 differs from weight 1: paired two-sided t-test at 5%;
  H3  clipping x weight interaction: the F test in score ~ seed + clipping * weight (seeds as
      blocks), and its one-degree contrast, the paired t-test of [15 - 1 without clipping]
      minus [15 - 1 with clipping].

The third arm (`<task>-uclip1`, `examples/study-clip-unweighted.yaml`), its tests fixed before
its run (RESULTS.md):

  H4  under unweighted clipping, weight 15 differs from weight 1: paired two-sided t-test at 5%;
  H5  the three regimes x weight interaction: the F test in score ~ seed + regime * weight.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import integrate, stats

BOUND = 0.5  # H1's equivalence bound, accuracy points
ALPHA = 0.05
CLIPPED, FREE, UNWEIGHTED = "clip1", "noclip", "uclip1"
# Before the run: the ladder's 700-row paired sds (3 seeds), accuracy points.
PLANNING_SDS = {"15 - 3 (ladder, clipped)": 0.43, "15 - 1 (ladder, clipped)": 0.99,
                "between the two": 0.57}
PLANNED_SEEDS = 8
# Before the third arm's run: the first two arms' paired sd of 15 - 1 (accuracy points).
H4_PLANNING_SDS = {"15 - 1 without clipping": 0.594, "15 - 1 with clipping": 0.682}

_spec = importlib.util.spec_from_file_location(
    "ladder_report", Path(__file__).resolve().parent / "ladder_report.py")
_ladder = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ladder)
dev_size, detectable, t_interval = _ladder.dev_size, _ladder.detectable, _ladder.t_interval


def tost_power(bound: float, sd: float, n: int, true: float = 0.0, alpha: float = ALPHA
               ) -> float:
    """Power of the paired TOST over n seeds: the chance that the 1 - 2 alpha interval lies
    inside +-bound, exactly (the normal mean integrated over the chi-square of the sd)."""
    df, se = n - 1, sd / math.sqrt(n)
    crit = stats.t.ppf(1 - alpha, df)

    def given(u: float) -> float:
        half = bound - crit * sd * math.sqrt(u / df) / math.sqrt(n)
        if half <= 0:
            return 0.0
        inside = stats.norm.cdf((half - true) / se) - stats.norm.cdf((-half - true) / se)
        return inside * stats.chi2.pdf(u, df)

    return float(integrate.quad(given, 0, stats.chi2.ppf(1 - 1e-12, df), limit=200)[0])


def read_cells(path: Path) -> tuple[pd.DataFrame, int, list[int]]:
    """Correct counts per (regime, weight, seed), over the seeds finished in every cell; the
    dev size; the seeds left out."""
    frame = pd.read_csv(path, sep="\t" if path.suffix.lower() == ".tsv" else ",")
    frame["regime"] = frame["central_task"].str.rsplit("-", n=1).str[-1]
    dev = dev_size(frame["metric"].to_numpy())
    if dev is None:
        raise SystemExit(f"{path}: the scores are not shares of one dev set")
    frame["count"] = np.round(frame["metric"] * dev).astype(int)
    cells = frame.groupby(["regime", "central_weight"])["seed"].apply(set)
    complete = sorted(set.intersection(*cells))
    left_out = sorted(set(frame["seed"]) - set(complete))
    return frame[frame["seed"].isin(complete)], dev, left_out


def counts(frame: pd.DataFrame, regime: str, weight: float) -> np.ndarray:
    mine = frame[(frame["regime"] == regime) & (frame["central_weight"] == weight)]
    return mine.sort_values("seed")["count"].to_numpy()


def paired(frame: pd.DataFrame, dev: int, regime: str, a: float, b: float) -> np.ndarray:
    """Accuracy points of weight a minus weight b, seed by seed."""
    return (counts(frame, regime, a) - counts(frame, regime, b)) * 100 / dev


def tost(diff: np.ndarray, bound: float) -> dict:
    n = len(diff)
    mean, sd = float(np.mean(diff)), float(np.std(diff, ddof=1))
    se = sd / math.sqrt(n)
    if se == 0:  # every seed the same difference
        p = 0.0 if abs(mean) < bound else 1.0
        return {"mean": mean, "sd": sd, "low90": mean, "high90": mean, "p": p}
    p_low = stats.t.sf((mean + bound) / se, n - 1)
    p_high = stats.t.cdf((mean - bound) / se, n - 1)
    _, low, high = t_interval(diff, 0.90)
    return {"mean": mean, "sd": sd, "low90": low, "high90": high, "p": float(max(p_low, p_high))}


def paired_t(diff: np.ndarray) -> dict:
    mean, low, high = t_interval(diff, 0.95)
    sd = float(np.std(diff, ddof=1))
    if sd == 0:
        return {"mean": mean, "sd": 0.0, "low": mean, "high": mean, "t": math.inf,
                "p": 0.0 if mean else 1.0}
    test = stats.ttest_1samp(diff, 0.0)
    return {"mean": mean, "sd": sd, "low": low, "high": high, "t": float(test.statistic),
            "p": float(test.pvalue)}


def interaction(frame: pd.DataFrame, dev: int, regimes: list[str]) -> dict:
    """F test of regime x weight in score ~ seed + regime * weight (accuracy points)."""
    data = frame[frame["regime"].isin(regimes)]
    y = (data["count"] * 100 / dev).to_numpy()

    def dummies(column: str) -> pd.DataFrame:
        return pd.get_dummies(data[column].astype(str), drop_first=True, dtype=float)

    regime, weight = dummies("regime"), dummies("central_weight")
    main = np.column_stack([np.ones(len(data)), dummies("seed"), regime, weight])
    products = np.column_stack([regime[a] * weight[b]
                                for a, b in itertools.product(regime, weight)])
    full = np.column_stack([main, products])

    def rss(design: np.ndarray) -> float:
        beta, *_ = np.linalg.lstsq(design, y, rcond=None)
        return float(np.sum((y - design @ beta) ** 2))

    df = products.shape[1]
    resid_df = len(y) - np.linalg.matrix_rank(full)
    f = ((rss(main) - rss(full)) / df) / (rss(full) / resid_df)
    return {"df": df, "resid_df": resid_df, "F": f, "p": float(stats.f.sf(f, df, resid_df))}


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def report(frame: pd.DataFrame, dev: int, left_out: list[int]) -> str:
    seeds = sorted(frame["seed"].unique())
    n = len(seeds)
    regimes = [r for r in (CLIPPED, FREE, UNWEIGHTED) if r in set(frame["regime"])]
    weights = sorted(frame["central_weight"].unique())
    out = [f"Seeds in every cell: {n} ({', '.join(map(str, seeds))})"
           + (f"; left out, unfinished in some cell: {', '.join(map(str, left_out))}"
              if left_out else "") + f". Dev set: {dev} sentences.", ""]
    out += ["| clipping | weight | correct per seed | mean accuracy | 95% t-interval | "
            "central updates clipped | median unweighted norm |",
            "|:---|---:|:---|---:|:---:|---:|---:|"]
    for regime, w in itertools.product(regimes, weights):
        c = counts(frame, regime, w)
        mean, low, high = t_interval(c * 100 / dev)
        mine = frame[(frame["regime"] == regime) & (frame["central_weight"] == w)]
        share = mine["clip_share"].mean() if "clip_share" in mine else math.nan
        norm = mine["central_norm"].median() if "central_norm" in mine else math.nan
        out.append(f"| {regime} | {w:g} | {', '.join(map(str, c))} | {mean:.2f} | "
                   f"[{low:.2f}, {high:.2f}] | {share:.3f} | {norm:.2f} |")
    h1 = tost(paired(frame, dev, CLIPPED, 15, 3), BOUND)
    h2 = paired_t(paired(frame, dev, FREE, 15, 1))
    contrast = paired_t(paired(frame, dev, FREE, 15, 1) - paired(frame, dev, CLIPPED, 15, 1))
    h3 = interaction(frame, dev, [CLIPPED, FREE])
    verdict1 = "equivalent" if h1["p"] < ALPHA else "not shown equivalent"
    verdict2 = "differ" if h2["p"] < ALPHA else "not shown to differ"
    out += ["", "| test | estimate (points) | interval | paired sd | statistic | p | result |",
            "|:---|---:|:---:|---:|:---|---:|:---|",
            f"| H1: clipped, 15 - 3, TOST +-{BOUND:g} | {h1['mean']:+.3f} | 90% "
            f"[{h1['low90']:+.3f}, {h1['high90']:+.3f}] | {h1['sd']:.3f} | two one-sided t, "
            f"{n - 1} df | {_p(h1['p'])} | {verdict1} |",
            f"| H2: no clipping, 15 - 1 | {h2['mean']:+.3f} | 95% [{h2['low']:+.3f}, "
            f"{h2['high']:+.3f}] | {h2['sd']:.3f} | t({n - 1}) = {h2['t']:.2f} | {_p(h2['p'])} "
            f"| {verdict2} |",
            f"| H3: clipping x weight | | | | F({h3['df']}, {h3['resid_df']}) = {h3['F']:.2f} | "
            f"{_p(h3['p'])} | {'interaction' if h3['p'] < ALPHA else 'no interaction shown'} |",
            f"| H3 contrast: (15 - 1) unclipped minus clipped | {contrast['mean']:+.3f} | 95% "
            f"[{contrast['low']:+.3f}, {contrast['high']:+.3f}] | {contrast['sd']:.3f} | "
            f"t({n - 1}) = {contrast['t']:.2f} | {_p(contrast['p'])} | |"]
    if UNWEIGHTED in regimes:
        h4 = paired_t(paired(frame, dev, UNWEIGHTED, 15, 1))
        h5 = interaction(frame, dev, [CLIPPED, FREE, UNWEIGHTED])
        verdict4 = "differ" if h4["p"] < ALPHA else "not shown to differ"
        out += [f"| H4: unweighted clipping, 15 - 1 | {h4['mean']:+.3f} | 95% "
                f"[{h4['low']:+.3f}, {h4['high']:+.3f}] | {h4['sd']:.3f} | t({n - 1}) = "
                f"{h4['t']:.2f} | {_p(h4['p'])} | {verdict4} |",
                f"| H5: three regimes x weight | | | | F({h5['df']}, {h5['resid_df']}) = "
                f"{h5['F']:.2f} | {_p(h5['p'])} | "
                f"{'interaction' if h5['p'] < ALPHA else 'no interaction shown'} |"]
    same = [w for w in weights if w > 3 and
            np.array_equal(counts(frame, CLIPPED, w), counts(frame, CLIPPED, 3))]
    if same:
        out += ["", f"With clipping, weights 3 and {', '.join(f'{w:g}' for w in same)} scored "
                "the same correct count on every seed."]
    return "\n".join(out) + "\n"


def power_report() -> str:
    lines = [f"Power before the run, {PLANNED_SEEDS} paired seeds, 5%:", ""]
    for name, sd in PLANNING_SDS.items():
        lines.append(f"- paired sd {sd:.2f} points ({name}): H1's TOST at +-{BOUND:g} has "
                     f"power {tost_power(BOUND, sd, PLANNED_SEEDS):.2f}; a paired t-test "
                     f"detects {detectable(sd, PLANNED_SEEDS):.2f} points with 80% power")
    return "\n".join(lines) + "\n"


def interaction_power(resid_sd: float, delta: float, n: int = PLANNED_SEEDS,
                      alpha: float = ALPHA) -> float:
    """H5's power: the F test of regime x weight over 3 regimes x weights 1, 3, 15 x n seeds,
    when only the third regime's weight-15 cell is shifted by `delta` points (noncentral F,
    its noncentrality the shift's part outside the main effects over the residual variance)."""
    seeds, regimes, weights = range(n), range(3), range(3)
    rows = list(itertools.product(seeds, regimes, weights))
    mean = np.array([delta if (r, w) == (2, 2) else 0.0 for _, r, w in rows])

    def onehot(index: int, levels: int) -> np.ndarray:
        return np.array([[1.0 if row[index] == k else 0.0 for k in range(1, levels)]
                         for row in rows])

    seed_d, regime_d, weight_d = onehot(0, n), onehot(1, 3), onehot(2, 3)
    main = np.column_stack([np.ones(len(rows)), seed_d, regime_d, weight_d])
    full = np.column_stack([main] + [regime_d[:, [a]] * weight_d[:, [b]]
                                     for a in range(2) for b in range(2)])

    def fitted(design: np.ndarray) -> np.ndarray:
        return design @ np.linalg.lstsq(design, mean, rcond=None)[0]

    nc = float(np.sum((fitted(full) - fitted(main)) ** 2)) / resid_sd ** 2
    df, resid_df = 4, len(rows) - np.linalg.matrix_rank(full)
    crit = stats.f.ppf(1 - alpha, df, resid_df)
    return float(stats.ncf.sf(crit, df, resid_df, nc))


def third_arm_power_report(resid_sd: float) -> str:
    lines = ["", f"Power before the third arm's run, {PLANNED_SEEDS} paired seeds, 5%:", ""]
    for name, sd in H4_PLANNING_SDS.items():
        lines.append(f"- H4 at paired sd {sd:.3f} points ({name}): a paired t-test detects "
                     f"{detectable(sd, PLANNED_SEEDS):.2f} points with 80% power")
    for delta in (0.5, 1.0, 1.5):
        lines.append(f"- H5, residual sd {resid_sd:.3f} points (the first two arms' two-way "
                     f"model), the unweighted arm's weight 15 alone {delta:+.1f} points off "
                     f"the additive pattern: power {interaction_power(resid_sd, delta):.2f}")
    return "\n".join(lines) + "\n"


def residual_sd(frame: pd.DataFrame, dev: int, regimes: list[str]) -> float:
    """The residual sd (accuracy points) of score ~ seed + regime * weight."""
    data = frame[frame["regime"].isin(regimes)]
    y = (data["count"] * 100 / dev).to_numpy()
    cells = pd.get_dummies(data["regime"] + "/" + data["central_weight"].astype(str),
                           dtype=float)
    design = np.column_stack([pd.get_dummies(data["seed"].astype(str), dtype=float), cells])
    beta, *_ = np.linalg.lstsq(design, y, rcond=None)
    resid_df = len(y) - np.linalg.matrix_rank(design)
    return math.sqrt(float(np.sum((y - design @ beta) ** 2)) / resid_df)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("evidence", nargs="?", type=Path, help="the exported study (csv/tsv)")
    parser.add_argument("--power", action="store_true", help="print the planned power")
    args = parser.parse_args(argv)
    if args.power:
        sys.stdout.write(power_report())
    if args.evidence is not None:
        frame, dev, left_out = read_cells(args.evidence)
        if args.power:
            sys.stdout.write(third_arm_power_report(residual_sd(frame, dev, [CLIPPED, FREE])))
            sys.stdout.write("\n")
        sys.stdout.write(report(frame, dev, left_out))
    elif not args.power:
        parser.error("give the evidence file, or --power")
    return 0


if __name__ == "__main__":
    sys.exit(main())
