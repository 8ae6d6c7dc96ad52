"""Which running cells have lost their driver: a launch holds a lease on each unit it trains
(`studies/claims.py`, its table in the study database) and renews it while the
trial trains; a RUNNING trial whose unit has no live lease was left by a driver that stopped
(killed, its Ray cluster lost, its machine gone). Readers show such a cell as `driver_gone`:
`weightsearch resume <study>` continues it from its last checkpoint."""

from __future__ import annotations

import dataclasses
from typing import Any

from weightsearch.studies.claims import lease_states

DRIVER_GONE = "driver_gone"


def live_units(engine: Any, study: str) -> set[str] | None:
    """The units of Optuna study `study` under a live lease (the database's clock); None where
    the database has no claims table (nothing was launched against it)."""
    states = lease_states(engine, study)
    return None if states is None else {unit for unit, live in states.items() if live}


def mark_driver_gone(storage: Any, studies: list) -> list:
    """`studies` (CentralStudy) with each RUNNING cell whose unit holds no live lease shown as
    DRIVER_GONE, and counted so (`counts["driver_gone"]`). Cells without a recorded unit
    (other programs' trials, trials from before leases) stay as they are."""
    engine = getattr(storage, "engine", None)
    out = []
    for s in studies:
        running = [c for c in s.cells if c.state == "running" and c.unit]
        live = live_units(engine, s.name) if running and engine is not None else None
        gone = {c.number for c in running if live is not None and c.unit not in live}
        if not gone:
            out.append(s)
            continue
        cells = tuple(dataclasses.replace(c, state=DRIVER_GONE) if c.number in gone else c
                      for c in s.cells)
        counts = {**s.counts, "running": s.counts.get("running", 0) - len(gone),
                  DRIVER_GONE: len(gone)}
        out.append(dataclasses.replace(s, cells=cells, counts=counts))
    return out
