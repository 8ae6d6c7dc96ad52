"""A trial's end in one transaction: its user attributes, the intermediate values it still owes,
its value and its finished state are written together or not at all.

Through the public API the end of a trial is a commit per attribute and one for `tell` (about
eight on SQLite, 100-150 ms, each taking the database's write lock): a driver killed between
them left a RUNNING trial with half its attributes, and every commit is another wait for the
other drivers of a study. Optuna's RDB storage writes each piece inside a session of its own;
here one session does them all, with the storage's own methods and models (not SQL on its
tables), so the rows are the ones Optuna would write and its cache reads them back as usual.
Other storages (in-memory, journal) take the public API, piece by piece.

The state rules are `Study.tell`'s: a COMPLETE trial whose value is NaN becomes FAIL, and a
PRUNED trial takes its last intermediate value as its value unless that is NaN.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from weightsearch.studies.retries import call_retrying


def finish_trial(study: optuna.Study, trial_id: int, state: TrialState,
                 value: float | None = None, attrs: Mapping[str, Any] | None = None,
                 steps: Mapping[int, float] | None = None) -> TrialState:
    """End the RUNNING trial `trial_id` of `study` as `state` (COMPLETE with `value`, PRUNED or
    FAIL), with its user `attrs` and the intermediate values `steps` (step -> value) it has
    not reported yet. Returns the state written (FAIL for a COMPLETE trial whose value is
    NaN). Raises optuna's UpdateFinishedTrialError, writing nothing, when the trial already
    finished."""
    attrs, steps = dict(attrs or {}), dict(steps or {})
    if state == TrialState.COMPLETE and (value is None or math.isnan(value)):
        state, value = TrialState.FAIL, None
    backend = _rdb(study)
    if backend is None:
        return _piece_by_piece(study, trial_id, state, value, attrs, steps)
    # All or nothing, so a transaction lost to a dropped connection is retried whole.
    call_retrying("finish_trial", _one_transaction, backend, trial_id, state, value, attrs,
                  steps)
    return state


def _one_transaction(backend: RDBStorage, trial_id: int, state: TrialState, value: float | None,
                     attrs: dict[str, Any], steps: dict[int, float]) -> None:
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    with _create_scoped_session(backend.scoped_session) as session:
        trial = models.TrialModel.find_or_raise_by_id(trial_id, session, for_update=True)
        # Optuna's models declare Column attributes, read on an instance as their values.
        backend.check_trial_is_updatable(trial_id, trial.state)  # type: ignore[arg-type]
        for step, v in sorted(steps.items()):
            backend._set_trial_intermediate_value_without_commit(session, trial_id, step, v)
        for key, v in attrs.items():
            backend._set_trial_attr_without_commit(session, models.TrialUserAttributeModel,
                                                   trial_id, key, v)
        if state == TrialState.PRUNED:
            value = _last_step_value(session, models, trial_id)
        if value is not None:
            backend._set_trial_value_without_commit(session, trial, 0, value)
        trial.state = state
        trial.datetime_complete = dt.datetime.now()


def _rdb(study: optuna.Study) -> RDBStorage | None:
    """The RDB storage under the study's cache, if it has one."""
    storage = study._storage
    storage = getattr(storage, "_backend", storage)  # optuna's _CachedStorage wraps it
    return storage if isinstance(storage, RDBStorage) else None


def _last_step_value(session: Any, models: Any, trial_id: int) -> float | None:
    """The trial's intermediate value at its last step, unless that is NaN."""
    row = (session.query(models.TrialIntermediateValueModel)
           .filter(models.TrialIntermediateValueModel.trial_id == trial_id)
           .order_by(models.TrialIntermediateValueModel.step.desc()).first())
    if row is None:
        return None
    v = models.TrialIntermediateValueModel.stored_repr_to_intermediate_value(
        row.intermediate_value, row.intermediate_value_type)
    return None if math.isnan(v) else v


def _piece_by_piece(study: optuna.Study, trial_id: int, state: TrialState,
                    value: float | None, attrs: dict[str, Any],
                    steps: dict[int, float]) -> TrialState:
    storage = study._storage
    for step, v in sorted(steps.items()):
        storage.set_trial_intermediate_value(trial_id, step, v)
    for key, v in attrs.items():
        storage.set_trial_user_attr(trial_id, key, v)
    if state == TrialState.PRUNED:
        trial = storage.get_trial(trial_id)
        last = trial.last_step
        v = trial.intermediate_values[last] if last is not None else math.nan
        value = None if math.isnan(v) else v
    storage.set_trial_state_values(trial_id, state, None if value is None else [value])
    return state


def add_running_attrs(study: optuna.Study, number: int, attrs: Mapping[str, Any]) -> bool:
    """Set user `attrs` on trial `number` of `study` while it is RUNNING, all in one
    transaction (what a trial was given or measured: its GPU share, its peak GPU memory).
    Returns False, writing nothing, when the trial has finished already (another driver took
    it over and failed it, or its end was written first)."""
    attrs = dict(attrs)
    backend = _rdb(study)
    if backend is None:
        storage = study._storage
        trial_id = storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
        try:
            for key, v in attrs.items():
                storage.set_trial_user_attr(trial_id, key, v)
        except UpdateFinishedTrialError:
            return False
        return True
    return call_retrying("add trial attributes", _add_in_one_transaction, backend,
                         study._study_id, number, attrs)


def _add_in_one_transaction(backend: RDBStorage, study_id: int, number: int,
                            attrs: dict[str, Any]) -> bool:
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    with _create_scoped_session(backend.scoped_session) as session:
        trial = (session.query(models.TrialModel)
                 .filter(models.TrialModel.study_id == study_id,
                         models.TrialModel.number == number)
                 .with_for_update().one_or_none())
        if trial is None or trial.state != TrialState.RUNNING:
            return False
        for key, v in attrs.items():  # trial.trial_id: a Column to Optuna's models, an int here
            backend._set_trial_attr_without_commit(session, models.TrialUserAttributeModel,
                                                   trial.trial_id,  # type: ignore[arg-type]
                                                   key, v)
    return True
