"""Settings of the multi-gate mixture of experts (MMoE; Ma et al. 2018) that can sit between
the shared encoder and the heads (the network itself: `trainer.model.MixtureOfExperts`).

N expert feed-forward networks read the encoder's token states; each task has its own softmax
gate over the experts (computed per token from the token's state), and its head reads its own
gated mixture. The mixture is added to the encoder's states (a residual): the experts start
random while the encoder is pretrained, and without the residual every head would first see
noise. Off by default (`mixture: {experts: N, expert_hidden: H}` in the run config).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MIXTURE_KEYS = ("experts", "expert_hidden")


@dataclass(frozen=True)
class MixtureSettings:
    experts: int = 4
    expert_hidden: int | None = None  # None: the encoder's hidden size


def parse_mixture(raw: object, problems: list[str]) -> MixtureSettings | None:
    """`mixture: {experts, expert_hidden}`; absent, null or false: off."""
    if raw is None or raw is False:
        return None
    if not isinstance(raw, Mapping):
        problems.append(f"mixture: expected a mapping such as {{experts: 4, expert_hidden: 384}}"
                        f", got {raw!r}")
        return None
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in MIXTURE_KEYS:
            problems.append(f"mixture.{key}: unknown setting; use {', '.join(MIXTURE_KEYS)}")
        elif value is None and key == "expert_hidden":
            values[key] = None
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"mixture.{key}: expected an integer >= 1, got {value!r}")
        else:
            values[key] = value
    return MixtureSettings(**values)
