"""Optimizer and learning-rate schedule (MT-DNN: Adamax, linear warm-up then linear decay).

`weight_decay` is decoupled from the gradient for both optimizers (AdamW, and AdamaxW below):
each update first shrinks the weights by `lr * weight_decay`, then takes the adaptive step.
Biases and LayerNorm weights are exempt. This is what the reference MT-DNN code does; an L2
term added to the gradient instead (torch's Adamax `weight_decay`) is divided by Adamax's
running maximum of the gradient and crippled training at MT-DNN's 0.01 (BENCHMARKS.md).
"""

from __future__ import annotations

import torch
from torch import nn

from trainer.config import RunConfig


class AdamaxW(torch.optim.Adamax):
    """Adamax (Kingma & Ba 2015, with its bias-corrected step size) with decoupled weight decay.

    A group's `decoupled_weight_decay` multiplies its parameters by `1 - lr * decay` before the
    Adamax update (Loshchilov & Hutter 2019), with the group's current, scheduled lr.
    """

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, foreach: bool | None = None):
        # Adamax's own weight_decay (L2 in the gradient) stays 0 in every group.
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=0.0, foreach=foreach)
        for group in self.param_groups:
            group.setdefault("decoupled_weight_decay", weight_decay)
            if group["weight_decay"]:
                raise ValueError("AdamaxW: give decoupled_weight_decay, not weight_decay")

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        for group in self.param_groups:
            decay = group["decoupled_weight_decay"]
            params = [p for p in group["params"] if p.grad is not None]
            if decay and params:
                torch._foreach_mul_(params, 1.0 - float(group["lr"]) * decay)
        return super().step(closure)


def linear_warmup_decay(step: int, total: int, warmup_steps: int) -> float:
    """LR multiplier at update `step` (from 0): rises to 1 over the warm-up, then falls to 0."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    remaining = total - warmup_steps
    if remaining <= 0:
        return 1.0
    return max(0.0, (total - step) / remaining)


def decay_groups(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(decayed, exempt) trainable parameters: biases and LayerNorm weights are exempt."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 or "LayerNorm" in name else decay).append(param)
    return decay, no_decay


def build_optimizer(
    model: nn.Module, cfg: RunConfig, device: torch.device
) -> torch.optim.Optimizer:
    decay, no_decay = decay_groups(model)
    if cfg.optimizer == "adamw":
        groups = [{"params": decay, "weight_decay": cfg.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        # foreach kernels batch the per-parameter updates; fused AdamW is faster still on CUDA.
        if device.type == "cuda":
            return torch.optim.AdamW(groups, lr=cfg.lr, fused=True)
        return torch.optim.AdamW(groups, lr=cfg.lr, foreach=True)
    groups = [{"params": decay, "decoupled_weight_decay": cfg.weight_decay},
              {"params": no_decay, "decoupled_weight_decay": 0.0}]
    return AdamaxW(groups, lr=cfg.lr, foreach=True)


def build_scheduler(optimizer: torch.optim.Optimizer, total_steps: int, warmup: float):
    warmup_steps = round(total_steps * warmup)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: linear_warmup_decay(step, total_steps, warmup_steps)
    )
