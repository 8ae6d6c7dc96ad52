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
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from optuna.trial import TrialState

from weightsearch.studies.storage import call_retrying

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
