"""The recommender at the edges: a trend in log size, censored grid ends, robust scatter,
regime offsets, pooled studies, studies that say nothing, and the simple rules beside it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from weightsearch.cli import main
from weightsearch.recommender.baselines import (
    baseline_errors,
    cells,
    nearest_neighbour,
    rule_of_thumb,
)
from weightsearch.recommender.evidence import load_evidence, point_from_scores
from weightsearch.recommender.hierarchy import fit_law, mixture_quantiles
from weightsearch.recommender.recommend import recommend_from
from weightsearch.recommender.task_curve import locate_best
from weightsearch.studies.importer import import_file

GRID = (1.0, 3.0, 6.0, 9.0, 12.0, 15.0)


def curve(best: float, grid=GRID, height: float = 4.0, seeds: int = 3, noise: float = 0.3,
          seed: int = 0) -> dict[float, list[float]]:
    """Scores of a concave curve peaking at `best`, with seed noise."""
    rng = np.random.default_rng(seed)
    return {w: [80 - height * ((w - best) / 7) ** 2 + float(e)
                for e in rng.normal(0, noise, seeds)] for w in grid}


def point(task: str, size: int, values: dict, encoder: str = "mine"):
    return point_from_scores(task, f"{encoder}/{task}", size, "classification", "studies", values,
                             True, encoder, "multitask", None)


def line(x: float) -> float:
    """The law the hand-made studies follow: 15 at 10^2.5, 4 weight units less per decade."""
    return min(15.0, max(1.0, 15.0 - 4.0 * (x - 2.5)))


def studies_on_the_line(sizes, encoder: str = "mine", shift: float = 0.0, prefix: str = "t"):
    return [point(f"{prefix}{i}", round(10 ** x), curve(line(x) + shift, seed=i), encoder)
            for i, x in enumerate(sizes)]


def test_far_below_the_studied_sizes_the_answer_follows_the_trend():
    """A task at 10^2.55 whose nearest study is at 10^3.93: the constant-mean law answered 4.6
    [1.0, 10.0] for a true best of 15; the trend carries the studies' slope down there."""
    evidence = studies_on_the_line([3.93, 4.2, 4.5, 4.8, 5.1, 5.4])
    rec = recommend_from(evidence, round(10 ** 2.55), encoder="mine")
    assert rec.central_weight >= 12.5
    assert rec.interval[0] <= line(2.55) <= rec.interval[1]
    assert any("trend: -" in n for n in rec.notes)


def test_a_best_weight_at_the_end_of_a_grid_is_censored_not_a_point():
    rising = {1.0: [70.0, 70.4, 69.6], 9.0: [75.0, 75.4, 74.6]}  # {1, 9}: still rising at 9
    located = locate_best(rising)
    assert located.location > 9.5  # "5 or more", not "9"
    assert math.sqrt(located.variance) > 2.0
    at_top = locate_best(curve(15.0, height=5.0, noise=0.1))
    assert at_top.location >= 14.5  # the old argmax mean stopped short of the grid's end


def test_the_peak_between_grid_weights_is_located_between_them():
    located = locate_best(curve(7.5, noise=0.05))
    assert 6.5 < located.location < 8.5


def test_tasks_that_ignore_the_law_do_not_bend_it():
    """Two precise studies far off the law (1 where it says 11, 15 where it says 6) barely
    move the answer at their sizes, and the fit says they are likely outliers."""
    evidence = studies_on_the_line([2.8, 3.0, 3.2, 3.6, 4.0, 4.4, 4.8, 5.2])
    odd = [point("odd0", round(10 ** 3.4), curve(1.0, seed=10)),
           point("odd1", round(10 ** 4.6), curve(15.0, seed=11))]
    both = evidence + odd

    def fit(robust: bool):
        return fit_law([math.log10(p.train_size) for p in both], [p.location for p in both],
                       [p.variance for p in both], [p.task for p in both], robust=robust)

    robust, plain = fit(True), fit(False)
    for x in (3.4, 4.6):
        clean = recommend_from(evidence, round(10 ** x), encoder="mine").central_weight
        assert abs(robust.predict(x).median - clean) < abs(plain.predict(x).median - clean)
        assert abs(robust.predict(x).median - clean) < 1.5
    # The two are singled out: each far more likely not to follow the law than any other.
    assert min(robust.outliers[-2:]) > 4 * max(robust.outliers[:-2])


def test_another_regime_gets_a_shared_offset_estimated_where_the_regimes_overlap():
    """The other encoder's best weights lie 4 higher on the tasks both measured: the offset is
    estimated and reported, and its studies at sizes the asked encoder never ran inform the
    answer there after taking the offset off."""
    mine = studies_on_the_line([3.0, 3.4, 3.8, 4.2], encoder="mine")
    theirs = studies_on_the_line([3.0, 3.4, 3.8, 4.2, 4.8, 5.2, 5.6], encoder="theirs",
                                 shift=4.0, prefix="t")  # t0-t3: the same tasks as mine
    rec = recommend_from(mine + theirs, round(10 ** 5.2), encoder="mine")
    [note] = [n for n in rec.notes if n.startswith("discounted: theirs")]
    offset = float(note.split("estimated ")[1].split()[0])
    assert 2.5 <= offset <= 5.5
    [field] = rec.regime_offsets
    assert field["offset"] == pytest.approx(offset, abs=0.05) and field["sd"] < 2.0
    assert field["differs_in"] == ["encoder"]
    assert abs(rec.central_weight - line(5.2)) <= 1.5  # not their 4-higher weight


def test_several_studies_of_one_task_pool():
    a = point("rte", 2490, curve(12.0, seed=1))
    b = point_from_scores("rte", "again/rte", 2490, "classification", "studies",
                          curve(12.0, seed=2), True, "mine", "multitask", None)
    rec = recommend_from([a, b, *studies_on_the_line([3.0, 4.0, 5.0])], 2490, encoder="mine")
    says = [e["say"] for e in rec.evidence if e["task"] == "rte"]
    assert len(says) == 2 and min(says) > 0.05


def test_a_study_that_says_nothing_is_named_in_the_notes(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    one = tmp_path / "one.csv"
    one.write_text("central_task,task_type,train_size,central_weight,seed,metric\n"
                   "tiny,classification,500,9,1,71.0\ntiny,classification,500,9,2,71.5\n")
    import_file(one, "single", url)
    evidence = load_evidence(url)
    rec = recommend_from(evidence, 500)
    assert any("single/tiny contributes nothing" in n and "one central weight only (9)" in n
               for n in rec.notes)
    assert all(e["study"] != "single/tiny" for e in rec.evidence)


def test_a_study_whose_every_trial_failed_is_named_in_the_notes(tmp_path):
    import optuna

    from weightsearch.studies import schema
    from weightsearch.studies.storage import open_storage

    url = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="broken/rte", storage=open_storage(url),
                                direction="maximize")
    for key, value in {schema.A_STUDY: "broken", schema.A_CENTRAL: "rte",
                       schema.A_TASK_TYPE: "classification", schema.A_TRAIN_SIZE: 2490,
                       schema.A_SOURCE: schema.SOURCE_SWEEP}.items():
        study.set_user_attr(key, value)
    weight = optuna.distributions.FloatDistribution(schema.WEIGHT_LOW, schema.WEIGHT_HIGH)
    for _ in range(2):
        trial = study.ask({schema.PARAM: weight})
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    rec = recommend_from(load_evidence(url), 2490)
    assert any("broken/rte contributes nothing: it has no finished trial: every trial failed"
               in n for n in rec.notes)


def test_the_predictive_quantiles_are_those_of_the_mixture():
    """Independent restatement: a 50/50 mixture of N(0,1) and N(10,1) has its median at 5
    and its 10% quantile where 0.5 * Phi(q) + 0.5 * Phi(q - 10) = 0.1."""
    from scipy.stats import norm

    low, median, high = mixture_quantiles(np.array([0.5, 0.5]), np.array([0.0, 10.0]),
                                          np.array([1.0, 1.0]), (0.1, 0.5, 0.9))
    assert median == pytest.approx(5.0, abs=1e-6)
    assert low == pytest.approx(norm.ppf(0.2), abs=1e-6)
    assert high == pytest.approx(10 + norm.ppf(0.8), abs=1e-6)
    uniform_only = mixture_quantiles(np.array([1.0]), np.array([8.0]), np.array([1.0]),
                                     (0.1, 0.9), uniform=1.0)
    assert uniform_only == pytest.approx([2.4, 13.6], abs=1e-6)  # 1 + 0.1 * 14, 1 + 0.9 * 14


def test_the_simple_rules_follow_their_definitions():
    assert rule_of_thumb(9_999) == 12.0 and rule_of_thumb(10_000) == 3.5
    assert nearest_neighbour(3000, [(2490, 15.0), (5749, 9.0), (100_000, 3.0)]) == 15.0
    errors = baseline_errors(3000, 12.0, [(2490, 15.0)], GRID)
    assert errors == {"constant": 4.0, "rule_of_thumb": 0.0, "nearest_neighbour": 3.0,
                      "random_grid": pytest.approx((11 + 9 + 6 + 3 + 0 + 3) / 6)}
    assert cells(3000, 14.0, [2000, 4000]) == {"size": "inside", "best": "end"}
    assert cells(50_000, 8.0, [2000, 4000]) == {"size": "outside", "best": "middle"}


def test_evaluate_prints_the_simple_rules_beside_the_recommender(tmp_path, capsys):
    assert main(["recommend", "--evaluate"]) == 0
    text = capsys.readouterr().out
    assert "the paper's rule of thumb" in text and "nearest task in log size" in text
    assert "constant 8" in text and "by cell" in text
    url = f"sqlite:///{tmp_path / 's.db'}"
    rows = ["central_task,task_type,train_size,central_weight,seed,metric"]
    # The smallest lies below every other task's size (the shipped ladder starts at 125).
    for i, x in enumerate((1.9, 3.3, 3.8, 4.3, 4.8)):
        for w, vs in curve(line(x), seed=i).items():
            rows += [f"t{i},classification,{round(10 ** x)},{w:g},{s},{v:.3f}"
                     for s, v in enumerate(vs)]
    (tmp_path / "mine.csv").write_text("\n".join(rows) + "\n")
    import_file(tmp_path / "mine.csv", "mine", url)
    assert main(["recommend", "--evaluate", "--format", "json", "--storage", url]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["evaluated"] == "studies" and len(report["tasks"]) == 5
    assert set(report["baselines"]) == {"constant", "rule_of_thumb", "nearest_neighbour",
                                        "random_grid"}
    assert report["mean_abs_error"] < report["baselines"]["constant"]
    assert {"size:inside", "size:outside"} <= set(report["coverage_by_cell"])


def test_a_censored_task_pulls_the_law_past_its_grid_end():
    """Tasks whose curves still rise at 15 say "at least 13.5"; fitted as censored sites they
    move the law at their size outwards, where their point locations would hold it inside."""
    rising = locate_best({w: [60 + w + e for e in (-0.2, 0.0, 0.2)] for w in GRID})
    assert rising.at_least == 13.5 and rising.at_most is None
    assert locate_best(curve(7.0)).at_least is None
    evidence = studies_on_the_line([3.6, 4.0, 4.4, 4.8, 5.2])
    steep = [point(f"small{i}", round(10 ** x), {w: [60 + w + e for e in (-0.2, 0.0, 0.2)]
                                                  for w in GRID})
             for i, x in enumerate((2.6, 2.8))]
    both = evidence + steep
    args = ([math.log10(p.train_size) for p in both], [p.location for p in both],
            [p.variance for p in both], [p.task for p in both])
    bounds = [(p.at_least, p.at_most) for p in both]
    assert all(b[0] == 13.5 for b in bounds[-2:])
    censored = fit_law(*args, bounds=bounds).predict(2.7)
    as_points = fit_law(*args).predict(2.7)
    assert censored.median > as_points.median
    assert censored.high >= 15.0


SEED_LEVELS = (3.0, -3.0, 0.5)  # each seed's own level, shared by every weight
PEAK_AT_6 = {1.0: 70.0, 3.0: 71.0, 6.0: 72.0, 9.0: 71.0, 12.0: 70.0, 15.0: 69.5}


def test_the_same_seeds_at_every_weight_are_compared_paired():
    """Seed levels of +-3 points dwarf a 1-point peak: unpaired, the trials barely locate it;
    paired (each seed's level taken out), they do."""
    from weightsearch.recommender.task_curve import paired_noise

    values = {w: [m + lvl + 0.1 * ((i * 7 + int(w)) % 3 - 1) for i, lvl in
                  enumerate(SEED_LEVELS)] for w, m in PEAK_AT_6.items()}
    # Independent restatement: the residual of a two-way table, by loops.
    weights, seeds = sorted(values), range(len(SEED_LEVELS))
    grand = sum(v for w in weights for v in values[w]) / (len(weights) * len(SEED_LEVELS))
    row = {w: sum(values[w]) / len(SEED_LEVELS) for w in weights}
    col = {s: sum(values[w][s] for w in weights) / len(weights) for s in seeds}
    ss = sum((values[w][s] - row[w] - col[s] + grand) ** 2 for w in weights for s in seeds)
    sigma, df = paired_noise(values)
    assert df == (len(weights) - 1) * (len(SEED_LEVELS) - 1)
    assert sigma == pytest.approx(math.sqrt(ss / df))
    unpaired, paired = locate_best(values), locate_best(values, paired=True)
    assert abs(paired.location - 6.0) < 1.0
    assert paired.variance < unpaired.variance / 4
    assert paired.informativeness > unpaired.informativeness


def test_a_study_with_the_same_seeds_everywhere_is_read_paired(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    rows = ["central_task,task_type,train_size,central_weight,seed,metric"]
    for w, m in PEAK_AT_6.items():
        rows += [f"mine,classification,3000,{w:g},{s},{m + lvl:.3f}"
                 for s, lvl in enumerate(SEED_LEVELS)]
    (tmp_path / "paired.csv").write_text("\n".join(rows) + "\n")
    import_file(tmp_path / "paired.csv", "p", url)
    [mine] = [p for p in load_evidence(url) if p.task == "mine"]
    assert abs(mine.location - 6.0) < 1.0 and math.sqrt(mine.variance) < 1.5


def test_the_law_keeps_a_bounded_number_of_components_with_many_tasks():
    from weightsearch.recommender.hierarchy import MAX_COMPONENTS

    rng = np.random.default_rng(3)
    x = rng.uniform(2.5, 5.7, 120)
    y = np.array([line(v) for v in x]) + rng.normal(0, 1.5, 120)
    law = fit_law(x, y, np.full(120, 1.0), [f"t{i}" for i in range(120)])
    assert law.cinv.shape[0] <= MAX_COMPONENTS and law.cinv.shape[1:] == (120, 120)
    assert abs(law.weights.sum() - 1) < 1e-9
    assert abs(law.predict(3.0).median - line(3.0)) < 1.0


def test_an_outlier_task_studied_twice_is_still_singled_out():
    """Its two studies share the task's scatter: left out one at a time, each would be
    predicted by the other; the task is left out as a whole."""
    evidence = studies_on_the_line([2.8, 3.0, 3.2, 3.6, 4.0, 4.4, 4.8, 5.2])
    twice = [point_from_scores("odd", f"s{i}/odd", 1000, "classification", "studies",
                               curve(1.0, seed=20 + i), True, "mine", "multitask", None)
             for i in range(2)]
    both = evidence + twice
    robust = fit_law([math.log10(p.train_size) for p in both], [p.location for p in both],
                     [p.variance for p in both], [p.task for p in both])
    assert robust.outliers[-1] == robust.outliers[-2] > 4 * max(robust.outliers[:-2])
    clean = recommend_from(evidence, 1000, encoder="mine").central_weight
    assert abs(robust.predict(3.0).median - clean) < 2.0


def test_a_flat_or_tied_two_weight_study_is_not_censored_and_changes_nothing():
    tied = locate_best({1.0: [80.0], 15.0: [80.00005]})
    flat = locate_best({1.0: [70.0, 70.1], 9.0: [70.0, 70.1]})
    assert (tied.at_least, tied.at_most, flat.at_least, flat.at_most) == (None,) * 4
    # One regime asked for both, so that the flat study does not become "your own studies".
    base = recommend_from(load_evidence(None), 3000, encoder="bert-base-uncased")
    with_flat = recommend_from([*load_evidence(None), point("flat", 3000, {
        1.0: [70.0, 70.1], 9.0: [70.0, 70.1]})], 3000, encoder="bert-base-uncased")
    assert abs(with_flat.central_weight - base.central_weight) <= 0.2
    assert math.isfinite(with_flat.interval[0]) and with_flat.interval[1] > with_flat.interval[0]


def test_the_level_reported_at_ten_thousand_examples_is_the_law_there():
    x = np.linspace(2.6, 5.5, 12)
    law = fit_law(x, np.where(x < 3.5, 12.0, 4.0), np.full(12, 0.3))
    assert law.trend()["level"] == pytest.approx(law.predict(4.0).median, abs=0.3)


def test_the_papers_rule_in_the_law_switches_where_the_baseline_does():
    from weightsearch.recommender.hierarchy import _basis, _mean_models

    [rule] = [m for m in _mean_models(np.array([3.0, 5.0])) if m[0] == 2]
    at = _basis(np.array([math.log10(9_999), 4.0]), np.array([rule[1]]))[0]
    assert list(at[:, 2]) == [0.0, 1.0]  # 12 below 10,000 examples, 3.5 from 10,000 on
    assert rule_of_thumb(10_000) == 3.5
