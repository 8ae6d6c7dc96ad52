"""What a task scores when nothing is learned: every dev example given one constant, the
training labels' most frequent class (classification) or their mean (regression, whose
correlations are then 0). A central task that never beats this at any weight learned nothing
the weight could change, so its verdict is about nothing (`studies.central`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from weightsearch.trainer.metrics import METRICS, compute_metrics

CONSTANT_TYPES = ("classification", "regression")  # one row per example, a label per row


def majority_scores(data: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per task of a constant type with labels: each of its metrics on its first eval split
    (the one a run is judged by) for the constant prediction. The most frequent class is the
    smallest label among ties, so the figure does not depend on the order of the rows."""
    out: dict[str, dict[str, float]] = {}
    for name, task in data.items():
        kind = task.spec.type
        splits = list(task.evals.values())
        if kind not in CONSTANT_TYPES or not splits or "label" not in task.train.column_names \
                or "label" not in splits[0].column_names or len(task.train) == 0 \
                or len(splits[0]) == 0:
            continue
        train = np.asarray(task.train["label"])
        dev = np.asarray(splits[0]["label"])
        if kind == "classification":
            train = train[train >= 0]  # an unlabelled row (-1) has no class to count
            if train.size == 0:
                continue
            constant = float(np.bincount(train.astype(np.int64)).argmax())
        else:
            constant = float(train.mean())
        names = [m for m in task.spec.metrics if m in METRICS]
        if names:
            out[name] = compute_metrics(names, np.full(dev.shape, constant), dev)
    return out
