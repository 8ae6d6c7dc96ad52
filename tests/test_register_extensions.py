"""Extensions stand alone: a weighting scheme and a task type (with its head), each defined in
this module, registered, and trained in a tiny real run; nothing else in the code names them."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch.nn.functional as F
from torch import Tensor

from weightsearch.core.errors import ConfigError
from weightsearch.testing import check_head, check_scheme, check_task_type
from weightsearch.trainer import load_config, train
from weightsearch.trainer import task_types as types_module
from weightsearch.trainer.heads import HEADS, Encoded, EvalSplit, head_class
from weightsearch.trainer.heads.classification import ClassificationHead
from weightsearch.trainer.task_types import (
    TASK_TYPES,
    TaskType,
    register_task_type,
    unregister_task_type,
)
from weightsearch.trainer.weighting import (
    SCHEMES,
    Scheme,
    Settings,
    build_scheme,
    has_central_weight,
    register_scheme,
    unregister_scheme,
)

# ---- a weighting scheme: the central task's batches get its weight, every other batch 0.5 ----

OTHERS = 0.5


@dataclass(frozen=True)
class CentralOnlySettings(Settings):
    central_weight: float
    scheme: str = field(default="central_only", init=False)

    KEYS: ClassVar[tuple[str, ...]] = ("central_weight",)
    has_central_weight: ClassVar[bool] = True

    def problems(self) -> list[str]:
        ok = isinstance(self.central_weight, int | float) and self.central_weight >= 0
        return [] if ok else [f"weighting.central_weight: must be >= 0, got "
                              f"{self.central_weight!r}"]

    def task_problems(self, tasks: Sequence[str], central_task: str | None) -> list[str]:
        return [] if central_task in tasks else ["central_task: required by central_only"]


class CentralOnlyScheme(Scheme):
    name = "central_only"
    settings_type = CentralOnlySettings

    def weight(self, task: str, epoch: int, step: int) -> float:
        self._check_position(epoch, step, task)
        return float(self.settings.central_weight) if task == self.central_task else OTHERS


@pytest.fixture
def central_only() -> Iterator[type[Scheme]]:
    register_scheme(CentralOnlyScheme)
    yield CentralOnlyScheme
    unregister_scheme(CentralOnlyScheme.name)


# ---- a task type: classification whose head trains with label smoothing -------------------

SMOOTHING = 0.2


class SmoothedClassificationHead(ClassificationHead):
    task_type = "smoothed_classification"
    forward_calls: ClassVar[int] = 0

    def forward(self, states: Encoded, batch: dict[str, Tensor]) -> Tensor:
        type(self).forward_calls += 1
        return super().forward(states, batch)

    def loss(self, outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return F.cross_entropy(outputs, batch["labels"].long(), label_smoothing=SMOOTHING)

    def score(self, predictions: np.ndarray, references: np.ndarray,
              split: EvalSplit) -> dict[str, float]:
        return {**super().score(predictions, references, split), "label_smoothing": SMOOTHING}


HEAD = SmoothedClassificationHead  # what `head_module` (this module) serves

SMOOTHED = TaskType("smoothed_classification", __name__, "classes", ("accuracy", "f1", "mcc"),
                    ("accuracy",), "accuracy", class_outputs=True)


@pytest.fixture
def smoothed_type() -> Iterator[TaskType]:
    register_task_type(SMOOTHED)
    SmoothedClassificationHead.forward_calls = 0
    yield SMOOTHED
    unregister_task_type(SMOOTHED.name)


# ---- tiny runs ---------------------------------------------------------------------------

def tiny(sample_data_dir: Path, tiny_encoder: str, out: Path, **extra) -> dict:
    raw = {
        "encoder": tiny_encoder,
        "data_dir": str(sample_data_dir),
        "tasks": ["rte", "mrpc"],
        "central_task": "rte",
        "epochs": 1,
        "batch_size": 8,
        "max_train_examples": 16,
        "max_eval_examples": 16,
        "num_threads": 1,
        "log_every": 1,
        "precision": "fp32",
        "output_dir": str(out),
    }
    raw.update(extra)
    return raw


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_registered_scheme_weights_a_real_run(central_only, sample_data_dir, tiny_encoder,
                                              tmp_path):
    out = tmp_path / "run"
    raw = tiny(sample_data_dir, tiny_encoder, out,
               weighting={"scheme": "central_only", "central_weight": 4})
    train(raw, quiet=True)

    steps = read_jsonl(out / "steps.jsonl")
    assert len(steps) == 2 * 2  # 2 tasks x 16/8 batches
    assert {s["task"] for s in steps} == {"rte", "mrpc"}
    for s in steps:
        assert s["weight"] == (4.0 if s["task"] == "rte" else OTHERS)
    assert json.loads((out / "result.json").read_text())["best"].keys() == {"rte", "mrpc"}


def test_registered_scheme_goes_through_the_registry(central_only):
    assert SCHEMES["central_only"] is CentralOnlyScheme
    assert has_central_weight("central_only") and has_central_weight("siwlm")
    assert not has_central_weight("equal") and not has_central_weight("nonesuch")
    cfg = load_config({"tasks": ["rte", "mrpc"], "central_task": "mrpc",
                       "weighting": {"scheme": "central_only", "central_weight": 2}})
    assert cfg.to_dict()["weighting"] == {"central_weight": 2, "scheme": "central_only"}
    scheme = build_scheme(cfg.weighting, cfg.task_names, cfg.central_task)
    assert (scheme.weight("mrpc", 1, 0), scheme.weight("rte", 2, 5)) == (2.0, OTHERS)
    # its own settings and their checks, as for a built-in scheme
    with pytest.raises(ConfigError, match="central_weight: required for scheme 'central_only'"):
        load_config({"tasks": ["rte"], "weighting": {"scheme": "central_only"}})
    with pytest.raises(ValueError, match="already registered"):
        register_scheme(type("Other", (CentralOnlyScheme,), {}))
    check_scheme("central_only", {"central_weight": 4})  # the conformance suite


def test_an_unregistered_scheme_is_unknown_again():
    register_scheme(CentralOnlyScheme)
    unregister_scheme("central_only")
    with pytest.raises(ConfigError, match="unknown scheme 'central_only'; choose one of dwa, "
                                          "equal, siwlm, static, uncertainty"):
        load_config({"tasks": ["rte"], "weighting": {"scheme": "central_only"}})
    with pytest.raises(TypeError):
        register_scheme(CentralOnlySettings)  # type: ignore[arg-type]


SMOOTHED_TASK = {
    "name": "rte_smoothed", "type": "smoothed_classification",
    "train_file": "RTE/train.tsv", "dev_files": "RTE/dev.tsv",
    "text_a": "sentence1", "text_b": "sentence2", "label": "label",
    "labels": ["not_entailment", "entailment"],
}


def test_registered_task_type_trains_with_its_head(smoothed_type, sample_data_dir,
                                                   tiny_encoder, tmp_path):
    out = tmp_path / "run"
    raw = tiny(sample_data_dir, tiny_encoder, out, tasks=[SMOOTHED_TASK, "mrpc"],
               central_task="rte_smoothed")
    result = train(raw, quiet=True)

    saved = json.loads((out / "result.json").read_text())
    metrics = saved["best"]["rte_smoothed"]
    assert 0.0 <= metrics["accuracy"] <= 1.0
    assert metrics["label_smoothing"] == SMOOTHING  # scored by the registered head
    assert result.best["rte_smoothed"]["label_smoothing"] == SMOOTHING
    assert "label_smoothing" not in saved["best"]["mrpc"]
    assert SmoothedClassificationHead.forward_calls >= 2  # its 2 training batches, then dev
    losses = [s["loss"] for s in read_jsonl(out / "steps.jsonl") if s["task"] == "rte_smoothed"]
    assert len(losses) == 2 and all(np.isfinite(losses))


def test_registered_task_type_is_seen_everywhere(smoothed_type, sample_data_dir):
    assert TASK_TYPES["smoothed_classification"] is SMOOTHED
    assert "smoothed_classification" in types_module.NAMES
    assert HEADS["smoothed_classification"] is SmoothedClassificationHead
    assert head_class("smoothed_classification") is SmoothedClassificationHead
    cfg = load_config({"tasks": [SMOOTHED_TASK]})
    spec = cfg.tasks[0]
    assert (spec.type, spec.num_labels, spec.metrics) == ("smoothed_classification", 2,
                                                          ("accuracy",))
    with pytest.raises(ValueError, match="already registered"):
        register_task_type(TaskType("smoothed_classification", __name__, "score", ("corr",),
                                    ("corr",), "corr"))
    check_task_type(SMOOTHED_TASK, sample_data_dir)  # the conformance suites
    check_head(SMOOTHED_TASK, sample_data_dir)


def test_an_unregistered_task_type_is_unknown_again():
    register_task_type(SMOOTHED)
    unregister_task_type(SMOOTHED.name)
    assert "smoothed_classification" not in types_module.NAMES
    assert set(HEADS) == set(types_module.NAMES)
    with pytest.raises(ConfigError, match="unknown task type 'smoothed_classification'; use one "
                                          "of classification, regression, ranking, "
                                          "multiple_choice, span_qa"):
        load_config({"tasks": [SMOOTHED_TASK]})
    with pytest.raises(TypeError):
        register_task_type("smoothed_classification")  # type: ignore[arg-type]


def test_a_registered_types_metrics_and_name_are_known_to_task_files_and_the_service(tmp_path):
    """What is derived from the registry is read when asked: the metric names a task file may
    use, and the service's task_type enum, built with each app."""
    from fastapi.testclient import TestClient

    import weightsearch.trainer.tasks as tasks_module
    from weightsearch.service.app import create_app
    from weightsearch.trainer.task_rules import known_metrics

    late = TaskType("late_kind", __name__, "score", ("late_corr",), ("late_corr",), "late_corr")
    assert "late_corr" not in tasks_module.METRICS
    register_task_type(late)
    try:
        assert "late_corr" in tasks_module.METRICS
        assert known_metrics()[-1] == "late_corr"
        client = TestClient(create_app(f"sqlite:///{tmp_path / 's.db'}", log_dir=tmp_path))
        answer = client.get("/recommend?train_size=2500&task_type=late_kind")
        assert answer.status_code == 200, answer.text
        enum = client.get("/openapi.json").json()["paths"]["/recommend"]["get"]["parameters"]
        task_type = next(p for p in enum if p["name"] == "task_type")
        assert "late_kind" in json.dumps(task_type["schema"])
    finally:
        unregister_task_type("late_kind")
    assert "late_corr" not in tasks_module.METRICS
