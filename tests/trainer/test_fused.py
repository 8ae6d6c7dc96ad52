"""Fused runs (`weightsearch.trainer.fused`): every member of a unit trains as its stand-alone run
with the same seed does, to float tolerance, on the real trainer with a tiny encoder: SIWLM
weight grids over classification (rte, mrpc) and regression (stsb) heads, over one task of each
head kind for 3 epochs (every update within 1e-6), a member stopped by its report, a member that
skips the batches of weight 0, and a unit resumed with its members at different epochs; a unit
trains under bf16 autocast."""

from __future__ import annotations

import gc
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import QA_SAMPLE, run_config
from weightsearch.trainer import train, train_fused
from weightsearch.trainer.fused import CannotFuse, StackedModels

WEIGHTS = (1, 9, 15)
STEP_READINGS = ("loss", "grad_norm", "clip_scale")
REL = 1e-6  # every update's readings, fused against stand-alone, over 3 epochs
SHIFT_INVARIANT = ("squad2.proj.bias", "san.summary.bias")


def siwlm(weight: float) -> dict:
    return {"scheme": "siwlm", "central_weight": weight, "focus_span": 2}


def member_configs(sample_data_dir, tiny_encoder, root: Path, tag: str,
                   weightings=None, **extra) -> list:
    weightings = weightings or [siwlm(w) for w in WEIGHTS]
    return [run_config(sample_data_dir, tiny_encoder, root / f"{tag}-{i}", weighting=weighting,
                       checkpoints="all", **extra)
            for i, weighting in enumerate(weightings)]


@pytest.fixture(scope="module")
def alone(tmp_path_factory, sample_data_dir, tiny_encoder) -> list[Path]:
    """The three SIWLM runs of the grid, each trained on its own (every checkpoint kept)."""
    root = tmp_path_factory.mktemp("alone")
    configs = member_configs(sample_data_dir, tiny_encoder, root, "alone")
    for cfg in configs:
        train(cfg, quiet=True)
    return [Path(cfg.output_dir) for cfg in configs]


def weights_of(folder: Path, epoch: int) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "checkpoints" / f"epoch-{epoch:03d}" / "model.safetensors"))


def steps_of(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines()]


def metrics_of(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def assert_same_run(fused: Path, alone: Path, epochs: tuple[int, ...] = (1, 2),
                    rel: float = 1e-4, absolute: float = 1e-6) -> None:
    """The fused member trained as the stand-alone run: each update's loss, gradient norm and
    clip factor (within `rel`), each epoch's dev scores and the weights at each epoch's end."""
    fused_steps, alone_steps = steps_of(fused), steps_of(alone)
    assert [(s["task"], s["weight"], s["skipped"]) for s in fused_steps] == \
        [(s["task"], s["weight"], s["skipped"]) for s in alone_steps]
    for ours, theirs in zip(fused_steps, alone_steps, strict=True):
        for key in STEP_READINGS:
            if theirs[key] is None:
                assert ours[key] is None
            else:
                assert ours[key] == pytest.approx(theirs[key], rel=rel, abs=absolute), key
    for ours, theirs in zip(metrics_of(fused), metrics_of(alone), strict=True):
        assert (ours["epoch"], ours["task"]) == (theirs["epoch"], theirs["task"])
        assert ours["primary"] == pytest.approx(theirs["primary"], abs=1e-4)
    for epoch in epochs:
        ours, theirs = weights_of(fused, epoch), weights_of(alone, epoch)
        assert ours.keys() == theirs.keys()
        for name in theirs:
            # A bias added before a softmax over tokens has a gradient of zero up to rounding,
            # which Adamax scales to steps of about lr: it drifts by about lr over a run.
            drifts = name.endswith(SHIFT_INVARIANT)
            torch.testing.assert_close(ours[name], theirs[name], rtol=1e-4,
                                       atol=1e-4 if drifts else 1e-5)


@pytest.mark.slow
def test_each_member_of_a_fused_siwlm_grid_trains_as_its_stand_alone_run(
        alone, sample_data_dir, tiny_encoder, tmp_path):
    configs = member_configs(sample_data_dir, tiny_encoder, tmp_path, "fused")
    results = train_fused(configs, quiet=True)

    for cfg, result, theirs in zip(configs, results, alone, strict=True):
        assert not isinstance(result, BaseException), result
        assert result.extra["fused_members"] == len(WEIGHTS)
        assert (Path(cfg.output_dir) / "result.json").is_file()
        assert_same_run(Path(cfg.output_dir), theirs)
    # The weights changed the training: the members moved apart, far more than a member is
    # from its stand-alone run.
    low, high = (weights_of(Path(c.output_dir), 2) for c in (configs[0], configs[2]))
    apart = max((low[n] - high[n]).abs().max().item() for n in low)
    drift = max((low[n] - weights_of(alone[0], 2)[n]).abs().max().item() for n in low)
    assert apart > 100 * drift


# One task of each head kind: classification, regression, SAN, span QA (windows of 128 tokens:
# the tiny encoder has 256 positions).
EVERY_HEAD = ["rte", "stsb", {"preset": "mrpc", "head": "san"},
              {"preset": "squad2", "data_dir": str(QA_SAMPLE), "max_seq_len": 128,
               "doc_stride": 48, "max_query_len": 32}]


@pytest.mark.slow
def test_members_over_every_head_kind_train_as_their_stand_alone_runs_for_3_epochs(
        sample_data_dir, tiny_encoder, tmp_path):
    extra = {"tasks": EVERY_HEAD, "epochs": 3, "max_seq_len": 64, "max_train_examples": 32,
             "max_eval_examples": 16}
    lone = member_configs(sample_data_dir, tiny_encoder, tmp_path, "alone", **extra)
    for cfg in lone:
        train(cfg, quiet=True)
    fused = member_configs(sample_data_dir, tiny_encoder, tmp_path, "fused", **extra)
    results = train_fused(fused, quiet=True)

    assert not any(isinstance(r, BaseException) for r in results)
    for ours, theirs in zip(fused, lone, strict=True):
        assert_same_run(Path(ours.output_dir), Path(theirs.output_dir), (1, 2, 3),
                        rel=REL, absolute=0)


@pytest.mark.slow
def test_a_fused_unit_trains_under_bf16_autocast(sample_data_dir, tiny_encoder, tmp_path):
    configs = member_configs(sample_data_dir, tiny_encoder, tmp_path, "fused",
                             precision="bf16", epochs=1)
    results = train_fused(configs, quiet=True)

    assert not any(isinstance(r, BaseException) for r in results)
    assert all(s["loss"] > 0 for c in configs for s in steps_of(Path(c.output_dir)))


@pytest.mark.slow
def test_a_member_stopped_by_its_report_ends_alone(alone, sample_data_dir, tiny_encoder,
                                                   tmp_path):
    class Stop(Exception):
        pass

    def stop_after_first_epoch(report):
        if report.epoch == 1:
            raise Stop("halved")

    configs = member_configs(sample_data_dir, tiny_encoder, tmp_path, "fused")
    results = train_fused(configs, reports=[None, stop_after_first_epoch, None], quiet=True)

    assert isinstance(results[1], Stop)
    # Returned without its traceback, whose frames would keep every member's model alive.
    assert results[1].__traceback__ is None
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, StackedModels)]
    stopped = Path(configs[1].output_dir)
    assert not (stopped / "result.json").exists()
    assert sorted(p.name for p in (stopped / "checkpoints").iterdir()) == ["epoch-001"]
    first_epoch = [s for s in steps_of(alone[1]) if s["epoch"] == 1]
    assert [s["loss"] for s in steps_of(stopped)] == \
        pytest.approx([s["loss"] for s in first_epoch], rel=1e-4)
    for name, tensor in weights_of(alone[1], 1).items():
        torch.testing.assert_close(weights_of(stopped, 1)[name], tensor, rtol=1e-4, atol=1e-5)
    for k in (0, 2):
        assert_same_run(Path(configs[k].output_dir), alone[k])


@pytest.mark.slow
def test_a_member_skips_its_weight_0_batches_while_the_others_train(
        sample_data_dir, tiny_encoder, tmp_path):
    weightings = [{"scheme": "static", "weights": {"rte": 0}}, siwlm(9)]
    fused = member_configs(sample_data_dir, tiny_encoder, tmp_path, "fused", weightings)
    # What a member does on its own (evaluation, checkpoints) may differ within a unit.
    fused[1] = fused[1].replace(eval_batch_size=8, checkpoints="final")
    lone = member_configs(sample_data_dir, tiny_encoder, tmp_path, "alone", weightings[:1])
    train(lone[0], quiet=True)
    results = train_fused(fused, quiet=True)

    assert not any(isinstance(r, BaseException) for r in results)
    skipped = [s for s in steps_of(Path(fused[0].output_dir)) if s["skipped"]]
    assert skipped and {s["task"] for s in skipped} == {"rte"}
    assert not any(s["skipped"] for s in steps_of(Path(fused[1].output_dir)))
    assert_same_run(Path(fused[0].output_dir), Path(lone[0].output_dir))


@pytest.mark.slow
def test_a_unit_resumed_with_members_at_different_epochs_ends_as_the_stand_alone_runs(
        alone, sample_data_dir, tiny_encoder, tmp_path):
    configs = member_configs(sample_data_dir, tiny_encoder, tmp_path, "fused")
    train_fused(configs, quiet=True)
    # As if killed at different points: member 0 finished, member 1 after its first epoch's
    # checkpoint, member 2 before its first.
    behind = Path(configs[1].output_dir)
    shutil.rmtree(behind / "checkpoints" / "epoch-002")
    (behind / "result.json").unlink()
    shutil.rmtree(configs[2].output_dir)

    results = train_fused(configs, resume=True, quiet=True)

    assert not any(isinstance(r, BaseException) for r in results)
    for cfg, theirs in zip(configs, alone, strict=True):
        assert_same_run(Path(cfg.output_dir), theirs)


@pytest.mark.parametrize(("change", "named"), [
    ({"lr": 1e-4}, "lr"),
    ({"seed": 2}, "seed"),
    ({"adversarial": {"enabled": True}}, "adversarial"),
    ({"recompute_activations": True}, "recompute_activations"),
])
def test_runs_that_cannot_be_fused_are_refused_before_anything_is_written(
        change, named, sample_data_dir, tiny_encoder, tmp_path):
    configs = member_configs(sample_data_dir, tiny_encoder, tmp_path, "fused")
    configs[1] = run_config(sample_data_dir, tiny_encoder, Path(configs[1].output_dir),
                            weighting=siwlm(9), checkpoints="all", **change)
    if "seed" not in change and "lr" not in change:  # refused for every member, not as a difference
        configs = [run_config(sample_data_dir, tiny_encoder, Path(c.output_dir),
                              weighting=siwlm(w), **change)
                   for c, w in zip(configs, WEIGHTS, strict=True)]
    with pytest.raises(CannotFuse) as refused:
        train_fused(configs, quiet=True)
    assert named in str(refused.value)
    assert not any(Path(c.output_dir).exists() for c in configs)


def test_two_members_in_one_folder_are_refused(sample_data_dir, tiny_encoder, tmp_path):
    configs = [run_config(sample_data_dir, tiny_encoder, tmp_path / "same", weighting=siwlm(w))
               for w in (1, 9)]
    with pytest.raises(CannotFuse, match="output_dir"):
        train_fused(configs, quiet=True)
    assert not (tmp_path / "same").exists()
