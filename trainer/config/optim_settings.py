"""Settings of the Adamax update and of the head initialisation (torch-free: config parsing
imports it, and config parsing never loads torch).

`adamax: {bias_correction: true, eps: 1e-8}` are torch's and Kingma & Ba's Adamax, which the
current MT-DNN code also uses. SIWLM's copy of the older MT-DNN code runs BERT's variant of it:
`bias_correction: false, eps: 1e-6` (trainer/optim.py spells out both updates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from weightsearch.core.fields import Flag, check_section, is_number, setting

# MT-DNN's Adamax; AdamW for the usual BERT recipe; RAdam (Liu et al. 2020), which SIWLM's
# fine-tuning scripts use
OPTIMIZERS = ("adamax", "adamw", "radam")
# trainer/optim.py `schedule_factor` computes each
SCHEDULES = ("linear", "warmup_linear")
# What happens to a parameter on a batch that gives it no gradient (RunConfig.idle_params)
IDLE_PARAMS = ("skip", "step")
HEAD_INITS = ("default", "normal")
HEAD_INIT_STD = 0.02  # BERT's initializer_range, what the reference code draws head weights from


class Eps:
    """An optimizer's eps: a number in (0, 1], with the values the reference codes use."""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        if not is_number(value) or not math.isfinite(value) or value <= 0 or value > 1:
            return None, (f"{key}: {value!r} is not a number in (0, 1]; use e.g. 1e-8 (torch, "
                          "MT-DNN) or 1e-6 (SIWLM's code)")
        return float(value), None

    def schema(self) -> dict[str, Any]:
        return {"type": "number", "exclusiveMinimum": 0, "maximum": 1}

    def describe(self) -> str:
        return "number in (0, 1]"


@dataclass(frozen=True)
class AdamaxSettings:
    # false: BERT's Adamax, whose first steps are ten times smaller.
    bias_correction: bool = setting(
        True, Flag(), doc="false: no bias correction of the first moment, and eps added to the "
                          "denominator too, as the BERT-style Adamax of SIWLM's code")
    eps: float = setting(1e-8, Eps(), doc="Adamax's eps: 1e-8 as torch and MT-DNN, 1e-6 as "
                                           "SIWLM's code")


def parse_adamax(raw: Any, problems: list[str]) -> AdamaxSettings:
    if raw is None:
        return AdamaxSettings()
    values = check_section(raw, AdamaxSettings, "adamax", problems,
                           "{bias_correction: true, eps: 1e-8}")
    return AdamaxSettings(**(values or {}))
