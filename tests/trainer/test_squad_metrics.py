"""The official SQuAD 2.0 exact match and F1, on hand-checked cases."""

from __future__ import annotations

import numpy as np
import pytest

from weightsearch.trainer.heads.span_qa import (
    best_threshold,
    exact_match,
    normalize_answer,
    squad_metrics,
    token_f1,
)


@pytest.mark.parametrize(("text", "normal"), [
    ("The Cat!", "cat"),
    ("  an  apple,  a pear ", "apple pear"),
    ("Theatre", "theatre"),  # articles only as whole words
    ("U.S.A.", "usa"),
    ("the", ""),
    ("Kraków's  Old-Town", "krakóws oldtown"),
])
def test_normalisation(text, normal):
    assert normalize_answer(text) == normal


@pytest.mark.parametrize(("gold", "pred", "em", "f1"), [
    ("Normandy", "normandy.", 1.0, 1.0),
    ("the Normans", "Normans", 1.0, 1.0),
    ("in the 10th century", "10th century", 0.0, 2 * (1.0 * (2 / 3)) / (1 + 2 / 3)),
    ("Denmark, Iceland and Norway", "Iceland", 0.0, 2 * (1 * 1 / 4) / (1 + 1 / 4)),
    ("x y y", "y y z", 0.0, 2 / 3),  # repeated tokens count: precision = recall = 2/3
    ("a b b", "b b c", 0.0, 0.8),  # "a" is an article: gold "b b", recall 1, precision 2/3
    ("", "", 1.0, 1.0),  # no answer, predicted no answer
    ("", "France", 0.0, 0.0),
    ("France", "", 0.0, 0.0),
    ("Rollo", "William", 0.0, 0.0),
])
def test_exact_and_f1(gold, pred, em, f1):
    assert exact_match(gold, pred) == em
    assert token_f1(gold, pred) == pytest.approx(f1)


def test_metrics_take_the_best_gold_answer_and_split_has_and_no_answer():
    golds = [["10th century", "the 10th and 11th centuries", "10th"],  # answerable
             [],  # unanswerable
             ["Rollo"],
             []]
    preds = ["10th and 11th centuries", "", "", "Vikings"]
    odds = np.array([-2.0, 3.0, 1.0, -1.0])
    m = squad_metrics(golds, preds, odds)
    # The first question's third-listed gold normalises to "10th and 11th centuries": the best
    # gold answer counts, not the first. The second and the fourth have no answer.
    assert m["exact"] == pytest.approx((1 + 1 + 0 + 0) / 4)
    assert m["f1"] == pytest.approx((1 + 1 + 0 + 0) / 4)
    assert m["has_ans_exact"] == pytest.approx(0.5) and m["no_ans_exact"] == pytest.approx(0.5)
    # Answering only the question with the lowest odds, and leaving "Vikings" (odds -1) out,
    # is better than threshold 0: (1 + 1 + 0 + 1) / 4.
    assert m["best_exact"] == pytest.approx(0.75) and m["best_exact_thresh"] == -2.0


def test_best_threshold_matches_every_threshold_tried_by_hand():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 12))
        has = rng.random(n) < 0.5
        answered = rng.random(n) < 0.7
        raw = np.where(has, np.where(answered, rng.random(n).round(1), 0.0),
                       np.where(answered, 0.0, 1.0))
        odds = rng.normal(size=n)
        best, thresh = best_threshold(raw, odds, has, answered)
        # By hand: a threshold answers the questions whose odds are at most it; "no answer"
        # earns 1 on unanswerable and 0 on answerable questions.
        candidates = [-np.inf, *sorted(set(odds))]
        scores = [sum(raw[i] if odds[i] <= t else float(not has[i]) for i in range(n)) / n
                  for t in candidates]
        assert best == pytest.approx(max(scores))
        if best > scores[0] + 1e-12:  # answering some questions beats answering none
            assert sum(raw[i] if odds[i] <= thresh else float(not has[i])
                       for i in range(n)) / n == pytest.approx(best)
