"""Settings of the multi-gate mixture of experts (MMoE; Ma et al. 2018) that can sit between
the shared encoder and the heads (the network itself: `trainer.model.MixtureOfExperts`).

N expert feed-forward networks read the encoder's token states; each task has its own softmax
gate over the experts (computed per token from the token's state), and its head reads its own
gated mixture. The mixture is added to the encoder's states (a residual): the experts start
random while the encoder is pretrained, and without the residual every head would first see
noise. Off by default (`mixture: {experts: N, expert_hidden: H}` in the run config).
"""

from __future__ import annotations

from dataclasses import dataclass

from weightsearch.fields import Number, check_section, setting


@dataclass(frozen=True)
class MixtureSettings:
    experts: int = setting(4, Number(integer=True, low=1))
    # None: the encoder's hidden size
    expert_hidden: int | None = setting(None, Number(integer=True, low=1, optional=True))


def parse_mixture(raw: object, problems: list[str]) -> MixtureSettings | None:
    """`mixture: {experts, expert_hidden}`; absent, null or false: off."""
    if raw is None or raw is False:
        return None
    values = check_section(raw, MixtureSettings, "mixture", problems,
                           "{experts: 4, expert_hidden: 384}")
    return None if values is None else MixtureSettings(**values)
