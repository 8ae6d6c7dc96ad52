"""GLUE metrics, computed with scikit-learn and SciPy.

Values are plain Python floats on the libraries' scale (accuracy and F1 in [0, 1], correlations
in [-1, 1]), not percentages. Constant inputs do not crash an early, collapsed model: a
correlation with a constant vector is undefined (SciPy gives NaN and a warning) and is
reported as 0.0, "no linear/rank relation", which is also what MCC reports for a constant
prediction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

Metric = Callable[[np.ndarray, np.ndarray], float]


def accuracy(predictions: np.ndarray, references: np.ndarray) -> float:
    return float(accuracy_score(references, predictions))


def f1(predictions: np.ndarray, references: np.ndarray) -> float:
    """Binary F1 of the positive class 1 (MRPC, QQP); 0.0 when nothing is predicted positive."""
    return float(f1_score(references, predictions, pos_label=1, average="binary",
                          zero_division=0.0))


def mcc(predictions: np.ndarray, references: np.ndarray) -> float:
    """Matthews correlation (CoLA); 0.0 for a constant prediction."""
    if _is_constant(predictions) or _is_constant(references):
        return 0.0  # sklearn also gives 0.0 here, but with a RuntimeWarning on some versions
    return float(matthews_corrcoef(references, predictions))


def pearson(predictions: np.ndarray, references: np.ndarray) -> float:
    if _is_constant(predictions) or _is_constant(references):
        return 0.0
    return float(stats.pearsonr(predictions, references)[0])


def spearman(predictions: np.ndarray, references: np.ndarray) -> float:
    if _is_constant(predictions) or _is_constant(references):
        return 0.0
    return float(stats.spearmanr(predictions, references)[0])


def corr(predictions: np.ndarray, references: np.ndarray) -> float:
    """Mean of Pearson and Spearman: the usual single STS-B score."""
    return (pearson(predictions, references) + spearman(predictions, references)) / 2


def _is_constant(values: np.ndarray) -> bool:
    return bool(np.all(values == values[0]))


METRICS: dict[str, Metric] = {
    "accuracy": accuracy,
    "f1": f1,
    "mcc": mcc,
    "pearson": pearson,
    "spearman": spearman,
    "corr": corr,
}
KNOWN_METRICS: tuple[str, ...] = tuple(METRICS)


def compute_metrics(
    names: Sequence[str], predictions: np.ndarray, references: np.ndarray
) -> dict[str, float]:
    """{name: value} for each metric in `names`, in that order."""
    unknown = [name for name in names if name not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {', '.join(unknown)}; known: {', '.join(METRICS)}")
    predictions = np.asarray(predictions).reshape(-1)
    references = np.asarray(references).reshape(-1)
    if predictions.shape != references.shape:
        raise ValueError(
            f"{predictions.size} predictions for {references.size} references; they must pair up"
        )
    if predictions.size == 0:
        raise ValueError("no predictions to score")
    return {name: METRICS[name](predictions, references) for name in names}
