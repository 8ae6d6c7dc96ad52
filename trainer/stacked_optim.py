"""A fused unit's updates as one optimizer step over its stacked tensors
(`weightsearch.trainer.fused`).

Stepping each member's own optimizer runs K optimizer steps over P parameters: K*P small
tensors, with torch's per-step host work K times over. Here the updating members are clipped
and stepped together. Each member keeps its own optimizer, schedule and clipping settings:
its optimizer's state tensors become views of slices of stacked [K, ...] state tensors (as its
parameters are views of the stacked parameters), so its `state_dict`, checkpoints and resume
are the stand-alone code's; only nothing calls its `step`.

The arithmetic is torch's multi-tensor step of the member's optimizer (AdamW, RAdam, or
`optim.AdamaxW` with or without bias correction), op for op, over one list of tensors with one
scalar per tensor: a parameter's whole [K, ...] tensor where every member of the stack updates
it with the same learning rate, weight decay and step count (then the per-member numbers are
one), else each updating member's slice with its own. Members that do not update (weight 0,
stopped) are in no list, so nothing of theirs moves. The clip is each member's own
(`clipping.clip_factor`, its mode and `grad_clip`): the norms of all members' gradients in one
multi-tensor reduction. Scalars rather than [K, 1, ...] tensors keep torch's exact arithmetic
and, on a GPU, its multi-tensor kernels, which broadcasting would leave.

A member whose optimizer this does not reproduce (a weighting scheme's learned parameters in
it, a capturable or clocked optimizer, a clipping mode of another kind, other betas than the
other members') takes its own `step.clip_and_step` on its slices of the gradients.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch

from weightsearch.trainer.clipping import GRAD_CLIP_MODES, clip_factor
from weightsearch.trainer.optim import AdamaxW, compact
from weightsearch.trainer.stage import StageRun
from weightsearch.trainer.step import clip_and_step

# The state each optimizer kind keeps per parameter, besides its step count.
STATE_KEYS = {"adamw": ("exp_avg", "exp_avg_sq"), "radam": ("exp_avg", "exp_avg_sq"),
              "adamax": ("exp_avg", "exp_inf")}


class Stack(Protocol):
    """What `fused.StackedModels` offers this module: the stacked parameters, each member's
    parameters (views of its slices, in the stacked parameters' order) and its gradients."""

    stacked: dict[str, torch.nn.Parameter]
    views: list[list[tuple[torch.nn.Parameter, str]]]

    def share_gradients(self, members: Sequence[int]) -> None: ...


class Layout(NamedTuple):
    """What every member stepped together shares: the optimizer kind and its constants."""

    kind: str
    beta1: float
    beta2: float
    eps: float


class Entry(NamedTuple):
    """One tensor of a step: a stacked parameter's whole tensor or one member's slice of it,
    with the learning rate, weight decay, step count (after this update) and, for Adamax,
    bias correction that its member's group and state give it."""

    param: torch.Tensor
    grad: torch.Tensor
    state: tuple[torch.Tensor, ...]
    lr: float
    decay: float
    step: float
    corrected: bool


def step_members(stack: Stack, updating: Sequence[tuple[int, StageRun, float]]
                 ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Clip and step each updating (slot, run, weight) after a backward pass of the wide model
    left the stacked gradients; each one's pre-clip norm and clip factor, as
    `step.clip_and_step` gives them."""
    stepper = stacked_optimizer(stack)
    stacked = [stepper.serves(slot, run) for slot, run, _ in updating]
    served = [u for u, s in zip(updating, stacked, strict=True) if s]
    alone = [u for u, s in zip(updating, stacked, strict=True) if not s]
    stack.share_gradients([slot for slot, _, _ in alone])
    readings = {slot: clip_and_step(run, weight) for slot, run, weight in alone}
    if served:
        readings.update(stepper.step(served))
    return [readings[slot] for slot, _, _ in updating]


def own_state(optimizer: torch.optim.Optimizer) -> None:
    """Give the optimizer state of its own, copies of the slices it views: for a member that
    leaves its stack (a stack rebuilt without it), whose views would keep every member's
    stacked state alive. A new state dict, so that a stacked optimizer that still serves the
    member takes it over again."""
    optimizer.state = defaultdict(dict, {  # type: ignore[misc]
        p: {key: compact(value) for key, value in state.items()}
        for p, state in optimizer.state.items()})


_CACHE: weakref.WeakKeyDictionary[Any, StackedOptimizer] = weakref.WeakKeyDictionary()


def stacked_optimizer(stack: Stack) -> StackedOptimizer:
    """The stack's stacked optimizer, built on first use: a stack built anew (members added
    or left out) gets its own, which takes over the members' state as it stands."""
    found = _CACHE.get(stack)
    if found is None:
        found = _CACHE[stack] = StackedOptimizer(stack)
    return found


class StackedOptimizer:
    """The members' optimizers of one stack, stepped together (see the module's doc)."""

    def __init__(self, stack: Stack) -> None:
        self.leaves = list(stack.stacked.values())  # they hold the gradients
        self.tensors = [t.detach() for t in self.leaves]
        self.size = len(stack.views)
        self.slices = [t.unbind(0) for t in self.tensors]
        self.params = [[p for p, _ in views] for views in stack.views]  # by slot, then index
        self.index = [{id(p): i for i, p in enumerate(ps)} for ps in self.params]
        self.layout: Layout | None = None
        self.state: list[tuple[torch.Tensor, ...]] = []  # per parameter, per state key
        # Step counts: the members' own state tensors view `steps`; `counts` is its host copy,
        # which the step's scalars are computed from without reading the device.
        self.steps = torch.zeros(len(self.tensors), self.size)
        self.counts = np.zeros((len(self.tensors), self.size))
        self.attached = np.zeros((len(self.tensors), self.size), dtype=bool)
        self.optimizers: list[torch.optim.Optimizer | None] = [None] * self.size
        self.states: list[Any] = [None] * self.size  # each optimizer's state dict, as adopted
        self.groups = [np.full(len(self.tensors), -1) for _ in range(self.size)]
        self.refused: dict[int, Any] = {}  # slot -> the optimizer found not to be served

    def serves(self, slot: int, run: StageRun) -> bool:
        """Whether the member in `slot` is stepped here; its optimizer's state is taken over
        the first time, and again after anything replaced it (a loaded state dict)."""
        optimizer = run.optimizer
        if self.optimizers[slot] is optimizer and self.states[slot] is optimizer.state:
            return True
        if self.refused.get(slot) is optimizer:
            return False
        if self.adopt(slot, run) is not None:
            self.optimizers[slot] = None
            self.refused[slot] = optimizer
            return False
        return True

    def adopt(self, slot: int, run: StageRun) -> str | None:
        """Take over the optimizer state of the member in `slot`: its values copied into the
        slot's slices, its tensors replaced by those slices. Why not, where it cannot be."""
        optimizer = run.optimizer
        groups = self.member_groups(slot, run)
        if isinstance(groups, str):
            return groups
        assert self.layout is not None
        keys = STATE_KEYS[self.layout.kind]
        saved = {}
        for p, state in optimizer.state.items():
            if state and set(state) != {"step", *keys}:
                return f"its optimizer state holds {sorted(state)}, not {['step', *keys]}"
            if state:  # copies first: the values may be views of this stack's own state
                saved[self.index[slot][id(p)]] = (float(state["step"]),
                                                  [state[k].detach().clone() for k in keys])
        for tensors in self.state:
            for tensor in tensors:
                tensor[slot].zero_()
        self.counts[:, slot] = 0
        self.attached[:, slot] = False
        self.optimizers[slot], self.states[slot] = optimizer, optimizer.state
        self.groups[slot] = groups
        for i, (count, values) in saved.items():
            for tensor, value in zip(self.state[i], values, strict=True):
                tensor[slot].copy_(value)
            self.counts[i, slot] = count
            self.attach(i, slot)
        self.steps.copy_(torch.from_numpy(self.counts))
        return None

    def member_groups(self, slot: int, run: StageRun) -> np.ndarray | str:
        """The group of the member's optimizer that each stacked parameter is in (-1: none),
        or why the member is not stepped here; the first member served sets the layout."""
        layout = optimizer_layout(run.optimizer)
        if isinstance(layout, str):
            return layout
        if run.cfg.grad_clip_mode not in GRAD_CLIP_MODES:
            return f"grad_clip_mode {run.cfg.grad_clip_mode!r} is not stepped stacked"
        if self.layout is not None and layout != self.layout:
            return "its optimizer's kind or constants differ from the other members'"
        groups = np.full(len(self.tensors), -1)
        for g, group in enumerate(run.optimizer.param_groups):
            for p in group["params"]:
                i = self.index[slot].get(id(p))
                if i is None:
                    return "its optimizer steps parameters outside the stacked model"
                groups[i] = g
        if self.layout is None:
            self.layout = layout
            self.state = [tuple(torch.zeros_like(t) for _ in STATE_KEYS[layout.kind])
                          for t in self.tensors]
        return groups

    def attach(self, i: int, slot: int) -> None:
        """Make the slot's slices the state of its member's parameter `i`."""
        assert self.layout is not None
        state = dict(zip(STATE_KEYS[self.layout.kind],
                         (t[slot] for t in self.state[i]), strict=True))
        optimizer = self.optimizers[slot]
        assert optimizer is not None
        optimizer.state[self.params[slot][i]] = {"step": self.steps[i, slot], **state}
        self.attached[i, slot] = True

    @torch.no_grad()
    def step(self, served: Sequence[tuple[int, StageRun, float]]
             ) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """Clip and step the served members; each one's pre-clip norm and clip factor."""
        assert self.layout is not None
        slots = [slot for slot, _, _ in served]
        full = {i: t.grad.detach() for i, t in enumerate(self.leaves) if t.grad is not None}
        with_grad = list(full)
        grads = {i: g.unbind(0) for i, g in full.items()}
        mine = [[grads[i][slot] for i in with_grad] for slot in slots]
        norms, scales = self.clip(served, mine)
        rows = np.array(with_grad, dtype=int)
        stepped = [rows[self.groups[slot][rows] >= 0] for slot in slots]
        for slot, own in zip(slots, stepped, strict=True):
            self.counts[own, slot] += 1
            for i in own[~self.attached[own, slot]]:
                self.attach(int(i), slot)
        self.steps.copy_(torch.from_numpy(self.counts))
        entries = self.entries(served, full, grads)
        if entries:
            KERNELS[self.layout.kind](entries, self.layout)
        return {slot: (norms[j], scales[j]) for j, slot in enumerate(slots)}

    def clip(self, served: Sequence[tuple[int, StageRun, float]],
             grads: list[list[torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Each member's gradient clipped as its settings say, in place: its norm over all its
        gradients (as `clipping.clip_gradient` takes it) and the factor applied."""
        count = len(grads[0]) if grads else 0
        flat = [g for member in grads for g in member]
        norms = torch.stack(torch._foreach_norm(flat)).view(len(grads), count)
        norm = torch.linalg.vector_norm(norms, dim=1)
        settings = [(run.cfg.grad_clip, run.cfg.grad_clip_mode) for _, run, _ in served]
        weights = torch.tensor([w for _, _, w in served], device=norm.device)
        if len(set(settings)) == 1:
            scale = clip_factor(norm, *settings[0], weights)
        else:
            scale = torch.stack([clip_factor(norm[j], clip, mode, weights[j])
                                 for j, (clip, mode) in enumerate(settings)])
        for j, member in enumerate(grads):
            if settings[j][0] > 0:
                torch._foreach_mul_(member, scale[j])
        return norm, scale

    def entries(self, served: Sequence[tuple[int, StageRun, float]],
                full: dict[int, torch.Tensor], grads: dict[int, tuple[torch.Tensor, ...]]
                ) -> list[Entry]:
        """The step's tensors: a parameter's whole stacked tensor where every member of the
        stack takes the same update of it, else each updating member's slice."""
        settings = []
        for _, run, _ in served:
            groups = run.optimizer.param_groups
            decay = "decoupled_weight_decay" if isinstance(run.optimizer, AdamaxW) \
                else "weight_decay"
            settings.append([(float(g["lr"]), float(g[decay]), bool(g.get("bias_correction")))
                             for g in groups])
        whole = len(served) == self.size
        entries = []
        for i, grad in full.items():
            numbers = []
            for j, (slot, _, _) in enumerate(served):
                g = self.groups[slot][i]
                if g >= 0:
                    lr, decay, corrected = settings[j][g]
                    numbers.append((slot, lr, decay, float(self.counts[i, slot]), corrected))
            if whole and len(numbers) == self.size and \
                    len({n[1:] for n in numbers}) == 1:
                entries.append(Entry(self.tensors[i], grad, self.state[i], *numbers[0][1:]))
                continue
            for slot, *rest in numbers:
                entries.append(Entry(self.slices[i][slot], grads[i][slot],
                                     tuple(t[slot] for t in self.state[i]), *rest))
        return entries


def optimizer_layout(optimizer: torch.optim.Optimizer) -> Layout | str:
    """The kind and constants of an optimizer stepped here, or why it is not."""
    kind = {torch.optim.AdamW: "adamw", torch.optim.RAdam: "radam", AdamaxW: "adamax"}.get(
        type(optimizer))  # type: ignore[call-overload]
    if kind is None:
        return f"{type(optimizer).__name__} is not stepped stacked"
    if getattr(optimizer, "clock", None) is not None:
        return "a clock per parameter (idle_params: step) is not stepped stacked"
    constants = set()
    for group in optimizer.param_groups:
        if any(group.get(flag) for flag in ("capturable", "differentiable", "maximize",
                                            "amsgrad")):
            return "a capturable, differentiable, maximizing or AMSGrad group"
        if kind != "adamax" and not group.get("decoupled_weight_decay"):
            return "weight decay in the gradient (not decoupled)"
        if isinstance(group["lr"], torch.Tensor):
            return "a learning rate held as a tensor"
        beta1, beta2 = group["betas"]
        constants.add((float(beta1), float(beta2), float(group["eps"])))
    if len(constants) != 1:
        return "groups with different betas or eps"
    return Layout(kind, *constants.pop())


def _decay(entries: list[Entry]) -> None:
    """Decoupled weight decay: each decayed parameter times 1 - lr x decay."""
    decayed = [e for e in entries if e.decay != 0]
    if decayed:
        torch._foreach_mul_([e.param for e in decayed], [1 - e.lr * e.decay for e in decayed])


def _adamw_step(entries: list[Entry], layout: Layout) -> None:
    """torch's multi-tensor AdamW (`torch.optim.adam._multi_tensor_adam`, not capturable)."""
    beta1, beta2, eps = layout.beta1, layout.beta2, layout.eps
    params, grads = [e.param for e in entries], [e.grad for e in entries]
    exp_avgs, exp_avg_sqs = [e.state[0] for e in entries], [e.state[1] for e in entries]
    _decay(entries)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
    step_size = [(e.lr / (1 - beta1 ** e.step)) * -1 for e in entries]
    bias_correction2_sqrt = [(1 - beta2 ** e.step) ** 0.5 for e in entries]
    denom = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denom, bias_correction2_sqrt)
    torch._foreach_add_(denom, eps)
    torch._foreach_addcdiv_(params, exp_avgs, denom, step_size)


def _radam_step(entries: list[Entry], layout: Layout) -> None:
    """torch's multi-tensor RAdam with decoupled weight decay (`_multi_tensor_radam`)."""
    beta1, beta2, eps = layout.beta1, layout.beta2, layout.eps
    params, grads = [e.param for e in entries], [e.grad for e in entries]
    exp_avgs, exp_avg_sqs = [e.state[0] for e in entries], [e.state[1] for e in entries]
    rho_inf = 2 / (1 - beta2) - 1
    rho_t = [rho_inf - 2 * e.step * (beta2 ** e.step) / (1 - beta2 ** e.step) for e in entries]
    _decay(entries)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
    rect = [((r - 4) * (r - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * r)) ** 0.5
            if r > 5 else 0 for r in rho_t]
    unrectified = [0 if r > 0 else 1.0 for r in rect]
    bias_correction1 = [1 - beta1 ** e.step for e in entries]
    unrect_step_size = [(e.lr * u / bc) * -1
                        for e, u, bc in zip(entries, unrectified, bias_correction1, strict=True)]
    bias_correction2 = [((1 - beta2 ** e.step) ** 0.5) * (e.lr * r / bc) * -1
                        for e, r, bc in zip(entries, rect, bias_correction1, strict=True)]
    buffer = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_add_(buffer, eps)
    torch._foreach_div_(buffer, bias_correction2)
    torch._foreach_reciprocal_(buffer)
    torch._foreach_add_(buffer, unrect_step_size)
    torch._foreach_addcmul_(params, exp_avgs, buffer)


def _adamax_step(entries: list[Entry], layout: Layout) -> None:
    """`optim.AdamaxW`'s step: with bias correction its multi-tensor step, without it its step
    per parameter, as multi-tensor ops of the same arithmetic. The gradients are overwritten
    (with |g| + eps), as AdamaxW overwrites them."""
    beta1, beta2, eps = layout.beta1, layout.beta2, layout.eps
    _decay(entries)
    torch._foreach_lerp_([e.state[0] for e in entries], [e.grad for e in entries], 1 - beta1)
    torch._foreach_mul_([e.state[1] for e in entries], beta2)
    torch._foreach_abs_([e.grad for e in entries])
    torch._foreach_add_([e.grad for e in entries], eps)
    torch._foreach_maximum_([e.state[1] for e in entries], [e.grad for e in entries])
    corrected = [e for e in entries if e.corrected]
    if corrected:
        torch._foreach_addcdiv_([e.param for e in corrected], [e.state[0] for e in corrected],
                                [e.state[1] for e in corrected],
                                [-e.lr / (1 - beta1 ** e.step) for e in corrected])
    plain = [e for e in entries if not e.corrected]
    if plain:
        denom = torch._foreach_add([e.state[1] for e in plain], eps)
        torch._foreach_addcdiv_([e.param for e in plain], [e.state[0] for e in plain], denom,
                                [-e.lr for e in plain])


KERNELS = {"adamw": _adamw_step, "radam": _radam_step, "adamax": _adamax_step}

__all__ = ["STATE_KEYS", "StackedOptimizer", "optimizer_layout", "own_state",
           "stacked_optimizer", "step_members"]
