"""Equal weighting: every batch's loss counts once (plain MT-DNN)."""

from __future__ import annotations

from dataclasses import dataclass, field

from weightsearch.trainer.weighting.base import Scheme, Settings


@dataclass(frozen=True)
class EqualSettings(Settings):
    """No settings: the MT-DNN baseline."""

    scheme: str = field(default="equal", init=False)


class EqualScheme(Scheme):
    name = "equal"
    settings_type = EqualSettings

    def weight(self, task: str, epoch: int, step: int) -> float:
        self._check_position(epoch, step, task)
        return 1.0
