"""The heads' conformance suite (weightsearch.testing.heads) on every built-in task type with
every answer module it offers, on a few rows of the shipped samples, and on a broken head,
which it rejects."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from torch import nn

from tests.helpers import QA_SAMPLE, SAMPLE, plugged_in
from weightsearch.testing import ConformanceError, HeadConformance, check_head
from weightsearch.trainer.heads import RegressionHead
from weightsearch.trainer.task_types import (
    TASK_TYPES,
    TaskType,
    register_task_type,
    unregister_task_type,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small tensors: no second thread

# RTE's premises as ranking lists: each premise a question, its hypotheses the candidates.
RTE_AS_RANKING = {"preset": "rte", "name": "rte_rank", "type": "ranking", "group": "sentence1"}
# Windows of 96 tokens, so that long contexts take several.
SQUAD_WINDOWS = {"preset": "squad2", "max_seq_len": 96, "doc_stride": 24}


class TestClassificationLinear(HeadConformance):
    task = "rte"
    data_dir = SAMPLE


class TestClassificationSan(HeadConformance):
    task: ClassVar[dict] = {"preset": "rte", "head": "san"}
    data_dir = SAMPLE


class TestRegression(HeadConformance):
    task = "stsb"
    data_dir = SAMPLE


class TestRanking(HeadConformance):
    task = RTE_AS_RANKING
    data_dir = SAMPLE


class TestMultipleChoice(HeadConformance):
    task = "swag"
    data_dir = QA_SAMPLE


class TestSpanQA(HeadConformance):
    task = SQUAD_WINDOWS
    data_dir = QA_SAMPLE


CASES = (TestClassificationLinear, TestClassificationSan, TestRegression, TestRanking,
         TestMultipleChoice, TestSpanQA)


def test_every_answer_module_of_every_task_type_has_a_conformance_class() -> None:
    covered = {(case().sample().spec.type, case().sample().spec.head) for case in CASES}
    assert covered == {(name, module) for name, kind in TASK_TYPES.items()
                       for module in kind.answer_modules}


# --- a broken head: a layer the loss never reaches -------------------------------------------
class IdleLayerHead(RegressionHead):
    task_type = "idle_regression"

    def __init__(self, hidden_size: int, spec: Any) -> None:
        super().__init__(hidden_size, spec)
        self.unused = nn.Linear(hidden_size, 1)


HEAD = IdleLayerHead  # what the type's head module (this one) serves


def test_the_suite_rejects_a_broken_head() -> None:
    kind = TASK_TYPES["regression"]
    idle = TaskType("idle_regression", __name__, "score", kind.metrics, kind.default_metrics,
                    kind.default_primary)
    with (plugged_in(register_task_type, unregister_task_type, idle, idle.name),
          pytest.raises(ConformanceError) as info):
        check_head({"preset": "stsb", "type": "idle_regression"}, SAMPLE)
    assert str(info.value).splitlines() == [
        "HeadConformance: 1 of 7 checks failed",
        "test_loss_trains_the_head_and_reaches_the_encoder: parameters ['unused.weight', "
        "'unused.bias'] get no gradient from the loss"]
