"""Smoothness-inducing adversarial regularisation (SMART, Jiang et al. 2020), as the reference
MT-DNN code computes it (`mt_dnn/perturbation.py`, `SmartPerturbation`, one step).

The regulariser asks the model to answer the same when the output of its embedding layer (word,
position and segment embeddings after their LayerNorm) moves a little. With x that output
(padding positions zeroed) and f the head's output:

  1. start from Gaussian noise of sd `noise` (padding zeroed): d0;
  2. g = the gradient, with respect to d0, of the divergence the reference ascends from
     f(x + d0) to the clean output (`Head.ascent_divergence`): its `stable_kl` for class
     distributions (classification, multiple choice), the squared error for scores;
  3. the adversarial input is x + step_size * g / (max|g| + 1e-6), the maximum taken over each
     token's vector; the initial noise is not kept, and nothing is projected;
  4. the term is `weight` times the head's symmetric divergence between the clean and the
     adversarial outputs, gradients reaching both (`Head.smoothness`: symmetric KL for class
     distributions, squared error for scores).

The perturbed passes run in fp32 whatever the run's precision: a perturbation of 1e-3 is below
bf16's resolution, so under bf16 the term would measure rounding. The loop adds the term to the
weighted task loss unweighted, as the reference adds `adv_alpha * adv_loss` after the task
weight. `project: true` is the SMART paper's own projected step instead (keep d0, step, clip
into the box of half-width `epsilon`); `ascent: kl` climbs KL(clean || perturbed) instead of
`stable_kl` (the gradient of the symmetric KL with the clean side constant), as this trainer did
before. The two reference codes reduce the ascended divergence differently: SIWLM's copy
averages it over the batch (`stable_kl`, the default, as `siwlm-paper` follows that code), the
current MT-DNN code sums it (`ascent: stable_kl_sum`). Since the step divides by max|g| + 1e-6
and g is far below 1e-6 at these noise levels, the sum takes a step about batch-size times
larger. Defaults are SIWLM's code's: noise 1e-5, step size 1e-3, weight 1, one step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from weightsearch.core.fields import Choice, Flag, Number, check_section, setting

if TYPE_CHECKING:  # torch stays out of config parsing, which imports the settings above
    import torch

    from weightsearch.trainer.model import MTDNN


ASCENTS = ("stable_kl", "stable_kl_sum", "kl")


@dataclass(frozen=True)
class AdversarialSettings:
    enabled: bool = setting(
        False, Flag(),
        doc="add SMART's smoothness term to every update; `true` alone, or a mapping without "
            "`enabled: false`, turns it on")
    weight: float = setting(
        1.0, Number(integer=False, low=0),
        doc="lambda_s: the term's weight against the task loss (added after the task's loss "
            "weight, unweighted)")
    # Left out while SMART is off, so that older runs resume; a run with SMART on computed the
    # former perturbation and is refused (its term changed).
    project: bool = setting(
        False, Flag(), since="0.2.0", omit_when=lambda adversarial: not adversarial.enabled,
        doc="true: the SMART paper's projected step (keep the initial noise, clip into the box "
            "of half-width epsilon); false: the reference code's unprojected step")
    # Left out while SMART is off, as `project`; a run begun before it ascended KL and is refused
    # unless it says `ascent: kl`.
    ascent: str = setting(
        "stable_kl", Choice(ASCENTS), since="0.2.0",
        omit_when=lambda adversarial: not adversarial.enabled,
        doc="what the ascent step climbs: stable_kl (SIWLM's copy of the MT-DNN code: the "
            "reference's divergence, a mean over the batch), stable_kl_sum (the current MT-DNN "
            "code's: its sum) or kl (KL(clean || perturbed), this trainer's earlier ascent)")
    epsilon: float = setting(
        1e-5, Number(integer=False, low=0),
        doc="with project: true, the half-width of the box the perturbation is clipped into")
    noise: float = setting(
        1e-5, Number(integer=False, low=0),
        doc="the sd of the first perturbation: Gaussian noise on the embedding layer's output")
    step_size: float = setting(
        1e-3, Number(integer=False, low=0),
        doc="eta: the ascent step, taken along the gradient divided by its largest absolute "
            "entry per token")


def parse_adversarial(raw: object, where: str, problems: list[str],
                      base: AdversarialSettings | None = None) -> AdversarialSettings:
    """`adversarial: {enabled, weight, project, epsilon, noise, step_size}`; `true` turns the
    defaults on, and so does a mapping unless it says `enabled: false`."""
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


NORM_EPS = 1e-6  # the reference's adv_epsilon: keeps the step finite where a gradient is 0


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
    device = batch["input_ids"].device.type
    with torch.autocast(device_type=device, enabled=False):  # fp32, whatever the run's
        mask = batch["attention_mask"].unsqueeze(-1).float()
        embed = model.embedding_output(batch).float() * mask
        noise = (torch.randn_like(embed) * settings.noise * mask).requires_grad_()
        perturbed = model(task, batch, embedding_output=embed.detach() + noise)
        divergence = (head.smoothness(perturbed.float(), clean.detach().float())
                      if settings.ascent == "kl"
                      else head.ascent_divergence(perturbed.float(), clean.detach().float(),
                                                  total=settings.ascent == "stable_kl_sum"))
        (grad,) = torch.autograd.grad(divergence, noise)
        direction = grad / (grad.abs().amax(dim=-1, keepdim=True) + NORM_EPS)
        step = settings.step_size * direction
        if settings.project:
            step = (noise.detach() + step).clamp(-settings.epsilon, settings.epsilon)
        adversarial = model(task, batch, embedding_output=(embed + step).detach())
        return head.smoothness(clean.float(), adversarial.float())
