"""`n_trials` points per (central task, seed), each proposed by an Optuna sampler by name.

The sampler runs on a private in-memory copy of the study (its "mirror"), never on the study
database: a proposal that turns out to be taken (finished, training, or just claimed by
another driver) is dropped there and asked again, so the database holds only trials that
train, and no "skipped" FAIL trials. The mirror lives as long as the driver and learns every
driver's results at each proposal; trials this driver proposed keep the sampler's own state
(CMA-ES keeps its generations in it).
"""

from __future__ import annotations

import importlib.util
import math
import random
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from weightsearch.core.fields import setting
from weightsearch.sweep.space import Dimension, Point, Space
from weightsearch.sweep.strategies.base import (
    DONE,
    Named,
    Record,
    Strategy,
    StrategySettings,
    Unit,
    Whole,
    done_units,
)

SAMPLERS = ("tpe", "gp", "random", "cmaes")
_TRIES = 20  # proposals asked before falling back to an untaken point of a finite space


@dataclass(frozen=True)
class GuidedSettings(StrategySettings):
    n_trials: int = setting(1, Whole("a whole number >= 1 (trials per central task and seed)",
                                     required=True),
                            doc="Trials per central task and seed (required).")
    sampler: str = setting("tpe", Named(SAMPLERS),
                           doc="The Optuna sampler that proposes the points: tpe, gp, random "
                               "or cmaes.")


class GuidedStrategy(Strategy):
    name = "guided"
    settings_type = GuidedSettings
    accepts_warm_start = True  # proposed first, before the sampler's own proposals

    @classmethod
    def weights_plain(cls, settings: GuidedSettings, dim: Dimension) -> Any:
        return {"low": dim.low, "high": dim.high, "n_trials": settings.n_trials,
                "sampler": settings.sampler, "step": dim.step}

    @classmethod
    def check(cls, settings: GuidedSettings, space: Space, central_tasks: Sequence[str],
              problems: list[str], where: str = "search", epochs: int | None = None) -> None:
        for central in central_tasks or ("",):
            size = space.size(central)
            if settings.n_trials > size:
                problems.append(
                    f"{where}.n_trials: {settings.n_trials} trials per seed, but the space "
                    f"holds only {int(size)} distinct points"
                    + (f" for central task {central}" if space.group else "")
                    + f"; lower n_trials to at most {int(size)}, or widen the space "
                    "(a finer step, more values)")
                break
        if settings.sampler == "cmaes":
            if any(d.kind == "values" and not all(_real(v) for v in d.values)
                   for d in space.dims):
                problems.append(f"{where}.sampler: cmaes samples numbers only; this space has "
                                "categorical values; use tpe, gp or random")
            if importlib.util.find_spec("cmaes") is None:
                problems.append(f"{where}.sampler: cmaes needs the `cmaes` package; install it "
                                "with `pip install cmaes`, or use tpe, gp or random")
        if settings.sampler == "gp" and importlib.util.find_spec("torch") is None:
            problems.append(f"{where}.sampler: gp needs torch; install it or use tpe or random")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._study: Any = None  # the mirror (optuna in-memory study)
        self._linked: dict[int, int] = {}  # study trial number -> mirror trial number
        self._open: set[int] = set()  # mirror trials still RUNNING
        self._proposed: dict[str, int] = {}  # cell -> mirror trial proposed, not yet seen

    # --- units ------------------------------------------------------------------------------
    def slot(self, seed: int, index: int) -> str:
        return f"slot:{int(seed)}:{int(index)}"

    def _slots(self) -> list[Unit]:
        return [Unit(self.slot(s, i), s, None) for s in self.seeds
                for i in range(self.settings.n_trials)]

    def _done(self, records: Sequence[Record]) -> set[str]:
        done = {k for k in done_units(records) if k.startswith("slot:")}
        # Studies from before slots were labelled: a seed's n finished trials fill its first
        # n slots.
        for seed in self.seeds:
            legacy = sum(1 for r in records if r.state in DONE and r.seed == seed
                         and not (r.unit or "").startswith("slot:"))
            done.update(self.slot(seed, i) for i in range(legacy))
        return done

    def units(self, records: Sequence[Record]) -> list[Unit]:
        done = self._done(records)
        return [u for u in self._slots() if u.key not in done]

    def progress(self, records: Sequence[Record]) -> tuple[int, int]:
        slots = {u.key for u in self._slots()}
        return len(slots & self._done(records)), len(slots)

    def max_units(self) -> int:
        return len(self._slots())

    # --- proposals ----------------------------------------------------------------------------
    def propose(self, unit: Unit, records: Sequence[Record], taken: set[str]) -> Point | None:
        for point in self.first:  # the warm start, in order
            if self.space.contains(point, self.central) and \
                    self.cell(point, unit.seed) not in taken:
                return dict(point)
        self._sync(records)
        import optuna

        dists = self.space.distributions(self.central, guided=True)
        for _ in range(_TRIES):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trial = self._study.ask(dists)
            asked = self.space.point_from_params(trial.params, self.central)
            cell = None if asked is None else self.cell(asked, unit.seed)
            if cell is not None and cell not in taken:
                self._open.add(trial.number)
                self._proposed[cell] = trial.number
                return asked
            self._study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        # The sampler keeps proposing taken points (a small finite space): take any untaken
        # one, in an order that depends only on the study's history.
        grid = self.space.grid(self.central) or []
        rng = random.Random(f"{self.seeds[0]}:{len(records)}:{len(taken)}")
        rng.shuffle(grid)
        return next((p for p in grid if self.cell(p, unit.seed) not in taken), None)

    def _sync(self, records: Sequence[Record]) -> None:
        """Teach the mirror every trial of the study it has not seen, and every result."""
        import optuna
        from optuna.trial import TrialState

        if self._study is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._study = optuna.create_study(direction="maximize",
                                                  sampler=_sampler(self.settings.sampler,
                                                                   self.seeds[0]))
        dists = self.space.distributions(self.central, guided=True)
        for r in records:
            if r.point is None or not self.space.contains(r.point, self.central):
                continue
            number = self._linked.get(r.number)
            if number is None:
                if r.state not in ("complete", "running"):
                    self._linked[r.number] = -1  # failed or pruned: nothing to learn
                    continue
                number = self._proposed.pop(r.cell, None) if r.cell else None
                if number is None:
                    complete = r.state == "complete" and _finite(r.value)
                    self._study.add_trial(optuna.trial.create_trial(
                        state=TrialState.COMPLETE if complete else TrialState.RUNNING,
                        params=self.space.params(r.point, self.central), distributions=dists,
                        value=r.value if complete else None))
                    number = len(self._study.trials) - 1
                    if not complete:
                        self._open.add(number)
                self._linked[r.number] = number
            if number >= 0 and number in self._open and r.state not in ("running", "waiting"):
                self._open.discard(number)
                if r.state == "complete" and _finite(r.value):
                    self._study.tell(number, r.value)
                else:
                    self._study.tell(number, state=TrialState.FAIL)


def _sampler(name: str, seed: int) -> Any:
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant_liar and GP are "experimental"
        if name == "tpe":
            # constant_liar: trials still running count as bad guesses, so parallel
            # proposals spread out.
            return optuna.samplers.TPESampler(seed=seed, constant_liar=True)
        if name == "gp":
            return optuna.samplers.GPSampler(seed=seed)
        if name == "cmaes":
            return optuna.samplers.CmaEsSampler(seed=seed)
        return optuna.samplers.RandomSampler(seed=seed)


def _real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
