"""Members of a fused unit that train the same updates are trained once
(`weightsearch.trainer.same_treatment`): which updates count as the same treatment, the
readings a follower derives against the clip's own arithmetic, and on the real trainer with a
tiny encoder, a follower that matches its member trained in full (every update within 1e-6,
every epoch's weights), a follower released when its representative stops, and `all`."""

from __future__ import annotations

import gc
import math
from pathlib import Path

import pytest
import torch

from tests.helpers import run_config
from tests.trainer.test_fused import assert_same_run, siwlm, steps_of
from weightsearch.trainer import fused as fused_module
from weightsearch.trainer import train_fused
from weightsearch.trainer.clipping import clip_gradient
from weightsearch.trainer.fused import StackedModels
from weightsearch.trainer.same_treatment import follower_readings, same_epoch, same_update
from weightsearch.trainer.stage import StageRun

# In the tiny run every update of weights 9 and 15 has a norm above this clip (the smallest is
# rte's off-focus update at 0.9, ~0.37), while weight 1's off-focus rte updates (~0.04) do not
# reach it: 9 and 15 are one treatment, 1 is its own.
CLIP = 0.05
WEIGHTS = (1, 9, 15)


def row(weight: float, scale: float | None, skipped: bool = False) -> dict:
    return {"weight": weight, "clip_scale": scale, "skipped": skipped}


@pytest.mark.parametrize(("a", "b", "global_clip", "same"), [
    (row(9, 0.3), row(15, 0.2), True, True),  # both clipped: g/||g|| x clip for both
    (row(9, 0.3), row(15, 0.2), False, False),  # unweighted clipping keeps the weight
    (row(9, 1.0), row(15, 0.5), True, False),  # one unclipped: its step is 9 x g
    (row(1, 1.0), row(1, 1.0), False, True),  # the same weight: the same step in any mode
    (row(0, None, True), row(0, None, True), True, True),  # both skipped: no step
    (row(0, None, True), row(15, 0.2), True, False),  # only one stepped
    (row(9, math.nan), row(15, 0.2), True, False),  # a non-finite clip factor is no evidence
])
def test_which_updates_are_the_same_treatment(a, b, global_clip, same):
    assert same_update(a, b, global_clip) is same
    assert same_update(b, a, global_clip) is same
    assert same_epoch([a, a], [b, b], global_clip) is same
    assert not same_epoch([a], [b, b], global_clip)  # epochs of different lengths


@pytest.mark.parametrize(("grad_clip", "mode"), [(1.0, "global"), (0.05, "global"),
                                                 (1.0, "unweighted"), (0.0, "global")])
@pytest.mark.parametrize("weight", [1.0, 9.0, 15.0])
def test_a_follower_derives_the_readings_its_own_clip_would_give(grad_clip, mode, weight):
    """Against `clip_gradient` run on the follower's own weighted gradient."""
    torch.manual_seed(0)
    grads = [torch.randn(7, 3) * 0.01, torch.randn(5) * 0.02]
    rep_weight = 9.0

    def readings(w: float) -> torch.Tensor:
        params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        for p, g in zip(params, grads, strict=True):
            p.grad = g * w
        norm, scale = clip_gradient(params, grad_clip, mode, w)
        return torch.stack([torch.tensor(0.7), norm, scale])

    derived = follower_readings(readings(rep_weight), rep_weight, weight, False, grad_clip, mode)
    torch.testing.assert_close(derived, readings(weight), rtol=1e-6, atol=0)


def test_a_skipped_follower_update_reads_as_skipped():
    derived = follower_readings(torch.tensor([0.5, 2.0, 0.4]), 9.0, 0.0, True, 1.0, "global")
    assert derived[0] == 0.5 and derived[1:].isnan().all()


def _configs(sample_data_dir, tiny_encoder, root: Path, tag: str) -> list:
    return [run_config(sample_data_dir, tiny_encoder, root / f"{tag}-{w}", weighting=siwlm(w),
                       epochs=3, grad_clip=CLIP, checkpoints="all") for w in WEIGHTS]


@pytest.fixture(scope="module")
def every_member(tmp_path_factory, sample_data_dir, tiny_encoder) -> list[Path]:
    """The unit with every member trained in full (`same_treatment: all`)."""
    root = tmp_path_factory.mktemp("all")
    configs = _configs(sample_data_dir, tiny_encoder, root, "all")
    results = train_fused(configs, quiet=True, same_treatment="all")
    assert not any(isinstance(r, BaseException) for r in results)
    assert not any("same_treatment" in r.extra for r in results)
    return [Path(c.output_dir) for c in configs]


class StackSizes:
    """The number of members each stacked forward pass of the unit computes."""

    def __init__(self, monkeypatch) -> None:
        self.sizes: list[int] = []
        forward = fused_module.StackedModels.forward

        def counted(stack, task, batch):
            self.sizes.append(len(stack))
            return forward(stack, task, batch)

        monkeypatch.setattr(fused_module.StackedModels, "forward", counted)


@pytest.mark.slow
def test_members_of_one_treatment_train_once_and_match_their_full_runs(
        every_member, sample_data_dir, tiny_encoder, tmp_path, monkeypatch):
    stacks = StackSizes(monkeypatch)
    configs = _configs(sample_data_dir, tiny_encoder, tmp_path, "once")
    results = train_fused(configs, quiet=True)

    assert not any(isinstance(r, BaseException) for r in results)
    follows = [r.extra.get("same_treatment") for r in results]
    assert follows == [None, None, {"trained_by": str(configs[1].output_dir), "from_epoch": 2,
                                    "weights": {"rte": 9.0, "mrpc": 1.0, "stsb": 1.0}}]
    steps_per_epoch = len(steps_of(Path(configs[0].output_dir))) // 3
    # the probe's passes (two per task), the first epoch with all three, then two stacked
    assert stacks.sizes[-2 * steps_per_epoch:] == [2] * (2 * steps_per_epoch)
    assert stacks.sizes.count(3) == steps_per_epoch + 2 * 3
    for ours, theirs in zip(configs, every_member, strict=True):
        # every update's loss, gradient norm and clip factor, dev scores, weights per epoch
        assert_same_run(Path(ours.output_dir), theirs, (1, 2, 3), rel=1e-6, absolute=0)
    weight_15 = [s for s in steps_of(Path(configs[2].output_dir)) if s["task"] == "rte"]
    assert {s["weight"] for s in weight_15} == {15.0, 1.5}  # its own weights, in its log


@pytest.mark.slow
def test_a_follower_whose_representative_stops_trains_on_from_its_checkpoint(
        every_member, sample_data_dir, tiny_encoder, tmp_path):
    configs = _configs(sample_data_dir, tiny_encoder, tmp_path, "orphan")
    reported: dict[int, list[int]] = {w: [] for w in WEIGHTS}

    def report_of(weight):
        def report(epoch_report):
            reported[weight].append(epoch_report.epoch)
            if weight == 9 and epoch_report.epoch == 2:
                raise RuntimeError("stopped by its report")
        return report

    results = train_fused(configs, [report_of(w) for w in WEIGHTS], quiet=True)

    assert isinstance(results[1], RuntimeError)
    assert not isinstance(results[2], BaseException)
    # released at epoch 3, it trained that epoch itself (from its epoch-2 checkpoint): each
    # epoch reported once, and the run is the member trained in full
    assert reported == {1: [1, 2, 3], 9: [1, 2], 15: [1, 2, 3]}
    assert "same_treatment" not in results[2].extra
    assert_same_run(Path(configs[2].output_dir), every_member[2], (1, 2, 3), rel=1e-6,
                    absolute=0)


@pytest.mark.slow
def test_a_follower_whose_later_epoch_is_another_treatment_trains_that_epoch_itself(
        sample_data_dir, tiny_encoder, tmp_path, monkeypatch):
    """Seed 2's plans put every rte batch of epochs 1 and 2 in SIWLM's focus (weights 9 and
    15, both clipped at 1.0: one treatment) and one of epoch 3's off it (0.9 and 1.5, neither
    clipped): the follower is released at epoch 3's check and trains that epoch from its
    epoch-2 checkpoint, matching the member trained in full."""
    def configs(tag: str) -> list:
        return [run_config(sample_data_dir, tiny_encoder, tmp_path / f"{tag}-{w}",
                           tasks=["rte", "mrpc"], max_train_examples=32, epochs=3, seed=2,
                           weighting={**siwlm(w), "focus_span": 1}, checkpoints="all")
                for w in (9, 15)]

    full = configs("all")
    assert not any(isinstance(r, BaseException)
                   for r in train_fused(full, quiet=True, same_treatment="all"))
    rte_off_focus = [(s["epoch"], s["weight"], s["clip_scale"])
                     for s in steps_of(Path(full[0].output_dir))
                     if s["task"] == "rte" and s["weight"] < 9]
    assert [e for e, *_ in rte_off_focus] == [3] and rte_off_focus[0][2] == 1.0  # unclipped
    stacks = StackSizes(monkeypatch)
    once = configs("once")
    reported: dict[int, list[int]] = {0: [], 1: []}
    results = train_fused(once, [lambda r, k=k: reported[k].append(r.epoch) for k in (0, 1)],
                          quiet=True)

    assert not any(isinstance(r, BaseException) for r in results)
    assert reported == {0: [1, 2, 3], 1: [1, 2, 3]}
    steps = len(steps_of(Path(full[0].output_dir))) // 3
    assert stacks.sizes.count(2) == steps + 2 * 2  # the probe and epoch 1 only
    assert "same_treatment" not in results[1].extra  # released, it trained its last epoch
    assert results[1].extra["fused_members"] == 2
    for ours, theirs in zip(once, full, strict=True):
        assert_same_run(Path(ours.output_dir), Path(theirs.output_dir), (1, 2, 3), rel=1e-6,
                        absolute=0)


def clipped_pair(sample_data_dir, tiny_encoder, root: Path, tag: str, epochs: int = 2,
                 precision: str = "fp32", **weighting) -> list:
    """Weights 9 and 15 on rte and mrpc: every update of both is clipped at CLIP, so weight 15
    follows weight 9 from epoch 2."""
    return [run_config(sample_data_dir, tiny_encoder, root / f"{tag}-{w}",
                       weighting={**siwlm(w), **weighting}, tasks=["rte", "mrpc"],
                       max_train_examples=32, epochs=epochs, grad_clip=CLIP, precision=precision)
            for w in (9, 15)]


@pytest.mark.slow
def test_a_unit_whose_members_follow_frees_the_stack_they_left(sample_data_dir, tiny_encoder,
                                                               tmp_path):
    """The first stack (K members' parameters and stacked optimizer state) goes once the unit
    stacks its representatives alone; kept, it doubled the unit's memory from then on."""
    live: dict[int, list[int]] = {}

    def report(epoch_report):
        gc.collect()
        live[epoch_report.epoch] = [len(o) for o in gc.get_objects()
                                    if isinstance(o, StackedModels)]

    results = train_fused(clipped_pair(sample_data_dir, tiny_encoder, tmp_path, "mem"),
                          [report, None], quiet=True)
    assert "same_treatment" in results[1].extra
    assert live == {1: [2], 2: [1]}


@pytest.mark.slow
def test_members_of_a_unit_that_ends_after_its_first_epoch_follow_no_one(
        sample_data_dir, tiny_encoder, tmp_path):
    """Grouped after the last epoch, the record said weight 15 followed weight 9 from an epoch
    that never came (and a study showed it trained by another cell)."""
    results = train_fused(clipped_pair(sample_data_dir, tiny_encoder, tmp_path, "one", epochs=1),
                          quiet=True)
    assert not any(isinstance(r, BaseException) for r in results)
    assert not any("same_treatment" in r.extra for r in results)


@pytest.mark.slow
def test_a_follower_under_the_paper_variant_names_its_representatives_weights(
        sample_data_dir, tiny_encoder, tmp_path):
    """SIWLM's paper variant has no nominal weights for the clipping summary (its focus batches
    train at 1), but the study set its central weight all the same: the record named none, and
    the sweep said "as weight None"."""
    results = train_fused(clipped_pair(sample_data_dir, tiny_encoder, tmp_path, "paper",
                                       variant="paper"), quiet=True)
    assert results[1].extra["same_treatment"]["weights"] == {"rte": 9.0, "mrpc": 1.0}


@pytest.mark.slow
def test_members_under_bf16_autocast_follow_no_one(sample_data_dir, tiny_encoder, tmp_path):
    """bf16 rounds a weighted gradient differently for each weight, so members clipped alike
    still end the first epoch apart (3e-5 on this run, beyond the states' agreement): none
    follows, and each trains its own bf16 run. What `precision: auto` gives on a GPU."""
    results = train_fused(clipped_pair(sample_data_dir, tiny_encoder, tmp_path, "bf16",
                                       precision="bf16"), quiet=True)
    assert not any(isinstance(r, BaseException) for r in results)
    assert not any("same_treatment" in r.extra for r in results)


@pytest.mark.slow
def test_a_released_follower_retrains_with_no_run_of_the_unit_left_alive(
        sample_data_dir, tiny_encoder, tmp_path):
    """While a released follower trains on, nothing of the unit it left stays alive but its
    results: the last member's run (its model, optimizer state and data) did, in the frame
    that trains the released ones."""
    alive: dict[int, int] = {}

    def stop(epoch_report):
        if epoch_report.epoch == 2:
            raise RuntimeError("stopped by its report")

    def count(epoch_report):
        gc.collect()
        alive[epoch_report.epoch] = sum(isinstance(o, StageRun) for o in gc.get_objects())

    results = train_fused(clipped_pair(sample_data_dir, tiny_encoder, tmp_path, "left",
                                       epochs=3), [stop, count], quiet=True)
    assert isinstance(results[0], RuntimeError) and "same_treatment" not in results[1].extra
    assert alive == {1: 2, 2: 2, 3: 1}  # epoch 3: the released follower's own run alone
