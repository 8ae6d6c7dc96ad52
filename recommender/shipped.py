"""Studies shipped with the recommender: this project's own measurements, kept in
`recommender/data/` as import files (`weightsearch export` wrote them; the README there says how
each was made) and counted as built-in evidence beside the SIWLM paper's Table 2.

A shipped file is read with the importer's own checks, so a damaged or edited file fails with
the importer's message naming the line and the column."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from weightsearch.studies.import_columns import ImportRow
from weightsearch.studies.import_rows import parse_rows

DATA = Path(__file__).parent / "data"


@dataclass(frozen=True, eq=False)
class ShippedStudy:
    study: str  # the study label its evidence points carry
    file: str  # in recommender/data/
    description: str  # for the recommendation's notes (sizes and seeds are read from the file)

    @functools.cached_property
    def summary(self) -> str:
        """The description, with the sizes and seeds the file holds (read once)."""
        rows = [r for task in self.tasks().values() for r in task]
        sizes = ", ".join(f"{n:,}" for n in sorted({r.train_size for r in rows}))
        seeds = len({r.seed for r in rows})
        return f"{self.description}; training sizes {sizes}, {seeds} seed(s)"

    def tasks(self) -> dict[str, list[ImportRow]]:
        """The file's rows per central task, in file order."""
        out: dict[str, list[ImportRow]] = {}
        for row in parse_rows(DATA / self.file):
            out.setdefault(row.central_task, []).append(row)
        return out


SHIPPED: tuple[ShippedStudy, ...] = (
    ShippedStudy(
        "sst2-ladder", "sst2_ladder_minilm.csv",
        "SST-2 at a ladder of training sizes (nested subsamples of one dataset), "
        "all-MiniLM-L6-v2, multi-task stage, variant reference, auxiliaries RTE, MRPC, STS-B "
        "and CoLA at 300 examples each (recommender/data/README.md)"),
    ShippedStudy(
        "clip-weight", "sst2_clip_minilm.csv",
        "SST-2 at 700 training sentences under the reference's gradient clipping (clip1), "
        "without (noclip) and with each task's own gradient clipped (uclip1), central weights "
        "1, 3 and 15, all-MiniLM-L6-v2, multi-task stage, variant reference, the ladder's "
        "auxiliaries (recommender/data/README.md)"),
    ShippedStudy(
        "sst2-rate-ladder", "sst2_rate_ladder_minilm.csv",
        "SST-2 at the ladder's sizes with the central weight as its sampling rate "
        "(weight_acts_on: sampling, regime rate-clip1), weights 1, 2, 4, 8, 15, "
        "all-MiniLM-L6-v2, multi-task stage, variant reference, the ladder's auxiliaries "
        "(recommender/data/README.md)"),
)
