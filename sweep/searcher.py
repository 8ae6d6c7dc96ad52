"""The Ray Tune searcher that hands out units of work and writes every Optuna record, in the
driver.

Why not Optuna's GridSampler or Ray's OptunaSearch: under parallel workers and several drivers
a point could be handed out twice, and a crashed driver would leave no record of which points
finished. Here a unit is pending until its study holds a COMPLETE or PRUNED trial labelled with
it, a unit is claimed in the database before its trial is created, and each strategy decides
from the study's trials alone, so a relaunch, a `resume` or a second driver runs exactly the
missing units.

The searcher keeps the round's state and answers Tune; the jobs it hands on live in their own
modules: `driver_state` (each central task's plan, each live cell), `unit_handout` (claiming
units and creating their trials), `trial_results` (what a cell's results become in Optuna),
`live_range` (a grid that global clipping makes one treatment), `trial_end` (the write).

Tune calls, all in the driver:
- `suggest(trial_id)` when a trial slot is free: the next unit this driver can claim, round-robin
  over the central tasks, its cell's RunConfig (built once, here) and its Optuna trial;
- `on_trial_result(trial_id, result)` after every epoch: an intermediate value per epoch;
- `on_trial_complete(trial_id, result, error)` once per trial, after Ray's retries are spent:
  user attributes, then `study.tell`, then the claims are released.
A trial whose claim this driver lost (it stalled past the lease and another driver took the
unit over) is stopped by the scheduler (`should_stop`) and never written to again.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, cast

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState
from ray.tune.search import Searcher

from weightsearch.core.errors import StorageError
from weightsearch.studies import schema as S
from weightsearch.studies.claims import Claims
from weightsearch.studies.storage_failures import check_same_file, file_identity, storage_failure
from weightsearch.sweep import study_db
from weightsearch.sweep.driver_state import CentralPlan, LiveCell, Picked
from weightsearch.sweep.fuse_auto import FuseSizer
from weightsearch.sweep.live_range import LiveRangeJudge
from weightsearch.sweep.progress import Progress, say, trial_label
from weightsearch.sweep.space import Space
from weightsearch.sweep.spec import StudySpec
from weightsearch.sweep.trainable import (
    EPOCH,
    FINETUNE_EPOCH,
    FINETUNE_TASK,
    FINETUNE_VALUE,
    FUSE_NOTE,
    MEMBER,
    MEMBER_END,
    MEMBER_ERROR,
    MEMBERS,
    OBJECTIVE,
    RUN_CONFIG,
    SAME_TREATMENT_KEY,
    SUMMARY_JSON,
)
from weightsearch.sweep.trial_end import finish_trial
from weightsearch.sweep.trial_results import absorb, completed, error_text, history_attrs
from weightsearch.sweep.unit_handout import cell_config, create_trial, take_partners, take_unit
from weightsearch.trainer.fusable import fusion_problems


class CellSearcher(Searcher):
    """Hands Tune the units this driver claimed, round-robin over the central tasks, and
    records each cell's results in its Optuna trial."""

    def __init__(self, spec: StudySpec, plans: list[CentralPlan], progress: Progress,
                 stopped_by_scheduler: set[str], claims: Claims,
                 identity: tuple[int, int] | None = None) -> None:
        super().__init__(metric=OBJECTIVE, mode="max")
        self.spec = spec
        self.plans = plans
        self.progress = progress
        self.stopped = stopped_by_scheduler  # filled by the scheduler wrapper
        self.claims = claims
        self.tune_trials: dict[str, Any] = {}  # trial_id -> ray Trial, filled by a callback
        # The SQLite file this driver writes, checked before each write (deleted or replaced
        # under a running launch, its results would land in an unlinked file): the one the
        # launch opened (`identity`), not whatever is at the path when a round starts.
        self.url = claims.engine.url.render_as_string(hide_password=False)
        self.identity = identity if identity is not None else file_identity(self.url)
        # Why the launch must stop: a failure of the study database inside a Tune hook (Tune
        # would log it and go on: it catches what `on_trial_complete` raises), or a grid that
        # global clipping makes one treatment (`LiveRangeJudge`). The searcher keeps it,
        # hands out nothing more, has the scheduler stop its trials, and `run_round` raises it.
        self.must_stop: Exception | None = None
        self.live_range = LiveRangeJudge(spec.weight_acts_on, spec.allow_inert, progress)
        self.ran = 0
        self._told_unfusable = False
        # Tune trial id -> the cells it trains that have not ended: one, or a fused unit's
        # members in their order in the unit (each ends on its own).
        self._live: dict[str, list[LiveCell]] = {}
        self._turn = 0
        self.fuse_sizer = FuseSizer(spec, plans, lambda text: say(text, progress.enabled))
        # A study stopped for a grid of one treatment stops again before a cell is handed out.
        self.must_stop = self.live_range.judge_stored(self.plans)

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its searcher into the experiment folder (tuner.pkl, for its own restore,
        # which the sweep never uses: the study database is this searcher's state). What ties
        # it to the database stays out: the studies, and the study file and URL, which may
        # hold a password. The copy is inert.
        return {**self.__dict__, "spec": None, "plans": [], "url": None, "identity": None,
                "_live": {}, "tune_trials": {}}

    # --- Tune hooks -------------------------------------------------------------------
    # Ray's annotation leaves out the FINISHED it documents: a str.
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:  # type: ignore[override]
        if self.must_stop is not None:
            return Searcher.FINISHED
        measuring = False
        for _ in range(len(self.plans)):
            plan = self.plans[self._turn % len(self.plans)]
            self._turn += 1
            if self.spec.fuse_auto and self.fuse_sizer.waiting(plan):
                measuring = True
                continue
            picked = take_unit(plan, self.claims, self.spec.fuse_cap)
            if picked is None:
                continue
            fuse_cells = self._fuse_size(plan, picked)
            if fuse_cells is None:  # `auto` measures first: the unit waits, unclaimed
                self._put_back(plan, [picked])
                measuring = True
                continue
            partners = take_partners(plan, picked, self.claims, fuse_cells) \
                if fuse_cells > 1 else []
            return self._start(trial_id, plan, [picked, *partners])
        if self._live or measuring:
            # A trial of ours that ends may open new units (the next halving rung, the next
            # forward-selection round), and a probe's answer lets units out: ask again later.
            return None
        # Units another driver holds (plan.deferred) are not waited for here: an idle Tune
        # would keep its workers' CPUs from the other drivers. `launch` waits between rounds.
        return Searcher.FINISHED

    def should_stop(self, trial_id: str) -> bool:
        """Whether the trial lost a claim of a cell it trains (the scheduler stops it at its
        next report; a fused unit's other members are then recorded as interrupted, and their
        checkpoints continue in the next attempt)."""
        members = self._live.get(trial_id)
        if not members:
            return False
        if self.must_stop is not None:
            return True
        for live in members:
            if not live.lost and self.claims.lost(live.plan.name, live.unit.key):
                live.lost = True
        return any(live.lost for live in members)

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self._guarded(self._on_result, trial_id, result)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        self._guarded(self._on_complete, trial_id, result, error)

    def _guarded(self, hook: Any, *args: Any) -> None:
        """Run a Tune hook, keeping a failure of the study database (the file deleted or
        replaced, a write refused) as `must_stop` instead of raising it into Tune, which
        would log it and go on; any other error propagates as before."""
        if isinstance(self.must_stop, StorageError):
            self._live.pop(args[0], None)  # the study is unwritable: nothing more is recorded
            return
        try:
            hook(*args)
        except Exception as exc:
            try:
                self._check_file()  # "deleted" says more than "readonly"
            except StorageError as gone:
                self.must_stop = gone
                return
            failure = storage_failure(exc, self.url)
            if failure is None:
                raise
            self.must_stop = failure

    def _check_file(self) -> None:
        """Raise StorageError when the study file is no longer the one at its path, naming
        the cells whose results went to it."""
        check_same_file(self.url, self.identity, self.progress.finished_cells)

    def _on_result(self, trial_id: str, result: dict[str, Any]) -> None:
        members = self._live.get(trial_id)
        if not members:
            return
        self.should_stop(trial_id)  # marks lost members; the others' rows still count
        if self.must_stop is not None:
            return
        if FUSE_NOTE in result:
            self._tell_unfusable(str(result[FUSE_NOTE]), "one after another in their trial")
            for member in members:  # they train alone after all: recorded so
                member.alone_after_all = True
        slot = result.get(MEMBER)
        live = next((m for m in members if m.slot == (slot or 0)), None)
        if live is None or live.lost:  # ended already (a retry reports it again), or lost
            return
        if FINETUNE_EPOCH in result:
            self.progress.finetune(live.shown_as, str(result[FINETUNE_TASK]),
                                   int(result[FINETUNE_EPOCH]), result.get(FINETUNE_VALUE))
            return
        try:
            absorb(live, result, self._check_file)
        except UpdateFinishedTrialError:  # another driver took the unit over and failed it
            live.lost = True
            return
        if MEMBER_END in result:  # a fused unit's member ended: record it now, on its own
            members.remove(live)
            error = result[MEMBER_END] == "error"
            self._end(trial_id, live, error, None, str(result.get(MEMBER_ERROR) or "") or None)
            return
        if EPOCH in result and OBJECTIVE in result and SUMMARY_JSON not in result:
            self.progress.epoch(live.shown_as, int(result[EPOCH]), float(result[OBJECTIVE]))

    def _on_complete(self, trial_id: str, result: dict[str, Any] | None, error: bool) -> None:
        members = self._live.pop(trial_id, None) or []
        for live in members:
            # A cell alone: the trial's last result is its own. A fused unit's members that
            # had not ended when the trial did (an error, a stop) end with the trial.
            own = result if result and result.get(MEMBER, 0) == live.slot else None
            ended = (own or {}).get(MEMBER_END)
            reason = str(own.get(MEMBER_ERROR) or "") or None if own and ended == "error" \
                else None
            self._end(trial_id, live, error or ended == "error", own, reason)

    def _end(self, trial_id: str, live: LiveCell, error: bool, result: dict[str, Any] | None,
             reason: str | None = None) -> None:
        """Record the end of one cell of the trial and release its claims."""
        live.plan.dirty = True
        elapsed = time.time() - live.started
        if not live.lost and result:
            absorb(live, result, self._check_file)
        if live.lost or not self.claims.holds(live.plan.name, live.unit.key):
            # Our lease ran out (a stalled driver) and another driver took the unit over:
            # its attempt is the one that counts, and this trial is not ours to write.
            self.progress.finished(live.shown_as, "LOST", elapsed, None,
                                   "claim lost; another driver took the cell over")
            self._release(live)
            live.plan.deferred.add(live.unit.key)  # wait for the new holder, then report
            return
        try:
            state, value, reason = self._record(trial_id, live, error, elapsed, reason)
        except UpdateFinishedTrialError:  # taken over between the check and the write
            state, value, reason = "LOST", None, "claim lost; another driver took the cell over"
            live.plan.deferred.add(live.unit.key)
        self.progress.finished(live.shown_as, state, elapsed, value, reason)
        if state == "COMPLETE":
            stop = self.live_range.judge(live.plan, (live.summary or {}).get("clipping") or {},
                                         trial_label(live.plan.strategy.space.label(live.point),
                                                     live.seed))
            if stop is not None:
                self.must_stop = stop
        best = study_best(live.plan.study, live.plan.strategy.space)
        if best is not None:
            self.progress.study_best(live.plan.central, *best)
        self._release(live)

    def abandon_live(self) -> int:
        """Trials Tune never finished (the driver is stopping): FAIL, claims released, so any
        driver may continue them from their checkpoints at once. Returns how many."""
        left = len(self._live)
        if isinstance(self.must_stop, StorageError):  # nothing can be written (run_round says)
            self._live.clear()
            return 0
        for trial_id in list(self._live):
            for live in self._live.pop(trial_id):
                if not live.lost:
                    with contextlib.suppress(UpdateFinishedTrialError):  # finished meanwhile
                        finish_trial(live.plan.study, live.trial._trial_id, TrialState.FAIL,
                                     attrs={S.T_ERROR: S.DRIVER_STOPPED})
                self._release(live)
        return left

    def save(self, checkpoint_path: str) -> None:
        """Nothing to save: the study database is this searcher's state."""

    def restore(self, checkpoint_path: str) -> None:
        """Nothing to restore: pending units are recomputed from the study database."""

    # --- trials -------------------------------------------------------------------------
    def _start(self, trial_id: str, plan: CentralPlan, picked: list[Picked]) -> dict[str, Any]:
        """Create the Optuna trial of each picked unit and the Tune trial's config: one cell's,
        or a fused unit's (`MEMBERS`) when several units train together."""
        self._check_file()
        space = plan.strategy.space
        cells = [cell_config(self.spec, plan, *one) for one in picked]
        if len(cells) > 1:
            problems = fusion_problems([c[RUN_CONFIG].cfg for c in cells])
            if problems:  # they train one by one: give the partners back
                self._unfusable(plan, picked[1:], problems[0])
                picked, cells = picked[:1], cells[:1]
        members = []
        for slot, ((unit, point, keys, _), cell) in enumerate(zip(picked, cells, strict=True)):
            trial = create_trial(plan, unit, point, cell["cell"], cell["attempt"],
                                 fused=[c["cell"] for c in cells] if len(cells) > 1 else None)
            cell["trial_number"] = trial.number
            shown_as = trial_id if len(cells) == 1 else f"{trial_id}#{slot}"
            members.append(LiveCell(plan, unit, trial, point, unit.seed, keys, time.time(),
                                    slot=slot, fused=len(cells) > 1, shown_as=shown_as))
            self.ran += 1
            self.progress.started(shown_as, plan.central, space.label(point), unit.seed,
                                  self.spec.epochs if unit.budget is None else unit.budget)
        self._live[trial_id] = members
        if len(cells) == 1:
            return cells[0]
        self.progress.fused(plan.central, [space.label(m.point) for m in members],
                            picked[0][0].seed)
        return {"central_task": plan.central, "seed": picked[0][0].seed,
                "cell": " + ".join(c["cell"] for c in cells), MEMBERS: cells,
                SAME_TREATMENT_KEY: self.spec.same_treatment}

    def _fuse_size(self, plan: CentralPlan, picked: Picked) -> int | None:
        """How many cells the trial of `picked` may train: `fuse_cells`, or with `auto` the
        size measured for its config (None while it is measured; `sweep/fuse_auto.py`)."""
        unit, point = picked[0], picked[1]
        if not self.spec.fuse_auto:
            return self.spec.fuse_cap
        if unit.point is None or plan.cannot_fuse:  # a guided slot trains alone
            return 1
        cfg = self.spec.for_cell(plan.central, point, unit.seed,
                                 self.spec.trial_dir(plan.central, point, unit.seed))
        size = self.fuse_sizer.size(plan, cfg)
        if size is not None:
            self.progress.cells_per_trial(size)
        return size

    def _unfusable(self, plan: CentralPlan, partners: list[Picked], why: str) -> None:
        """Partners that cannot train fused after all: released, and queued to train alone;
        the plan's other cells share their configs' settings, so it stops trying."""
        plan.cannot_fuse = True
        self._put_back(plan, partners)
        self._tell_unfusable(why, "one per trial")

    def _put_back(self, plan: CentralPlan, picked: list[Picked]) -> None:
        """Units handed out but not started: their claims released, first in the queue."""
        for unit, *_, keys, _records in reversed(picked):
            for key in keys:
                self.claims.release(plan.name, key)
            plan.tried.discard(unit.key)
            plan.queue.appendleft(unit)

    def _tell_unfusable(self, why: str, how: str) -> None:
        if not self._told_unfusable:
            self._told_unfusable = True
            say(f"note: fuse_cells: cells that could not be fused trained {how} ({why})",
                self.progress.enabled)

    def _tell_same_treatment(self, live: LiveCell, record: Any) -> None:
        """A fused cell another cell of its unit trained for (one treatment): say which."""
        if not isinstance(record, dict):
            return
        weights = record.get("weights")
        by = weights.get(live.plan.central) if isinstance(weights, dict) else None
        label = trial_label(live.plan.strategy.space.label(live.point), live.seed)
        say(f"note: {live.plan.central} {label} trained the same updates as weight {by} from "
            f"epoch {record.get('from_epoch')} (global clipping above the weight's live "
            "range): trained once for both; same_treatment: all trains each",
            self.progress.enabled)

    def _release(self, live: LiveCell) -> None:
        for key in live.claims:
            self.claims.release(live.plan.name, key)

    # --- results ----------------------------------------------------------------------
    def _record(self, trial_id: str, live: LiveCell, error: bool, elapsed: float,
                reason: str | None = None) -> tuple[str, float | None, str | None]:
        """Write the trial's end, all of it in one transaction (`weightsearch.sweep.trial_end`)."""
        self._check_file()
        trial, plan = live.trial, live.plan
        if not error and live.summary is not None:
            value, attrs, steps = completed(live, self.spec.weight_acts_on)
            state = finish_trial(plan.study, trial._trial_id, TrialState.COMPLETE, value, attrs,
                                 steps)
            if state != TrialState.COMPLETE:  # a NaN value: failed, as tell fails it
                return "FAIL", None, "its value is not a number"
            self._tell_same_treatment(live, attrs.get(S.T_SAME_TREATMENT))
            return "COMPLETE", value, None
        alone: dict[str, Any] = {S.T_FUSED: []} if live.fused and live.alone_after_all else {}
        if not error and (trial_id in self.stopped or live.stint_end) and live.values:
            attrs = {**history_attrs(live), S.T_WALL_TIME: elapsed, **alone}
            finish_trial(plan.study, trial._trial_id, TrialState.PRUNED, attrs=attrs)
            return "PRUNED", live.values[max(live.values)], None
        reason = reason or (error_text(self.tune_trials.get(trial_id)) if error else
                            "interrupted before it finished")
        attrs = {"error": reason, **history_attrs(live), **alone}
        finish_trial(plan.study, trial._trial_id, TrialState.FAIL, attrs=attrs)
        return "FAIL", None, reason


def study_best(study: optuna.Study, space: Space | None = None) -> tuple[float, str] | None:
    """The best complete trial of `study` so far, every driver's: (value, its name as the live
    display names the trials it runs: `trial_label`, e.g. "w=9 seed 2"); None before the
    first. A trial whose point is not known (no `space`, or none recorded) is "trial N"."""
    try:
        best = study.best_trial
    except ValueError:  # no complete trial yet
        return None
    seed = best.user_attrs.get(S.T_SEED)
    point = study_db.to_record(best, space).point if space is not None else None
    label = space.label(point) if space is not None and point else f"trial {best.number}"
    value = cast(float, best.value)  # a complete trial's, never None
    return float(value), trial_label(label, seed if isinstance(seed, int) else None)
