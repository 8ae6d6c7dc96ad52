"""idle_params: step against the SIWLM code's optimizer as it ran on torch 1.4, restated here:
its Adamax (module/bert_optim.py: no bias correction, the decay added to the update, the rate
warmup_linear(count / t_total) with a count per parameter, read before it is counted) skips a
parameter only while its gradient is None, and torch 1.4's zero_grad zero-filled gradients, so
a head that has had a gradient steps on every later batch of any task. Multi-task, fp64: a
shared encoder and two heads, the second task's first batch coming later; every parameter equal
to 1e-12. Then through the real training loop: the idle head moves on the other task's batches
under `step`, not under `skip`."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tests.helpers import run_config
from weightsearch.core.errors import ConfigError
from weightsearch.trainer.optim import build_optimizer, build_scheduler

TOTAL, WARMUP, LR, WD, EPS, B1, B2 = 24, 0.1, 0.02, 0.01, 1e-6, 0.9, 0.999
ORDER = "AABABBABAABBABABBAABABAB"  # task of each batch: B's first batch is the third


def _warmup_linear(x: float, warmup: float) -> float:  # pytorch-pretrained-bert 0.6.0
    return x / warmup if x < warmup else 1.0 - x


class ReferenceAdamax(torch.optim.Optimizer):
    """The SIWLM code's Adamax, restated: per parameter, skipped while its gradient is None."""

    def __init__(self, params, lr: float, warmup: float, t_total: int, weight_decay: float):
        super().__init__(params, {"lr": lr, "warmup": warmup, "t_total": t_total,
                                  "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_inf"] = torch.zeros_like(p)
                m, u = state["exp_avg"], state["exp_inf"]
                m.mul_(B1).add_(p.grad, alpha=1 - B1)
                u.copy_(torch.maximum(u * B2, p.grad.abs() + EPS))
                update = m / (u + EPS)
                if group["weight_decay"] > 0:
                    update = update + group["weight_decay"] * p
                rate = group["lr"] * _warmup_linear(state["step"] / group["t_total"],
                                                    group["warmup"])
                p.add_(-rate * update)
                state["step"] += 1


def _model() -> nn.ModuleDict:
    torch.manual_seed(0)
    return nn.ModuleDict({"encoder": nn.Linear(4, 4), "A": nn.Linear(4, 1),
                          "B": nn.Linear(4, 1)}).double()


def _batch(k: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 + k)
    return torch.randn(8, 4, generator=g, dtype=torch.float64)


def _loss(model: nn.ModuleDict, task: str, x: torch.Tensor) -> torch.Tensor:
    return (model[task](torch.tanh(model["encoder"](x))) - 0.5).pow(2).mean()


def _cfg(sample_data_dir, tiny_encoder, tmp_path, idle: str):
    return run_config(sample_data_dir, tiny_encoder, tmp_path / f"run-{idle}", optimizer="adamax",
                      lr=LR, warmup=WARMUP, weight_decay=WD, schedule="warmup_linear",
                      adamax={"bias_correction": False, "eps": EPS}, idle_params=idle)


def _ours(cfg) -> nn.ModuleDict:
    model = _model()
    opt = build_optimizer(model, cfg, torch.device("cpu"))
    sched = build_scheduler(opt, TOTAL, cfg)
    for k, task in enumerate(ORDER):
        opt.zero_grad(set_to_none=cfg.idle_params == "skip")  # as trainer/loop.py does
        _loss(model, task, _batch(k)).backward()
        opt.step()
        sched.step()
    return model


def _reference() -> nn.ModuleDict:
    model = _model()
    decay = [p for n, p in model.named_parameters() if not n.endswith("bias")]
    exempt = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = ReferenceAdamax([{"params": decay, "weight_decay": WD},
                           {"params": exempt, "weight_decay": 0.0}],
                          lr=LR, warmup=WARMUP, t_total=TOTAL, weight_decay=WD)
    for k, task in enumerate(ORDER):
        for p in model.parameters():  # torch 1.4's zero_grad: zero-filled, never None
            if p.grad is not None:
                p.grad.zero_()
        _loss(model, task, _batch(k)).backward()
        opt.step()
    return model


def test_step_moves_every_parameter_as_the_siwlm_optimizer_on_torch_1_4(
        sample_data_dir, tiny_encoder, tmp_path) -> None:
    reference = dict(_reference().named_parameters())
    ours = dict(_ours(_cfg(sample_data_dir, tiny_encoder, tmp_path, "step")).named_parameters())
    for name, p in reference.items():
        assert torch.allclose(ours[name], p, rtol=0, atol=1e-12), name
    # `skip` (torch >= 2.0) moves the heads less: each only on its own task's batches.
    skip = dict(_ours(_cfg(sample_data_dir, tiny_encoder, tmp_path, "skip")).named_parameters())
    start = dict(_model().named_parameters())
    for head in ("A.weight", "B.weight"):
        moved_step = (reference[head] - start[head]).norm().item()
        moved_skip = (skip[head] - start[head]).norm().item()
        assert not math.isclose(moved_step, moved_skip, rel_tol=1e-3), head


@pytest.mark.slow  # a tiny end-to-end run: several CPU-seconds
def test_the_training_loop_zero_fills_gradients_only_under_step(
        sample_data_dir, tiny_encoder, tmp_path, monkeypatch) -> None:
    """The real loop (rte and mrpc, one epoch) clears gradients as the setting says: set to
    None under `skip`, zero-filled under `step` (what makes the optimizer above step idle
    heads), and the optimizer it builds carries the per-parameter clock only under `step`."""
    from weightsearch.trainer import train
    from weightsearch.trainer.optim import AdamaxW

    seen: list[tuple[bool, bool]] = []
    real = AdamaxW.zero_grad

    def spy(self, set_to_none: bool = True) -> None:
        seen.append((set_to_none, self.clock is not None))
        real(self, set_to_none=set_to_none)

    monkeypatch.setattr(AdamaxW, "zero_grad", spy)
    for idle in ("skip", "step"):
        seen.clear()
        cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / idle, tasks=["rte", "mrpc"],
                         epochs=1, optimizer="adamax", schedule="warmup_linear",
                         adamax={"bias_correction": False, "eps": EPS}, idle_params=idle)
        train(cfg, quiet=True)
        assert seen and set(seen) == {(idle == "skip", idle == "step")}, (idle, set(seen))


@pytest.mark.parametrize("change", [{"optimizer": "adamw"}, {"adamax": {"bias_correction": True}}])
def test_step_is_refused_where_it_restates_nothing(sample_data_dir, tiny_encoder, tmp_path,
                                                   change) -> None:
    with pytest.raises(ConfigError, match="idle_params: step follows the SIWLM code's Adamax"):
        run_config(sample_data_dir, tiny_encoder, tmp_path / "r", idle_params="step", **change)


def test_step_is_refused_for_fused_cells(sample_data_dir, tiny_encoder, tmp_path) -> None:
    from weightsearch.trainer.fusable import fusion_problems

    configs = [run_config(sample_data_dir, tiny_encoder, tmp_path / f"f{w}", optimizer="adamax",
                          adamax={"bias_correction": False}, idle_params="step",
                          weighting={"scheme": "siwlm", "central_weight": w, "focus_span": 2})
               for w in (1, 9)]
    assert any("idle_params: step" in p for p in fusion_problems(configs))


def test_a_siwlm_paper_study_stored_before_format_7_keeps_training_with_skip(
        sample_data_dir, tmp_path) -> None:
    """preset: siwlm-paper now sets idle_params: step; a study launched before (format 6)
    trained its first cells with skip, and its remaining cells must train as they did."""
    from weightsearch.sweep.spec import SPEC_VERSION, as_launched, load_study_spec

    raw = {"study": "paper", "train": {"preset": "siwlm-paper", "data_dir": str(sample_data_dir),
                                       "tasks": ["rte", "mrpc"], "epochs": 1},
           "central_tasks": ["rte"], "weights": [1, 9], "workdir": str(tmp_path / "runs")}
    stored = load_study_spec(raw).to_dict()
    assert stored["version"] == SPEC_VERSION and as_launched(stored) == stored

    def cell(spec: dict):
        return load_study_spec(as_launched(spec)).for_cell(
            "rte", {"weighting.central_weight": 9.0}, 1, str(tmp_path / "x"))

    assert cell(stored).idle_params == "step"
    six = {**stored, "version": 6}
    assert as_launched(six)["train"]["idle_params"] == "skip"
    assert cell(six).idle_params == "skip"
    plain = {**six, "train": {k: v for k, v in six["train"].items() if k != "preset"}}
    assert "idle_params" not in as_launched(plain)["train"]  # nothing changed for it
