"""A study's trials as `inspect`, the plots and the recommender read them: in bulk, with only
the attributes they use.

Optuna's `get_trials` builds every trial whole: each parameter's distribution, every user
attribute decoded from JSON (a trial's per-epoch history is most of its bytes), the
intermediate values and system attributes. At 50,000 trials that took 44 s. These readers need
the number, state and value of a trial, the central weight and a few small attributes, so they
are read with four queries over Optuna's tables (trials, values, the named parameters, the
named attributes) and decoded only for those. What a trial is not asked for here (its history,
intermediate values) is read through Optuna, by the few commands that show it.

The table and column names are those of Optuna's RDB schema, unchanged since Optuna 3.0
(trial values with their `value_type` since 3.0, earlier releases' databases are upgraded by
`optuna storage upgrade`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from optuna.trial import TrialState

from weightsearch.studies.retries import call_retrying

_STATES = {s.name: s for s in TrialState}
_INFINITE = {"INF_POS": math.inf, "INF_NEG": -math.inf}


@dataclass(frozen=True)
class TrialRow:
    """The parts of an Optuna FrozenTrial that the study readers use."""

    number: int
    state: TrialState
    values: tuple[float, ...] | None
    params: dict[str, Any] = field(default_factory=dict)
    user_attrs: dict[str, Any] = field(default_factory=dict)


def optuna_tables() -> dict[str, Any]:
    """The columns of Optuna's trial tables that weightsearch reads (by their names there)."""
    from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text

    meta = MetaData()
    return {
        "trials": Table("trials", meta, Column("trial_id", Integer), Column("number", Integer),
                        Column("study_id", Integer), Column("state", String(32))),
        "values": Table("trial_values", meta, Column("trial_id", Integer),
                        Column("objective", Integer), Column("value", Float),
                        Column("value_type", String(16))),
        "params": Table("trial_params", meta, Column("trial_id", Integer),
                        Column("param_name", String(512)), Column("param_value", Float),
                        Column("distribution_json", Text)),
        "attrs": Table("trial_user_attributes", meta, Column("trial_id", Integer),
                       Column("key", String(512)), Column("value_json", Text)),
        "studies": Table("studies", meta, Column("study_id", Integer),
                         Column("study_name", String(512))),
    }


def engine_of(storage: Any) -> Any:
    return getattr(storage, "_backend", storage).engine  # a cached Optuna storage wraps one


def state_counts(storage: Any) -> dict[int, tuple[tuple[str, int], ...]]:
    """Per study id, its trials counted by state: one grouped query for every study, so a
    reader can tell which studies changed since it last looked."""
    from sqlalchemy import func, select

    trials = optuna_tables()["trials"]
    query = (select(trials.c.study_id, trials.c.state, func.count())
             .group_by(trials.c.study_id, trials.c.state))

    def counts() -> dict[int, tuple[tuple[str, int], ...]]:
        out: dict[int, list[tuple[str, int]]] = {}
        with engine_of(storage).connect() as connection:
            for study_id, state, count in connection.execute(query):
                out.setdefault(study_id, []).append((str(state), int(count)))
        return {k: tuple(sorted(v)) for k, v in out.items()}

    return call_retrying("count trials", counts)


def read_trials(storage: Any, study_id: int, params: Iterable[str],
                attrs: Iterable[str]) -> list[TrialRow]:
    """Every trial of a study, in number order, with the named params (external values) and
    user attributes only."""
    return call_retrying("read trials", _read_trials, storage, study_id, list(params),
                         list(attrs))


def _read_trials(storage: Any, study_id: int, params: list[str],
                 attrs: list[str]) -> list[TrialRow]:
    from sqlalchemy import select

    t = optuna_tables()
    trials, values, param_table, attr_table = t["trials"], t["values"], t["params"], t["attrs"]
    mine = trials.c.study_id == study_id
    by_id: dict[int, tuple[int, str]] = {}
    found_values: dict[int, dict[int, float]] = {}
    found_params: dict[int, dict[str, Any]] = {}
    found_attrs: dict[int, dict[str, Any]] = {}
    with engine_of(storage).connect() as connection:
        for trial_id, number, state in connection.execute(
                select(trials.c.trial_id, trials.c.number, trials.c.state).where(mine)):
            by_id[trial_id] = (number, str(state))
        for trial_id, objective, value, kind in connection.execute(
                select(values.c.trial_id, values.c.objective, values.c.value,
                       values.c.value_type)
                .join(trials, trials.c.trial_id == values.c.trial_id).where(mine)):
            number = _INFINITE.get(str(kind), value)
            found_values.setdefault(trial_id, {})[objective] = number
        for trial_id, name, internal, distribution in connection.execute(
                select(param_table.c.trial_id, param_table.c.param_name,
                       param_table.c.param_value, param_table.c.distribution_json)
                .join(trials, trials.c.trial_id == param_table.c.trial_id)
                .where(mine, param_table.c.param_name.in_(params))):
            found_params.setdefault(trial_id, {})[name] = _external(distribution, internal)
        for trial_id, key, text in connection.execute(
                select(attr_table.c.trial_id, attr_table.c.key, attr_table.c.value_json)
                .join(trials, trials.c.trial_id == attr_table.c.trial_id)
                .where(mine, attr_table.c.key.in_(attrs))):
            found_attrs.setdefault(trial_id, {})[key] = _json(text)
    rows = []
    for trial_id, (number, state) in by_id.items():
        objectives = found_values.get(trial_id)
        rows.append(TrialRow(
            number=number, state=_STATES.get(state, TrialState.FAIL),
            values=(tuple(objectives[k] for k in sorted(objectives)) if objectives else None),
            params=found_params.get(trial_id, {}), user_attrs=found_attrs.get(trial_id, {})))
    return sorted(rows, key=lambda r: r.number)


def _json(text: str) -> Any:
    """An attribute's value; an unreadable one (another tool's, an edited database) is None,
    which the readers take as unknown."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


@lru_cache(maxsize=1024)
def _distribution(text: str) -> Any:
    from optuna.distributions import json_to_distribution

    return json_to_distribution(text)


def _external(distribution: str, internal: float) -> Any:
    """A parameter's value as Optuna gives it (a categorical's choice, not its index)."""
    try:
        return _distribution(distribution).to_external_repr(internal)
    except (ValueError, KeyError, IndexError, TypeError):
        return None  # an unreadable distribution: the value is unknown, as an odd one is


# --- writing a new study's trials in bulk (`weightsearch import`) -----------------------------
# Optuna's `add_trials` writes a trial per transaction and numbers each with a count of the
# study's trials so far: quadratic, 40 rows/s at 20,000 rows into SQLite. The import writes
# finished trials into a study no one else writes to, so it inserts them with a few statements
# in one transaction, through Optuna's own table definitions (the columns' types and enums
# as Optuna writes them; `tests/studies/test_import_integrity.py` reads them back through
# Optuna's API).
def write_trials(storage: Any, study_id: int, attrs: dict[str, Any],
                 trials: list[Any]) -> None:
    """Set `attrs` as the study's user attributes and add `trials` (FrozenTrials from
    `optuna.trial.create_trial`, finished ones) numbered from the study's trial count, all in
    one transaction."""
    call_retrying("write trials", _write_trials, storage, study_id, attrs, trials)


def _write_trials(storage: Any, study_id: int, attrs: dict[str, Any],
                  trials: list[Any]) -> None:
    import datetime as dt

    from optuna.storages._rdb import models
    from sqlalchemy import func, insert, select

    t = models.TrialModel.__table__
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)  # Optuna stores naive UTC
    with engine_of(storage).begin() as connection:
        if attrs:
            connection.execute(insert(models.StudyUserAttributeModel.__table__), [
                {"study_id": study_id, "key": k, "value_json": json.dumps(v)}
                for k, v in attrs.items()])
        if not trials:
            return
        first = connection.execute(select(func.count()).select_from(t)
                                   .where(t.c.study_id == study_id)).scalar_one()
        connection.execute(insert(t), [
            {"study_id": study_id, "number": first + i, "state": trial.state,
             "datetime_start": now, "datetime_complete": now}
            for i, trial in enumerate(trials)])
        ids = {number: trial_id for number, trial_id in connection.execute(
            select(t.c.number, t.c.trial_id).where(t.c.study_id == study_id,
                                                   t.c.number >= first))}
        by_id = [(ids[first + i], trial) for i, trial in enumerate(trials)]
        _insert_parts(connection, models, by_id)


def _insert_parts(connection: Any, models: Any, by_id: list[tuple[int, Any]]) -> None:
    """Each trial's values, params and user attributes, one statement per table."""
    from optuna.distributions import distribution_to_json
    from sqlalchemy import insert

    kind = models.TrialValueModel.TrialValueType
    values = [{"trial_id": i, "objective": k, "value": v if math.isfinite(v) else None,
               "value_type": kind.FINITE if math.isfinite(v)
               else kind.INF_POS if v > 0 else kind.INF_NEG}
              for i, trial in by_id for k, v in enumerate(trial.values or ())]
    params = [{"trial_id": i, "param_name": name,
               "param_value": trial.distributions[name].to_internal_repr(value),
               "distribution_json": distribution_to_json(trial.distributions[name])}
              for i, trial in by_id for name, value in trial.params.items()]
    attrs = [{"trial_id": i, "key": k, "value_json": json.dumps(v)}
             for i, trial in by_id for k, v in trial.user_attrs.items()]
    for table, rows in ((models.TrialValueModel, values), (models.TrialParamModel, params),
                        (models.TrialUserAttributeModel, attrs)):
        if rows:
            connection.execute(insert(table.__table__), rows)


class RenameLost(Exception):
    """Studies to rename were no longer there (deleted meanwhile); nothing was renamed."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(", ".join(names))
        self.names = names


def rename_studies(storage: Any, names: dict[int, str],
                   clashes: Callable[[str], bool]) -> list[str]:
    """Give each study its new name ({study id: name}) in one transaction, unless a study
    whose name `clashes` exists already: then nothing changes, and those names are returned.
    Optuna has no rename; a study's name is one column of its row. A study that is gone
    (another process deleted it) raises RenameLost, and no rename of the call stays."""
    from optuna.storages._rdb import models
    from sqlalchemy import select, update

    table = models.StudyModel.__table__
    with engine_of(storage).begin() as connection:
        taken = [n for (n,) in connection.execute(select(table.c.study_name)) if clashes(n)]
        if taken:
            return sorted(taken)
        gone = []
        for study_id, name in names.items():
            done = connection.execute(update(table).where(table.c.study_id == study_id)
                                      .values(study_name=name))
            if done.rowcount != 1:
                gone.append(name)
        if gone:  # raised inside the transaction: no rename of this call stays
            raise RenameLost(gone)
    return []
