"""Optimizer and learning-rate schedule (MT-DNN: Adamax, linear warm-up then linear decay).

Two schedules (`schedule`): `linear` rises over the warm-up and then falls from the peak to 0,
as the current MT-DNN code and `transformers` decay it; `warmup_linear` is the one the SIWLM
code's optimizers compute (pytorch-pretrained-bert 0.6.0's `warmup_linear`, see
`warmup_linear`).

`weight_decay` is decoupled from the gradient for both optimizers (AdamW, and AdamaxW below):
each update first shrinks the weights by `lr * weight_decay`, then takes the adaptive step.
Biases and LayerNorm weights are exempt. This is what the reference MT-DNN code does; an L2
term added to the gradient instead (torch's Adamax `weight_decay`) is divided by Adamax's
running maximum of the gradient, which costs MRPC several points at MT-DNN's 0.01
(BENCHMARKS.md, "Parity with the reference MT-DNN code").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

if TYPE_CHECKING:
    from weightsearch.trainer.config import RunConfig


class AdamaxW(torch.optim.Adamax):
    """Adamax with decoupled weight decay, with or without bias correction.

    Per parameter, with m and u starting at 0, gradient g at update t:
        m = b1 m + (1 - b1) g,   u = max(b2 u, |g| + eps)
        p = p (1 - lr decay) - lr / (1 - b1^t) * m / u     (bias_correction: true)
        p = p (1 - lr decay) - lr * m / (u + eps)          (bias_correction: false)
    The first is Kingma & Ba's Adamax (torch's, and the current MT-DNN code's AdamaxW) with
    Loshchilov & Hutter's decay; the second is the BERT-style Adamax of SIWLM's copy of the
    MT-DNN code. `decoupled_weight_decay` and `bias_correction` are per-group settings.
    """

    def __init__(self, params: Any, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, bias_correction: bool = True,
                 foreach: bool | None = None, capturable: bool = False):
        # Read by add_param_group, which torch's __init__ calls for every group.
        self._extra_defaults = {"decoupled_weight_decay": weight_decay,
                                "bias_correction": bias_correction}
        # Adamax's own weight_decay (L2 in the gradient) stays 0 in every group.
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=0.0, foreach=foreach,
                         capturable=capturable)
        self.defaults.update(self._extra_defaults)
        # idle_params: step (`build_scheduler` sets it): each parameter's rate is the group's
        # times clock(its own update count), as the SIWLM code's Adamax schedules it; the
        # run's schedule then stays at 1.
        self.clock: Any = None

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        for key, value in self._extra_defaults.items():
            param_group.setdefault(key, value)
        if param_group.get("weight_decay"):
            raise ValueError("AdamaxW: give decoupled_weight_decay, not weight_decay")
        super().add_param_group(param_group)

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        corrected = []
        for group in self.param_groups:
            decay = group["decoupled_weight_decay"]
            params = [p for p in group["params"] if p.grad is not None]
            if decay and params and self.clock is None:  # with a clock: per parameter, below
                torch._foreach_mul_(params, _decay_factor(group["lr"], decay, group["capturable"]))
            if group["bias_correction"]:
                corrected.append(group)
            elif params:
                self._uncorrected_step(group, params)
        for group in corrected:
            self._corrected_step(group)
        return loss

    def _state(self, p: torch.Tensor, capturable: bool) -> dict[str, Any]:
        """The parameter's state, made on first use in torch's Adamax layout (the step count on
        the parameter's device when capturable, as CUDA graphs replay it)."""
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), device=p.device if capturable else None)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_inf"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def _corrected_step(self, group: dict[str, Any]) -> None:
        """torch's multi-tensor Adamax step, op for op (so bit for bit), except that |g| + eps
        is formed in the gradients' own memory: torch copies every gradient for it at every
        update (a 4-byte-per-parameter allocation, page faults included, 6.5% of a CPU step
        on MiniLM). The gradients are read here last and zeroed before the next backward
        pass (`step.py`), so nothing sees them changed."""
        beta1, beta2 = group["betas"]
        eps, capturable = group["eps"], group["capturable"]
        params, grads, exp_avgs, exp_infs, steps = [], [], [], [], []
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("Adamax does not support sparse gradients")
            state = self._state(p, capturable)
            params.append(p)
            grads.append(p.grad)
            exp_avgs.append(state["exp_avg"])
            exp_infs.append(state["exp_inf"])
            steps.append(state["step"])
        if not params:
            return
        torch._foreach_add_(steps, 1)
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_infs, beta2)
        torch._foreach_abs_(grads)
        torch._foreach_add_(grads, eps)
        torch._foreach_maximum_(exp_infs, grads)
        if capturable:  # all on the device: lr / (beta1^t - 1) folded into the denominator
            scale = torch._foreach_pow(beta1, steps)
            torch._foreach_sub_(scale, 1)
            torch._foreach_div_(scale, group["lr"])
            torch._foreach_addcdiv_(params, exp_avgs, torch._foreach_mul(exp_infs, scale))
            return
        lr = float(group["lr"])
        clr = [-lr / (1 - beta1 ** float(s)) for s in steps]
        torch._foreach_addcdiv_(params, exp_avgs, exp_infs, clr)

    def _uncorrected_step(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        beta1, beta2 = group["betas"]
        eps, capturable = group["eps"], group["capturable"]
        if self.clock is not None:
            self._clocked_step(group, params)
            return
        for p in params:
            state = self._state(p, capturable)
            state["step"] += 1
            m, u = state["exp_avg"], state["exp_inf"]
            grad = cast(torch.Tensor, p.grad)  # params: those with a gradient (step)
            m.lerp_(grad, 1 - beta1)
            torch.maximum(u.mul_(beta2), grad.abs().add_(eps), out=u)
            if capturable:
                p.sub_(group["lr"] * m / (u + eps))
            else:
                p.addcdiv_(m, u + eps, value=-float(group["lr"]))


    def _clocked_step(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        """The SIWLM code's Adamax (module/bert_optim.py) per parameter: the rate is the
        group's times clock(the parameter's own update count, read before it is counted),
        and the decay is added to the update, from the weight before it."""
        beta1, beta2 = group["betas"]
        eps, decay = group["eps"], group["decoupled_weight_decay"]
        for p in params:
            state = self._state(p, False)
            rate = float(group["lr"]) * self.clock(int(state["step"]))
            state["step"] += 1
            m, u = state["exp_avg"], state["exp_inf"]
            grad = cast(torch.Tensor, p.grad)  # as above
            m.lerp_(grad, 1 - beta1)
            torch.maximum(u.mul_(beta2), grad.abs().add_(eps), out=u)
            if decay:
                p.mul_(1.0 - rate * decay)
            p.addcdiv_(m, u + eps, value=-rate)


def _decay_factor(lr: float | torch.Tensor, decay: float, capturable: bool
                  ) -> float | torch.Tensor:
    """1 - lr x decay: a host number, or (capturable) a device scalar from the lr tensor."""
    if capturable:
        return 1.0 - lr * decay
    return 1.0 - float(lr) * decay


def linear_warmup_decay(step: int, total: int, warmup_steps: int) -> float:
    """LR multiplier at update `step` (from 0): rises to 1 over the warm-up, then falls to 0."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    remaining = total - warmup_steps
    if remaining <= 0:
        return 1.0
    return max(0.0, (total - step) / remaining)


def warmup_linear(progress: float, warmup: float) -> float:
    """pytorch-pretrained-bert 0.6.0's `warmup_linear`, which the SIWLM code's optimizers call
    with `progress` = their step count / the total: progress / warmup during the warm-up, then
    1 - progress, not rescaled, so the rate falls from the peak to 1 - warmup of it where the
    warm-up ends."""
    if progress < warmup:
        return progress / warmup
    return 1.0 - progress


# The step count the SIWLM code's optimizers hand `warmup_linear`, at the update numbered from
# 0: its Adamax and BERT's Adam (the code's `adam`) read it before counting the update (so the
# first update runs at rate 0), its RAdam after.
WARMUP_LINEAR_COUNT_FROM = {"adamax": 0, "adamw": 0, "radam": 1}


def schedule_factor(schedule: str, optimizer: str, step: int, total: int,
                    warmup: float) -> float:
    """The learning-rate multiplier of update `step` (from 0) of `total`."""
    if schedule == "warmup_linear":
        return warmup_linear((step + WARMUP_LINEAR_COUNT_FROM[optimizer]) / total, warmup)
    return linear_warmup_decay(step, total, round(total * warmup))


def decay_groups(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(decayed, exempt) trainable parameters: biases and LayerNorm weights are exempt."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 or "LayerNorm" in name else decay).append(param)
    return decay, no_decay


def build_optimizer(
    model: nn.Module, cfg: RunConfig, device: torch.device,
    extra: Sequence[dict[str, Any]] = (), capturable: bool = False,
) -> torch.optim.Optimizer:
    """The run's optimizer over the model's parameters, plus the `extra` parameter groups (a
    weighting scheme's learned tensors: `Scheme.setup`), which are never weight-decayed.
    `capturable`: every update runs on the device without a host read, as a CUDA graph replays
    it (the caller then makes the learning rate a device tensor: `make_capturable`)."""
    decay, no_decay = decay_groups(model)
    if cfg.optimizer == "adamw":
        groups = [{"params": decay, "weight_decay": cfg.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0},
                  *({**g, "weight_decay": 0.0} for g in extra)]
        # foreach kernels batch the per-parameter updates; fused AdamW is faster still on CUDA.
        if capturable:
            return torch.optim.AdamW(groups, lr=cfg.learning_rate, eps=cfg.adam_eps,
                                     foreach=True, capturable=True)
        if device.type == "cuda":
            return torch.optim.AdamW(groups, lr=cfg.learning_rate, eps=cfg.adam_eps, fused=True)
        return torch.optim.AdamW(groups, lr=cfg.learning_rate, eps=cfg.adam_eps, foreach=True)
    if cfg.optimizer == "radam":  # rectified Adam; weight decay decoupled, as in AdamW
        groups = [{"params": decay, "weight_decay": cfg.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0},
                  *({**g, "weight_decay": 0.0} for g in extra)]
        return torch.optim.RAdam(groups, lr=cfg.learning_rate, eps=cfg.adam_eps,
                                 decoupled_weight_decay=True, foreach=True,
                                 capturable=capturable)
    groups = [{"params": decay, "decoupled_weight_decay": cfg.weight_decay},
              {"params": no_decay, "decoupled_weight_decay": 0.0},
              *({**g, "decoupled_weight_decay": 0.0} for g in extra)]
    return AdamaxW(groups, lr=cfg.learning_rate, eps=cfg.adamax.eps,
                   bias_correction=cfg.adamax.bias_correction, foreach=True,
                   capturable=capturable)


def make_capturable(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Ready an optimizer for CUDA graphs, also after a checkpoint's state was loaded into it:
    capturable groups, each learning rate a device scalar (which the schedule fills in place,
    so a replayed graph reads the current rate) and the step counts on the device."""
    for group in optimizer.param_groups:
        group["capturable"] = True
        if not isinstance(group["lr"], torch.Tensor):
            group["lr"] = torch.tensor(float(group["lr"]), device=device)
        for p in group["params"]:
            state = optimizer.state.get(p)
            if state and "step" in state:
                state["step"] = state["step"].to(device=device, dtype=torch.float32)


def portable_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's state_dict as an eager run reads it too: plain learning rates, groups
    not capturable (loading then keeps the step counts on the CPU; `make_capturable` moves
    them back)."""
    state = optimizer.state_dict()
    state["param_groups"] = [
        {**g, "lr": float(g["lr"]), **({"capturable": False} if "capturable" in g else {})}
        for g in state["param_groups"]]
    # A fused member's state tensors are slices of the unit's stacked state
    # (`weightsearch.trainer.stacked_optim`); torch.save writes a view's whole storage.
    state["state"] = {index: {key: compact(value) for key, value in entry.items()}
                      for index, entry in state["state"].items()}
    return state


def compact(value: Any) -> Any:
    """A tensor that views part of a larger storage as a copy of that part alone."""
    if isinstance(value, torch.Tensor) and \
            value.untyped_storage().nbytes() > value.numel() * value.element_size():
        return value.clone()
    return value


# How an optimizer computes its step, which is the run's to choose (fused AdamW eagerly on CUDA,
# foreach and capturable under CUDA graphs), not the checkpoint's.
IMPLEMENTATION = ("foreach", "fused", "capturable")


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """torch's `load_state_dict`, keeping the optimizer's own implementation: torch takes every
    group setting from the saved groups, so a checkpoint of a run with CUDA graphs would turn
    a fused AdamW into a foreach one. Step counts go where the implementation keeps them
    (the device for fused and capturable groups, else the CPU)."""
    own = [{k: g[k] for k in IMPLEMENTATION if k in g} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, flags in zip(optimizer.param_groups, own, strict=True):
        for key in IMPLEMENTATION:
            group.pop(key, None)
        group.update(flags)
        on_device = bool(group.get("fused") or group.get("capturable"))
        for p in group["params"]:
            step = optimizer.state.get(p, {}).get("step")
            if isinstance(step, torch.Tensor):
                optimizer.state[p]["step"] = step.to(
                    device=p.device if on_device else "cpu", dtype=torch.float32)


def current_lr(scheduler: Any) -> float:
    """The first group's learning rate for the coming update, as a host number (the schedule's
    own arithmetic; reading a device learning rate would wait for the device). With a clock per
    parameter: the encoder's, whose count is the run's (it has a gradient at every update)."""
    step = scheduler.last_epoch
    clock = getattr(scheduler.optimizer, "clock", None)
    factor = clock(step) if clock is not None else scheduler.lr_lambdas[0](step)
    return float(scheduler.base_lrs[0]) * factor


def build_scheduler(optimizer: torch.optim.Optimizer, total_steps: int, cfg: RunConfig):
    """The run's schedule (`cfg.schedule`) over `total_steps` updates; with idle_params: step,
    the optimizer's clock per parameter instead (the LambdaLR then stays at 1)."""
    def factor(step: int) -> float:
        return schedule_factor(cfg.schedule, cfg.optimizer, step, total_steps, cfg.warmup)

    if cfg.idle_params == "step":
        optimizer.clock = factor  # type: ignore[attr-defined]
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
