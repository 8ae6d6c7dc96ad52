"""The trials of one unit of work, found without reading the whole study.

A driver that has just claimed a unit must know what the study already holds of it: whether
another driver finished it, which of its trials a dead driver left RUNNING, how many attempts
its cell had. Reading every trial for that made each claim cost time in proportion to the
study (15 us per trial: 0.1 s per claim at 6,000 trials). Here the unit's trials are found by
their `unit`, `cell` and `slot` attributes in Optuna's attribute table, through a small
partial index per attribute where the database has partial indexes (SQLite, PostgreSQL:
created by `launch` if missing; they hold a 200-character prefix of these values only, so a
long value another tool stores under one of these keys still fits), and then only those trials
are read. Other backends scan the attribute table, which stays correct. Building the indexes
the first time locks the attribute table against writes for as long as the build takes
(under a second for 50,000 trials).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from weightsearch.studies import schema as S
from weightsearch.studies.bulk import engine_of, optuna_tables
from weightsearch.studies.claims import create_once
from weightsearch.studies.dialects import dialect
from weightsearch.studies.retries import call_retrying
from weightsearch.sweep.space import Space
from weightsearch.sweep.strategies import Record
from weightsearch.sweep.study_db import to_record

PREFIX_CHARS = 200  # our keys are at most 100 characters; the index holds this much of a value
PREFIX = f"substr(value_json, 1, {PREFIX_CHARS})"  # the indexed expression, as queried
KEYS = (S.T_UNIT, S.T_CELL, S.T_SLOT)  # the attributes a trial is found by (older trials
# name their unit by cell or slot alone)


def ensure_indexes(engine: Any) -> None:
    """One partial index per lookup attribute, where the backend has partial indexes. A
    database that refuses them (a read-only role) is only slower: said, not fatal."""
    from sqlalchemy import Index, func
    from sqlalchemy.exc import SQLAlchemyError

    if not dialect(engine.dialect.name).partial_indexes:
        return
    attrs = optuna_tables()["attrs"]
    for key in KEYS:
        where = attrs.c.key == key
        # On a prefix of the value: another tool sharing the database may store a long value
        # under one of these keys, which a whole-value index entry could not hold (PostgreSQL
        # refuses index rows over about 2.7 kB, and with them the tool's write).
        index = Index(f"ix_weightsearch_trial_{key}",
                      func.substr(attrs.c.value_json, 1, PREFIX_CHARS),
                      sqlite_where=where, postgresql_where=where)
        try:  # IF NOT EXISTS: checking first would reflect indexes, which SQLAlchemy cannot
            # do for expression indexes on SQLite without a warning
            call_retrying("create lookup indexes", create_once,
                          lambda index=index: _create(engine, index))
        except SQLAlchemyError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            print(f"note: no lookup index on the study database ({first}); each claim reads "
                  "the attribute table instead, which grows with the study", file=sys.stderr)
            return


def _create(engine: Any, index: Any) -> None:
    from sqlalchemy.schema import CreateIndex

    with engine.begin() as connection:
        connection.execute(CreateIndex(index, if_not_exists=True))


def unit_records(study: Any, space: Space, unit: str, cell: str | None) -> list[Record]:
    """The study's trials that fill `unit` or train `cell`, in trial order."""
    from sqlalchemy import select, text

    tables = optuna_tables()
    trials, attrs = tables["trials"], tables["attrs"]
    wanted = {(S.T_UNIT, unit), (S.T_SLOT, unit), (S.T_CELL, unit)}
    if cell is not None:
        wanted.add((S.T_CELL, cell))
    storage = study._storage
    engine = engine_of(storage)

    def trial_ids() -> set[int]:
        found: set[int] = set()
        with engine.connect() as connection:
            # One query per attribute, in the exact form of its index: the key as a literal
            # (a bound key would not show the partial index applies), then the value's prefix.
            # Values are stored as Optuna writes them: json.dumps of the value.
            for key, value in sorted(wanted):
                stored = json.dumps(value)
                query = select(attrs.c.trial_id, attrs.c.value_json).where(
                    text(f"key = '{key}'"),  # one of KEYS: no user text
                    text(f"{PREFIX} = :prefix").bindparams(prefix=stored[:PREFIX_CHARS]))
                # The whole value is compared here: a second condition on it in the query
                # turns SQLite's index search into a scan.
                found.update(trial_id for trial_id, text_value in connection.execute(query)
                             if text_value == stored)
            if not found:
                return found
            mine = select(trials.c.trial_id).where(trials.c.trial_id.in_(sorted(found)),
                                                   trials.c.study_id == study._study_id)
            return {row[0] for row in connection.execute(mine)}

    ids = call_retrying("read the unit's trials", trial_ids)
    found = sorted((storage.get_trial(trial_id) for trial_id in ids), key=lambda t: t.number)
    return [to_record(t, space) for t in found]
