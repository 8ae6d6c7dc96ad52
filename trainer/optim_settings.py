"""Settings of the Adamax update and of the head initialisation (torch-free: config parsing
imports it, and config parsing never loads torch).

`adamax: {bias_correction: true, eps: 1e-8}` are torch's and Kingma & Ba's Adamax, which the
current MT-DNN code also uses. SIWLM's copy of the older MT-DNN code runs BERT's variant of it:
`bias_correction: false, eps: 1e-6` (trainer/optim.py spells out both updates).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

HEAD_INITS = ("default", "normal")
HEAD_INIT_STD = 0.02  # BERT's initializer_range, what the reference code draws head weights from


@dataclass(frozen=True)
class AdamaxSettings:
    # false: no bias correction of the first moment, and eps also added to the denominator,
    # as in the BERT-style Adamax of SIWLM's code; its first steps are ten times smaller.
    bias_correction: bool = True
    eps: float = 1e-8


def parse_adamax(raw: Any, problems: list[str]) -> AdamaxSettings:
    if raw is None:
        return AdamaxSettings()
    if not isinstance(raw, Mapping):
        problems.append(f"adamax: expected a mapping such as {{bias_correction: true, eps: 1e-8}},"
                        f" got {raw!r}")
        return AdamaxSettings()
    values: dict[str, Any] = {}
    for key in sorted(set(raw) - {"bias_correction", "eps"}):
        problems.append(f"adamax.{key}: unknown setting; known settings: bias_correction, eps")
    if "bias_correction" in raw:
        value = raw["bias_correction"]
        if not isinstance(value, bool):
            problems.append(f"adamax.bias_correction: expected true or false, got {value!r}")
        else:
            values["bias_correction"] = value
    if "eps" in raw:
        value = raw["eps"]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value <= 0 or value > 1:
            problems.append(f"adamax.eps: {value!r} is not a number in (0, 1]; use e.g. 1e-8 "
                            "(torch, MT-DNN) or 1e-6 (SIWLM's code)")
        else:
            values["eps"] = float(value)
    return AdamaxSettings(**values)
