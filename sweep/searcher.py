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
from sweep.claims import Claims
from sweep.progress import Progress
from sweep.spec import GuidedSearch
from sweep.trainable import EPOCH, METRICS_JSON, OBJECTIVE, SUMMARY_JSON

DONE_STATES = (TrialState.COMPLETE, TrialState.PRUNED)
_DUPLICATE_TRIES = 20  # guided search with a step: re-ask when a proposed weight is taken


@dataclass(frozen=True)
class Unit:
    """One claimable piece of work: a grid cell (weight fixed) or a guided-search slot."""

    key: str
    seed: int
    weight: float | None  # None: the guided search's sampler chooses


@dataclass
class CentralPlan:
    """What is left to run for one central task (one Optuna study)."""

    central: str
    study: optuna.Study
    primary_metric: str  # the metric the trial value is (the objective's)
    distribution: FloatDistribution
    stage: str = "multitask"  # the stage the trial value scores: multitask | finetuned
    units: deque[Unit] = field(default_factory=deque)
    warm: dict[int, list[float]] = field(default_factory=dict)  # seed -> weights tried first
    deferred: list[Unit] = field(default_factory=list)  # held by another driver's live claim

    @property
    def remaining(self) -> int:
        return len(self.units)


@dataclass
class _Live:
    plan: CentralPlan
    unit: Unit
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
        claims: Claims,
    ) -> None:
        super().__init__(metric=OBJECTIVE, mode="max")
        self.plans = [p for p in plans if p.remaining]
        self.epochs = epochs
        self.progress = progress
        self.stopped = stopped_by_scheduler  # filled by the scheduler wrapper in launch
        self.claims = claims
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
            unit, trial, weight, attempt = picked
            self._live[trial_id] = _Live(plan, unit, trial, weight, unit.seed, time.time())
            self.progress.started(plan.central, weight, unit.seed)
            return {"central_task": plan.central, "weight": weight, "seed": unit.seed,
                    "cell": S.cell_key(weight, unit.seed), "trial_number": trial.number,
                    "attempt": attempt}
        # Units another driver holds (plan.deferred) are not waited for here: an idle Tune
        # would keep its workers' CPUs from the other drivers. `launch` waits between rounds.
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
        name = plan.study.study_name
        elapsed = time.time() - live.started
        if not self.claims.holds(name, live.unit.key):
            # Our lease ran out (a stalled driver) and another driver took the cell over: its
            # attempt is the one that counts.
            reason = "claim expired; another driver took the cell over"
            trial.set_user_attr("error", reason)
            plan.study.tell(trial, state=TrialState.FAIL)
            self.progress.finished(plan, live.weight, live.seed, "FAIL", elapsed, None, reason)
            return
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
            self.progress.finished(plan, live.weight, live.seed, "FAIL", elapsed, None, reason)
        self.claims.release(name, live.unit.key)

    def abandon_live(self) -> int:
        """Trials Tune never finished (the driver is stopping): FAIL, claims released, so any
        driver may continue them from their checkpoints at once. Returns how many."""
        left = len(self._live)
        for trial_id in list(self._live):
            live = self._live.pop(trial_id)
            live.trial.set_user_attr("error", "driver stopped before it ended")
            live.plan.study.tell(live.trial, state=TrialState.FAIL)
            self.claims.release(live.plan.study.study_name, live.unit.key)
        return left

    def save(self, checkpoint_path: str) -> None:
        """Nothing to save: the study database is this searcher's state."""

    def restore(self, checkpoint_path: str) -> None:
        """Nothing to restore: pending cells are recomputed from the study database."""

    # --- cells ------------------------------------------------------------------------
    def _take(self, plan: CentralPlan) -> tuple[Unit, optuna.Trial, float, int] | None:
        """The next unit this driver could claim, with its Optuna trial; None if none now."""
        name = plan.study.study_name
        while plan.units:
            unit = plan.units.popleft()
            if not self.claims.claim(name, unit.key):
                plan.deferred.append(unit)
                continue
            # Read the study only now that the unit is ours: a driver that finished it told
            # Optuna COMPLETE before it released the claim.
            trials = plan.study.get_trials(deepcopy=False)
            if _unit_done(unit, trials):
                self.claims.release(name, unit.key)
                continue
            weight = unit.weight if unit.weight is not None else self._resumed_weight(unit, trials)
            _fail_stale(plan.study, unit, trials)
            if weight is None:
                warm = plan.warm.get(unit.seed) or []
                taken = _taken_cells(trials)
                while warm and weight is None:
                    w = warm.pop(0)
                    weight = w if S.cell_key(w, unit.seed) not in taken else None
            if weight is None:
                trial, weight = self._ask_sampler(plan, unit.seed, _taken_cells(trials))
                attempt = _attempts(trials, S.cell_key(weight, unit.seed))
                self._label(trial, unit, weight, attempt)
            else:
                attempt = _attempts(trials, S.cell_key(weight, unit.seed))
                trial = self._fixed(plan, unit, weight, attempt)
            return unit, trial, weight, attempt
        return None

    @staticmethod
    def _resumed_weight(unit: Unit, trials: list) -> float | None:
        """A slot taken over from a dead driver continues that driver's weight (and checkpoint)."""
        for t in reversed(trials):
            if t.user_attrs.get(S.T_SLOT) == unit.key and t.state == TrialState.RUNNING:
                return float(t.params[S.PARAM])
        return None

    @staticmethod
    def _fixed(plan: CentralPlan, unit: Unit, weight: float, attempt: int) -> optuna.Trial:
        """A RUNNING trial at `weight`, labelled in the same insert. Not enqueue + ask: another
        driver's ask could pop the enqueued trial and train it under its own cell."""
        attrs = _labels(unit, weight, attempt)
        template = optuna.trial.create_trial(
            state=TrialState.RUNNING, params={S.PARAM: weight},
            distributions={S.PARAM: plan.distribution}, user_attrs=attrs,
        )
        storage = plan.study._storage
        trial_id = storage.create_new_trial(plan.study._study_id, template_trial=template)
        return optuna.Trial(plan.study, trial_id)

    def _ask_sampler(self, plan: CentralPlan, seed: int, taken: set[str]
                     ) -> tuple[optuna.Trial, float]:
        """A weight proposed by the study's sampler (TPE or random); taken weights are skipped."""
        for _ in range(_DUPLICATE_TRIES):
            trial = _quiet_ask(plan.study, plan.distribution)
            weight = float(trial.params[S.PARAM])
            if S.cell_key(weight, seed) not in taken:
                break
            trial.set_user_attr("skipped", f"weight {weight:g} already tried with seed {seed}")
            plan.study.tell(trial, state=TrialState.FAIL)
        else:  # the sampler insists: run the repeat rather than stall the study
            trial = _quiet_ask(plan.study, plan.distribution)
            weight = float(trial.params[S.PARAM])
        return trial, weight

    @staticmethod
    def _label(trial: optuna.Trial, unit: Unit, weight: float, attempt: int) -> None:
        for key, value in _labels(unit, weight, attempt).items():
            trial.set_user_attr(key, value)

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
        tuned = summary.get("finetuned") or {}
        scored = tuned[central]["best"] if live.plan.stage == "finetuned" else summary["best"]
        value = float(scored[central][live.plan.primary_metric])
        trial = live.trial
        if tuned:
            trial.set_user_attr(S.T_FINETUNED_METRICS,
                                {t: run["best"][t] for t, run in tuned.items()})
        for h in history:  # epochs trained before a resume reach Optuna here
            if h["epoch"] not in live.values:
                live.values[h["epoch"]] = float(h["metrics"][central][live.plan.primary_metric])
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


def _labels(unit: Unit, weight: float, attempt: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {S.T_SEED: int(unit.seed), S.T_CELL: S.cell_key(weight, unit.seed),
                             S.T_ATTEMPT: attempt}
    if unit.weight is None:
        attrs[S.T_SLOT] = unit.key
    return attrs


def _unit_done(unit: Unit, trials: list) -> bool:
    if unit.weight is not None:
        return any(t.state in DONE_STATES and t.user_attrs.get(S.T_CELL) == unit.key
                   for t in trials)
    if any(t.state in DONE_STATES and t.user_attrs.get(S.T_SLOT) == unit.key for t in trials):
        return True
    # Studies from before slots were labelled: the first n slots of a seed are its n done trials.
    legacy = sum(1 for t in trials if t.state in DONE_STATES and S.T_SLOT not in t.user_attrs
                 and t.user_attrs.get(S.T_SEED) == unit.seed and S.T_CELL in t.user_attrs)
    return slot_index(unit.key) < legacy


def _taken_cells(trials: list) -> set[str]:
    """Cells finished or in training (by any driver)."""
    return {t.user_attrs[S.T_CELL] for t in trials if S.T_CELL in t.user_attrs
            and t.state in (*DONE_STATES, TrialState.RUNNING)}


def _attempts(trials: list, cell: str) -> int:
    """Earlier trials of `cell`: this attempt's number, and its folder's."""
    return sum(1 for t in trials if t.user_attrs.get(S.T_CELL) == cell)


def _fail_stale(study: optuna.Study, unit: Unit, trials: list) -> None:
    """Trials of `unit` still RUNNING although we now hold its claim: their driver died (its
    lease expired) or predates claims. FAIL them; their checkpoints stay for the next attempt."""
    storage = study._storage
    for t in trials:
        if t.state not in (TrialState.RUNNING, TrialState.WAITING):
            continue
        mine = (t.user_attrs.get(S.T_SLOT) == unit.key if unit.weight is None
                else t.user_attrs.get(S.T_CELL) == unit.key)
        if mine:
            storage.set_trial_user_attr(t._trial_id, "error", "driver stopped before it ended")
            storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL)


def slot_key(seed: int, index: int) -> str:
    return f"slot:{int(seed)}:{int(index)}"


def slot_index(key: str) -> int:
    return int(key.rsplit(":", 1)[1])


def guided_distribution(search: GuidedSearch) -> FloatDistribution:
    return FloatDistribution(search.low, search.high, step=search.step)
