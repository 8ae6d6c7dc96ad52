"""The Ray Tune searcher that hands out units of work and writes every Optuna record, in the
driver.

Why not Optuna's GridSampler or Ray's OptunaSearch: under parallel workers and several drivers
a point could be handed out twice, and a crashed driver would leave no record of which points
finished. Here a unit is pending until its study holds a COMPLETE or PRUNED trial labelled with
it, a unit is claimed in the database before its trial is created, and each strategy decides
from the study's trials alone, so a relaunch, a `resume` or a second driver runs exactly the
missing units.

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
import json
import math
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState
from ray.tune.search import Searcher

from weightsearch.core.errors import ConfigError, StorageError
from weightsearch.studies import schema as S
from weightsearch.studies.claims import Claims
from weightsearch.studies.storage_failures import check_same_file, file_identity, storage_failure
from weightsearch.sweep import lookup, study_db
from weightsearch.sweep.inert_grid import MEANS_IT, clipping_fix
from weightsearch.sweep.progress import Progress, say, trial_label
from weightsearch.sweep.space import CENTRAL_WEIGHT, Point, Space
from weightsearch.sweep.spec import StudySpec
from weightsearch.sweep.strategies import Record, Strategy, Unit
from weightsearch.sweep.strategies.base import done_units, taken_cells
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
    METRICS_JSON,
    OBJECTIVE,
    RUN_CONFIG,
    STINT_END,
    SUMMARY_JSON,
    Carried,
    attempt_folder,
    epoch_objective,
)
from weightsearch.sweep.trial_end import finish_trial
from weightsearch.trainer.fusable import fusion_problems

_PROPOSALS = 20  # guided search: proposals tried when other drivers keep winning the cells
_REFRESH_S = 5.0  # an idle plan re-reads its study at most this often (other drivers' results)


@dataclass
class CentralPlan:
    """One central task (one Optuna study) and what this driver knows of its units."""

    central: str
    study: optuna.Study
    strategy: Strategy
    primary_metric: str  # the metric the trial value is (the objective's)
    stage: str = "multitask"  # the stage the trial value scores: multitask | finetuned
    queue: deque[Unit] = field(default_factory=deque)
    tried: set[str] = field(default_factory=set)  # units handed out or deferred this round
    deferred: set[str] = field(default_factory=set)  # held by another driver's live claim
    dirty: bool = True  # something finished since the last read: re-read before giving up
    refreshed: float = 0.0
    # The queued units by what they may be fused with (`_fuse_group`), built with the queue.
    groups: dict[tuple, list[Unit]] = field(default_factory=dict)
    cannot_fuse: bool = False  # its cells' configs cannot be fused: stop trying

    @property
    def name(self) -> str:
        return self.study.study_name

    def records(self) -> list[Record]:
        return study_db.records(self.study, self.strategy.space, self.central)

    def unit_records(self, unit: Unit) -> list[Record]:
        """What the study holds of a unit that carries its point (its trials and its cell's):
        read by index, so a claim costs the same in a small study and a large one."""
        cell = self.strategy.space.cell_key(unit.point, unit.seed) if unit.point else None
        return lookup.unit_records(self.study, self.strategy.space, unit.key, cell)


# A unit this driver claimed, ready to start: (unit, its point, its claim keys, its records).
Picked = tuple[Unit, Point, list[str], list[Record]]


@dataclass
class _Live:
    plan: CentralPlan
    unit: Unit
    trial: optuna.Trial
    point: Point
    seed: int
    claims: list[str]  # claim keys held for this trial (the unit, a guided search's cell)
    started: float
    history: dict[int, dict[str, Any]] = field(default_factory=dict)  # epoch -> metrics
    values: dict[int, float] = field(default_factory=dict)  # epoch -> objective
    summary: dict[str, Any] | None = None
    stint_end: bool = False
    lost: bool = False
    slot: int = 0  # its place in a fused unit (0 alone)
    fused: bool = False  # handed out in a fused unit
    alone_after_all: bool = False  # ... whose trial could not fuse it
    shown_as: str = ""  # its id in the progress display (the Tune trial's, or one per member)


class CellSearcher(Searcher):
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
        # global clipping makes one treatment (`_judge_live_range`). The searcher keeps it,
        # hands out nothing more, has the scheduler stop its trials, and `run_round` raises it.
        self.must_stop: Exception | None = None
        self._told_live_range: set[str] = set()  # central tasks whose live range was judged
        self.ran = 0
        self._told_unfusable = False
        # Tune trial id -> the cells it trains that have not ended: one, or a fused unit's
        # members in their order in the unit (each ends on its own).
        self._live: dict[str, list[_Live]] = {}
        self._turn = 0
        self._judge_stored_cells()

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its searcher into the experiment folder (tuner.pkl, for its own restore,
        # which the sweep never uses: the study database is this searcher's state). What ties
        # it to the database stays out: the studies, and the study file and URL, which may
        # hold a password. The copy is inert.
        return {**self.__dict__, "spec": None, "plans": [], "url": None, "identity": None,
                "_live": {}, "tune_trials": {}}

    # --- Tune hooks -------------------------------------------------------------------
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self.must_stop is not None:
            return Searcher.FINISHED
        for _ in range(len(self.plans)):
            plan = self.plans[self._turn % len(self.plans)]
            self._turn += 1
            picked = self._take(plan)
            if picked is not None:
                partners = self._take_partners(plan, picked) if self.spec.fuse_cells > 1 else []
                return self._start(trial_id, plan, [picked, *partners])
        if self._live:
            # A trial of ours that ends may open new units (the next halving rung, the next
            # forward-selection round): ask again later.
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
            self._absorb(live, result)
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

    def _end(self, trial_id: str, live: _Live, error: bool, result: dict[str, Any] | None,
             reason: str | None = None) -> None:
        """Record the end of one cell of the trial and release its claims."""
        live.plan.dirty = True
        elapsed = time.time() - live.started
        if not live.lost and result:
            self._absorb(live, result)
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
            self._judge_live_range(live.plan, (live.summary or {}).get("clipping") or {},
                                   trial_label(live.plan.strategy.space.label(live.point),
                                               live.seed))
        best = study_best(live.plan.study, live.plan.strategy.space)
        if best is not None:
            self.progress.study_best(live.plan.central, *best)
        self._release(live)

    def _judge_live_range(self, plan: CentralPlan, record: dict[str, Any], cell: str,
                          quiet: bool = False) -> None:
        """Once per central task, from its first finished cell under global clipping (`record`,
        its run's clipping): the grid's weights above the one from which every central update
        was clipped train the same treatment. Said as a note (unless `quiet`); where that is
        every weight of the grid and the study sets allow_inert: false, the launch stops
        (exit 2)."""
        space = plan.strategy.space
        dim = space.dim(CENTRAL_WEIGHT)
        if (plan.central in self._told_live_range or not space.central_weight_only
                or self.spec.weight_acts_on != "loss"  # a sampling rate is not cut by a clip
                or dim is None or not dim.values or record.get("grad_clip_mode") != "global"
                or not record.get("grad_clip")):
            return
        limit = ((record.get("tasks") or {}).get(plan.central) or {}).get("saturates_at")
        if not isinstance(limit, int | float) or not math.isfinite(limit):
            return
        self._told_live_range.add(plan.central)  # judged once, on the first cell that tells
        grid = sorted(float(w) for w in dim.values)
        above = [w for w in grid if w > limit]
        if len(above) < 2:
            return
        shown = ", ".join(f"{w:g}" for w in above)
        fix = clipping_fix(limit, record["grad_clip"])
        said = (f"{plan.central}: in a finished cell ({cell}) every central update was "
                f"clipped from weight about {limit:.2g} up (global clipping at "
                f"{record['grad_clip']:g}), so weights {shown} will train the same treatment")
        if len(above) == len(grid) and not self.spec.allow_inert:
            self.must_stop = ConfigError([
                f"{said}: every weight of the grid, which cannot tell them apart; {fix}, "
                f"{MEANS_IT}"])
            return
        if not quiet:
            say(f"note: {said}; to tell them apart, {fix}", self.progress.enabled)

    def _judge_stored_cells(self) -> None:
        """Before a round hands anything out: a study stopped for a grid of one treatment
        stops again at once (no further cell is trained to find it out again). Only a study
        that can stop (allow_inert: false) reads its stored trials for it."""
        if self.spec.allow_inert:
            return
        for plan in self.plans:
            if not plan.strategy.space.central_weight_only:
                continue
            for trial in plan.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
                record = trial.user_attrs.get(S.T_CLIPPING)
                weight = trial.params.get(S.PARAM)
                if isinstance(record, dict) and isinstance(weight, int | float):
                    self._judge_live_range(plan, record, trial_label(
                        f"w={weight:g}", trial.user_attrs.get(S.T_SEED)), quiet=True)
                    break

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

    # --- units --------------------------------------------------------------------------
    def _take(self, plan: CentralPlan) -> tuple[Unit, Point, list[str], list[Record]] | None:
        """The next unit this driver claimed, its point and claim keys; None if none now."""
        if not plan.queue and (plan.dirty or time.monotonic() - plan.refreshed > _REFRESH_S):
            plan.dirty, plan.refreshed = False, time.monotonic()
            plan.queue = deque(u for u in plan.strategy.units(plan.records())
                               if u.key not in plan.tried)
            plan.groups = {}
            if self.spec.fuse_cells > 1:
                for u in plan.queue:
                    if u.point is not None:
                        plan.groups.setdefault(_fuse_group(u, u.point), []).append(u)
        name = plan.name
        while plan.queue:
            unit = plan.queue.popleft()
            if unit.key in plan.tried:  # taken meanwhile as another unit's fused partner
                continue
            plan.tried.add(unit.key)
            if not self.claims.claim(name, unit.key):
                plan.deferred.add(unit.key)
                continue
            plan.deferred.discard(unit.key)
            # Read the study only now that the unit is ours: a driver that finished it told
            # Optuna before it released the claim. A guided slot proposes from every trial.
            records = plan.unit_records(unit) if unit.point is not None else plan.records()
            if unit.key in done_units(records):
                self.claims.release(name, unit.key)
                continue
            keys = [unit.key]
            point = unit.point or _resumed_point(unit, records)
            if unit.point is None:  # a guided slot: its cell is claimed too
                point, cell_key = self._claim_cell(plan, unit, point, records)
                if point is None:  # every point taken for now (or the resumed one is held)
                    self.claims.release(name, unit.key)
                    plan.deferred.add(unit.key)
                    continue
                keys.append(cell_key)
                records = plan.records()
            return unit, point, keys, records
        return None

    def _claim_cell(self, plan: CentralPlan, unit: Unit, resumed: Point | None,
                    records: list[Record]) -> tuple[Point | None, str]:
        space, name = plan.strategy.space, plan.name
        if resumed is not None:  # a dead driver's slot: continue its point
            cell = space.cell_key(resumed, unit.seed)
            return (resumed, cell) if self.claims.claim(name, cell) else (None, cell)
        taken = taken_cells(records)
        for _ in range(_PROPOSALS):
            point = plan.strategy.propose(unit, records, taken)
            if point is None:
                return None, ""
            cell = space.cell_key(point, unit.seed)
            if self.claims.claim(name, cell):
                if cell not in taken_cells(plan.records()):  # not finished meanwhile
                    return point, cell
                self.claims.release(name, cell)
            taken.add(cell)  # another driver trains (or just proposed) it: ask again
        return None, ""

    def _take_partners(self, plan: CentralPlan, first: Picked) -> list[Picked]:
        """Up to `fuse_cells - 1` more units of `plan` this driver claimed that can train
        fused with `first`: fixed points (not a guided slot) of the same seed and stint that
        differ from it only in the loss weighting."""
        unit, point = first[0], first[1]
        if unit.point is None or plan.cannot_fuse:
            return []
        partners: list[Picked] = []
        for other in plan.groups.get(_fuse_group(unit, point), []):
            if len(partners) >= self.spec.fuse_cells - 1:
                break
            if other.key in plan.tried or not _fusable_units(unit, point, other):
                continue
            plan.tried.add(other.key)  # left in the queue, skipped there
            if not self.claims.claim(plan.name, other.key):
                plan.deferred.add(other.key)
                continue
            plan.deferred.discard(other.key)
            records = plan.unit_records(other)
            if other.key in done_units(records):
                self.claims.release(plan.name, other.key)
                continue
            partners.append((other, other.point, [other.key], records))
        return partners

    def _start(self, trial_id: str, plan: CentralPlan, picked: list[Picked]) -> dict[str, Any]:
        """Create the Optuna trial of each picked unit and the Tune trial's config: one cell's,
        or a fused unit's (`MEMBERS`) when several units train together."""
        self._check_file()
        space = plan.strategy.space
        cells = [self._cell_config(plan, *one) for one in picked]
        if len(cells) > 1:
            problems = fusion_problems([c[RUN_CONFIG].cfg for c in cells])
            if problems:  # they train one by one: give the partners back
                self._unfusable(plan, picked[1:], problems[0])
                picked, cells = picked[:1], cells[:1]
        members = []
        for slot, ((unit, point, keys, _), cell) in enumerate(zip(picked, cells, strict=True)):
            trial = _create_trial(plan, unit, point, cell["cell"], cell["attempt"],
                                  fused=[c["cell"] for c in cells] if len(cells) > 1 else None)
            cell["trial_number"] = trial.number
            shown_as = trial_id if len(cells) == 1 else f"{trial_id}#{slot}"
            members.append(_Live(plan, unit, trial, point, unit.seed, keys, time.time(),
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
                "cell": " + ".join(c["cell"] for c in cells), MEMBERS: cells}

    def _cell_config(self, plan: CentralPlan, unit: Unit, point: Point, keys: list[str],
                     records: list[Record]) -> dict[str, Any]:
        """One cell's trial config, with its RunConfig built (once, here) for its attempt."""
        space = plan.strategy.space
        cell = space.cell_key(point, unit.seed)
        _fail_stale(plan.study, unit, records)
        attempt = sum(1 for r in records if r.cell == cell)
        base = self.spec.trial_dir(plan.central, point, unit.seed)
        cfg = self.spec.for_cell(plan.central, point, unit.seed, attempt_folder(base, attempt))
        return {
            # the point's settings as their own config keys too, as Tune users read them
            # (`config/weighting.central_weight`), beside the JSON the searcher reads back
            **{path: list(v) if isinstance(v, tuple) else v for path, v in point.items()},
            "central_task": plan.central, "seed": unit.seed, "cell": cell,
            "point": json.dumps(point, default=list), "attempt": attempt,
            "budget": unit.budget, "base_dir": base,
            "metric": plan.primary_metric, "stage": plan.stage, RUN_CONFIG: Carried(cfg),
        }

    def _unfusable(self, plan: CentralPlan, partners: list[Picked], why: str) -> None:
        """Partners that cannot train fused after all: released, and queued to train alone;
        the plan's other cells share their configs' settings, so it stops trying."""
        plan.cannot_fuse = True
        for unit, *_, keys, _records in partners:
            for key in keys:
                self.claims.release(plan.name, key)
            plan.tried.discard(unit.key)
            plan.queue.appendleft(unit)
        self._tell_unfusable(why, "one per trial")

    def _tell_unfusable(self, why: str, how: str) -> None:
        if not self._told_unfusable:
            self._told_unfusable = True
            say(f"note: fuse_cells: cells that could not be fused trained {how} ({why})",
                self.progress.enabled)

    def _release(self, live: _Live) -> None:
        for key in live.claims:
            self.claims.release(live.plan.name, key)

    # --- results ----------------------------------------------------------------------
    def _record(self, trial_id: str, live: _Live, error: bool, elapsed: float,
                reason: str | None = None) -> tuple[str, float | None, str | None]:
        """Write the trial's end, all of it in one transaction (`weightsearch.sweep.trial_end`)."""
        self._check_file()
        trial, plan = live.trial, live.plan
        if not error and live.summary is not None:
            value, attrs, steps = self._complete(live)
            state = finish_trial(plan.study, trial._trial_id, TrialState.COMPLETE, value, attrs,
                                 steps)
            if state != TrialState.COMPLETE:  # a NaN value: failed, as tell fails it
                return "FAIL", None, "its value is not a number"
            return "COMPLETE", value, None
        alone = {S.T_FUSED: []} if live.fused and live.alone_after_all else {}
        if not error and (trial_id in self.stopped or live.stint_end) and live.values:
            attrs = {**self._history_attrs(live), S.T_WALL_TIME: elapsed, **alone}
            finish_trial(plan.study, trial._trial_id, TrialState.PRUNED, attrs=attrs)
            return "PRUNED", live.values[max(live.values)], None
        reason = reason or (self._error_text(trial_id) if error else
                            "interrupted before it finished")
        attrs = {"error": reason, **self._history_attrs(live), **alone}
        finish_trial(plan.study, trial._trial_id, TrialState.FAIL, attrs=attrs)
        return "FAIL", None, reason

    def _absorb(self, live: _Live, result: dict[str, Any]) -> None:
        if SUMMARY_JSON in result:
            live.summary = json.loads(result[SUMMARY_JSON])
            if METRICS_JSON not in result:  # a summary alone: its objective is no epoch's
                return
        if EPOCH not in result or OBJECTIVE not in result:
            return
        epoch, value = int(result[EPOCH]), float(result[OBJECTIVE])
        if METRICS_JSON in result:
            live.history[epoch] = json.loads(result[METRICS_JSON])
        if result.get(STINT_END):
            live.stint_end = True
        if epoch not in live.values and math.isfinite(value):
            live.values[epoch] = value
            if live.plan.stage == "multitask":  # Optuna's intermediate values: the scored stage's
                self._check_file()
                live.trial.report(value, step=epoch)  # a retried trial re-reports nothing twice

    def _complete(self, live: _Live) -> tuple[float, dict[str, Any], dict[int, float]]:
        """The trial's value, its user attributes and the intermediate values not yet
        reported, from its summary."""
        summary, central = live.summary or {}, live.plan.central
        history = summary.get("history") or []
        if live.plan.primary_metric == S.GROUP_MEAN:
            return self._complete_group(live, summary, history)
        best_epoch = int(summary["best_epoch"][central])
        at_best = next((h["metrics"] for h in history if h["epoch"] == best_epoch), {})
        tuned = summary.get("finetuned") or {}
        scored = tuned[central]["best"] if live.plan.stage == "finetuned" else summary["best"]
        value = float(scored[central][live.plan.primary_metric])
        attrs: dict[str, Any] = {}
        steps: dict[int, float] = {}
        if tuned:
            attrs[S.T_FINETUNED_METRICS] = {t: run["best"][t] for t, run in tuned.items()}
        for h in history:  # epochs trained before a resume reach Optuna here
            if h["epoch"] not in live.values:
                live.values[h["epoch"]] = float(h["metrics"][central][live.plan.primary_metric])
                if live.plan.stage == "multitask":
                    steps[h["epoch"]] = live.values[h["epoch"]]
        if live.plan.stage == "finetuned":  # its epochs, so that the values lead to the value
            for h in tuned[central].get("history") or []:
                score = h["metrics"][central][live.plan.primary_metric]
                if isinstance(score, int | float) and math.isfinite(score):
                    steps[h["epoch"]] = float(score)
        attrs.update(_end_attrs(summary, at_best, best_epoch))
        if self.spec.weight_acts_on != "loss" and S.T_CLIPPING in attrs:
            # the clip cut SIWLM's loss weight of 1, not the searched sampling rate: readers
            # must not judge weights one treatment from this record (`treatments.clipped_away`)
            attrs[S.T_CLIPPING] = {**attrs[S.T_CLIPPING],
                                   S.WEIGHT_ACTS_ON: self.spec.weight_acts_on}
        if live.fused and (live.alone_after_all or summary.get("fused_members", 1) <= 1):
            attrs[S.T_FUSED] = []  # created fused, it trained alone after all: say so
        return value, attrs, steps

    def _complete_group(self, live: _Live, summary: dict[str, Any],
                        history: list[dict[str, Any]]
                        ) -> tuple[float, dict[str, Any], dict[int, float]]:
        """A network of a budgeted grouping study: one epoch for all its tasks, the one where
        the mean of their primary metrics peaks (the first on a tie); every task's metrics
        at that epoch are its scores in this network."""
        steps: dict[int, float] = {}
        for h in history:  # epochs trained before a resume reach Optuna here
            if h["epoch"] not in live.values:
                live.values[h["epoch"]] = epoch_objective(h["metrics"], h["primary"], "",
                                                          S.GROUP_MEAN)
                steps[h["epoch"]] = live.values[h["epoch"]]
        means = {h["epoch"]: epoch_objective(h["metrics"], h["primary"], "", S.GROUP_MEAN)
                 for h in history}
        best_epoch = max(means, key=lambda e: (means[e], -e))
        at_best = next(h["metrics"] for h in history if h["epoch"] == best_epoch)
        return means[best_epoch], _end_attrs(summary, at_best, best_epoch), steps

    def _history_attrs(self, live: _Live) -> dict[str, Any]:
        """What a stopped or failed trial got through, for inspection."""
        if not live.history:
            return {}
        history = [{"epoch": e, "metrics": m, "primary": {live.plan.central: live.values.get(e)}}
                   for e, m in sorted(live.history.items())]
        best = max(live.values, key=lambda e: (live.values[e], -e))
        return {S.T_HISTORY: history, S.T_BEST_EPOCH: best, S.T_EPOCHS: len(history),
                S.T_METRICS: live.history.get(best, {}),
                S.T_FINAL_METRICS: history[-1]["metrics"]}

    def _error_text(self, trial_id: str) -> str:
        """The last line of the trial's error file: usually the exception and its message."""
        tune_trial = self.tune_trials.get(trial_id)
        path = getattr(tune_trial, "error_file", None)
        if not path or not Path(path).is_file():
            return "the trial raised an error (see the Ray trial folder)"
        lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines()]
        lines = [ln for ln in lines if ln and not ln.startswith("Failure #")]
        return lines[-1][:500] if lines else "the trial raised an error"


def _end_attrs(summary: dict[str, Any], at_best: dict[str, Any],
               best_epoch: int) -> dict[str, Any]:
    """A finished trial's user attributes, from its run's summary."""
    return {
        S.T_METRICS: at_best,
        S.T_FINAL_METRICS: summary.get("final", {}),
        S.T_HISTORY: summary.get("history") or [],
        S.T_BEST_EPOCH: best_epoch,
        S.T_EPOCHS: len(summary.get("history") or []),
        S.T_WALL_TIME: float(summary.get("wall_time_s", 0.0)),
        S.T_EXAMPLES_PER_S: float(summary.get("train_examples_per_s", 0.0)),
        "output_dir": summary.get("output_dir"),
        **({S.T_CLIPPING: summary["clipping"]} if summary.get("clipping") else {}),
        **({S.T_MAJORITY: summary["majority"]} if summary.get("majority") else {}),
    }

def _fuse_group(unit: Unit, point: Point) -> tuple:
    """What units must share to be fused: the seed, the stint and every setting of the point
    but the loss weighting's."""
    rest = tuple(sorted((k, repr(v)) for k, v in point.items() if not k.startswith("weighting.")))
    return unit.seed, unit.budget, rest


def _fusable_units(unit: Unit, point: Point, other: Unit) -> bool:
    """Whether `other` may train fused with `unit` (at `point`): a fixed point of the same seed
    and stint, differing from `point` only in the loss weighting (the trainer checks the rest
    of the two cells' configs, `fusion_problems`)."""
    if other.point is None or other.seed != unit.seed or other.budget != unit.budget:
        return False
    differing = {k for k in set(point) | set(other.point) if point.get(k) != other.point.get(k)}
    return bool(differing) and all(k.startswith("weighting.") for k in differing)


def _create_trial(plan: CentralPlan, unit: Unit, point: Point, cell: str,
                  attempt: int, fused: list[str] | None = None) -> optuna.Trial:
    """A RUNNING trial at `point`, labelled in the same insert. Not enqueue + ask: another
    driver's ask could pop the enqueued trial and train it under its own cell."""
    space = plan.strategy.space
    guided = unit.point is None
    attrs: dict[str, Any] = {S.T_SEED: int(unit.seed), S.T_CELL: cell, S.T_ATTEMPT: attempt,
                             S.T_UNIT: unit.key}
    if guided:
        attrs[S.T_SLOT] = unit.key
    if not space.central_weight_only:
        attrs[S.T_POINT] = {k: list(v) if isinstance(v, tuple) else v for k, v in point.items()}
    grouped = space.group or space.groups
    if grouped is not None:
        attrs[S.T_GROUP] = list(point[grouped.path])
    if unit.budget is not None:
        attrs[S.T_BUDGET] = unit.budget
    if fused:  # the cells it trained with, as one stacked model (itself included)
        attrs[S.T_FUSED] = fused
    params = space.params(point, plan.central)
    # Only the params the point sets (a conditional central weight may be absent).
    dists = {k: v for k, v in space.distributions(plan.central, guided=guided).items()
             if k in params}
    template = optuna.trial.create_trial(
        state=TrialState.RUNNING, params=params, distributions=dists, user_attrs=attrs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trial_id = plan.study._storage.create_new_trial(plan.study._study_id,
                                                        template_trial=template)
    return optuna.Trial(plan.study, trial_id)


def _resumed_point(unit: Unit, records: list[Record]) -> Point | None:
    """A slot taken over from a dead driver continues that driver's point (and checkpoint)."""
    for r in reversed(records):
        if r.unit == unit.key and r.state == "running":
            return r.point
    return None


def _fail_stale(study: optuna.Study, unit: Unit, records: list[Record]) -> None:
    """Trials of `unit` still RUNNING although we now hold its claim: their driver died (its
    lease expired) or predates claims. FAIL them; their checkpoints stay for the next attempt."""
    storage = study._storage
    for r in records:
        if r.unit == unit.key and r.state in ("running", "waiting"):
            trial_id = storage.get_trial_id_from_study_id_trial_number(study._study_id, r.number)
            try:
                storage.set_trial_user_attr(trial_id, S.T_ERROR, S.DRIVER_STOPPED)
                storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
            except UpdateFinishedTrialError:
                pass  # finished meanwhile


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
    return float(best.value), trial_label(label, seed if isinstance(seed, int) else None)
