"""Which central weights of a study were one treatment: clipping took the weight away.

Every update trains loss x weight and then, under global clipping (`grad_clip_mode: global`,
the reference's), clips the gradient to norm `grad_clip`. When every update of the central
task was clipped, the applied gradient was g/||g|| x grad_clip at each of them whatever the
central weight, so two cells of one seed (and one point otherwise) that differ only in the
central weight, and clipped all their central updates, trained the same updates: the same
run, to rounding. Such weights form one *arm*. A verdict compares arms, not labels: an arm's
scores are counted once, under its smallest weight (`merge`), and every place that names a
best weight says which weights it stands for.

A cell's clipping record comes from its run (`Cell.clipping`, schema.T_CLIPPING); cells
without one (trials from before it was recorded, imports without the columns) never join an
arm, since nothing says what they trained.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from weightsearch.studies import schema

FIX = ("search weights inside the live range, or set grad_clip_mode: unweighted (or "
       "grad_clip: 0) so that the weight scales the step")


@dataclass(frozen=True)
class Arm:
    """Central weights whose cells trained the same updates."""

    weights: tuple[float, ...]  # ascending; the first stands for the arm in verdicts
    rest: str  # the rest of the search point, e.g. "grad_clip=1" ("" for a weight grid)
    grad_clip: float
    acts_below: float | None  # the median central update is clipped above this weight
    whole_grid: bool  # every weight the study trained at this rest is in the arm
    # Above these weights every in-focus (off-focus) central update was clipped: the median
    # over the arm's cells of each run's limit (trainer.clipping.clip_summary); None where the
    # records do not give them (older runs, imports without the columns).
    saturates_in_focus: float | None = None
    saturates_off_focus: float | None = None

    @property
    def label(self) -> str:
        return "=".join(f"{w:g}" for w in self.weights)

    def text(self) -> str:
        where = f" at {self.rest}" if self.rest else ""
        weights = ", ".join(f"{w:g}" for w in self.weights)
        same = (f"trained the same treatment: every central update was clipped at norm "
                f"{self.grad_clip:g}{self._live_range()}, so the runs are identical in exact "
                "arithmetic and differ by float rounding, which grows over training (bf16 "
                "from the first update)")
        if self.whole_grid:
            return (f"every weight of the grid{where} ({weights}) {same}; the grid cannot tell "
                    f"weights apart: {FIX}")
        return f"weights {weights}{where} {same}"

    def _live_range(self) -> str:
        """Where the weight stops acting: per focus group where the records give it, else
        the median update's limit (a mix of both groups, older records)."""
        focus, off = self.saturates_in_focus, self.saturates_off_focus
        if focus is not None or off is not None:
            parts = [f"every {name} update from about {v:.2g}"
                     for name, v in (("in-focus", focus), ("off-focus", off)) if v is not None]
            return " (" + " and ".join(parts) + ")"
        if self.acts_below is not None:
            return f" (the median update from about {self.acts_below:.2g})"
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {"weights": list(self.weights), "rest": self.rest or None,
                "grad_clip": self.grad_clip, "acts_below": self.acts_below,
                "saturates_in_focus": self.saturates_in_focus,
                "saturates_off_focus": self.saturates_off_focus,
                "whole_grid": self.whole_grid, "text": self.text()}


def rest_of(point: dict) -> str:
    """A cell's search point without its central weight, as one label ("" when nothing)."""
    rest = {k: v for k, v in point.items() if k != schema.T_CENTRAL_WEIGHT_PATH}
    return " ".join(f"{k}={_show(v)}" for k, v in sorted(rest.items()))


def clipped_away(cell: Any) -> bool:
    """Whether global clipping clipped every update of the cell's central task, by a complete
    record (no update left unrecorded) of a run whose update is the weight times its task's
    gradient (SMART's unweighted term makes the clipped direction depend on the weight), and
    whose searched weight was that loss weight (a sampling rate is not cut by a clip)."""
    record, central = cell.clipping, cell.task_clipping()
    return (record.get("grad_clip_mode") == "global" and (record.get("grad_clip") or 0) > 0
            and not record.get("adversarial") and not record.get(schema.WEIGHT_ACTS_ON)
            and not central.get("unrecorded")
            and central.get("updates") != 0 and central.get("clip_share") == 1.0)


def arms(study: Any) -> list[Arm]:
    """The study's arms of two or more weights, one at most per rest of the point."""
    groups: dict[str, list[Any]] = {}
    tried: dict[str, set[float]] = {}  # every weight a trial reached, whatever its state
    for c in study.cells:
        if c.weight is not None:
            tried.setdefault(rest_of(c.point), set()).add(c.weight)
        if c.state == "complete" and c.weight is not None:
            groups.setdefault(rest_of(c.point), []).append(c)
    found = []
    for rest, cells in sorted(groups.items()):
        by_weight: dict[float, list[Any]] = {}
        for c in cells:
            by_weight.setdefault(c.weight, []).append(c)
        inert = sorted(w for w, mine in by_weight.items() if all(map(clipped_away, mine)))
        if len(inert) < 2:
            continue
        found.append(Arm(tuple(inert), rest, float(by_weight[inert[0]][0].clipping["grad_clip"]),
                         _median_of(cells, "acts_below"), whole_grid=set(inert) == tried[rest],
                         saturates_in_focus=_median_of(cells, "saturates_in_focus"),
                         saturates_off_focus=_median_of(cells, "saturates_off_focus")))
    return found


def _median_of(cells: list[Any], key: str) -> float | None:
    """The median over `cells` of their central task's clipping record's `key` (finite
    values only), None where none records it."""
    found = [v for c in cells if isinstance(v := c.task_clipping().get(key), int | float)
             and math.isfinite(v)]
    return statistics.median(found) if found else None


def live_bound(study: Any) -> float | None:
    """The weight below which the median central update of the study's cells is not clipped
    (the median over its cells); None where no cell records one (no global clipping)."""
    bounds = [b for c in study.cells if c.state == "complete"
              and (b := c.task_clipping().get("acts_below")) is not None and math.isfinite(b)]
    return statistics.median(bounds) if bounds else None


def merge(triples: Iterable[tuple[float, int | None, float]], found: list[Arm], rest: str = ""
          ) -> tuple[list[tuple[float, int | None, float]], dict[float, str]]:
    """(weight, seed, score) triples of one rest with each arm's scores counted once, under
    its smallest weight; and the display name of each such weight ("6=9=12=15")."""
    arm = next((a for a in found if a.rest == rest), None)
    if arm is None:
        return list(triples), {}
    kept, seen = [], set()
    # One score per seed from any member (the smallest weight that has it): a seed that
    # finished at 9 but not at 6 still counts for the arm.
    for weight, seed, score in sorted(triples, key=lambda t: (t[0] not in arm.weights, t[0])):
        if weight in arm.weights:
            if seed in seen:
                continue
            seen.add(seed)
            weight = arm.weights[0]
        kept.append((weight, seed, score))
    return kept, {arm.weights[0]: arm.label}


def notes(study: Any) -> list[str]:
    """One sentence per arm, for inspect, the launch summary and the HTTP study view."""
    return [a.text() for a in arms(study)]


def clip_rows(study: Any) -> list[dict[str, Any]]:
    """Per central weight (and rest of the point): the central task's clipping over the seeds."""
    groups: dict[tuple[str, float], list[Any]] = {}
    for c in study.cells:
        if c.state == "complete" and c.weight is not None and c.task_clipping():
            groups.setdefault((rest_of(c.point), c.weight), []).append(c)
    rows = []
    for (rest, weight), cells in sorted(groups.items()):
        records = [c.task_clipping() for c in cells]
        updates = sum(r.get("updates") or 0 for r in records)
        clipped = sum(r.get("clipped") or 0 for r in records)
        # imported records give shares, not counts: their mean
        shares = [r["clip_share"] for r in records if r.get("clip_share") is not None]
        norms = [r["median_norm"] for r in records if r.get("median_norm") is not None]
        bounds = [r["acts_below"] for r in records if r.get("acts_below") is not None]
        live = {key: _median_of(cells, key)
                for key in ("saturates_in_focus", "saturates_off_focus")}
        rows.append({"central_task": study.central_task, **({"point": rest} if rest else {}),
                     "central_weight": weight, "seeds": len(cells),
                     "grad_clip": cells[0].clipping.get("grad_clip"),
                     "grad_clip_mode": cells[0].clipping.get("grad_clip_mode"),
                     "clip_share": clipped / updates if updates
                     else statistics.fmean(shares) if shares else None,
                     "median_norm": statistics.median(norms) if norms else None,
                     "acts_below": statistics.median(bounds) if bounds else None, **live,
                     "all_clipped": all(map(clipped_away, cells))})
    return rows


PARTIAL_SHARE = 0.5  # a weight whose clip cut at least this share of central updates is said


def partial_text(study: Any) -> str | None:
    """Where global clipping cut most, but not every weight's, central updates (a loss
    weight): per weight the share clipped, and what it means for comparing them. None where
    no weight had at least half its central updates clipped."""
    rows = [r for r in clip_rows(study) if r["grad_clip_mode"] == "global"
            and (r["grad_clip"] or 0) > 0 and r["clip_share"] is not None and "point" not in r]
    if any(c.clipping.get(schema.WEIGHT_ACTS_ON) for c in study.cells) or not rows \
            or max(r["clip_share"] for r in rows) < PARTIAL_SHARE \
            or all(r["all_clipped"] for r in rows):
        return None
    shares = ", ".join(f"{r['clip_share']:.0%} at {r['central_weight']:g}" for r in rows)
    full = [r["central_weight"] for r in rows if r["all_clipped"]]
    partly = [r for r in rows if not r["all_clipped"]]
    left = ", ".join(f"{1 - r['clip_share']:.0%} at {r['central_weight']:g}" for r in partly)
    text = (f"global clipping at {rows[0]['grad_clip']:g} cut {shares} of the central "
            "updates; a clipped update is the same whatever the weight, so the weight changed "
            f"only the updates left unclipped ({left})")
    if full:
        text += (f"; from {min(full):g} every central update was clipped, so any larger weight "
                 "trains the same treatment")
    return text + f"; {FIX}"


def _show(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return v if isinstance(v, str) else json.dumps(v)


__all__ = ["FIX", "Arm", "arms", "clip_rows", "clipped_away", "live_bound", "merge", "notes",
           "rest_of"]
