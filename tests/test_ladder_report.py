"""scripts/ladder_report.py: counts, ties, the weights not separated from the best, exact power,
the bootstrap over integer counts, the weight x size interaction and equivalence bounds, each
checked against a computation of its own here."""

from __future__ import annotations

import importlib.util
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ladder_report.py"
LADDER = ROOT / "recommender" / "data" / "sst2_ladder_minilm.csv"
TABLES = ROOT / "results" / "sst2_ladder_tables.md"
DEV = 872  # SST-2's dev sentences

spec = importlib.util.spec_from_file_location("ladder_report", SCRIPT)
lr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lr)


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    frame = pd.read_csv(LADDER)
    return frame.assign(count=[round(m * DEV) for m in frame["metric"]])


@pytest.fixture(scope="module")
def ladder():
    return lr.read_ladder(LADDER)


@pytest.fixture(scope="module")
def text(ladder) -> str:
    return lr.report(ladder[0], ladder[2], inferred=True)


def _section(text: str, heading: str) -> list[str]:
    part = text.split(f"### {heading}")[1].split("\n### ")[0]
    return [line for line in part.splitlines() if line.startswith("| ")]


def _counts(rows: pd.DataFrame, size: int, weight: float) -> np.ndarray:
    part = rows[(rows["train_size"] == size) & (rows["central_weight"] == weight)]
    return part.sort_values("seed")["count"].to_numpy()


def test_scores_are_read_as_whole_counts_of_the_dev_set(rows, ladder):
    tables, metric, dev = ladder
    assert (dev, metric) == (DEV, "accuracy")
    assert sorted(tables) == [125, 700, 4000]
    for _, row in rows.iterrows():
        assert tables[row["train_size"]].loc[row["central_weight"], row["seed"]] == row["count"]
    assert lr.read_ladder(LADDER, 872)[2] == DEV


def test_a_score_that_is_no_whole_count_is_refused(tmp_path):
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"train_size": [10, 10, 10, 10], "central_weight": [1, 1, 3, 3],
                  "seed": [1, 2, 1, 2], "metric": [0.5, 0.25, 0.75, 0.5]}).to_csv(bad)
    with pytest.raises(SystemExit, match="whole counts of 3"):
        lr.read_ladder(bad, 3)


def test_ties_are_exact_and_named(rows, ladder, text):
    tables = ladder[0]
    # 4,000 rows: weights 3 and 15 tie at 2,227 of 2,616, from the file itself
    sums = rows[rows["train_size"] == 4000].groupby("central_weight")["count"].sum()
    assert sums[3] == sums[15] == sums.max() == 2227
    for size, table in tables.items():
        sums = rows[rows["train_size"] == size].groupby("central_weight")["count"].sum()
        expected = sorted(float(w) for w in sums.index if sums[w] == sums.max())
        assert lr.best_weights(table.sum(axis=1).to_numpy(), table.index.to_numpy(float)) \
            == expected
        groups = {tuple(float(w) for w in g.index) for _, g in sums.groupby(sums) if len(g) > 1}
        assert {tuple(ws) for _, ws, _ in lr.tie_groups(table)} == groups
    assert "| 4,000 | 3 | 3 and 15, tied (2,227 of 2,616 each) |" in text
    assert "3 = 15 (2,227 of 2,616)" in text
    # equal seed by seed: 6 and 12 at 125 rows, 9 and 12 at 4,000 rows
    assert (_counts(rows, 125, 6) == _counts(rows, 125, 12)).all()
    assert "6 = 12 (1,810 of 2,616, equal seed by seed)" in text
    assert "9 and 12 equal seed by seed" in text


def test_float_sums_would_break_a_tie_that_counts_keep(tmp_path):
    # 0.1 + 0.2 > 0.3 + 0.0 in floats; 1 + 2 = 3 + 0 correct of 10
    path = tmp_path / "ladder.csv"
    pd.DataFrame({"train_size": [50] * 4, "central_weight": [1, 1, 3, 3], "seed": [1, 2, 1, 2],
                  "metric": [0.1, 0.2, 0.3, 0.0]}).to_csv(path, index=False)
    assert 0.1 + 0.2 > 0.3 + 0.0
    tables, _, dev = lr.read_ladder(path)
    assert dev == 10
    table = tables[50]
    assert lr.best_weights(table.sum(axis=1).to_numpy(), table.index.to_numpy(float)) == [1, 3]
    sole, tied, _ = lr.bootstrap_best(table, np.random.default_rng(0))
    # the draws (1,1) and (2,2) of seeds: 2 vs 6 and 4 vs 0; (1,2) and (2,1): 3 vs 3
    assert sole.tolist() == [0.25, 0.25] and tied.tolist() == [0.5, 0.5]


def test_the_weights_not_separated_from_the_best(rows, text):
    lines = _section(text, "The best weight and the weights not separated from it")
    for size in (125, 700, 4000):
        weights = sorted(rows["central_weight"].unique())
        sums = {w: _counts(rows, size, w).sum() for w in weights}
        bests = [w for w in weights if sums[w] == max(sums.values())]
        separated = set()
        for b, w in itertools.product(bests, weights):
            if w in bests:
                continue
            ci = stats.ttest_rel(_counts(rows, size, w), _counts(rows, size, b)) \
                .confidence_interval(0.95)
            if not ci.low <= 0 <= ci.high:
                separated.add(w)
        rest = [w for w in weights if w not in bests and w not in separated]
        row = next(line for line in lines if line.startswith(f"| {size:,} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[3] == ", ".join(str(w) for w in rest)
        assert cells[4] == (", ".join(str(w) for w in sorted(separated)) or "none")
    assert "| 125 | 3 | 9 (1,811 of 2,616) | 1, 3, 6, 12, 15 | none |" in text


def test_each_pair_has_its_intervals_and_exact_power(rows, text):
    lines = _section(text, "Each weight against the best, seed by seed")[1:]
    # the factor sd -> detectable for 3 seeds, by simulation of paired t-tests
    factor = lr.detectable(1.0, 3)
    rng = np.random.default_rng(7)
    d = rng.normal(factor, 1.0, size=(400_000, 3))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(3))
    assert abs(np.mean(np.abs(t) > stats.t.ppf(0.975, 2)) - 0.8) < 0.005
    assert factor > (stats.t.ppf(0.975, 2) + stats.t.ppf(0.8, 2)) / math.sqrt(3)  # not the
    # shortcut the old pooled line used
    seen = set()
    for line in lines:
        size, best, weight, per_seed, mean, ci95, ci90, sd, detect = \
            [c.strip() for c in line.strip("|").split("|")]
        size, best, weight = int(size.replace(",", "")), float(best), float(weight)
        diff = _counts(rows, size, weight) - _counts(rows, size, best)
        assert per_seed == ", ".join(f"{int(x):+d}" for x in diff)
        points = diff / DEV * 100
        assert float(mean) == pytest.approx(points.mean(), abs=0.006)
        for level, cell in ((0.95, ci95), (0.90, ci90)):
            ci = stats.ttest_1samp(points, 0).confidence_interval(level)
            low, high = (float(x) for x in cell.strip("[]").split(","))
            assert (low, high) == (pytest.approx(ci.low, abs=0.006),
                                   pytest.approx(ci.high, abs=0.006))
        paired_sd = np.std(points, ddof=1)
        assert float(sd) == pytest.approx(paired_sd, abs=0.006)
        assert float(detect) == pytest.approx(factor * paired_sd, abs=0.006)
        seen.add((size, best, weight))
    # every weight against every tied best; 3 and 15 at 4,000 once
    assert len(seen) == 5 + 5 + 9 and (4000, 3, 15) in seen and (4000, 15, 3) not in seen


def test_the_bootstrap_enumerates_seed_draws_over_integer_counts(rows, ladder):
    tables = ladder[0]
    for size, table in tables.items():
        weights = sorted(rows["central_weight"].unique())
        counts = {w: _counts(rows, size, w) for w in weights}
        sole, tied = dict.fromkeys(weights, 0), dict.fromkeys(weights, 0)
        draws = list(itertools.product(range(3), repeat=3))
        for draw in draws:
            total = {w: sum(int(counts[w][i]) for i in draw) for w in weights}
            top = [w for w in weights if total[w] == max(total.values())]
            for w in top:
                (sole if len(top) == 1 else tied)[w] += 1
        got_sole, got_tied, how = lr.bootstrap_best(table, np.random.default_rng(0))
        assert how.startswith("all 27 ordered draws")
        assert got_sole.tolist() == [sole[w] / 27 for w in weights]
        assert got_tied.tolist() == [tied[w] / 27 for w in weights]
    # at 4,000 rows a third of the draws tie 3 and 15
    _, got_tied, _ = lr.bootstrap_best(tables[4000], np.random.default_rng(0))
    assert got_tied[[1, 5]].tolist() == [9 / 27, 9 / 27]


def test_the_weight_by_size_interaction(rows, ladder, text):
    # balanced two-way layout within each size, by cell means
    y = {(s, w, r): c / DEV * 100 for s, w, r, c in
         rows[["train_size", "central_weight", "seed", "count"]].itertuples(index=False)}
    sizes, weights, seeds = (sorted({k[i] for k in y}) for i in range(3))
    m_sw = {(s, w): np.mean([y[s, w, r] for r in seeds]) for s in sizes for w in weights}
    m_sr = {(s, r): np.mean([y[s, w, r] for w in weights]) for s in sizes for r in seeds}
    m_s = {s: np.mean([m_sw[s, w] for w in weights]) for s in sizes}
    m_w = {w: np.mean([m_sw[s, w] for s in sizes]) for w in weights}
    grand = np.mean(list(y.values()))
    ss_int = len(seeds) * sum((m_sw[s, w] - m_s[s] - m_w[w] + grand) ** 2
                              for s in sizes for w in weights)
    ss_res = sum((y[s, w, r] - m_sw[s, w] - m_sr[s, r] + m_s[s]) ** 2
                 for s in sizes for w in weights for r in seeds)
    df_int, df_res = (len(sizes) - 1) * (len(weights) - 1), \
        len(sizes) * (len(weights) - 1) * (len(seeds) - 1)
    f = (ss_int / df_int) / (ss_res / df_res)
    p = stats.f.sf(f, df_int, df_res)
    assert (df_int, df_res, round(f, 2), round(p, 2)) == (10, 30, 1.12, 0.38)
    got = {name: (df, ss, fv, pv) for name, df, ss, fv, pv in lr.interaction_anova(*ladder[::2])}
    assert got["weight x size"][0] == 10
    assert got["weight x size"][1:] == pytest.approx((ss_int, f, p))
    assert got["residual (weight x seed within size)"][:2] == (30, pytest.approx(ss_res))
    assert "| weight x size | 10 | " in text and "F(10, 30) = 1.12 | 0.38 |" in text


def test_equivalence_bounds_are_the_smallest_tost_accepts(rows, text):
    lines = _section(text, "Equivalence to the best")
    header = lines[0]
    starts = [float(c.split(">=")[1]) for c in header.strip("|").split("|")[1:]]
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        size = int(cells[0].replace(",", ""))
        weights = sorted(rows["central_weight"].unique())
        sums = {w: _counts(rows, size, w).sum() for w in weights}
        bests = [w for w in weights if sums[w] == max(sums.values())]
        for start, cell in zip(starts, cells[1:], strict=True):
            diffs = [(_counts(rows, size, w) - _counts(rows, size, b)) / DEV * 100
                     for b in bests for w in weights if w >= start and w != b]
            bound = float(cell)

            def shown(delta, diffs=diffs):
                return all(stats.ttest_1samp(d, -delta, alternative="greater").pvalue < 0.05
                           and stats.ttest_1samp(d, delta, alternative="less").pvalue < 0.05
                           for d in diffs)

            assert shown(bound + 0.006) and not shown(bound - 0.006)
    # weights 3 to 15 at each size
    assert [line.split("|")[3].strip() for line in lines[1:]] == ["2.97", "1.00", "0.33"]


def test_the_trend_is_descriptive_and_shows_both_ties(text):
    assert "### Trend" not in text
    line = next(x for x in text.splitlines() if x.startswith("Descriptive only, not a test"))
    x = np.log10([125, 700, 4000])
    for best in ([9, 3, 3], [9, 3, 15]):
        rho = stats.spearmanr(x, best)[0]
        slope = np.polyfit(x, best, 1)[0]
        assert (f"best weight {', '.join(map(str, best))}: Spearman's rho {rho:+.2f}, slope "
                f"{slope:+.2f}") in line


def test_the_shipped_tables_and_curves_are_the_scripts(tmp_path, capsys):
    svg = tmp_path / "curves.svg"
    assert lr.main([str(LADDER), "--plot", str(svg), "--majority", "0.5092"]) == 0
    assert capsys.readouterr().out == TABLES.read_text()
    assert svg.read_text().startswith("<?xml") and "<dc:date>" not in svg.read_text()


@pytest.mark.slow
def test_the_interaction_power_matches_a_simulation_of_the_f_test():
    """H6's planned power (noncentral F) against the share of simulated ladders, drawn from
    the slope pattern plus seed blocks and normal noise, in which `interaction_anova` itself
    rejects at 5%."""
    weights, sizes, seeds, sd, delta = [1.0, 2.0, 4.0, 8.0, 15.0], 3, 4, 0.67, 2.0
    planned = lr.interaction_power(sd, delta, weights, sizes, seeds)
    rng = np.random.default_rng(7)
    pattern = lr.slope_pattern(sizes, weights, delta)
    # restated: the smallest size gains delta from the first weight to the last, linear in
    # log2 weight; the largest gains nothing
    x = np.log2(weights) / math.log2(15.0)
    assert np.allclose(pattern[0], delta * x) and np.allclose(pattern[-1], 0.0)
    dev = 100_000  # scores as counts of a large dev set: the analysis reads points
    rejected, runs = 0, 600
    for _ in range(runs):
        ladder = {}
        for s in range(sizes):
            block = rng.normal(0.0, 1.0, seeds)
            scores = 80.0 + pattern[s][:, None] + block[None, :] \
                + rng.normal(0.0, sd, (len(weights), seeds))
            ladder[s] = pd.DataFrame(scores / 100 * dev, index=weights,
                                     columns=range(1, seeds + 1))
        p = lr.interaction_anova(ladder, dev)[3][4]
        rejected += p < 0.05
    share = rejected / runs
    assert abs(share - planned) < 3 * math.sqrt(planned * (1 - planned) / runs) + 0.01, \
        (share, planned)
