"""A best weight is named only where the trials separate it (studies.verdict), checked against
the t-intervals restated here with scipy's own tests."""

from __future__ import annotations

import pytest
from scipy import stats

from weightsearch.studies.verdict import judge


def _paired_interval(a, b):
    return stats.ttest_rel(a, b).confidence_interval(0.95)


def _welch_interval(a, b):
    return stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)


def test_paired_seeds_separate_a_steady_lead():
    values = {1.0: [0.50, 0.60, 0.70], 9.0: [0.520, 0.621, 0.719], 15.0: [0.40, 0.45, 0.5]}
    v = judge(values, paired=True)
    low, high = _paired_interval(values[9.0], values[1.0])
    assert v.best == 9 and v.rival == 1 and v.clear
    assert v.interval == pytest.approx((low, high)) and low > 0
    assert v.text("accuracy").startswith("best central weight 9 (9 leads 1 by 0.0200 accuracy")
    # The same scores unpaired: the seed-to-seed spread swamps the lead.
    u = judge(values, paired=False)
    assert not u.clear and u.reason == "within seed noise"
    assert u.interval == pytest.approx(tuple(_welch_interval(values[9.0], values[1.0])))


def test_a_lead_within_noise_is_not_a_finding():
    values = {1.0: [0.50, 0.60, 0.70], 9.0: [0.52, 0.63, 0.71]}
    v = judge(values, paired=True)
    low, high = _paired_interval(values[9.0], values[1.0])
    assert v.best == 9 and not v.clear and low < 0 < high
    assert v.text("accuracy").startswith("no weight is clearly better (within seed noise: 9 "
                                         "leads 1 by 0.0200 accuracy, 95% interval")


@pytest.mark.parametrize(("values", "best", "reason"), [
    ({1.0: [0.49], 9.0: [0.52]}, 9, "one seed per weight, so seed noise is unknown"),
    ({1.0: [0.48], 9.0: [0.48]}, 1, "a tie"),
    ({1.0: [0.48, 0.5], 9.0: [0.48, 0.5]}, 1, "a tie"),
])
def test_single_runs_and_ties_name_no_best(values, best, reason):
    v = judge(values)
    assert v.best == best and not v.clear and v.reason == reason
    assert v.text().startswith(f"no weight is clearly better ({reason}")


def test_lower_is_better_and_edge_cases():
    v = judge({1.0: [2.0, 2.1, 2.05], 9.0: [1.0, 1.1, 1.05]}, paired=True, maximize=False)
    assert v.best == 9 and v.clear and v.lead == pytest.approx(1.0)
    assert judge({}).text() == "no finished trial yet"
    assert "nothing to compare" in judge({3.0: [0.5, 0.6]}).text()


def test_seeds_in_lockstep_and_non_numbers_separate_nothing():
    # Two seeds whose difference is the same: a zero-width interval is no evidence.
    v = judge({1.0: [0.70, 0.72], 9.0: [0.71, 0.73]}, paired=True)
    assert not v.clear and v.reason == "no spread between seeds, so seed noise is unknown"
    assert not judge({1.0: [0.5, 0.6], 9.0: [float("nan"), 0.5]}).clear
    mixed = judge({1.0: [0.5, 0.6, 0.55], 9.0: [0.9]})
    assert mixed.reason == "a weight with a single seed, so seed noise is unknown"


def test_scores_pair_only_when_every_weight_has_the_same_seeds_once():
    from weightsearch.studies.verdict import by_seed

    assert by_seed([(1, 1, 0.5), (1, 2, 0.6), (9, 2, 0.8), (9, 1, 0.7)]) == (
        {1: [0.5, 0.6], 9: [0.7, 0.8]}, True)
    assert by_seed([(1, 1, 0.5), (1, 1, 0.6), (9, 1, 0.7), (9, 2, 0.8)])[1] is False
    assert by_seed([(1, None, 0.5), (1, None, 0.6), (9, None, 0.7)])[1] is False
    assert by_seed([(1, 1, float("nan")), (1, 2, 0.6), (9, 1, 0.7), (9, 2, 0.8)]) == (
        {1: [0.6], 9: [0.7, 0.8]}, False)


def _two_way_interval(values: dict, best, other) -> tuple[float, float]:
    """The pooled interval restated: least squares of the additive weight x seed model."""
    import numpy as np
    from scipy import stats

    keys = list(values)
    k, n = len(keys), len(values[keys[0]])
    y = np.array([values[w][j] for w in keys for j in range(n)])
    design = np.column_stack([np.ones(k * n)]
                             + [[float(i == a) for i in range(k) for _ in range(n)]
                                for a in range(1, k)]
                             + [[float(j == b) for _ in range(k) for j in range(n)]
                                for b in range(1, n)])
    beta, *_ = np.linalg.lstsq(design, y, rcond=None)
    df = (k - 1) * (n - 1)
    mse = float(np.sum((y - design @ beta) ** 2)) / df
    diff = np.mean(values[best]) - np.mean(values[other])
    half = stats.t.ppf(0.975, df) * np.sqrt(2 * mse / n)
    return diff - half, diff + half


def test_pooled_residual_variance_with_enough_seeds_and_alike_noise():
    import numpy as np

    rng = np.random.default_rng(11)
    seeds = rng.normal(0.7, 0.03, 8)
    values = {w: list(seeds + shift + rng.normal(0, 0.004, 8))
              for w, shift in ((1.0, 0.0), (3.0, 0.004), (9.0, 0.012))}
    v = judge(values, paired=True)
    assert v.noise == "pooled" and v.best == 9.0
    low, high = _two_way_interval(values, 9.0, v.rival)
    assert v.interval == pytest.approx((low, high))
    assert "pooled weight x seed residual variance" in v.text("accuracy")


def test_no_pooling_when_one_weight_is_noisier_or_seeds_are_few():
    import numpy as np

    rng = np.random.default_rng(12)
    seeds = rng.normal(0.7, 0.03, 8)
    values = {1.0: list(seeds + rng.normal(0, 0.002, 8)),
              6.0: list(seeds + 0.01 + rng.normal(0, 0.002, 8)),
              15.0: list(seeds + 0.01 + rng.normal(0, 0.05, 8))}  # 25 times the others' sd
    assert judge(values, paired=True).noise == "paired"
    calm = {w: v for w, v in values.items()}
    calm[15.0] = list(seeds + 0.01 + rng.normal(0, 0.002, 8))
    assert judge(calm, paired=True).noise == "pooled"
    assert judge({w: v[:3] for w, v in calm.items()}, paired=True).noise == "paired"


def test_equal_sums_over_unequal_seeds_are_no_tie():
    v = judge({1.0: [0.8, 0.8], 3.0: [0.8, 0.4, 0.4]})
    assert v.ties == ()
