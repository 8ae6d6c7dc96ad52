"""Checkpoints that cannot run code and cannot be silently damaged: a crafted `state.pt` is
never unpickled (init_from and teachers do not read it at all; a resume refuses it by name),
and bytes changed inside the tensor data after the write are caught by the digest written with
the checkpoint, the previous intact checkpoint used instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers import run_config
from weightsearch.core.files import file_digest
from weightsearch.trainer import train
from weightsearch.trainer.checkpoint import latest_checkpoint


class _Planted:
    """Unpickling this touches `marker`: what a crafted state.pt could do instead."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _two_epoch_run(sample_data_dir, tiny_encoder, out: Path):
    cfg = run_config(sample_data_dir, tiny_encoder, out, tasks=["rte"], central_task="rte",
                     weighting=None, checkpoints="all", max_train_examples=32)
    train(cfg, quiet=True)
    return cfg


def _plant(checkpoint: Path, marker: Path) -> None:
    """Replace state.pt by a crafted pickle and its digest by the crafted file's, as someone
    handing over a run folder could."""
    state = checkpoint / "state.pt"
    torch.save({"optimizer": _Planted(marker), "scheduler": {}, "rng": {}}, state)
    meta = json.loads((checkpoint / "meta.json").read_text())
    meta["digests"]["state.pt"] = file_digest(state)
    (checkpoint / "meta.json").write_text(json.dumps(meta))


@pytest.mark.slow  # a tiny end-to-end run: several CPU-seconds
def test_a_crafted_state_file_is_never_unpickled(sample_data_dir, tiny_encoder, tmp_path,
                                                 capsys):
    out = tmp_path / "shared-run"
    cfg = _two_epoch_run(sample_data_dir, tiny_encoder, out)
    marker = tmp_path / "code-ran"
    for epoch in ("epoch-001", "epoch-002"):
        _plant(out / "checkpoints" / epoch, marker)
    # init_from reads the weights alone.
    train(cfg.replace(output_dir=str(tmp_path / "from-it"), init_from=str(out), epochs=1),
          quiet=True)
    assert not marker.exists()
    # A resume needs the state, and refuses it unread.
    ckpt = latest_checkpoint(out, warn=print)
    said = capsys.readouterr().out
    assert ckpt is None and not marker.exists()
    assert said.count("refused unread") == 2 and "state.pt" in said


@pytest.mark.slow  # a tiny end-to-end run: several CPU-seconds
def test_bytes_changed_inside_the_tensor_data_are_caught(sample_data_dir, tiny_encoder,
                                                         tmp_path):
    out = tmp_path / "run"
    _two_epoch_run(sample_data_dir, tiny_encoder, out)
    weights = out / "checkpoints" / "epoch-002" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    middle = len(data) // 2  # far past the header: it still parses
    data[middle:middle + 64] = bytes(64)
    weights.write_bytes(bytes(data))
    warned: list[str] = []
    ckpt = latest_checkpoint(out, warn=warned.append)
    assert ckpt is not None and ckpt.epoch == 1
    assert len(warned) == 1 and str(weights) in warned[0] and "SHA-256" in warned[0]
    # init_from checks the same digest.
    assert latest_checkpoint(out, warn=warned.append, with_state=False).epoch == 1


def test_checkpoints_written_before_digests_still_read(sample_data_dir, tiny_encoder, tmp_path):
    out = tmp_path / "run"
    _two_epoch_run(sample_data_dir, tiny_encoder, out)
    meta_file = out / "checkpoints" / "epoch-002" / "meta.json"
    meta = json.loads(meta_file.read_text())
    del meta["digests"]
    meta_file.write_text(json.dumps(meta))
    ckpt = latest_checkpoint(out, warn=pytest.fail)
    assert ckpt is not None and ckpt.epoch == 2 and set(ckpt.state) >= {"optimizer", "rng"}
