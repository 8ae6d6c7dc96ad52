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

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from weightsearch.fields import Flag, Number, check_section, setting

if TYPE_CHECKING:  # torch stays out of config parsing, which imports the settings above
    import torch

    from trainer.model import MTDNN


@dataclass(frozen=True)
class AdversarialSettings:
    enabled: bool = setting(False, Flag())
    # lambda_s: the regulariser's weight against the task loss
    weight: float = setting(1.0, Number(integer=False, low=0))
    # half-width of the box the perturbation is projected into
    epsilon: float = setting(1e-5, Number(integer=False, low=0))
    noise: float = setting(1e-5, Number(integer=False, low=0))  # sd of the first perturbation
    step_size: float = setting(1e-3, Number(integer=False, low=0))  # eta: the ascent step


def parse_adversarial(raw: object, where: str, problems: list[str],
                      base: AdversarialSettings | None = None) -> AdversarialSettings:
    """`adversarial: {enabled, weight, epsilon, noise, step_size}`; `true` turns the defaults on,
    and so does a mapping unless it says `enabled: false`."""
    base = base or AdversarialSettings()
    if raw is None:
        return base
    if isinstance(raw, bool):
        return dataclasses.replace(base, enabled=raw)
    values = check_section(raw, AdversarialSettings, where, problems,
                           "{weight: 1.0, epsilon: 1e-5} (or true, false)")
    if values is None:
        return base
    return dataclasses.replace(base, **{"enabled": True, **values})


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
