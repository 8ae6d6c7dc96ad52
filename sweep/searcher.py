"""The Ray Tune searcher that hands out cells and writes every Optuna record, in the driver.

Why not Optuna's GridSampler or Ray's OptunaSearch: under parallel workers GridSampler can hand
the same point out twice, and a crashed driver would leave no record of which points finished.
Here the driver is the only writer: a cell (central task, weight, seed) is pending until its
study holds a COMPLETE (or, under ASHA, PRUNED) trial carrying that cell, so a relaunch or
`resume` runs exactly the missing cells.

Tune calls, all in the driver:
- `suggest(trial_id)` when a trial slot is free: the next pending cell, round-robin over the
  central tasks, and the Optuna trial for it (`study.ask`);
- `on_trial_result(trial_id, result)` after every epoch: an intermediate value per epoch;
- `on_trial_complete(trial_id, result, error)` once per trial, after Ray's retries are spent:
  user attributes, then `study.tell`.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState
from ray.tune.search import Searcher

from studies import schema as S
from sweep.progress import Progress
from sweep.spec import GuidedSearch
from sweep.trainable import EPOCH, METRICS_JSON, OBJECTIVE, SUMMARY_JSON

DONE_STATES = (TrialState.COMPLETE, TrialState.PRUNED)
_DUPLICATE_TRIES = 20  # guided search with a step: re-ask when a proposed weight is taken


@dataclass
class CentralPlan:
    """What is left to run for one central task (one Optuna study)."""

    central: str
    study: optuna.Study
    primary_metric: str
    distribution: FloatDistribution
    grid: deque[tuple[float, int]] = field(default_factory=deque)  # (weight, seed), grid mode
    slots: dict[int, int] = field(default_factory=dict)  # seed -> trials left, guided mode
    warm: dict[int, list[float]] = field(default_factory=dict)  # seed -> weights tried first
    taken: set[str] = field(default_factory=set)  # cells done or handed out
    attempts: dict[str, int] = field(default_factory=dict)  # cell -> earlier trials of it

    @property
    def remaining(self) -> int:
        return len(self.grid) + sum(self.slots.values())


@dataclass
class _Live:
    plan: CentralPlan
    trial: optuna.Trial
    weight: float
    seed: int
    started: float
    history: dict[int, dict[str, Any]] = field(default_factory=dict)  # epoch -> metrics
    values: dict[int, float] = field(default_factory=dict)  # epoch -> objective
    summary: dict[str, Any] | None = None


class CellSearcher(Searcher):
    def __init__(
        self,
        plans: list[CentralPlan],
        epochs: int,
        progress: Progress,
        stopped_by_scheduler: set[str],
    ) -> None:
        super().__init__(metric=OBJECTIVE, mode="max")
        self.plans = [p for p in plans if p.remaining]
        self.epochs = epochs
        self.progress = progress
        self.stopped = stopped_by_scheduler  # filled by the scheduler wrapper in launch
        self.tune_trials: dict[str, Any] = {}  # trial_id -> ray Trial, filled by a callback
        self._live: dict[str, _Live] = {}
        self._turn = 0

    # --- Tune hooks -------------------------------------------------------------------
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        for _ in range(len(self.plans)):
            plan = self.plans[self._turn % len(self.plans)]
            self._turn += 1
            picked = self._take(plan)
            if picked is None:
                continue
            trial, weight, seed = picked
            self._live[trial_id] = _Live(plan, trial, weight, seed, time.time())
            self.progress.started(plan.central, weight, seed)
            return {"central_task": plan.central, "weight": weight, "seed": seed,
                    "cell": S.cell_key(weight, seed), "trial_number": trial.number}
        return Searcher.FINISHED

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        live = self._live.get(trial_id)
        if live is not None:
            self._absorb(live, result)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        live = self._live.pop(trial_id, None)
        if live is None:
            return
        if result:
            self._absorb(live, result)
        trial, plan = live.trial, live.plan
        elapsed = time.time() - live.started
        if not error and live.summary is not None:
            value = self._complete(live)
            self.progress.finished(plan, live.weight, live.seed, "COMPLETE", elapsed, value)
        elif not error and trial_id in self.stopped and live.values:
            self._history_attrs(live)
            trial.set_user_attr(S.T_WALL_TIME, elapsed)
            plan.study.tell(trial, state=TrialState.PRUNED)
            self.progress.finished(plan, live.weight, live.seed, "PRUNED", elapsed, None)
        else:
            reason = self._error_text(trial_id) if error else "interrupted before it finished"
            trial.set_user_attr("error", reason)
            self._history_attrs(live)
            plan.study.tell(trial, state=TrialState.FAIL)
            plan.taken.discard(S.cell_key(live.weight, live.seed))
            self.progress.finished(plan, live.weight, live.seed, "FAIL", elapsed, None, reason)

    def save(self, checkpoint_path: str) -> None:
        """Nothing to save: the study database is this searcher's state."""

    def restore(self, checkpoint_path: str) -> None:
        """Nothing to restore: pending cells are recomputed from the study database."""

    # --- cells ------------------------------------------------------------------------
    def _take(self, plan: CentralPlan) -> tuple[optuna.Trial, float, int] | None:
        if plan.grid:
            weight, seed = plan.grid.popleft()
            return self._ask(plan, weight, seed), weight, seed
        for seed, left in plan.slots.items():
            if left <= 0:
                continue
            plan.slots[seed] = left - 1
            warm = plan.warm.get(seed) or []
            while warm:
                weight = warm.pop(0)
                if S.cell_key(weight, seed) not in plan.taken:
                    return self._ask(plan, weight, seed), weight, seed
            return self._ask_sampler(plan, seed)
        return None

    def _ask(self, plan: CentralPlan, weight: float, seed: int) -> optuna.Trial:
        """An Optuna trial fixed at `weight` (enqueued, so the sampler does not choose)."""
        plan.study.enqueue_trial({S.PARAM: weight})
        trial = _quiet_ask(plan.study, plan.distribution)
        self._label(plan, trial, weight, seed)
        return trial

    def _ask_sampler(self, plan: CentralPlan, seed: int) -> tuple[optuna.Trial, float, int]:
        """A weight proposed by the study's sampler (TPE or random); taken weights are skipped."""
        for _ in range(_DUPLICATE_TRIES):
            trial = _quiet_ask(plan.study, plan.distribution)
            weight = float(trial.params[S.PARAM])
            if S.cell_key(weight, seed) not in plan.taken:
                break
            trial.set_user_attr("skipped", f"weight {weight:g} already tried with seed {seed}")
            plan.study.tell(trial, state=TrialState.FAIL)
        else:  # the sampler insists: run the repeat rather than stall the study
            trial = _quiet_ask(plan.study, plan.distribution)
            weight = float(trial.params[S.PARAM])
        self._label(plan, trial, weight, seed)
        return trial, weight, seed

    @staticmethod
    def _label(plan: CentralPlan, trial: optuna.Trial, weight: float, seed: int) -> None:
        cell = S.cell_key(weight, seed)
        trial.set_user_attr(S.T_SEED, int(seed))
        trial.set_user_attr(S.T_CELL, cell)
        trial.set_user_attr(S.T_ATTEMPT, plan.attempts.get(cell, 0))
        plan.attempts[cell] = plan.attempts.get(cell, 0) + 1
        plan.taken.add(cell)

    # --- results ----------------------------------------------------------------------
    def _absorb(self, live: _Live, result: dict[str, Any]) -> None:
        if SUMMARY_JSON in result:
            live.summary = json.loads(result[SUMMARY_JSON])
            return
        if EPOCH not in result or OBJECTIVE not in result:
            return
        epoch, value = int(result[EPOCH]), float(result[OBJECTIVE])
        if METRICS_JSON in result:
            live.history[epoch] = json.loads(result[METRICS_JSON])
        if epoch not in live.values and math.isfinite(value):
            live.values[epoch] = value
            live.trial.report(value, step=epoch)  # a retried trial re-reports nothing twice

    def _complete(self, live: _Live) -> float:
        summary, central = live.summary or {}, live.plan.central
        history = summary.get("history") or []
        best_epoch = int(summary["best_epoch"][central])
        at_best = next((h["metrics"] for h in history if h["epoch"] == best_epoch), {})
        value = float(summary["best"][central][live.plan.primary_metric])
        trial = live.trial
        for h in history:  # epochs trained before a resume reach Optuna here
            if h["epoch"] not in live.values:
                live.values[h["epoch"]] = float(h["primary"][central])
                trial.report(live.values[h["epoch"]], step=h["epoch"])
        trial.set_user_attr(S.T_METRICS, at_best)
        trial.set_user_attr(S.T_FINAL_METRICS, summary.get("final", {}))
        trial.set_user_attr(S.T_HISTORY, history)
        trial.set_user_attr(S.T_BEST_EPOCH, best_epoch)
        trial.set_user_attr(S.T_WALL_TIME, float(summary.get("wall_time_s", 0.0)))
        trial.set_user_attr(S.T_EXAMPLES_PER_S, float(summary.get("train_examples_per_s", 0.0)))
        trial.set_user_attr("output_dir", summary.get("output_dir"))
        live.plan.study.tell(trial, value)
        return value

    def _history_attrs(self, live: _Live) -> None:
        """What a stopped or failed trial got through, for inspection."""
        if not live.history:
            return
        history = [{"epoch": e, "metrics": m, "primary": {live.plan.central: live.values.get(e)}}
                   for e, m in sorted(live.history.items())]
        best = max(live.values, key=lambda e: (live.values[e], -e))
        live.trial.set_user_attr(S.T_HISTORY, history)
        live.trial.set_user_attr(S.T_BEST_EPOCH, best)
        live.trial.set_user_attr(S.T_METRICS, live.history.get(best, {}))
        live.trial.set_user_attr(S.T_FINAL_METRICS, history[-1]["metrics"])

    def _error_text(self, trial_id: str) -> str:
        """The last line of the trial's error file: usually the exception and its message."""
        tune_trial = self.tune_trials.get(trial_id)
        path = getattr(tune_trial, "error_file", None)
        if not path or not Path(path).is_file():
            return "the trial raised an error (see the Ray trial folder)"
        lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines()]
        lines = [ln for ln in lines if ln and not ln.startswith("Failure #")]
        return lines[-1][:500] if lines else "the trial raised an error"


def _quiet_ask(study: optuna.Study, distribution: FloatDistribution) -> optuna.Trial:
    # The storage has heartbeats on for crash detection elsewhere; ask/tell outside
    # Study.optimize makes Optuna warn about that on every trial.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Heartbeat of storage")
        return study.ask({S.PARAM: distribution})


def guided_distribution(search: GuidedSearch) -> FloatDistribution:
    return FloatDistribution(search.low, search.high, step=search.step)
