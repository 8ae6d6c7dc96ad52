"""Optimizer and learning-rate schedule (MT-DNN: Adamax, linear warm-up then linear decay)."""

from __future__ import annotations

import torch
from torch import nn

from trainer.config import RunConfig


def linear_warmup_decay(step: int, total: int, warmup_steps: int) -> float:
    """LR multiplier at update `step` (from 0): rises to 1 over the warm-up, then falls to 0."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    remaining = total - warmup_steps
    if remaining <= 0:
        return 1.0
    return max(0.0, (total - step) / remaining)


def build_optimizer(
    model: nn.Module, cfg: RunConfig, device: torch.device
) -> torch.optim.Optimizer:
    # No weight decay on biases and LayerNorm weights, as in BERT fine-tuning.
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 or "LayerNorm" in name else decay).append(param)
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    # foreach kernels batch the per-parameter updates; fused AdamW is faster still on CUDA.
    if cfg.optimizer == "adamw":
        if device.type == "cuda":
            return torch.optim.AdamW(groups, lr=cfg.lr, fused=True)
        return torch.optim.AdamW(groups, lr=cfg.lr, foreach=True)
    return torch.optim.Adamax(groups, lr=cfg.lr, foreach=True)


def build_scheduler(optimizer: torch.optim.Optimizer, total_steps: int, warmup: float):
    warmup_steps = round(total_steps * warmup)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: linear_warmup_decay(step, total_steps, warmup_steps)
    )
