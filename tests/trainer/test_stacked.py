"""The wide model of a fused unit (`weightsearch.trainer.stacked`): each member's outputs and
gradients are its own model's, in training mode too (dropout, attention dropout, SAN's draws:
the stand-alone run's masks, shared by every member), bf16 autocast runs through it, and a layer
that cannot be stacked is refused by name."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.helpers import QA_SAMPLE, run_config
from weightsearch.trainer import draws
from weightsearch.trainer.fused import NO_GRAPHS, CannotFuse, StackedModels
from weightsearch.trainer.loop import set_up
from weightsearch.trainer.stacked import stacked_attention, widen
from weightsearch.trainer.step import step_batch, task_loss

TASKS = ["rte", "stsb", {"preset": "mrpc", "head": "san"},
         {"preset": "squad2", "data_dir": str(QA_SAMPLE), "max_seq_len": 128, "doc_stride": 48,
          "max_query_len": 32},
         {"preset": "swag", "data_dir": str(QA_SAMPLE)}]
NAMES = ["rte", "stsb", "mrpc", "squad2", "swag"]


@pytest.fixture(scope="module")
def unit(tmp_path_factory, sample_data_dir, tiny_encoder):
    """A run (a mixture of experts on every head kind) and three members' models, made to
    differ, stacked."""
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path_factory.mktemp("stacked") / "run",
                     tasks=TASKS, max_seq_len=64, mixture={"experts": 2, "expert_hidden": 16})
    run = set_up(cfg, graphs=NO_GRAPHS)
    models = [run.model] + [copy.deepcopy(run.model) for _ in range(2)]
    torch.manual_seed(1)
    with torch.no_grad():
        for k, model in enumerate(models):
            for p in model.parameters():
                p.add_(0.02 * k * torch.randn_like(p))
    return run, models, StackedModels(models)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()


@pytest.mark.parametrize("task", NAMES)
def test_each_member_trains_as_its_own_model_on_the_same_draws(unit, task):
    run, models, stack = unit
    batch = step_batch(run, task, torch.arange(6).numpy())
    stack.lead.train()
    torch.manual_seed(7)
    outputs = stack.forward(task, batch)
    sum((k + 1) * task_loss(run, task, outputs[k], batch) for k in range(3)).backward()
    assert stack.last.attention_calls == 2  # both layers' attention dropout drew shared masks
    stack.share_gradients(range(3))
    fused = [{n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
             for m in models]
    stack.clear_gradients()
    for k, model in enumerate(models):
        model.train()
        torch.manual_seed(7)  # the same draws as the stacked pass: its masks are this run's
        alone = model(task, batch)
        ((k + 1) * task_loss(run, task, alone, batch)).backward()
        assert relative(outputs[k], alone) < 1e-5
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        assert grads.keys() == fused[k].keys()
        for name, grad in grads.items():
            torch.testing.assert_close(fused[k][name], grad, rtol=1e-4, atol=1e-6)
        model.zero_grad(set_to_none=True)


def test_dropout_draws_one_mask_for_every_member_the_stand_alone_runs():
    x = torch.randn(12, 5, 6)
    torch.manual_seed(3)
    alone = F.dropout(x[:4], 0.3, True)
    torch.manual_seed(3)
    with draws.stacked(3, 12):
        out = draws.dropout(x, 0.3, True)
    dropped = (out == 0).view(3, 4, 5, 6)
    assert dropped.any() and torch.equal(dropped[0], dropped[1]) and \
        torch.equal(dropped[0], dropped[2])
    assert torch.equal(out[:4], alone)  # to the last bit


def test_attention_dropout_draws_the_masks_of_sdpa_for_every_member():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 7, 8) for _ in range(3))
    mask = torch.ones(2, 1, 7, 7, dtype=torch.bool)
    mask[1, ..., 5:] = False
    torch.manual_seed(5)
    alone = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1)
    wide = [t.repeat(3, 1, 1, 1) for t in (q, k, v, mask)]
    torch.manual_seed(5)
    with draws.stacked(3, 6):
        out, _ = stacked_attention(nn.Module(), *wide, dropout=0.1)
    out = out.transpose(1, 2).view(3, 2, 4, 7, 8)
    for member in out:
        torch.testing.assert_close(member, alone, rtol=0, atol=1e-6)


@pytest.mark.parametrize("task", ["rte", "mrpc", "squad2"])
def test_bf16_autocast_runs_through_the_wide_model_close_to_fp32(unit, task):
    run, _, stack = unit
    batch = step_batch(run, task, torch.arange(4).numpy())
    stack.lead.eval()
    with torch.no_grad():
        exact = stack.forward(task, batch)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = stack.forward(task, batch)
    assert low.shape == exact.shape
    assert relative(low.float(), exact) < 0.05


class Toy(nn.Module):
    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.odd = layer


@pytest.mark.parametrize(("layer", "named"), [(nn.Conv1d(4, 4, 1), "odd (Conv1d)"),
                                              (nn.BatchNorm1d(4), "odd (BatchNorm1d)"),
                                              (nn.Dropout2d(0.1), "odd (Dropout2d)")])
def test_a_layer_that_cannot_be_stacked_is_refused_by_name(layer, named):
    toy = Toy(layer)
    stacked = {n: nn.Parameter(torch.stack([p.detach()] * 2)) for n, p in toy.named_parameters()}
    with pytest.raises(CannotFuse, match=named.replace("(", r"\(").replace(")", r"\)")):
        widen(toy, stacked)
