"""GLUE metrics against hand-checked values, including the degenerate constant cases."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from weightsearch.trainer.metrics import KNOWN_METRICS, METRICS, compute_metrics
from weightsearch.trainer.tasks import METRICS as TASK_METRICS


def test_registry_covers_every_metric_the_task_types_score_with_it():
    from weightsearch.trainer.heads import head_class
    from weightsearch.trainer.heads.base import Head
    from weightsearch.trainer.task_types import TASK_TYPES

    assert set(KNOWN_METRICS) == set(METRICS) <= set(TASK_METRICS)
    for kind in TASK_TYPES.values():
        if head_class(kind.name).score is Head.score:  # the heads that score with this registry
            assert set(kind.metrics) <= set(METRICS), kind.name


def test_classification_metrics_by_hand():
    predictions = np.array([1, 0, 1, 1])
    references = np.array([1, 0, 0, 1])
    # tp 2, fp 1, fn 0, tn 1: precision 2/3, recall 1 -> F1 0.8;
    # MCC = (2*1 - 1*0) / sqrt(3 * 2 * 1 * 2) = 2 / sqrt(12).
    result = compute_metrics(["accuracy", "f1", "mcc"], predictions, references)
    assert result == pytest.approx({"accuracy": 0.75, "f1": 0.8, "mcc": 2 / math.sqrt(12)})
    assert list(result) == ["accuracy", "f1", "mcc"]


def test_correlation_metrics_by_hand():
    predictions = np.array([1.0, 2.0, 3.0, 4.0])
    references = np.array([1.0, 3.0, 2.0, 4.0])
    # Deviations (-1.5, -.5, .5, 1.5) and (-1.5, .5, -.5, 1.5): 4 / 5 = 0.8; ranks are the same
    # values, so Spearman is 0.8 too.
    result = compute_metrics(["pearson", "spearman", "corr"], predictions, references)
    assert result == pytest.approx({"pearson": 0.8, "spearman": 0.8, "corr": 0.8})
    monotone = compute_metrics(["pearson", "spearman", "corr"], predictions, predictions ** 3)
    assert monotone["spearman"] == pytest.approx(1.0)
    assert monotone["pearson"] < 1.0
    assert monotone["corr"] == pytest.approx((monotone["pearson"] + 1.0) / 2)


def test_constant_predictions_do_not_crash_or_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        labels = compute_metrics(["accuracy", "f1", "mcc"], np.zeros(4, int),
                                 np.array([0, 1, 0, 0]))
        scores = compute_metrics(["pearson", "spearman", "corr"], np.full(3, 2.5),
                                 np.array([0.0, 1.0, 5.0]))
        constant_refs = compute_metrics(["pearson", "mcc"], np.array([0, 1, 1]), np.ones(3))
    assert labels == {"accuracy": 0.75, "f1": 0.0, "mcc": 0.0}
    assert scores == {"pearson": 0.0, "spearman": 0.0, "corr": 0.0}
    assert constant_refs == {"pearson": 0.0, "mcc": 0.0}


def test_values_are_plain_json_floats():
    result = compute_metrics(list(KNOWN_METRICS), np.array([1, 0, 1]), np.array([1, 0, 0]))
    assert all(type(value) is float for value in result.values())
    json.dumps(result)


@pytest.mark.parametrize(
    ("names", "predictions", "references", "fragment"),
    [
        (["acc"], [1], [1], "unknown metric"),
        (["accuracy"], [1, 0], [1], "must pair up"),
        (["accuracy"], [], [], "no predictions"),
    ],
)
def test_misuse_is_refused(names, predictions, references, fragment):
    with pytest.raises(ValueError, match=fragment):
        compute_metrics(names, np.array(predictions), np.array(references))
