"""A fused unit's stacked optimizer step (`weightsearch.trainer.stacked_optim`) against each
member's own clip and optimizer step, on random gradients: every optimizer kind the trainer
offers, with and without weight decay, both clipping modes, members at different learning
rates, a member left out of a step (its slice of the gradient NaN: nothing of it moves), a head
without a gradient, state taken over from a member that stepped alone first, a member whose
optimizer steps a weighting scheme's own parameter (stepped alone), checkpoints of the
members' optimizers as compact as a stand-alone run's, and a loaded or copied state taken
over. End to end, fused runs under AdamW and RAdam (the fused tests' runs use Adamax) train as
their stand-alone runs."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from tests.helpers import run_config
from weightsearch.trainer import train, train_fused
from weightsearch.trainer.clipping import clip_gradient
from weightsearch.trainer.fused import StackedModels
from weightsearch.trainer.optim import build_optimizer, portable_state
from weightsearch.trainer.stacked_optim import own_state, stacked_optimizer, step_members

K = 3
WEIGHTS = (1.0, 5.0, 9.0)
# Per step: the members that update, and whether the head has a gradient.
PLAN = [((0, 1, 2), True), ((0, 2), True), ((0, 1, 2), False), ((1, 2), True),
        ((0, 1, 2), True)]
OPTIMIZERS = {"adamw": {"optimizer": "adamw"}, "radam": {"optimizer": "radam"},
              "adamax": {"optimizer": "adamax"},
              "adamax-uncorrected": {"optimizer": "adamax",
                                     "adamax": {"bias_correction": False, "eps": 1e-6}}}


@dataclasses.dataclass
class Run:
    """What a member's step reads of its run: its config, model and optimizer."""

    cfg: Any
    model: nn.Module
    optimizer: torch.optim.Optimizer


def model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Embedding(7, 5), nn.Linear(5, 4), nn.LayerNorm(4), nn.Linear(4, 2))


def members(cfg, extra: int | None = None, rates_apart: bool = True) -> list[Run]:
    """K members of `cfg`; `rates_apart`: each at a learning rate of its own, as members at
    different points of their schedules (else every update whose step counts agree takes the
    whole stacked tensors); `extra`: that member's optimizer steps a parameter of its own."""
    runs = []
    for k in range(K):
        net = model(k)
        learned = [{"params": [nn.Parameter(torch.ones(2))]}] if k == extra else []
        optimizer = build_optimizer(net, cfg, torch.device("cpu"), learned)
        for group in optimizer.param_groups if rates_apart else ():
            group["lr"] *= 1 + k
        runs.append(Run(cfg, net, optimizer))
    return runs


def gradients(step: int, has_head: bool) -> dict[str, torch.Tensor | None]:
    generator = torch.Generator().manual_seed(100 + step)
    shapes = {n: p.shape for n, p in model(0).named_parameters()}
    return {n: None if n.startswith("3.") and not has_head
            else torch.randn(K, *shape, generator=generator) * (0.1 + step)
            for n, shape in shapes.items()}


def extra_gradient(run: Run, step: int) -> None:
    learned = run.optimizer.param_groups[-1]["params"][0]
    if len(run.optimizer.param_groups) > 2:
        learned.grad = torch.full_like(learned, 0.5 + step)


def step_alone(runs: list[Run], step: int, has_head: bool, updating) -> list:
    """Each updating member's own clip and optimizer step: what fused runs did before."""
    readings = []
    grads = gradients(step, has_head)
    for k in updating:
        run = runs[k]
        run.optimizer.zero_grad(set_to_none=True)
        for name, p in run.model.named_parameters():
            grad = grads[name]
            p.grad = None if grad is None else grad[k].clone()
        extra_gradient(run, step)
        norm, scale = clip_gradient(run.model.parameters(), run.cfg.grad_clip,
                                    run.cfg.grad_clip_mode, WEIGHTS[k])
        run.optimizer.step()
        readings.append((norm, scale))
    return readings


def step_stacked(stack: StackedModels, runs: list[Run], step: int, has_head: bool,
                 updating) -> list:
    grads = gradients(step, has_head)
    stack.clear_gradients()
    for k in updating:
        runs[k].optimizer.zero_grad(set_to_none=True)
        extra_gradient(runs[k], step)
    for name, stacked in stack.stacked.items():
        grad = grads[name]
        if grad is not None:
            grad = grad.clone()
            for k in set(range(K)) - set(updating):
                grad[k] = float("nan")  # whatever the wide model left there: never read
        stacked.grad = grad
    return step_members(stack, [(k, runs[k], WEIGHTS[k]) for k in updating])


def assert_same(alone: list[Run], fused: list[Run]) -> None:
    for ours, theirs in zip(fused, alone, strict=True):
        for (name, p), q in zip(ours.model.named_parameters(), theirs.model.parameters(),
                                strict=True):
            torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=name)
        mine, yours = ours.optimizer.state_dict(), theirs.optimizer.state_dict()
        assert mine["state"].keys() == yours["state"].keys()
        for index, state in yours["state"].items():
            assert mine["state"][index].keys() == state.keys()
            for key, value in state.items():
                torch.testing.assert_close(mine["state"][index][key], value, rtol=1e-6,
                                           atol=1e-7, check_device=False)


@pytest.mark.parametrize("rates_apart", [False, True])
@pytest.mark.parametrize("mode", ["global", "unweighted"])
@pytest.mark.parametrize("decay", [0.0, 0.01])
@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_one_stacked_step_is_each_members_own_step(kind, decay, mode, rates_apart,
                                                   sample_data_dir, tiny_encoder, tmp_path):
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", weight_decay=decay,
                     grad_clip_mode=mode, grad_clip=2.0, **OPTIMIZERS[kind])
    alone, fused = (members(cfg, rates_apart=rates_apart) for _ in range(2))
    # Every member's first update alone: the stacked optimizer takes over its state.
    for runs in (alone, fused):
        step_alone(runs, 0, True, range(K))
    stack = StackedModels([run.model for run in fused])
    stepper = stacked_optimizer(stack)
    for step, (updating, has_head) in enumerate(PLAN, start=1):
        left_out = [copy.deepcopy((r.model.state_dict(), r.optimizer.state_dict()))
                    for k, r in enumerate(fused) if k not in updating]
        theirs = step_alone(alone, step, has_head, updating)
        ours = step_stacked(stack, fused, step, has_head, updating)
        assert all(stepper.serves(k, fused[k]) for k in range(K))
        for (norm, scale), (their_norm, their_scale) in zip(ours, theirs, strict=True):
            torch.testing.assert_close(norm, their_norm, rtol=1e-6, atol=0)
            torch.testing.assert_close(scale, their_scale, rtol=1e-6, atol=0)
        assert_same(alone, fused)
        still = [(r.model.state_dict(), r.optimizer.state_dict())
                 for k, r in enumerate(fused) if k not in updating]
        for (weights, state), (now, state_now) in zip(left_out, still, strict=True):
            for name, tensor in weights.items():
                assert torch.equal(now[name], tensor), name  # not moved at all
            assert repr(state_now) == repr(state)
    assert any(s < 1 for _, s in ours)  # some member's step was clipped


def test_a_member_whose_optimizer_steps_more_than_its_model_steps_alone(
        sample_data_dir, tiny_encoder, tmp_path):
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", weight_decay=0.01)
    alone, fused = members(cfg, extra=1), members(cfg, extra=1)
    stack = StackedModels([run.model for run in fused])
    for step, (updating, has_head) in enumerate(PLAN):
        step_alone(alone, step, has_head, updating)
        step_stacked(stack, fused, step, has_head, updating)
    stepper = stacked_optimizer(stack)
    assert [stepper.serves(k, fused[k]) for k in range(K)] == [True, False, True]
    assert_same(alone, fused)


def test_a_members_checkpointed_optimizer_state_is_its_own_slices_only(
        sample_data_dir, tiny_encoder, tmp_path):
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run")
    alone, fused = members(cfg), members(cfg)
    stack = StackedModels([run.model for run in fused])
    for step, (updating, has_head) in enumerate(PLAN):
        step_alone(alone, step, has_head, updating)
        step_stacked(stack, fused, step, has_head, updating)
    ours, theirs = (io.BytesIO(), io.BytesIO())
    torch.save(portable_state(fused[0].optimizer), ours)
    torch.save(portable_state(alone[0].optimizer), theirs)
    assert len(ours.getvalue()) == len(theirs.getvalue())
    # Loading a checkpoint replaces the member's state: the stacked optimizer takes it over.
    ours.seek(0)
    fused[0].optimizer.load_state_dict(torch.load(ours, weights_only=True))
    step_alone(alone, len(PLAN), True, range(K))
    step_stacked(stack, fused, len(PLAN), True, range(K))
    assert_same(alone, fused)
    # A member leaving the stack takes copies of its state; still served, it is taken over.
    own_state(fused[1].optimizer)
    assert all(t.untyped_storage().nbytes() == t.numel() * t.element_size()
               for state in fused[1].optimizer.state.values() for t in state.values())
    step_alone(alone, len(PLAN) + 1, True, range(K))
    step_stacked(stack, fused, len(PLAN) + 1, True, range(K))
    assert_same(alone, fused)


def step_log(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["adamw", "radam"])
def test_fused_members_under_adamw_and_radam_train_as_their_stand_alone_runs(
        kind, sample_data_dir, tiny_encoder, tmp_path):
    """End to end, the kinds the fused tests' default (Adamax) leaves out, with weight decay and
    unweighted clipping: every update's readings and the final weights, fused against alone."""
    def configs(tag: str) -> list:
        return [run_config(sample_data_dir, tiny_encoder, tmp_path / f"{tag}-{w}",
                           weighting={"scheme": "siwlm", "central_weight": w, "focus_span": 2},
                           optimizer=kind, weight_decay=0.01, grad_clip_mode="unweighted",
                           epochs=1, checkpoints="final")
                for w in (1, 9)]

    for cfg in configs("alone"):
        train(cfg, quiet=True)
    assert not any(isinstance(r, BaseException) for r in train_fused(configs("fused"),
                                                                      quiet=True))
    for ours, theirs in zip(configs("fused"), configs("alone"), strict=True):
        fused, alone = Path(ours.output_dir), Path(theirs.output_dir)
        for mine, yours in zip(step_log(fused), step_log(alone), strict=True):
            for key in ("loss", "grad_norm", "clip_scale"):
                assert mine[key] == pytest.approx(yours[key], rel=1e-5, abs=1e-7), key
        final = "checkpoints/epoch-001/model.safetensors"
        ours_w, theirs_w = load_file(str(fused / final)), load_file(str(alone / final))
        for name, tensor in theirs_w.items():
            torch.testing.assert_close(ours_w[name], tensor, rtol=1e-4, atol=1e-5)
