"""The inert-grid check from a finished cell's whole run, in the driver: under global clipping,
the grid's central weights above the one from which every central update was clipped train the
same treatment. Judged once per central task, from its first finished cell (or, before a round
hands anything out, from a cell the study already holds); where that is every weight of the
grid and the study sets allow_inert: false, the launch stops. The checks before a study
spends: `sweep/inert_grid.py`."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from optuna.trial import TrialState

from weightsearch.core.errors import ConfigError
from weightsearch.studies import schema as S
from weightsearch.sweep.driver_state import CentralPlan
from weightsearch.sweep.inert_grid import MEANS_IT, clipping_fix
from weightsearch.sweep.progress import Progress, say, trial_label
from weightsearch.sweep.space import CENTRAL_WEIGHT


class LiveRangeJudge:
    """Judges each central task's grid once, from a finished cell's clipping record; returns
    the error that stops the launch, if any (the searcher keeps it as `must_stop`)."""

    def __init__(self, weight_acts_on: str, allow_inert: bool, progress: Progress) -> None:
        self.weight_acts_on = weight_acts_on
        self.allow_inert = allow_inert
        self.progress = progress
        self.told: set[str] = set()  # central tasks whose live range was judged

    def judge(self, plan: CentralPlan, record: dict[str, Any], cell: str,
              quiet: bool = False) -> ConfigError | None:
        """Once per central task, from its first finished cell under global clipping (`record`,
        its run's clipping): the grid's weights above the one from which every central update
        was clipped train the same treatment. Said as a note (unless `quiet`); where that is
        every weight of the grid and the study sets allow_inert: false, the error that stops
        the launch (exit 2)."""
        space = plan.strategy.space
        dim = space.dim(CENTRAL_WEIGHT)
        if (plan.central in self.told or not space.central_weight_only
                or self.weight_acts_on != "loss"  # a sampling rate is not cut by a clip
                or dim is None or not dim.values or record.get("grad_clip_mode") != "global"
                or not record.get("grad_clip")):
            return None
        limit = ((record.get("tasks") or {}).get(plan.central) or {}).get("saturates_at")
        if not isinstance(limit, int | float) or not math.isfinite(limit):
            return None
        self.told.add(plan.central)  # judged once, on the first cell that tells
        grid = sorted(float(w) for w in dim.values)
        above = [w for w in grid if w > limit]
        if len(above) < 2:
            return None
        shown = ", ".join(f"{w:g}" for w in above)
        fix = clipping_fix(limit, record["grad_clip"])
        said = (f"{plan.central}: in a finished cell ({cell}) every central update was "
                f"clipped from weight about {limit:.2g} up (global clipping at "
                f"{record['grad_clip']:g}), so weights {shown} will train the same treatment")
        if len(above) == len(grid) and not self.allow_inert:
            return ConfigError([
                f"{said}: every weight of the grid, which cannot tell them apart; {fix}, "
                f"{MEANS_IT}"])
        if not quiet:
            say(f"note: {said}; to tell them apart, {fix}", self.progress.enabled)
        return None

    def judge_stored(self, plans: Iterable[CentralPlan]) -> ConfigError | None:
        """Before a round hands anything out: a study stopped for a grid of one treatment
        stops again at once (no further cell is trained to find it out again). Only a study
        that can stop (allow_inert: false) reads its stored trials for it; of several
        central tasks that stop, the last one's error."""
        if self.allow_inert:
            return None
        stop = None
        for plan in plans:
            if not plan.strategy.space.central_weight_only:
                continue
            for trial in plan.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
                record = trial.user_attrs.get(S.T_CLIPPING)
                weight = trial.params.get(S.PARAM)
                if isinstance(record, dict) and isinstance(weight, int | float):
                    judged = self.judge(plan, record, trial_label(
                        f"w={weight:g}", trial.user_attrs.get(S.T_SEED)), quiet=True)
                    stop = judged if judged is not None else stop
                    break
        return stop
