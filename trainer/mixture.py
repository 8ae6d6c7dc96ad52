"""Settings of the multi-gate mixture of experts (MMoE; Ma et al. 2018) that can sit between
the shared encoder and the heads (the network itself:
`weightsearch.trainer.model.MixtureOfExperts`).

N expert feed-forward networks read the encoder's token states; each task k has its own
softmax gate over the experts and its head reads its own gated mixture, as Ma et al. define it:
f^k(x) = sum_i g^k(x)_i f_i(x), g^k(x) = softmax(W_gk x). By default (`gate: example`) the gate
is one per example, computed from x = the mean of the example's token states, and applied to
every token's expert outputs; the head reads the mixture alone (`residual: false`).

Named departures: `gate: token` computes a gate per token from that token's state, and
`residual: true` adds the mixture to the encoder's states, so that heads start from the
pretrained states while the experts are still random (their last layers then start small).
Off by default (`mixture: {experts: N, expert_hidden: H}` in the run config).
"""

from __future__ import annotations

from dataclasses import dataclass

from weightsearch.core.fields import Choice, Flag, Number, check_section, setting

GATES = ("example", "token")


@dataclass(frozen=True)
class MixtureSettings:
    experts: int = setting(4, Number(integer=True, low=1),
                           doc="the number of expert feed-forward networks")
    expert_hidden: int | None = setting(
        None, Number(integer=True, low=1, optional=True),
        doc="the width of each expert's hidden layer; null: the encoder's hidden size")
    gate: str = setting(
        "example", Choice(GATES), since="0.2.0",
        doc="example: one gate per task and example, from the mean of its token states (Ma et "
            "al.); token: one per token, from that token's state (a departure)")
    residual: bool = setting(
        False, Flag(), since="0.2.0",
        doc="true: the heads read the encoder's states plus the mixture (a departure); false: "
            "the mixture alone (Ma et al.)")


def parse_mixture(raw: object, problems: list[str]) -> MixtureSettings | None:
    """`mixture: {experts, expert_hidden, gate, residual}`; absent, null or false: off."""
    if raw is None or raw is False:
        return None
    values = check_section(raw, MixtureSettings, "mixture", problems,
                           "{experts: 4, expert_hidden: 384, gate: example, residual: false}")
    return None if values is None else MixtureSettings(**values)
