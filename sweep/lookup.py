"""The trials of one unit of work, found without reading the whole study.

A driver that has just claimed a unit must know what the study already holds of it: whether
another driver finished it, which of its trials a dead driver left RUNNING, how many attempts
its cell had. Reading every trial for that made each claim cost time in proportion to the
study (15 us per trial: 0.1 s per claim at 6,000 trials). Here the unit's trials are found by
their `unit`, `cell` and `slot` attributes in Optuna's attribute table, through a small
partial index per attribute where the database has partial indexes (SQLite, PostgreSQL:
created by `launch` if missing; they hold only these short values), and then only those trials
are read. Other backends scan the attribute table, which stays correct.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from studies import schema as S
from studies.storage import call_retrying, dialect
from sweep.claims import create_once
from sweep.space import Space
from sweep.strategies import Record
from sweep.study_db import to_record

KEYS = (S.T_UNIT, S.T_CELL, S.T_SLOT)  # the attributes a trial is found by (older trials
# name their unit by cell or slot alone)


def _tables(metadata: Any) -> tuple[Any, Any]:
    """The columns of Optuna's `trials` and `trial_user_attributes` this module reads."""
    from sqlalchemy import Column, Integer, String, Table, Text

    trials = Table("trials", metadata, Column("trial_id", Integer), Column("study_id", Integer))
    attrs = Table("trial_user_attributes", metadata, Column("trial_id", Integer),
                  Column("key", String(512)), Column("value_json", Text))
    return trials, attrs


def ensure_indexes(engine: Any) -> None:
    """One partial index per lookup attribute, where the backend has partial indexes. A
    database that refuses them (a read-only role) is only slower: said, not fatal."""
    from sqlalchemy import Index, MetaData
    from sqlalchemy.exc import SQLAlchemyError

    if not dialect(engine.dialect.name).partial_indexes:
        return
    _, attrs = _tables(MetaData())
    for key in KEYS:
        where = attrs.c.key == key
        index = Index(f"ix_weightsearch_trial_{key}", attrs.c.value_json, sqlite_where=where,
                      postgresql_where=where)
        try:
            call_retrying("create lookup indexes", create_once,
                          lambda index=index: index.create(engine, checkfirst=True))
        except SQLAlchemyError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            print(f"note: no lookup index on the study database ({first}); each claim reads "
                  "the attribute table instead, which grows with the study", file=sys.stderr)
            return


def unit_records(study: Any, space: Space, unit: str, cell: str | None) -> list[Record]:
    """The study's trials that fill `unit` or train `cell`, in trial order."""
    from sqlalchemy import MetaData, select

    trials, attrs = _tables(MetaData())
    wanted = {(S.T_UNIT, unit), (S.T_SLOT, unit), (S.T_CELL, unit)}
    if cell is not None:
        wanted.add((S.T_CELL, cell))
    storage = study._storage
    engine = getattr(storage, "_backend", storage).engine  # Optuna caches an RDBStorage

    def trial_ids() -> set[int]:
        out: set[int] = set()
        with engine.connect() as connection:
            # One query per attribute, each the exact form of its partial index's condition.
            # The values are stored as Optuna writes them: json.dumps of the value.
            for key, value in sorted(wanted):
                query = (select(attrs.c.trial_id)
                         .join(trials, trials.c.trial_id == attrs.c.trial_id)
                         .where(attrs.c.key == key, attrs.c.value_json == json.dumps(value),
                                trials.c.study_id == study._study_id))
                out.update(row[0] for row in connection.execute(query))
        return out

    ids = call_retrying("read the unit's trials", trial_ids)
    found = sorted((storage.get_trial(trial_id) for trial_id in ids), key=lambda t: t.number)
    return [to_record(t, space) for t in found]
