"""Handing out units, in the driver: the next unit of a central task this driver claimed (a
guided slot's cell claimed too), the units that may train fused with it, and each cell's
Tune config and Optuna trial. A unit is claimed in the database before its trial is created,
and read back only once it is ours (`sweep/searcher.py` says why)."""

from __future__ import annotations

import json
import time
import warnings
from collections import deque
from typing import Any, cast

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from weightsearch.studies import schema as S
from weightsearch.studies.claims import Claims
from weightsearch.sweep.driver_state import CentralPlan, Picked
from weightsearch.sweep.space import Point
from weightsearch.sweep.spec import StudySpec
from weightsearch.sweep.strategies import Record, Unit
from weightsearch.sweep.strategies.base import done_units, taken_cells
from weightsearch.sweep.trainable import RUN_CONFIG, Carried, attempt_folder

_PROPOSALS = 20  # guided search: proposals tried when other drivers keep winning the cells
_REFRESH_S = 5.0  # an idle plan re-reads its study at most this often (other drivers' results)


def take_unit(plan: CentralPlan, claims: Claims, fuse_cells: int) -> Picked | None:
    """The next unit this driver claimed, its point and claim keys; None if none now."""
    if not plan.queue and (plan.dirty or time.monotonic() - plan.refreshed > _REFRESH_S):
        plan.dirty, plan.refreshed = False, time.monotonic()
        plan.queue = deque(u for u in plan.strategy.units(plan.records())
                           if u.key not in plan.tried)
        plan.groups = {}
        if fuse_cells > 1:
            for u in plan.queue:
                if u.point is not None:
                    plan.groups.setdefault(_fuse_group(u, u.point), []).append(u)
    name = plan.name
    while plan.queue:
        unit = plan.queue.popleft()
        if unit.key in plan.tried:  # taken meanwhile as another unit's fused partner
            continue
        plan.tried.add(unit.key)
        if not claims.claim(name, unit.key):
            plan.deferred.add(unit.key)
            continue
        plan.deferred.discard(unit.key)
        # Read the study only now that the unit is ours: a driver that finished it told
        # Optuna before it released the claim. A guided slot proposes from every trial.
        records = plan.unit_records(unit) if unit.point is not None else plan.records()
        if unit.key in done_units(records):
            claims.release(name, unit.key)
            continue
        keys = [unit.key]
        point = unit.point or _resumed_point(unit, records)
        if unit.point is None:  # a guided slot: its cell is claimed too
            point, cell_key = _claim_cell(plan, claims, unit, point, records)
            if point is None:  # every point taken for now (or the resumed one is held)
                claims.release(name, unit.key)
                plan.deferred.add(unit.key)
                continue
            keys.append(cell_key)
            records = plan.records()
        # A fixed unit carries its point; a guided slot's was claimed above.
        return unit, cast(Point, point), keys, records
    return None


def _claim_cell(plan: CentralPlan, claims: Claims, unit: Unit, resumed: Point | None,
                records: list[Record]) -> tuple[Point | None, str]:
    space, name = plan.strategy.space, plan.name
    if resumed is not None:  # a dead driver's slot: continue its point
        cell = space.cell_key(resumed, unit.seed)
        return (resumed, cell) if claims.claim(name, cell) else (None, cell)
    taken = taken_cells(records)
    for _ in range(_PROPOSALS):
        point = plan.strategy.propose(unit, records, taken)
        if point is None:
            return None, ""
        cell = space.cell_key(point, unit.seed)
        if claims.claim(name, cell):
            if cell not in taken_cells(plan.records()):  # not finished meanwhile
                return point, cell
            claims.release(name, cell)
        taken.add(cell)  # another driver trains (or just proposed) it: ask again
    return None, ""


def take_partners(plan: CentralPlan, first: Picked, claims: Claims,
                  fuse_cells: int) -> list[Picked]:
    """Up to `fuse_cells - 1` more units of `plan` this driver claimed that can train
    fused with `first`: fixed points (not a guided slot) of the same seed and stint that
    differ from it only in the loss weighting."""
    unit, point = first[0], first[1]
    if unit.point is None or plan.cannot_fuse:
        return []
    partners: list[Picked] = []
    for other in plan.groups.get(_fuse_group(unit, point), []):
        if len(partners) >= fuse_cells - 1:
            break
        if other.key in plan.tried or other.point is None or \
                not _fusable_units(unit, point, other):
            continue
        plan.tried.add(other.key)  # left in the queue, skipped there
        if not claims.claim(plan.name, other.key):
            plan.deferred.add(other.key)
            continue
        plan.deferred.discard(other.key)
        records = plan.unit_records(other)
        if other.key in done_units(records):
            claims.release(plan.name, other.key)
            continue
        partners.append((other, other.point, [other.key], records))
    return partners


def cell_config(spec: StudySpec, plan: CentralPlan, unit: Unit, point: Point, keys: list[str],
                records: list[Record]) -> dict[str, Any]:
    """One cell's trial config, with its RunConfig built (once, here) for its attempt."""
    space = plan.strategy.space
    cell = space.cell_key(point, unit.seed)
    _fail_stale(plan.study, unit, records)
    attempt = sum(1 for r in records if r.cell == cell)
    base = spec.trial_dir(plan.central, point, unit.seed)
    cfg = spec.for_cell(plan.central, point, unit.seed, attempt_folder(base, attempt))
    return {
        # the point's settings as their own config keys too, as Tune users read them
        # (`config/weighting.central_weight`), beside the JSON the searcher reads back
        **{path: list(v) if isinstance(v, tuple) else v for path, v in point.items()},
        "central_task": plan.central, "seed": unit.seed, "cell": cell,
        "point": json.dumps(point, default=list), "attempt": attempt,
        "budget": unit.budget, "base_dir": base,
        "metric": plan.primary_metric, "stage": plan.stage, RUN_CONFIG: Carried(cfg),
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


def create_trial(plan: CentralPlan, unit: Unit, point: Point, cell: str,
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
