"""The task types' conformance suite (weightsearch.testing.task_types) on every built-in task
type, on a few rows of the shipped samples, and on a broken type, which it rejects."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest

from tests.helpers import QA_SAMPLE, SAMPLE, plugged_in
from weightsearch.testing import ConformanceError, TaskTypeConformance, check_task_type
from weightsearch.trainer.heads import EvalSplit, RegressionHead
from weightsearch.trainer.task_types import (
    TASK_TYPES,
    TaskType,
    register_task_type,
    unregister_task_type,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small tensors: no second thread


class TestClassification(TaskTypeConformance):
    task = "rte"
    data_dir = SAMPLE


class TestRegression(TaskTypeConformance):
    task = "stsb"
    data_dir = SAMPLE


class TestRanking(TaskTypeConformance):
    # RTE's premises as ranking lists: each premise a question, its hypotheses the candidates.
    task: ClassVar[dict] = {"preset": "rte", "name": "rte_rank", "type": "ranking",
                            "group": "sentence1"}
    data_dir = SAMPLE


class TestMultipleChoice(TaskTypeConformance):
    task = "swag"
    data_dir = QA_SAMPLE


class TestSpanQA(TaskTypeConformance):
    # Windows of 96 tokens, so that long contexts take several.
    task: ClassVar[dict] = {"preset": "squad2", "max_seq_len": 96, "doc_stride": 24}
    data_dir = QA_SAMPLE


def test_every_registered_task_type_has_a_conformance_class() -> None:
    cases = (TestClassification, TestRegression, TestRanking, TestMultipleChoice, TestSpanQA)
    assert {case().sample().spec.type for case in cases} == set(TASK_TYPES)


# --- a broken type: its score leaves out the metric the task ranks epochs by -----------------
class UncorrelatedHead(RegressionHead):
    task_type = "uncorrelated"

    def score(self, predictions: np.ndarray, references: np.ndarray,
              split: EvalSplit) -> dict[str, float]:
        return {k: v for k, v in super().score(predictions, references, split).items()
                if k != "corr"}


HEAD = UncorrelatedHead  # what the type's head module (this one) serves


def test_the_suite_rejects_a_broken_task_type() -> None:
    kind = TASK_TYPES["regression"]
    uncorrelated = TaskType("uncorrelated", __name__, "score", kind.metrics,
                            kind.default_metrics, kind.default_primary, parser=kind.parser)
    with (plugged_in(register_task_type, unregister_task_type, uncorrelated, uncorrelated.name),
          pytest.raises(ConformanceError) as info):
        check_task_type({"preset": "stsb", "type": "uncorrelated"}, SAMPLE)
    lines = str(info.value).splitlines()
    assert lines[0] == "TaskTypeConformance: 1 of 6 checks failed"
    assert lines[1].startswith("test_scores: dev: score gave {'pearson': ")
    assert lines[1].endswith("not every metric of ('pearson', 'spearman', 'corr')")
