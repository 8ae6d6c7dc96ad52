"""scripts/clip_report.py: the clipping study's tests, each checked against a computation of
its own here, on a synthetic study file with the export's columns."""

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
spec = importlib.util.spec_from_file_location("clip_report", ROOT / "scripts" / "clip_report.py")
cr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cr)

DEV = 872
SEEDS = range(1, 9)


def _counts() -> dict[tuple[str, int], list[int]]:
    rng = np.random.default_rng(7)
    base = rng.integers(690, 710, size=len(SEEDS))
    return {("clip1", 1): list(base + rng.integers(-3, 3, 8)),
            ("clip1", 3): list(base + 2 + rng.integers(-2, 2, 8)),
            ("clip1", 15): list(base + 2 + rng.integers(-2, 2, 8)),
            ("noclip", 1): list(base - 4 + rng.integers(-3, 3, 8)),
            ("noclip", 3): list(base + rng.integers(-3, 3, 8)),
            ("noclip", 15): list(base + 9 + rng.integers(-3, 3, 8))}


@pytest.fixture
def evidence(tmp_path) -> tuple[Path, dict]:
    counts = _counts()
    rows = [{"central_task": f"sst2_700-{regime}", "central_weight": w, "seed": s,
             "metric": c / DEV, "clip_share": 1.0 if regime == "clip1" else 0.0,
             "central_norm": 3.0}
            for (regime, w), cs in counts.items() for s, c in zip(SEEDS, cs, strict=True)]
    path = tmp_path / "clip.csv"
    pd.DataFrame(rows).to_csv(path, index=False, float_format="%.17g")
    return path, counts


def _points(counts, regime, a, b):
    return (np.array(counts[(regime, a)]) - np.array(counts[(regime, b)])) * 100 / DEV


def test_h1_is_two_one_sided_tests(evidence):
    path, counts = evidence
    frame, dev, left_out = cr.read_cells(path)
    assert dev == DEV and left_out == []
    diff = _points(counts, "clip1", 15, 3)
    got = cr.tost(cr.paired(frame, dev, "clip1", 15, 3), 0.5)
    # each one-sided test as a shifted one-sample t-test
    lower = stats.ttest_1samp(diff, -0.5, alternative="greater").pvalue
    upper = stats.ttest_1samp(diff, 0.5, alternative="less").pvalue
    assert got["p"] == pytest.approx(max(lower, upper))
    assert got["mean"] == pytest.approx(diff.mean())


def test_h2_is_a_paired_t_test(evidence):
    path, counts = evidence
    frame, dev, _ = cr.read_cells(path)
    got = cr.paired_t(cr.paired(frame, dev, "noclip", 15, 1))
    expected = stats.ttest_rel(np.array(counts[("noclip", 15)]) * 100 / DEV,
                               np.array(counts[("noclip", 1)]) * 100 / DEV)
    assert got["p"] == pytest.approx(expected.pvalue) and got["t"] == pytest.approx(
        expected.statistic)


def test_h3_is_the_interaction_of_a_balanced_two_way_table_with_seed_blocks(evidence):
    path, counts = evidence
    frame, dev, _ = cr.read_cells(path)
    got = cr.interaction(frame, dev, ["clip1", "noclip"])
    y = {(r, w, s): c * 100 / DEV for (r, w), cs in counts.items()
         for s, c in zip(SEEDS, cs, strict=True)}
    regimes, weights, seeds = ["clip1", "noclip"], [1, 3, 15], list(SEEDS)
    grand = np.mean(list(y.values()))

    def mean(r=None, w=None, s=None):
        return np.mean([v for (a, b, c), v in y.items()
                        if r in (None, a) and w in (None, b) and s in (None, c)])

    ss_inter = len(seeds) * sum((mean(r, w) - mean(r=r) - mean(w=w) + grand) ** 2
                                for r, w in itertools.product(regimes, weights))
    ss_total = sum((v - grand) ** 2 for v in y.values())
    ss_seed = 6 * sum((mean(s=s) - grand) ** 2 for s in seeds)
    ss_regime = 24 * sum((mean(r=r) - grand) ** 2 for r in regimes)
    ss_weight = 16 * sum((mean(w=w) - grand) ** 2 for w in weights)
    resid = ss_total - ss_seed - ss_regime - ss_weight - ss_inter
    resid_df = 47 - 7 - 1 - 2 - 2
    f = (ss_inter / 2) / (resid / resid_df)
    assert (got["df"], got["resid_df"]) == (2, resid_df)
    assert got["F"] == pytest.approx(f) and got["p"] == pytest.approx(stats.f.sf(f, 2, 35))


def test_unfinished_seeds_are_left_out_and_named(evidence, tmp_path):
    path, _ = evidence
    frame = pd.read_csv(path)
    frame = frame[~((frame["seed"] == 8) & (frame["central_task"] == "sst2_700-noclip")
                    & (frame["central_weight"] == 15))]
    partial = tmp_path / "partial.csv"
    frame.to_csv(partial, index=False, float_format="%.17g")
    cells, _, left_out = cr.read_cells(partial)
    assert left_out == [8] and sorted(cells["seed"].unique()) == list(range(1, 8))
    assert "left out, unfinished in some cell: 8" in cr.report(cells, DEV, left_out)


def test_planned_power_matches_a_simulation():
    """TOST power by integration against a Monte-Carlo of the same test."""
    rng = np.random.default_rng(3)
    sd, n, bound = 0.43, 8, 0.5
    diffs = rng.normal(0, sd, size=(40_000, n))
    mean, s = diffs.mean(axis=1), diffs.std(axis=1, ddof=1)
    half = stats.t.ppf(0.95, n - 1) * s / math.sqrt(n)
    simulated = np.mean((mean - half > -bound) & (mean + half < bound))
    assert cr.tost_power(bound, sd, n) == pytest.approx(simulated, abs=0.01)


@pytest.fixture
def three_arms(tmp_path) -> tuple[Path, dict]:
    counts = _counts()
    rng = np.random.default_rng(11)
    base = np.array(counts[("clip1", 1)])
    counts.update({("uclip1", 1): list(base - 2 + rng.integers(-3, 3, 8)),
                   ("uclip1", 3): list(base + 1 + rng.integers(-3, 3, 8)),
                   ("uclip1", 15): list(base + 6 + rng.integers(-3, 3, 8))})
    rows = [{"central_task": f"sst2_700-{regime}", "central_weight": w, "seed": s,
             "metric": c / DEV, "clip_share": 1.0, "central_norm": 3.0}
            for (regime, w), cs in counts.items() for s, c in zip(SEEDS, cs, strict=True)]
    path = tmp_path / "three.csv"
    pd.DataFrame(rows).to_csv(path, index=False, float_format="%.17g")
    return path, counts


def test_h4_and_h5_are_the_third_arms_paired_t_and_the_three_way_interaction(three_arms):
    """H4 restated as scipy's paired t-test; H5 as the balanced two-way sums of squares with
    seed blocks, 3 regimes x 3 weights x 8 seeds: F(4, 56)."""
    path, counts = three_arms
    frame, dev, _ = cr.read_cells(path)
    expected = stats.ttest_rel(np.array(counts[("uclip1", 15)]) * 100 / DEV,
                               np.array(counts[("uclip1", 1)]) * 100 / DEV)
    text = cr.report(frame, dev, [])
    assert f"t(7) = {expected.statistic:.2f}" in text.split("H4:")[1].splitlines()[0]
    got = cr.interaction(frame, dev, ["clip1", "noclip", "uclip1"])
    y = {(r, w, s): c * 100 / DEV for (r, w), cs in counts.items()
         for s, c in zip(SEEDS, cs, strict=True)}
    grand = np.mean(list(y.values()))

    def mean(r=None, w=None):
        return np.mean([v for (a, b, _), v in y.items() if r in (None, a) and w in (None, b)])

    cells = list(itertools.product(["clip1", "noclip", "uclip1"], [1, 3, 15]))
    ss_inter = 8 * sum((mean(r, w) - mean(r=r) - mean(w=w) + grand) ** 2 for r, w in cells)
    seed_mean = {s: np.mean([y[(r, w, s)] for r, w in cells]) for s in SEEDS}
    resid = sum((y[(r, w, s)] - mean(r, w) - seed_mean[s] + grand) ** 2
                for r, w in cells for s in SEEDS)
    f = (ss_inter / 4) / (resid / 56)
    assert (got["df"], got["resid_df"]) == (4, 56)
    assert got["F"] == pytest.approx(f) and got["p"] == pytest.approx(stats.f.sf(f, 4, 56))
    assert "| H5: three regimes x weight |" in text


def test_h5_planned_power_matches_a_simulation():
    """The noncentral F power of H5 against a Monte-Carlo of the same F test."""
    rng = np.random.default_rng(5)
    sd, delta, reps = 0.48, 1.0, 1500
    cells = list(itertools.product(range(3), range(3)))
    hits = 0
    for _ in range(reps):
        seeds = rng.normal(0, 1.0, 8)
        y = {(r, w, s): seeds[s] + (delta if (r, w) == (2, 2) else 0.0) + rng.normal(0, sd)
             for r, w in cells for s in range(8)}
        grand = np.mean(list(y.values()))
        cell = {c: np.mean([y[(*c, s)] for s in range(8)]) for c in cells}
        row = {r: np.mean([cell[(r, w)] for w in range(3)]) for r in range(3)}
        col = {w: np.mean([cell[(r, w)] for r in range(3)]) for w in range(3)}
        seed = {s: np.mean([y[(*c, s)] for c in cells]) for s in range(8)}
        ss_inter = 8 * sum((cell[(r, w)] - row[r] - col[w] + grand) ** 2 for r, w in cells)
        resid = sum((y[(*c, s)] - cell[c] - seed[s] + grand) ** 2 for c in cells
                    for s in range(8))
        hits += stats.f.sf((ss_inter / 4) / (resid / 56), 4, 56) < 0.05
    assert cr.interaction_power(sd, delta) == pytest.approx(hits / reps, abs=0.04)
