"""The constant-prediction score a run records per task (`trainer.majority`), checked against
its definition restated on the raw rows of the tiny run's data: the training labels' most
frequent class (the smallest among ties) predicted for every dev example, scored with the
task's metrics; for regression the correlations of a constant, 0."""

from __future__ import annotations

import csv
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest


def _labels(task_dir: Path, split: str, column: str, n: int, cast) -> list:
    with (task_dir / f"{split}.tsv").open(encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [cast(r[column]) for r in rows[:n]]


def test_the_run_records_each_tasks_constant_prediction_score(tiny_run, sample_data_dir):
    recorded = tiny_run.result.extra["majority"]
    assert set(recorded) == {"rte", "mrpc", "stsb"}
    # RTE: labels are words; the preset maps entailment -> 0, not_entailment -> 1.
    train = _labels(sample_data_dir / "RTE", "train", "label", 64, str)
    dev = _labels(sample_data_dir / "RTE", "dev", "label", 32, str)
    counts = Counter(train)
    top = max(counts.values())
    majority = min(k for k, v in counts.items() if v == top)  # alphabetical = label order
    assert recorded["rte"]["accuracy"] == pytest.approx(
        sum(d == majority for d in dev) / len(dev), abs=1e-12)
    # MRPC: its F1 of the positive class is 0 when the majority is 0, else 2p / (1 + p).
    train = _labels(sample_data_dir / "MRPC", "train", "Quality", 64, int)
    dev = _labels(sample_data_dir / "MRPC", "dev", "Quality", 32, int)
    counts = Counter(train)
    majority = 0 if counts[0] >= counts[1] else 1
    share = sum(d == majority for d in dev) / len(dev)
    assert recorded["mrpc"]["accuracy"] == pytest.approx(share, abs=1e-12)
    positive = sum(d == 1 for d in dev) / len(dev)
    f1 = 0.0 if majority == 0 else 2 * positive / (1 + positive)
    assert recorded["mrpc"]["f1"] == pytest.approx(f1, abs=1e-12)
    # STS-B: a constant has no correlation with anything.
    assert recorded["stsb"] == {"pearson": 0.0, "spearman": 0.0, "corr": 0.0}


def test_ties_go_to_the_smallest_label_and_types_without_a_constant_are_left_out():
    import datasets

    from weightsearch.trainer.majority import majority_scores

    class Spec:
        def __init__(self, kind: str, metrics: tuple[str, ...]) -> None:
            self.type, self.metrics = kind, metrics

    class Task:
        def __init__(self, kind, metrics, train, dev) -> None:
            self.spec = Spec(kind, metrics)
            self.train = datasets.Dataset.from_dict({"label": train})
            self.evals = {"dev": datasets.Dataset.from_dict({"label": dev})}

    found = majority_scores({
        "tied": Task("classification", ("accuracy",), [1, 0, 1, 0], [0, 0, 0, 1]),
        "qa": Task("span_qa", ("f1",), [1], [1]),
        "empty": Task("classification", ("accuracy",), [], [0]),
        "unlabelled": Task("classification", ("accuracy",), [-1, -1], [0]),
    })
    assert found == {"tied": {"accuracy": 0.75}}  # class 0 of the tie: 3 of 4 dev rows
    assert not math.isnan(np.float64(found["tied"]["accuracy"]))
