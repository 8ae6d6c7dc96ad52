"""The end of a launch: how far the study got and its best point per central task."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from weightsearch.studies import schema as S
from weightsearch.studies.central import CentralStudy
from weightsearch.studies.reading import read_central
from weightsearch.studies.verdict import Verdict, by_seed, judge
from weightsearch.sweep import study_db
from weightsearch.sweep.space import CENTRAL_WEIGHT, Space
from weightsearch.sweep.spec import StudySpec


@dataclass
class CentralResult:
    central: str
    primary_metric: str
    complete: int
    best_weight: float | None  # the central weight of the best point, when it is searched
    best_value: float | None  # mean over the best point's seeds
    best_label: str | None = None  # the best point, e.g. "w=9" or "group=mrpc+stsb"
    gain: float | None = None  # task grouping: best group's mean minus the central task alone
    verdict: Verdict | None = None  # is the best weight (or point) separated from the others?
    # weights that trained the same updates, clipping having taken the weight away
    same_updates: list[str] = field(default_factory=list)


@dataclass
class SweepSummary:
    study: str
    storage_url: str
    ran: int  # trials started by this call
    complete: int  # units finished (COMPLETE or PRUNED), all drivers together
    total: int  # units of the study
    failed: int  # trials of this call that ended FAIL
    centrals: list[CentralResult] = field(default_factory=list)
    classic: bool = True  # the central weight alone: "best central weight" lines
    unit_word: str = "cells"

    @property
    def finished(self) -> bool:
        return self.complete >= self.total

    def lines(self) -> list[str]:
        out = [f"study {self.study}: {self.complete}/{self.total} {self.unit_word} done "
               f"({self.ran} trained now, {self.failed} failed)"]
        for c in self.centrals:
            if c.best_value is None:
                out.append(f"  {c.central}: no finished trial yet")
            elif c.primary_metric == S.GROUP_MEAN:  # networks, not rival points
                out.append(f"  {c.central}: {c.complete} networks finished; `weightsearch "
                           f"inspect {self.study}` chooses the networks for each budget")
            elif c.verdict is not None and (self.classic or not c.verdict.clear):
                gain = (f"; {c.best_label}: {c.gain:+.4f} over {c.central} alone"
                        if c.gain is not None else "")
                out.append(f"  {c.central}: {c.verdict.text(c.primary_metric)} "
                           f"({c.complete} trials{gain})")
            else:
                gain = (f", {c.gain:+.4f} over {c.central} alone" if c.gain is not None
                        else "")
                out.append(f"  {c.central}: best {c.best_label} ({c.primary_metric} "
                           f"{c.best_value:.4f}, {c.complete} trials{gain})")
            out.extend(f"    {note}" for note in c.same_updates)
        return out


def summarise(spec: StudySpec, storage: Any, url: str, centrals: Sequence[Any], ran: int,
              failed: int, first: Mapping[str, Sequence[Any]] | None = None) -> SweepSummary:
    """`first`: each central task's first points (a narrowed halving start counts only its own
    stints)."""
    import optuna

    summary = SweepSummary(spec.study, url, ran=ran, complete=0, total=0, failed=failed,
                           classic=spec.space.central_weight_only,
                           unit_word=spec.strategy(spec.central_tasks[0]).unit_word)
    names = set(optuna.get_all_study_names(storage))
    for c in centrals:
        name = S.study_name(spec.study, c.name)
        metric = c.attrs[S.A_PRIMARY]
        strategy = spec.strategy(c.name, (first or {}).get(c.name, ()))
        if name not in names:
            summary.total += strategy.progress([])[1]
            summary.centrals.append(CentralResult(c.name, metric, 0, None, None))
            continue
        study = optuna.load_study(study_name=name, storage=storage)
        records = study_db.records(study, spec.space, c.name)
        done, total = strategy.progress(records)
        summary.complete += done
        summary.total += total
        summary.centrals.append(_with_arms(best_point(c.name, metric, spec.space, records),
                                           read_central(storage, name), spec.space))
    return summary


def _with_arms(result: CentralResult, study: CentralStudy, space: Space) -> CentralResult:
    """The result with the study's arms of weights that trained the same updates: named, and
    in a grid of the central weight alone compared as one (`weightsearch.studies.treatments`)."""
    result.same_updates = [a.text() for a in study.arms]
    if space.central_weight_only and result.verdict is not None and study.arms:
        result.verdict = study.verdict
    return result


def best_point(central: str, metric: str, space: Space, records: Sequence[Any]
               ) -> CentralResult:
    """The point with the best mean over its seeds' COMPLETE trials (ties: the first)."""
    by_point: dict[str, list[float]] = {}
    points: dict[str, dict] = {}
    for r in records:
        if r.state == "complete" and r.point is not None and r.value is not None \
                and math.isfinite(r.value):
            key = space.point_key(r.point)
            by_point.setdefault(key, []).append(r.value)
            points[key] = r.point
    complete = sum(len(v) for v in by_point.values())
    if not by_point:
        return CentralResult(central, metric, 0, None, None)
    verdict = _weight_verdict(records) if space.central_weight_only else \
        _point_verdict(records, space)
    # The verdict's best (ties broken as it breaks them), so that the lines agree.
    best = next(k for k in by_point if _key_of(points[k], space) == verdict.best)
    point = points[best]
    gain = None
    group = space.group
    if group is not None and point[group.path] != ():
        alone = [k for k, p in points.items() if p[group.path] == ()
                 and all(p[d.path] == point[d.path] for d in space.dims if d is not group)]
        if alone:
            gain = statistics.fmean(by_point[best]) - statistics.fmean(by_point[alone[0]])
    weight = point.get(CENTRAL_WEIGHT)
    return CentralResult(central, metric, complete, None if weight is None else float(weight),
                         statistics.fmean(by_point[best]), space.label(point), gain, verdict)


def _key_of(point: dict, space: Space) -> Any:
    """What a verdict calls a point: its central weight, or its label."""
    return float(point[CENTRAL_WEIGHT]) if space.central_weight_only else space.label(point)


def _point_verdict(records: Sequence[Any], space: Space) -> Verdict:
    """Whether the COMPLETE trials separate the best search point from every other."""
    values, paired = by_seed([(space.label(r.point), r.seed, r.value) for r in records
                              if r.state == "complete" and r.point is not None
                              and r.value is not None])
    return judge(values, paired, kind="point")


def _weight_verdict(records: Sequence[Any]) -> Verdict:
    """Whether the COMPLETE trials separate the best central weight (paired by seed when the
    same seeds finished at every weight)."""
    values, paired = by_seed([(float(r.point[CENTRAL_WEIGHT]), r.seed, r.value)
                              for r in records if r.state == "complete" and r.point is not None
                              and r.value is not None])
    return judge(values, paired)
