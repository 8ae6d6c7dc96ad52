"""The dataset bootstrap of `--evaluate` against a restatement written here: the same draws,
each resampled sample built row by row, its means with numpy and its Spearman's rho with
scipy's spearmanr (ties, repeated datasets and degenerate draws included)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from weightsearch.recommender.baselines import POINT_RULES
from weightsearch.recommender.evaluation import BOOTSTRAP, regret_comparison


def _rows(seed: int, families: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for f in range(families):
        for _ in range(int(rng.integers(1, 4))):  # 1-3 sizes of a dataset: correlated cells
            rows.append({
                "family": f"data{f}", "regret": float(rng.uniform(0, 2)),
                # few levels: ties within and across datasets
                "recommended": float(rng.choice([1, 3, 6, 9])),
                "best_weight": float(rng.choice([1, 3, 9, 15])),
                "rule_regrets": {m: float(rng.uniform(0, 2)) for m in POINT_RULES},
            })
    return rows


def _restated(rows: list[dict]) -> dict:
    families = sorted({r["family"] for r in rows})
    rng = np.random.default_rng(0)
    draws = [[r for f in rng.choice(families, len(families)) for r in rows
              if r["family"] == f] for _ in range(BOOTSTRAP)]

    def spearman(sample):
        got = [r["recommended"] for r in sample]
        best = [r["best_weight"] for r in sample]
        if len(sample) < 3 or len(set(got)) < 2 or len(set(best)) < 2:
            return None
        return float(stats.spearmanr(got, best).statistic)

    def summary(stat):
        boot = [v for v in (stat(d) for d in draws) if v is not None]
        low, high = np.percentile(boot, [5, 95])
        return stat(rows), float(low), float(high)

    return {"recommender": summary(lambda s: float(np.mean([r["regret"] for r in s]))),
            "weight_1": summary(lambda s: float(np.mean([r["rule_regrets"]["weight_1"]
                                                         for r in s]))),
            "spearman": summary(spearman)}


@pytest.mark.parametrize(("seed", "families"), [(1, 4), (2, 7), (3, 2)])
def test_the_bootstrap_matches_a_draw_by_draw_restatement(seed, families):
    rows = _rows(seed, families)
    out = regret_comparison(rows)
    expected = _restated(rows)
    for name, (point, low, high) in expected.items():
        got = out["spearman"] if name == "spearman" else out["methods"][name]
        assert got["mean"] == pytest.approx(point, abs=5e-4), name
        assert got["low90"] == pytest.approx(low, abs=5e-4), name
        assert got["high90"] == pytest.approx(high, abs=5e-4), name
