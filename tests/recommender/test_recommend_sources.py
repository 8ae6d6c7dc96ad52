"""Where an answer comes from: each regime's share of it and the law's prior's, a size outside
the asked regime's measured sizes, the prior's pull on the slope; and `--evaluate`'s regret in
metric points."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from weightsearch.cli import main
from weightsearch.recommender import hierarchy
from weightsearch.recommender.evaluation import evaluation_summary, leave_one_task_out
from weightsearch.recommender.evidence import builtin_evidence, point_from_scores
from weightsearch.recommender.hierarchy import fit_law
from weightsearch.recommender.recommend import recommend_from
from weightsearch.recommender.report import evaluation_text

GRID = (1.0, 3.0, 6.0, 9.0, 12.0, 15.0)


def study(task: str, size: int, best: float, encoder: str, dataset: str | None = None):
    """Three seeds of a concave curve peaking at `best`, inside the grid (nothing censored)."""
    values = {w: [80 - 4 * ((w - best) / 7) ** 2 + e for e in (-0.3, 0.0, 0.3)] for w in GRID}
    return point_from_scores(task, f"{encoder}/{task}", size, "classification", "studies", values,
                             True, encoder, "multitask", None, dataset=dataset)


def two_regimes():
    """Two task families (too few for the outlier model), measured by two encoders."""
    mine = [study("a", 1000, 11.0, "mine"), study("b", 10_000, 7.0, "mine")]
    theirs = [study("a", 1000, 13.0, "theirs"), study("b", 10_000, 9.0, "theirs"),
              study("b_big", 100_000, 5.0, "theirs", dataset="b")]
    return mine + theirs


def median_at(evidence, asked: str, size: int, shift: dict[str, float],
              clipping: str | None = None) -> float:
    """The law's median at `size`, fitted as the recommender fits it, with each encoder's
    locations (and bounds) moved by `shift[encoder]`. `clipping`: the asked regime's, where
    the asked encoder was measured under several (each other one is its own regime)."""
    moved = [p.location + shift.get(p.encoder, 0.0) for p in evidence]
    bounds = [tuple(None if b is None else b + shift.get(p.encoder, 0.0)
                    for b in (p.at_least, p.at_most)) for p in evidence]
    law = fit_law([math.log10(p.train_size) for p in evidence], moved,
                  [p.variance for p in evidence], tasks=[p.family for p in evidence],
                  groups=[None if p.encoder == asked and clipping in (None, p.clipping)
                          else p.regime.label() for p in evidence],
                  bounds=bounds)
    return law.predict(math.log10(size)).median


@pytest.fixture
def one_line(monkeypatch):
    """One component (a line, one deviation, one scatter): the answer is one Gaussian, exactly
    linear in the points' locations and in the prior's level."""
    monkeypatch.setattr(hierarchy, "DEVIATIONS", ((1.0, 0.5),))
    monkeypatch.setattr(hierarchy, "TAU_GRID", (0.5,))
    monkeypatch.setattr(hierarchy, "_mean_models", lambda x: [(0, math.nan, 0.0)])
    return monkeypatch


def test_each_regimes_share_is_how_far_the_answer_moves_with_its_evidence(one_line):
    evidence = two_regimes()
    assert all(p.at_least is None and p.at_most is None for p in evidence)
    rec = recommend_from(evidence, 50_000, encoder="mine")
    shares = {r["name"]: r for r in rec.evidence_shares}
    assert set(shares) == {"mine/multitask", "theirs/multitask", "the law's prior level"}
    assert sum(r["share"] for r in rec.evidence_shares) == pytest.approx(1.0, abs=1e-3)
    assert shares["mine/multitask"]["points"] == 2 and shares["theirs/multitask"]["points"] == 3
    assert shares["mine/multitask"]["source"] == "asked regime"
    assert shares["theirs/multitask"]["say"] == pytest.approx(
        sum(e["say"] for e in rec.evidence if e["encoder"] == "theirs"), abs=1e-3)
    # Independently: refit with one regime's locations moved by delta.
    base = median_at(evidence, "mine", 50_000, {})
    for encoder in ("mine", "theirs"):
        moved = median_at(evidence, "mine", 50_000, {encoder: 2.0})
        assert (moved - base) / 2.0 == pytest.approx(shares[f"{encoder}/multitask"]["share"],
                                                     abs=1e-3)
    # And the prior's level moved by delta.
    line, *others = hierarchy.PRIORS
    one_line.setattr(hierarchy, "PRIORS", (((line[0][0] + 2.0, line[0][1]), *line[1:]),
                                           *others))
    moved = median_at(evidence, "mine", 50_000, {})
    assert (moved - base) / 2.0 == pytest.approx(shares["the law's prior level"]["share"],
                                                 abs=1e-3)
    order = [r["share"] for r in rec.evidence_shares]
    assert order == sorted(order, reverse=True)
    [note] = [n for n in rec.notes if "of this answer rests on" in n]
    top = rec.evidence_shares[0]
    assert note.startswith(f"{top['share']:.0%} of this answer rests on {top['name']}")


@pytest.mark.parametrize("size", [700, 50_000])
def test_the_shares_move_the_full_models_answer_to_first_order(size):
    """The full mixture (shapes, hyperparameters, outliers, censored grid ends): moving the
    paper's points by +-delta moves the median by about their share times delta."""
    evidence = builtin_evidence()
    rec = recommend_from(evidence, size, encoder="all-MiniLM-L6-v2")
    shares = {r["name"]: r["share"] for r in rec.evidence_shares}
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-3)
    assert all(0 < s < 1 for s in shares.values())
    delta = 0.2
    up, down = (median_at(evidence, "all-minilm-l6-v2", size, {"bert-base-uncased": d},
                          clipping="clip1") for d in (delta, -delta))
    assert (up - down) / (2 * delta) == pytest.approx(shares["bert-base-uncased/finetuned"],
                                                      abs=0.05)


def test_a_size_outside_the_asked_regimes_sizes_is_said():
    mine = [study(f"m{i}", n, 9.0, "mine") for i, n in enumerate((1000, 2000, 4000))]
    theirs = [study(f"t{i}", n, 9.0, "theirs") for i, n in enumerate((100, 30_000, 300_000))]
    evidence = mine + theirs
    above = recommend_from(evidence, 50_000, encoder="mine")
    assert above.asked_regime_sizes == {"smallest": 1000, "largest": 4000, "points": 3,
                                        "position": "above", "sizes": [1000, 2000, 4000]}
    assert any(n.startswith("train size 50,000 lies above the largest size measured in this "
                            "regime (4,000): the answer extrapolates the trend") and
               "other regimes measured sizes to 300,000" in n for n in above.notes)
    below = recommend_from(evidence, 300, encoder="mine")
    assert below.asked_regime_sizes["position"] == "below"
    assert any("train size 300 lies below the smallest size measured in this regime (1,000)"
               in n and "sizes to 100," in n for n in below.notes)
    inside = recommend_from(evidence, 2500, encoder="mine")
    assert inside.asked_regime_sizes["position"] == "inside"
    assert not any("lies above" in n or "lies below" in n for n in inside.notes)
    # No evidence in the asked regime: said as such, beside the unmatched encoder.
    none = recommend_from(evidence, 2500, encoder="roberta-base")
    assert none.unmatched_encoder is not None
    assert none.asked_regime_sizes == {"smallest": None, "largest": None, "points": 0,
                                       "position": "no evidence", "sizes": []}
    assert any("no training size was measured in the asked regime" in n
               and "(sizes 100 to 300,000)" in n for n in none.notes)
    assert [r["source"] for r in none.evidence_shares if r["source"] == "asked regime"] == []


def test_the_slope_the_data_alone_give_is_the_slope_under_a_flat_prior(one_line):
    x = np.array([2.5, 3.0, 3.4, 3.9, 4.5, 5.0, 5.6])
    y = 14.0 - 2.0 * (x - 2.5) + np.array([0.4, -0.3, 0.2, -0.5, 0.1, 0.3, -0.2])
    law = fit_law(x, y, np.full(len(x), 0.8), robust=False)
    trend = law.trend()
    (level, (slope_mean, slope_sd), jump), *others = hierarchy.PRIORS
    one_line.setattr(hierarchy, "PRIORS", ((level, (slope_mean, 300.0), jump), *others))
    flat = fit_law(x, y, np.full(len(x), 0.8), robust=False).trend()
    assert trend["slope_data_alone"] == pytest.approx(flat["slope"], abs=1e-3)
    assert trend["slope_data_alone_sd"] == pytest.approx(flat["slope_sd"], rel=1e-3)
    prior_precision = 1 / slope_sd ** 2
    share = prior_precision / (prior_precision + 1 / flat["slope_sd"] ** 2)
    assert trend["slope_prior_share"] == pytest.approx(share, abs=1e-4)
    # The posterior slope is the precision-weighted mean of the prior's and the data's.
    assert trend["slope"] == pytest.approx(
        share * slope_mean + (1 - share) * flat["slope"], abs=1e-3)


def test_the_law_and_the_notes_carry_the_priors_pull_on_the_slope():
    rec = recommend_from(builtin_evidence(), 700, encoder="all-MiniLM-L6-v2")
    law = rec.law
    assert 0 < law["slope_prior_share"] < 1 and law["slope_data_alone_sd"] > 0
    [note] = [n for n in rec.notes if n.startswith("the prior's pull on the slope")]
    assert f"{law['slope']:+.1f} per decade with the prior" in note
    assert f"{law['slope_data_alone']:+.1f} +- {law['slope_data_alone_sd']:.1f}" in note
    assert f"{law['slope_prior_share']:.0%} of the slope's precision" in note


# Mean scores per grid weight of held-out tasks: accuracies as fractions (x100 in metric
# points), a table in percent, and a loss (lower is better, as measured).
FRACTION = {1.0: 0.700, 3.0: 0.741, 6.0: 0.762, 9.0: 0.755, 12.0: 0.731, 15.0: 0.712}
PERCENT = {1.0: 70.0, 3.0: 71.5, 6.0: 72.25, 9.0: 73.0, 12.0: 74.5, 15.0: 74.0}
LOSS = {1.0: 0.52, 3.0: 0.47, 6.0: 0.45, 9.0: 0.46, 12.0: 0.49, 15.0: 0.55}


def measured(task: str, size: int, means: dict[float, float], maximize: bool = True):
    values = {w: [m - 0.001, m, m + 0.001] for w, m in means.items()}
    return point_from_scores(task, f"mine/{task}", size, "classification", "studies", values,
                             maximize, "mine", "multitask", None)


def test_evaluate_reports_regret_in_metric_points():
    evidence = [measured("frac", 800, FRACTION), measured("pct", 3000, PERCENT),
                measured("loss", 20_000, LOSS, maximize=False),
                measured("frac2", 60_000, FRACTION)]
    rows, _, over = leave_one_task_out(evidence)
    assert over == "studies" and len(rows) == 4
    tables = {"frac": (FRACTION, 100.0, 1), "frac2": (FRACTION, 100.0, 1),
              "pct": (PERCENT, 1.0, 1), "loss": (LOSS, 1.0, -1)}
    hand = {}
    for r in rows:
        means, scale, sign = tables[r["task"]]
        nearest = min(means, key=lambda w: (abs(w - r["recommended"]), w))
        best = max(sign * m for m in means.values())
        hand[r["task"]] = scale * (best - sign * means[nearest])
        assert r["regret"] == pytest.approx(hand[r["task"]], abs=1e-3)
        chance = sum(scale * (best - sign * m) for m in means.values()) / len(means)
        assert r["chance_regret"] == pytest.approx(chance, abs=1e-3)
    summary = evaluation_summary(rows)
    assert summary["mean_regret"] == pytest.approx(sum(hand.values()) / 4, abs=1e-3)
    text = evaluation_text(rows, 0.5, over)
    assert f"mean {summary['mean_regret']:.2f} over 4 tasks" in text
    assert "regret" in text.splitlines()[1]
    assert (f"in words: taking the recommended weight cost these tasks "
            f"{sum(hand.values()) / 4:.2f} points of their metric on average") in text


def test_cli_and_http_carry_the_new_fields(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["recommend", "--train-size", "50000", "--encoder", "all-MiniLM-L6-v2",
                 "--storage", url, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["asked_regime_sizes"]["position"] == "above"
    assert sum(r["share"] for r in out["evidence_shares"]) == pytest.approx(1.0, abs=1e-3)
    assert {"slope_data_alone", "slope_data_alone_sd", "slope_prior_share"} <= set(out["law"])
    assert main(["recommend", "--train-size", "50000", "--encoder", "all-MiniLM-L6-v2",
                 "--storage", url]) == 0
    text = capsys.readouterr().out
    assert "of this answer rests on" in text and "lies above the largest size" in text

    from fastapi.testclient import TestClient

    from weightsearch.service.app import create_app

    client = TestClient(create_app(url))
    body = client.get("/recommend", params={"train_size": 50000}).json()
    assert body["evidence_shares"] == out["evidence_shares"]
    assert body["asked_regime_sizes"] == out["asked_regime_sizes"]
    schema = client.get("/openapi.json").json()["components"]["schemas"]["Recommendation"]
    assert {"evidence_shares", "asked_regime_sizes"} <= set(schema["properties"])
    assert not (tmp_path / "none.db").exists()
    assert main(["recommend", "--evaluate", "--format", "json", "--storage", url]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mean_regret"] is not None and all("regret" in r for r in report["tasks"])


def test_a_point_without_scores_has_no_regret():
    p = dataclasses.replace(measured("frac", 800, FRACTION), means=())
    rows, _, _ = leave_one_task_out([p, measured("pct", 3000, PERCENT)])
    assert {r["task"]: r["regret"] for r in rows}["frac"] is None
    assert evaluation_summary([r for r in rows if r["task"] == "frac"])["mean_regret"] is None
