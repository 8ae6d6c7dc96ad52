"""`weightsearch export`: a study's finished trials as an import file (studies/import_columns.py).

One row per COMPLETE trial of each central task: the required columns, the regime the study
recorded (encoder, stage, variant, the gradient clipping), the share of the central task's
updates clipped and their median gradient norm, the dataset its central task is drawn from,
and the central task's further metrics as numeric columns. A study that searched the clipping
beside the central weight (`grad_clip`, `grad_clip_mode`) exports one task per clipping regime,
named `<central task>-<regime>` (`sst2_700-clip1`, `sst2_700-noclip`;
schema.clipping_label). `weightsearch import` of the file rebuilds the same evidence in
another database: the same scores per weight and seed, the same regime.

Only weight searches export: a study that searches more than the central weight and the
clipping has no place in the import format for its other dimensions, and a foreign study has
no weightsearch settings.
The file is written whole or not at all (a temporary file renamed over the target).
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

from weightsearch.core.errors import ConfigError, DataError
from weightsearch.core.files import check_output_file
from weightsearch.studies import schema
from weightsearch.studies.central import Cell, CentralStudy, weight_acts_on
from weightsearch.studies.reading import read_central, resolve
from weightsearch.studies.urls import shown_url

FORMATS = {".csv": ",", ".tsv": "\t"}
COLUMNS = ("central_task", "dataset", "task_type", "train_size", "central_weight", "seed",
           "metric", "metric_name", "encoder", "stage", "variant", "grad_clip", "grad_clip_mode",
           "clip_share", "central_norm", "saturates_in_focus", "saturates_off_focus",
           "weight_acts_on")


def export_rows(members: list[CentralStudy]) -> list[dict]:
    """The import rows of `members` (the central-task studies of one base study)."""
    problems = []
    for s in members:
        if s.source == schema.SOURCE_FOREIGN:
            problems.append(f"{s.name} is not a weightsearch study")
        elif any(set(c.point) - {schema.T_CENTRAL_WEIGHT_PATH, *schema.T_CLIP_PATHS}
                 for c in s.cells):
            problems.append(f"{s.name} searches more than the central weight and the "
                            "clipping; the import format holds one weight per trial and "
                            "nothing else")
        elif not s.train_size or not s.task_type:
            problems.append(f"{s.name} records no training size or task type")
    if problems:
        raise ConfigError(problems)
    rows = []
    for s in members:
        metric = s.primary_metric or "metric"
        done = [c for c in s.cells
                if c.state == "complete" and c.value is not None and math.isfinite(c.value)]
        # A study that searched the clipping beside the weight: one task per clipping regime,
        # since a task of the import format is trained one way.
        split = len({s.cell_regime(c) for c in done}) > 1 or any(
            set(c.point) & set(schema.T_CLIP_PATHS) for c in s.cells)
        for c in sorted(done, key=lambda c: (s.cell_regime(c), c.weight or 0, c.seed or 0)):
            prefix = f"{s.central_task}."
            further = {k[len(prefix):]: v for k, v in c.metrics.items()
                       if k.startswith(prefix) and k[len(prefix):] != metric}
            rows.append({
                "central_task": f"{s.central_task}-{s.cell_regime(c)}" if split
                else s.central_task,
                "dataset": s.dataset or s.central_task,
                "task_type": s.task_type, "train_size": s.train_size,
                "central_weight": c.weight, "seed": c.seed, "metric": c.value,
                "metric_name": metric, "encoder": s.encoder or "", "stage": s.stage or "",
                "variant": s.variant or "", **_clip_columns(s, c), **further,
            })
    return rows


def _clip_columns(s: CentralStudy, c: Cell) -> dict:
    """The cell's clipping regime and, where its run recorded them, the share of the central
    task's updates clipped, their median unweighted gradient norm and the weights above which
    every in-focus and every off-focus update is clipped (blank otherwise)."""
    regime = s.cell_clipping(c)
    central = c.task_clipping()
    return {"grad_clip": regime[0] if regime else None,
            "grad_clip_mode": regime[1] if regime else "",
            "clip_share": central.get("clip_share"),
            "central_norm": central.get("median_norm"),
            "saturates_in_focus": central.get("saturates_in_focus"),
            "saturates_off_focus": central.get("saturates_off_focus"),
            "weight_acts_on": weight_acts_on(c.clipping) if regime else ""}


def export_study(storage_url: str, study: str, output: str | Path) -> int:
    """Write `study`'s finished trials to `output` (.csv or .tsv); returns the rows written."""
    import pandas as pd

    from weightsearch.studies.reading import open_quiet

    target = Path(output)
    sep = FORMATS.get(target.suffix.lower())
    if sep is None and not target.is_dir():
        raise ConfigError(f"--output {output}: end the name with {' or '.join(FORMATS)}")
    check_output_file(target, "--output")  # before any reading
    storage = open_quiet(storage_url)
    members = [read_central(storage, n) for n in resolve(storage, storage_url, study)]
    rows = export_rows(members)
    if not rows:
        raise DataError(f"study {study!r} in {shown_url(storage_url)} has no finished trial to "
                        f"export")
    frame = pd.DataFrame(rows)
    frame = frame[[*COLUMNS, *sorted(set(frame.columns) - set(COLUMNS))]]
    try:
        _write_whole(target, lambda fh: _shortest_floats(frame).to_csv(fh, sep=sep,
                                                                       index=False))
    except OSError as err:
        raise DataError(f"--output {output}: cannot write it ({err.strerror or err}); "
                        "choose a folder you can write to") from None
    return len(rows)


def _shortest_floats(frame):
    """Float columns as the shortest text that reads back to the same float (0.72, not
    %.17g's 0.71999999999999997), whole numbers without ".0" (weight 9); missing: empty."""
    import math

    out = frame.copy()
    for col in out.columns:
        if out[col].dtype.kind == "f":
            out[col] = out[col].map(lambda v: "" if math.isnan(v) else
                                    f"{v:.0f}" if v.is_integer() and abs(v) < 1e15 else repr(v))
    return out


def _write_whole(target: Path, write) -> None:
    """`write(fh)` into a temporary file beside `target`, synced, then renamed over it: the
    target is the old file or the new one, never half of one. The new file gets the usual
    permissions (the umask's), not the temporary file's private ones."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w", newline="") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
