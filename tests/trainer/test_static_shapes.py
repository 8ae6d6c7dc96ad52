"""Static shapes (`pad_to: buckets`): every batch padded to one of a few fixed widths of its
token limit, which changes no result (padded tokens are masked out), only the shapes the
device sees."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from tests.helpers import run_config
from weightsearch.core.errors import ConfigError
from weightsearch.trainer import load_config, train
from weightsearch.trainer.loop import evaluate, set_up
from weightsearch.trainer.task_data import bucket_widths, static_width


def widths_restated(limit: int, count: int) -> tuple[int, ...]:
    """The limit's count equal parts, each rounded up to a multiple of 8, capped at the limit."""
    out = []
    for i in range(1, count + 1):
        part = math.ceil(limit * i / count)
        out.append(min(limit, 8 * math.ceil(part / 8)))
    return tuple(sorted(set(out)))


@pytest.mark.parametrize("limit", [8, 10, 64, 100, 128, 129, 384, 512])
@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 16])
def test_bucket_widths_are_the_limits_equal_parts_rounded_to_eight(limit, count):
    widths = bucket_widths(limit, count)
    assert widths == widths_restated(limit, count)
    assert widths[-1] == limit and len(widths) <= count


def test_the_four_buckets_of_128_tokens():
    assert bucket_widths(128, 4) == (32, 64, 96, 128)


def test_a_batch_takes_the_smallest_width_that_holds_it():
    widths = (32, 64, 96, 128)
    assert [static_width(n, widths) for n in (1, 32, 33, 64, 65, 128)] == [32, 32, 64, 64, 96, 128]
    assert static_width(17, ()) is None  # no buckets: pad to the longest row
    assert static_width(140, widths) == 140  # longer than every width: as long as itself


@pytest.fixture(scope="module")
def bucketed(sample_data_dir, tiny_encoder, tmp_path_factory):
    root = tmp_path_factory.mktemp("bucketed")
    cfg = run_config(sample_data_dir, tiny_encoder, root / "run", pad_to="buckets",
                     tasks=["rte", "mrpc", "stsb", "sst2"], max_seq_len=100)
    return set_up(cfg)


def test_training_batches_come_in_the_bucket_widths_only(bucketed):
    widths = bucket_widths(100, 4)
    assert widths == (32, 56, 80, 100)
    seen = set()
    for plan in bucketed.plans.values():
        for task, indices in plan:
            data = bucketed.data[task]
            batch = data.collate(data.train, indices, bucketed.pad_id)
            width = batch["input_ids"].shape[1]
            longest = int(batch["attention_mask"].sum(1).max())
            assert width in widths and width == min(w for w in widths if w >= longest)
            seen.add(width)
    assert len(seen) >= 2  # the sample's rows are not all one length


def test_a_bucketed_batch_is_the_longest_padded_batch_with_more_padding(bucketed):
    data = bucketed.data["mrpc"]
    indices = np.arange(16)
    static = data.collate(data.train, indices, bucketed.pad_id)
    widths, data.train_widths = data.train_widths, ()
    try:
        plain = data.collate(data.train, indices, bucketed.pad_id)
    finally:
        data.train_widths = widths
    longest = plain["input_ids"].shape[1]
    assert static["input_ids"].shape[1] >= longest
    for name in ("input_ids", "token_type_ids", "attention_mask"):
        assert torch.equal(static[name][:, :longest], plain[name])
    assert (static["input_ids"][:, longest:] == bucketed.pad_id).all()
    assert (static["attention_mask"][:, longest:] == 0).all()
    assert torch.equal(static["labels"], plain["labels"])


def test_dev_batches_take_the_dev_limits_widths(sample_data_dir, tiny_encoder, tmp_path):
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", pad_to="buckets",
                     max_seq_len=64, eval_max_seq_len=128)
    run = set_up(cfg)
    data = run.data["rte"]
    assert data.train_widths == (16, 32, 48, 64)
    assert data.eval_widths == (32, 64, 96, 128)
    dev = data.evals["dev"]
    batch = data.collate(dev, np.arange(8), run.pad_id)
    assert batch["input_ids"].shape[1] in data.eval_widths


def test_dev_scores_do_not_depend_on_the_padding(bucketed):
    """The same model scores every dev split the same, padded to buckets or to the longest."""
    static = evaluate(bucketed.model, bucketed.data, bucketed.runtime, 8, bucketed.pad_id)
    saved = {name: d.eval_widths for name, d in bucketed.data.items()}
    for d in bucketed.data.values():
        d.eval_widths = ()
    try:
        plain = evaluate(bucketed.model, bucketed.data, bucketed.runtime, 8, bucketed.pad_id)
    finally:
        for name, d in bucketed.data.items():
            d.eval_widths = saved[name]
    assert static.keys() == plain.keys()
    for task in plain:
        for metric, value in plain[task].items():
            assert static[task][metric] == pytest.approx(value, abs=1e-5), (task, metric)


def test_multiple_choice_batches_pad_every_choice_to_the_width(tmp_path):
    from weightsearch.trainer.heads import head_class

    head = head_class("multiple_choice")
    import pyarrow as pa

    table = pa.table({
        "input_ids": pa.array([[[1, 2, 3], [4, 5]], [[6], [7, 8, 9, 10]]]),
        "token_type_ids": pa.array([[[0, 0, 1], [0, 1]], [[0], [0, 0, 1, 1]]],
                                   type=pa.list_(pa.list_(pa.int8()))),
        "choice_length": pa.array([[3, 2], [1, 4]]),
        "length": pa.array([3, 4]),
        "label": pa.array([0, 1]),
    })
    batch = head.collate(table, 0, 8)
    assert batch["input_ids"].shape == (4, 8)
    assert batch["attention_mask"].sum(1).tolist() == [3, 2, 1, 4]
    assert batch["input_ids"][3].tolist() == [7, 8, 9, 10, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="shorter than the longest row"):
        head.collate(table, 0, 3)


def no_dropout_encoder(tmp_path) -> str:
    """A tiny encoder without dropout: its training steps then depend on the padding only
    through float rounding (dropout masks are drawn per padded position)."""
    from tests.compat.tiny_encoder import build

    path = build(tmp_path / "encoder", hidden=32, layers=2, heads=4, intermediate=64,
                 positions=256)
    config_file = tmp_path / "encoder" / "config.json"
    config = json.loads(config_file.read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config_file.write_text(json.dumps(config))
    return path


@pytest.mark.slow
def test_a_run_padded_to_buckets_trains_as_one_padded_to_the_longest(sample_data_dir, tmp_path):
    encoder = no_dropout_encoder(tmp_path)
    tasks = [{"preset": name, "dropout": 0.0} for name in ("rte", "mrpc", "stsb")]
    results = {}
    for pad_to in ("longest", "buckets"):
        cfg = run_config(sample_data_dir, encoder, tmp_path / pad_to, pad_to=pad_to, tasks=tasks)
        train(cfg, quiet=True)
        results[pad_to] = [json.loads(line) for line in
                           (tmp_path / pad_to / "steps.jsonl").read_text().splitlines()]
    for plain, static in zip(results["longest"], results["buckets"], strict=True):
        assert static["task"] == plain["task"]
        assert static["loss"] == pytest.approx(plain["loss"], rel=1e-4, abs=1e-5)
        assert static["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-3, abs=1e-5)


def test_pad_settings_are_checked(sample_data_dir, tiny_encoder, tmp_path):
    base = {"encoder": tiny_encoder, "data_dir": str(sample_data_dir), "tasks": ["rte"],
            "central_task": "rte", "output_dir": str(tmp_path / "run")}
    with pytest.raises(ConfigError, match="pad_to"):
        load_config({**base, "pad_to": "static"})
    with pytest.raises(ConfigError, match="pad_buckets"):
        load_config({**base, "pad_buckets": 0})
    assert load_config(base).pad_to == "auto"
    assert "pad_to" not in load_config(base).to_dict()  # at its default: not written
