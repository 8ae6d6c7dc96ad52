"""The baselines in real runs on the tiny random-init encoder: `weightsearch train` with each new
weighting scheme and sampling rule, their weights in `steps.jsonl`, and a run interrupted and
resumed that gets the batch order, the weights and the model of an uninterrupted one."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from tests.helpers import read_jsonl
from weightsearch.cli import main
from weightsearch.trainer import train

TASKS = ["rte", "mrpc", "stsb"]


def _raw(sample_data_dir: Path, tiny_encoder: str, out: Path, **extra) -> dict:
    """3 tasks of 32 rows in batches of 8 (4 batches each), 3 epochs: DWA's weights move in the
    third."""
    raw = {"encoder": tiny_encoder, "data_dir": str(sample_data_dir), "tasks": TASKS,
           "central_task": "rte", "epochs": 3, "batch_size": 8, "max_train_examples": 32,
           "subsample": "head", "max_eval_examples": 16, "log_every": 4, "precision": "fp32",
           "num_threads": 1, "checkpoints": "last", "output_dir": str(out)}
    raw.update(extra)
    return raw


def _cli_train(raw: dict, folder: Path) -> list[dict]:
    config = folder / "run.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert main(["train", "--config", str(config), "--quiet"]) == 0
    return read_jsonl(Path(raw["output_dir"]) / "steps.jsonl")


def _epoch_task_means(steps: list[dict]) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, list[float]]] = {}
    for s in steps:
        out.setdefault(s["epoch"], {}).setdefault(s["task"], []).append(s["loss"])
    return {e: {t: sum(v) / len(v) for t, v in by.items()} for e, by in out.items()}


def _resume_matches(raw: dict, straight: Path, tmp_path: Path) -> None:
    """Train `raw` again, crashing after epoch 2, resume: the same steps and model as `straight`."""
    resumed = tmp_path / "resumed"
    raw = {**raw, "output_dir": str(resumed)}

    class Crash(Exception):
        pass

    def crash_after_second_epoch(report):
        if report.epoch == 2:
            raise Crash

    with pytest.raises(Crash):
        train(raw, report=crash_after_second_epoch, quiet=True)
    assert {s["epoch"] for s in read_jsonl(resumed / "steps.jsonl")} == {1, 2}
    train(raw, resume=True, quiet=True)
    assert (resumed / "steps.jsonl").read_text() == (straight / "steps.jsonl").read_text()
    a = load_file(straight / "checkpoints" / "epoch-003" / "model.safetensors")
    b = load_file(resumed / "checkpoints" / "epoch-003" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_dwa_with_unimax_trains_and_resumes(sample_data_dir, tiny_encoder, tmp_path):
    out = tmp_path / "straight"
    raw = _raw(sample_data_dir, tiny_encoder, out, weighting={"scheme": "dwa"},
               sampling={"scheme": "unimax", "max_epochs": 2})
    steps = _cli_train(raw, tmp_path)
    # UniMax on equal sizes (4 batches each): 4 updates per task per epoch, as MT-DNN.
    for epoch in (1, 2, 3):
        assert Counter(s["task"] for s in steps if s["epoch"] == epoch) == dict.fromkeys(TASKS, 4)
    # DWA: 1 for two epochs, then the weights of the logged losses (eq. 7, T = 2, K = 3).
    means = _epoch_task_means(steps)
    ratios = {t: means[2][t] / means[1][t] for t in TASKS}
    norm = sum(math.exp(r / 2) for r in ratios.values())
    for s in steps:
        expected = 1.0 if s["epoch"] < 3 else 3 * math.exp(ratios[s["task"]] / 2) / norm
        assert s["weight"] == pytest.approx(expected, rel=1e-5), s
    assert len({round(s["weight"], 8) for s in steps if s["epoch"] == 3}) == 3
    _resume_matches(raw, out, tmp_path)


@pytest.mark.slow
def test_uncertainty_with_temperature_trains_and_resumes(sample_data_dir, tiny_encoder,
                                                         tmp_path):
    out = tmp_path / "straight"
    raw = _raw(sample_data_dir, tiny_encoder, out, weighting={"scheme": "uncertainty", "lr": 0.05},
               sampling={"scheme": "temperature", "T": 3, "cap": 3})
    steps = _cli_train(raw, tmp_path)
    assert [sum(s["epoch"] == e for s in steps) for e in (1, 2, 3)] == [12, 12, 12]
    # The first update of each task logs exp(-0) c_t: 1 (classification), 1/2 (STS-B).
    first = {}
    for s in steps:
        first.setdefault(s["task"], s["weight"])
    assert first == {t: (0.5 if t == "stsb" else 1.0) for t in first}
    # Afterwards the log-variances have learned: a task's weight changes between its updates,
    # and stays positive and finite.
    for task in first:
        weights = [s["weight"] for s in steps if s["task"] == task]
        assert len(set(weights)) > 1 and all(0 < w < math.inf for w in weights)
    # The learned log-variances are in the checkpoint, and give the next update's weight.
    state = torch.load(out / "checkpoints" / "epoch-003" / "state.pt", weights_only=False)
    assert state["scheme"]["tasks"] == tuple(TASKS)
    assert state["scheme"]["log_variance"].shape == (3,)
    _resume_matches(raw, out, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(("weighting", "sampling"), [
    ({"scheme": "siwlm", "central_weight": 9, "focus_span": 2}, {"scheme": "proportional"}),
    ({"scheme": "equal"}, {"scheme": "sqrt"}),
])
def test_the_other_size_rules_compose_with_a_weighting(weighting, sampling, sample_data_dir,
                                                       tiny_encoder, tmp_path):
    out = tmp_path / "run"
    raw = _raw(sample_data_dir, tiny_encoder, out, epochs=1, weighting=weighting,
               sampling=sampling,
               tasks=[*TASKS[:2], {"preset": "stsb", "max_train_examples": 8}])
    steps = _cli_train(raw, tmp_path)
    sizes = json.loads((out / "data.json").read_text())["train_sizes"]
    batches = {t: math.ceil(n / 8) for t, n in sizes.items()}
    assert len(steps) == sum(batches.values())  # an MT-DNN epoch's updates
    assert {s["task"] for s in steps} <= set(TASKS)
    if weighting["scheme"] == "siwlm":  # SIWLM's focus counts updates whatever their order
        order = ["rte", "mrpc", "stsb"]
        for s in steps:
            focus = order[(s["step"] // 2) % 3]
            initial = 9.0 if s["task"] == "rte" else 1.0
            assert s["weight"] == pytest.approx(initial if s["task"] == focus else initial / 10)
    assert json.loads((out / "result.json").read_text())["best"].keys() == set(TASKS)
