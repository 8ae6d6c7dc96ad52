"""Smoothness-inducing adversarial regularisation (SMART, Jiang et al. 2020), one projected step.

The regulariser asks the model to answer the same when its input embeddings move a little:
start from Gaussian noise of scale `noise` on the word embeddings, take one ascent step of size
`step_size` along the gradient of the divergence between the perturbed and the clean
predictions (normalised by its largest entry per token, so the step does not depend on the
loss scale), project the perturbation back into the box of half-width `epsilon`, and add
`weight` times the symmetric divergence at that point to the task loss. The divergence is the
head's own (`Head.smoothness`): symmetric KL for class distributions, squared error for scores.

Defaults are the SMART paper's: epsilon 1e-5, noise 1e-5, step size 1e-3, weight 1, one step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch stays out of config parsing, which imports the settings above
    import torch

    from trainer.model import MTDNN


@dataclass(frozen=True)
class AdversarialSettings:
    enabled: bool = False
    weight: float = 1.0  # lambda_s: the regulariser's weight against the task loss
    epsilon: float = 1e-5  # half-width of the box the perturbation is projected into
    noise: float = 1e-5  # standard deviation of the initial perturbation
    step_size: float = 1e-3  # eta: the ascent step


ADVERSARIAL_KEYS = ("enabled", "weight", "epsilon", "noise", "step_size")


def parse_adversarial(raw: object, where: str, problems: list[str],
                      base: AdversarialSettings | None = None) -> AdversarialSettings:
    """`adversarial: {enabled, weight, epsilon, noise, step_size}`; `true` turns the defaults on."""
    base = base or AdversarialSettings()
    if raw is None:
        return base
    if isinstance(raw, bool):
        return AdversarialSettings(**{**base.__dict__, "enabled": raw})
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: expected true, false or a mapping of "
                        f"{', '.join(ADVERSARIAL_KEYS)}; got {raw!r}")
        return base
    values = dict(base.__dict__)
    values["enabled"] = True  # a mapping turns it on unless it says enabled: false
    for key, value in raw.items():
        if key not in ADVERSARIAL_KEYS:
            problems.append(f"{where}.{key}: unknown setting; use {', '.join(ADVERSARIAL_KEYS)}")
        elif key == "enabled":
            if not isinstance(value, bool):
                problems.append(f"{where}.enabled: expected true or false, got {value!r}")
            else:
                values[key] = value
        elif (isinstance(value, bool) or not isinstance(value, (int, float))
              or not math.isfinite(value) or value < 0):
            problems.append(f"{where}.{key}: expected a number >= 0, got {value!r}")
        else:
            values[key] = float(value)
    return AdversarialSettings(**values)


def smart_loss(
    model: MTDNN,
    task: str,
    batch: dict[str, torch.Tensor],
    clean: torch.Tensor,
    settings: AdversarialSettings,
) -> torch.Tensor:
    """The smoothness term for one batch whose clean outputs (with their graph) are `clean`."""
    import torch

    head = model.head(task)
    embed = model.encoder.get_input_embeddings()(batch["input_ids"])
    noise = (torch.randn_like(embed) * settings.noise).requires_grad_()
    # Ascent direction: from a copy of the embeddings that carries no graph into the model.
    perturbed = model(task, batch, embeds=embed.detach() + noise)
    divergence = head.smoothness(perturbed.float(), clean.detach().float())
    (grad,) = torch.autograd.grad(divergence, noise)
    scale = grad.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12)
    delta = (noise + settings.step_size * grad / scale).clamp(-settings.epsilon, settings.epsilon)
    perturbed = model(task, batch, embeds=embed + delta.detach())
    return head.smoothness(perturbed.float(), clean.float())
