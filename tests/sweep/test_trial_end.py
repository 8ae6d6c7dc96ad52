"""A trial's end is one transaction (`weightsearch.sweep.trial_end`): the same rows Optuna's public
API writes, committed once, and nothing at all when any part fails."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from optuna.exceptions import UpdateFinishedTrialError  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from weightsearch.studies.storage import open_storage  # noqa: E402
from weightsearch.sweep.trial_end import finish_trial  # noqa: E402

ATTRS = {"seed": 3, "metrics": {"rte": {"accuracy": 0.61}}, "history": [{"epoch": 1}],
         "best_epoch": 2, "wall_time_s": 12.5, "output_dir": None}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'end.db'}"
    return request.getfixturevalue("postgres_url")


def _running(study: optuna.Study) -> optuna.Trial:
    trial = study.ask()
    trial.report(0.5, step=1)
    return trial


def _commits(storage) -> list[int]:
    from sqlalchemy import event

    seen: list[int] = []
    event.listen(storage.engine, "commit", lambda conn: seen.append(1))
    return seen


def _same(a: optuna.trial.FrozenTrial, b: optuna.trial.FrozenTrial) -> None:
    assert (a.state, a.values, a.user_attrs, a.intermediate_values) == (
        b.state, b.values, b.user_attrs, b.intermediate_values)
    assert a.datetime_complete is not None and b.datetime_complete is not None


def test_a_finished_trial_has_the_rows_the_public_api_writes_in_one_commit(url):
    storage = open_storage(url)
    study = optuna.create_study(study_name="end", storage=storage, direction="maximize")
    # Restated with the public API: each attribute, each report, then tell.
    by_api = _running(study)
    for key, value in ATTRS.items():
        by_api.set_user_attr(key, value)
    by_api.report(0.6, step=2)
    study.tell(by_api, 0.61)
    ours = _running(study)
    commits = _commits(storage)
    state = finish_trial(study, ours._trial_id, TrialState.COMPLETE, 0.61, ATTRS, {2: 0.6})
    assert state == TrialState.COMPLETE and len(commits) == 1
    fresh = optuna.load_study(study_name="end", storage=open_storage(url)).get_trials()
    _same(fresh[1], fresh[0])
    # Through the study's own cache too (the driver reads its trials back through it).
    _same(study.get_trials()[1], study.get_trials()[0])


def test_pruned_takes_its_last_value_and_a_nan_value_fails_as_tell_does(url):
    storage = open_storage(url)
    study = optuna.create_study(study_name="end", storage=storage, direction="maximize")
    for state, value in ((TrialState.PRUNED, None), (TrialState.COMPLETE, math.nan),
                         (TrialState.FAIL, None), (TrialState.COMPLETE, math.inf)):
        by_api, ours = _running(study), _running(study)
        nan = value is not None and math.isnan(value)
        with pytest.warns(UserWarning) if nan else contextlib.nullcontext():
            study.tell(by_api, value, state=None if value is not None else state)
        written = finish_trial(study, ours._trial_id, state, value)
        trials = study.get_trials()
        _same(trials[-1], trials[-2])
        assert written == trials[-1].state
    assert [t.state for t in study.get_trials()][1::2] == [
        TrialState.PRUNED, TrialState.FAIL, TrialState.FAIL, TrialState.COMPLETE]
    assert study.get_trials()[-1].value == math.inf  # tell fails only NaN
    assert study.get_trials()[1].value == 0.5  # the pruned trial's last intermediate value


def test_a_failed_write_leaves_the_trial_running_with_nothing_written(url):
    storage = open_storage(url)
    study = optuna.create_study(study_name="end", storage=storage, direction="maximize")
    trial = _running(study)
    # The last attribute cannot be stored (not JSON): the attributes before it must not land.
    with pytest.raises(TypeError):
        finish_trial(study, trial._trial_id, TrialState.COMPLETE, 0.7,
                     {**ATTRS, "bad": object()}, {2: 0.6})
    left = optuna.load_study(study_name="end", storage=open_storage(url)).get_trials()[0]
    assert left.state == TrialState.RUNNING
    assert left.user_attrs == {} and left.intermediate_values == {1: 0.5}
    # A trial another driver already finished is refused whole, as tell refuses it.
    study.tell(trial, 0.9)
    with pytest.raises(UpdateFinishedTrialError):
        finish_trial(study, trial._trial_id, TrialState.FAIL, attrs={"error": "late"})
    assert "error" not in study.get_trials()[0].user_attrs


def test_storages_without_a_database_are_written_piece_by_piece():
    study = optuna.create_study(direction="maximize")  # in memory
    by_api, ours = _running(study), _running(study)
    for key, value in ATTRS.items():
        by_api.set_user_attr(key, value)
    by_api.report(0.6, step=2)
    study.tell(by_api, 0.61)
    finish_trial(study, ours._trial_id, TrialState.COMPLETE, 0.61, ATTRS, {2: 0.6})
    _same(study.get_trials()[1], study.get_trials()[0])

