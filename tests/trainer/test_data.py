"""Tokenization cache, truncation, MT-DNN batch plans and padding, on the shipped sample."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from weightsearch.trainer import task_data as data
from weightsearch.trainer.encoders import load_tokenizer
from weightsearch.trainer.task_data import (
    TaskData,
    batch_plan,
    collate,
    eval_batches,
    load_task_data,
)
from weightsearch.trainer.tasks import TASK_PRESETS, TaskSpec


@pytest.fixture(scope="module")
def tokenizer(minilm_path: str) -> Any:
    return load_tokenizer(minilm_path)


@pytest.fixture(scope="module")
def sample_tasks(sample_data_dir: Path, tokenizer: Any,
                 tmp_path_factory: pytest.TempPathFactory) -> dict[str, TaskData]:
    cache = tmp_path_factory.mktemp("cache")
    return {name: load_task_data(TASK_PRESETS[name], sample_data_dir, tokenizer, 128, cache)
            for name in ("rte", "mrpc", "stsb", "cola")}


def test_columns_and_sizes(sample_tasks: dict[str, TaskData], tokenizer: Any) -> None:
    rte = sample_tasks["rte"]
    assert rte.train_size == 300 and list(rte.evals) == ["dev"] and len(rte.evals["dev"]) == 100
    assert set(rte.train.column_names) == {"input_ids", "token_type_ids", "length", "label"}
    row = rte.train[0]
    assert row["length"] == len(row["input_ids"]) == len(row["token_type_ids"])
    assert row["input_ids"][0] == tokenizer.cls_token_id and 1 in row["token_type_ids"]
    assert isinstance(sample_tasks["stsb"].train[0]["label"], float)
    assert sample_tasks["cola"].train[0]["label"] == 1
    assert set(rte.truncated) == {"train", "dev"}


def test_cache_hit_does_not_tokenize(sample_data_dir: Path, tokenizer: Any, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from weightsearch.trainer.heads import featurize

    calls: list[int] = []
    real = featurize.encode_counted  # what tokenizes a split's text (pairs)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(featurize, "encode_counted", counting)
    first = load_task_data(TASK_PRESETS["mrpc"], sample_data_dir, tokenizer, 64, tmp_path)
    assert calls and len(list(tmp_path.iterdir())) == 2  # train + dev entries, no temp dirs left
    calls.clear()
    second = load_task_data(TASK_PRESETS["mrpc"], sample_data_dir, tokenizer, 64, tmp_path)
    assert calls == []
    assert second.train["input_ids"][:5] == first.train["input_ids"][:5]
    assert second.truncated == first.truncated
    # A different max_seq_len or example limit is a different entry.
    load_task_data(TASK_PRESETS["mrpc"], sample_data_dir, tokenizer, 64, tmp_path,
                   max_train_examples=10)
    assert calls and len(list(tmp_path.iterdir())) == 3


def test_truncation_counted_not_dropped(sample_data_dir: Path, tokenizer: Any) -> None:
    full = load_task_data(TASK_PRESETS["rte"], sample_data_dir, tokenizer, 512, None)
    lengths = np.asarray(full.train["length"])
    short = load_task_data(TASK_PRESETS["rte"], sample_data_dir, tokenizer, 64, None)
    assert short.train_size == full.train_size == 300
    assert short.truncated["train"] == int((lengths > 64).sum()) > 0
    assert max(short.train["length"]) == 64
    assert full.truncated["train"] == 0


def test_example_limits_take_first_rows(sample_data_dir: Path, tokenizer: Any) -> None:
    task = load_task_data(TASK_PRESETS["stsb"], sample_data_dir, tokenizer, 128, None,
                          max_train_examples=7, max_eval_examples=5)
    assert task.train_size == 7 and len(task.evals["dev"]) == 5
    assert task.train["label"][:2] == pytest.approx([5.0, 3.8])


def test_batch_plan_covers_each_example_once(sample_tasks: dict[str, TaskData]) -> None:
    plan = batch_plan(sample_tasks, 16, seed=3, epoch=1)
    seen: dict[str, list[int]] = {name: [] for name in sample_tasks}
    for name, idx in plan:
        assert 1 <= len(idx) <= 16
        seen[name].extend(idx.tolist())
    for name, task in sample_tasks.items():
        assert sorted(seen[name]) == list(range(task.train_size))
    names = [name for name, _ in plan[:12]]
    assert len(set(names)) > 1  # tasks are interleaved, not one block each


def test_batch_plan_is_a_function_of_seed_and_epoch(sample_tasks: dict[str, TaskData]) -> None:
    def flat(plan: list[tuple[str, np.ndarray]]) -> list[tuple[str, list[int]]]:
        return [(name, idx.tolist()) for name, idx in plan]

    a = flat(batch_plan(sample_tasks, 16, seed=3, epoch=2))
    assert a == flat(batch_plan(sample_tasks, 16, seed=3, epoch=2))
    assert a != flat(batch_plan(sample_tasks, 16, seed=3, epoch=3))
    assert a != flat(batch_plan(sample_tasks, 16, seed=4, epoch=2))


def _padding(task: TaskData, plan: list[tuple[str, np.ndarray]]) -> int:
    lengths = np.asarray(task.train["length"])
    return sum(int(lengths[idx].max() * len(idx) - lengths[idx].sum()) for _, idx in plan)


def test_length_bucketing_reduces_padding(sample_tasks: dict[str, TaskData]) -> None:
    tasks = {"rte": sample_tasks["rte"]}
    bucketed = _padding(tasks["rte"], batch_plan(tasks, 8, seed=1, epoch=1))
    plain = _padding(tasks["rte"], batch_plan(tasks, 8, seed=1, epoch=1, length_bucketing=False))
    assert bucketed < plain / 2


def test_ranking_groups_stay_in_one_batch(tmp_path: Path, tokenizer: Any) -> None:
    rng = np.random.default_rng(0)
    lines = ["index\tquestion\tsentence\tlabel"]
    for i in range(120):
        q = f"question {int(rng.integers(0, 30))}"
        label = "entailment" if i % 3 == 0 else "not_entailment"
        lines.append(f"{i}\t{q}\t{'word ' * int(rng.integers(1, 20))}\t{label}")
    (tmp_path / "q.tsv").write_text("\n".join(lines) + "\n")
    spec = dataclasses.replace(TASK_PRESETS["qnlirank"], train_file="q.tsv",
                               dev_files=(("dev", "q.tsv"),))
    task = load_task_data(spec, tmp_path, tokenizer, 128, tmp_path / "cache")
    groups = np.asarray(task.train["group"])
    for batches in ([idx for _, idx in batch_plan({"q": task}, 8, 1, 1)],
                    eval_batches(task.evals["dev"], 8)):
        assert sorted(np.concatenate(batches).tolist()) == list(range(120))
        owner = {}
        for b, idx in enumerate(batches):
            for g in set(groups[idx].tolist()):
                assert owner.setdefault(g, b) == b, f"group {g} split across batches"
    batch = collate(task.train, batch_plan({"q": task}, 8, 1, 1)[0][1], tokenizer.pad_token_id)
    assert batch["group"].dtype == batch["labels"].dtype == torch.int64


def test_eval_batches_sorted_and_complete(sample_tasks: dict[str, TaskData]) -> None:
    dev = sample_tasks["mrpc"].evals["dev"]
    batches = eval_batches(dev, 32)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(dev)))
    lengths = np.asarray(dev["length"])
    maxima = [int(lengths[idx].max()) for idx in batches]
    assert maxima == sorted(maxima)


def test_collate_pads_to_longest(sample_tasks: dict[str, TaskData], tokenizer: Any) -> None:
    ds = sample_tasks["stsb"].train
    idx = np.array([4, 0, 17])
    batch = collate(ds, idx, tokenizer.pad_token_id)
    lengths = [ds[int(i)]["length"] for i in idx]
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (3, max(lengths))
    assert batch["token_type_ids"].shape == (3, max(lengths))
    assert batch["attention_mask"].sum(1).tolist() == lengths
    for row, i in enumerate(idx):
        n = lengths[row]
        assert batch["input_ids"][row, :n].tolist() == ds[int(i)]["input_ids"]
        assert batch["token_type_ids"][row, :n].tolist() == ds[int(i)]["token_type_ids"]
        assert (batch["input_ids"][row, n:] == tokenizer.pad_token_id).all()
    assert batch["labels"].dtype.is_floating_point and batch["labels"].shape == (3,)
    assert "group" not in batch
    cls = collate(sample_tasks["rte"].train, np.array([0, 1]), tokenizer.pad_token_id)
    assert cls["labels"].dtype == cls["input_ids"].dtype == torch.int64


def test_count_train_examples(sample_data_dir: Path) -> None:
    assert data.count_train_examples(TASK_PRESETS["cola"], sample_data_dir) == 300
    spec: TaskSpec = dataclasses.replace(TASK_PRESETS["wnli"], train_file="WNLI/dev.tsv")
    assert data.count_train_examples(spec, sample_data_dir) == 71


def test_fixed_batches_are_cut_once_from_consecutive_rows_as_the_reference_does(sample_tasks):
    """The reference sampler (MultiTaskBatchSampler) cuts each task's rows [i, i + size) once,
    shuffles that list once and iterates it in that order every epoch; only the sequence of
    tasks is dealt anew. Re-stated here from that description, not from the trainer."""
    size = 16

    def per_task(plan):
        out: dict[str, list[list[int]]] = {}
        for task, idx in plan:
            out.setdefault(task, []).append([int(i) for i in idx])
        return out

    epochs = [batch_plan(sample_tasks, size, seed=3, epoch=e, length_bucketing=False,
                         fixed=True) for e in (1, 2, 3)]
    first = per_task(epochs[0])
    for task, rows in sample_tasks.items():
        n = len(rows.train)
        consecutive = sorted([list(range(i, min(i + size, n))) for i in range(0, n, size)])
        assert sorted(first[task]) == consecutive  # consecutive rows, each batch once
    for plan in epochs[1:]:
        assert per_task(plan) == first  # the same batches, in the same order per task
    sequences = [[task for task, _ in plan] for plan in epochs]
    assert sequences[0] != sequences[1]  # which task comes next is dealt anew
    reshuffled = per_task(batch_plan(sample_tasks, size, seed=3, epoch=2,
                                     length_bucketing=False))
    assert reshuffled != first  # the default cuts new batches every epoch
