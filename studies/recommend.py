"""Recommend a central weight for a new task from its training-set size.

Evidence: one point per finished central task, (log10 training size, best central weight, task
type), from the built-in prior (the SIWLM paper's Table 2, `studies.prior`) and from the study
database. A central task found in both counts once, with the measured study preferred (same task
name and a training size within ~12%, i.e. the same data); a study on a subsample of a task is a
point of its own.

Estimator: a kernel-weighted mean of the best weights (Nadaraya-Watson), Gaussian in log10 size
with a bandwidth of half a decade, so tasks of similar size vote and tasks 2+ decades away barely
count. Why this and not something cleverer:
- There are ~8 points, each a noisy argmax (the paper ran each cell once; seed noise on small
  tasks is several points). Anything with more parameters than a local average would fit noise.
- We tried letting tasks vote with their whole weight-score curve (score minus the task's mean,
  kernel-weighted, then the argmax over the grid). On Table 2 the curves of the large tasks differ
  by 0.1-0.3 points between weights, below seed noise, and the vote flips on one such bump (QNLI's
  +0.2 at weight 9 makes it recommend 9 for 300k examples). The mean of best weights is as noisy
  per task but averages it out, and it is continuous: the central weight is a float in [1, 15].
- It is deterministic and needs no random resampling.

Task type: when the requested type has evidence, points of that type get SAME_TYPE_FACTOR (2x)
kernel weight; without such evidence the type is ignored (the paper's finding is about size).

Interval: where the best weight of a new task of this size plausibly lies, not the standard error
of the mean: mean +- s * sqrt(1 + 1/n_eff), where s is the kernel-weighted standard deviation of
the neighbours' best weights and n_eff = (sum w)^2 / sum w^2 is the effective number of points
(the usual prediction interval of one new observation). With n_eff < 2 the local spread cannot be
estimated, so s falls back to the spread of all points. Clipped to the search range [1, 15].
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from studies import schema
from studies.prior import PRIOR, PRIOR_STUDY
from weightsearch.errors import ConfigError

BANDWIDTH = 0.5  # decades of training-set size
SAME_TYPE_FACTOR = 2.0
TASK_TYPES = ("classification", "regression", "ranking")
SAME_DATA_DECADES = 0.05  # |log10 size ratio| below which two points are the same data (~12%)


@dataclass(frozen=True)
class EvidencePoint:
    task: str
    study: str
    train_size: int
    best_weight: float
    task_type: str | None
    source: str  # "prior" | "studies"
    top2: tuple[float, ...] = ()
    grid: tuple[float, ...] = ()
    n_seeds: int = 1


@dataclass(frozen=True)
class Recommendation:
    central_weight: float
    interval: tuple[float, float]
    train_size: int
    task_type: str | None
    source: str  # "prior" | "studies" | "both"
    evidence: list[dict] = field(default_factory=list)
    effective_points: float = 0.0
    method: str = (f"kernel-weighted mean of best weights, Gaussian in log10 size, "
                   f"bandwidth {BANDWIDTH} decade")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["interval"] = list(self.interval)
        return d


def prior_evidence() -> list[EvidencePoint]:
    out = []
    for t in PRIOR:
        ranked = sorted(t.scores, key=lambda w: (-t.scores[w], w))
        out.append(EvidencePoint(
            task=t.task, study=PRIOR_STUDY, train_size=t.train_size, best_weight=ranked[0],
            task_type=t.task_type, source="prior", top2=tuple(ranked[:2]),
            grid=tuple(sorted(t.scores)), n_seeds=1,
        ))
    return out


def study_evidence(studies) -> list[EvidencePoint]:
    """Points from `studies.reading.CentralStudy` objects: those with a known training size and
    COMPLETE trials at two or more weights (one weight has no best)."""
    out = []
    for s in studies:
        best = s.best
        if best is None or len(s.curve) < 2 or not s.train_size or s.train_size <= 0:
            continue
        out.append(EvidencePoint(
            task=s.central_task, study=s.name, train_size=int(s.train_size),
            best_weight=best.weight, task_type=s.task_type, source="studies",
            top2=tuple(s.top_weights(2)), grid=tuple(c.weight for c in s.curve),
            n_seeds=min(c.n for c in s.curve),
        ))
    return out


def _same_data(a: EvidencePoint, b: EvidencePoint) -> bool:
    return a.task.lower() == b.task.lower() and \
        abs(math.log10(a.train_size / b.train_size)) < SAME_DATA_DECADES


def merge_evidence(prior: list[EvidencePoint],
                   measured: list[EvidencePoint]) -> list[EvidencePoint]:
    """One point per (task, data): measured studies first (the one with the most seeds when
    several studies ran the same task), then prior points that no study replaced."""
    kept: list[EvidencePoint] = []
    measured = sorted(measured, key=lambda p: (p.source != "studies", -p.n_seeds, p.study))
    for p in [*measured, *prior]:
        if not any(_same_data(p, k) for k in kept):
            kept.append(p)
    return kept


def load_evidence(storage_url: str | None) -> list[EvidencePoint]:
    """The prior plus every usable study in `storage_url` (None, or a SQLite file that does not
    exist yet: the prior alone)."""
    measured: list[EvidencePoint] = []
    if storage_url:
        from studies.reading import open_quiet, read_all, sqlite_file_missing

        if not sqlite_file_missing(storage_url):
            measured = study_evidence(read_all(open_quiet(storage_url)))
    return merge_evidence(prior_evidence(), measured)


def check_request(train_size, task_type: str | None) -> tuple[int, str | None]:
    problems = []
    size = None
    try:
        size = int(train_size)
        if size != float(train_size) or size <= 0:
            raise ValueError
    except (TypeError, ValueError):
        problems.append(f"train_size must be a positive whole number of examples, "
                        f"got {train_size!r}")
    if task_type is not None and task_type not in TASK_TYPES:
        problems.append(f"task_type must be one of {', '.join(TASK_TYPES)}, got {task_type!r}")
    if problems:
        raise ConfigError(problems)
    return size, task_type  # type: ignore[return-value]


def _weighted_mean_sd(x: list[float], w: list[float]) -> tuple[float, float | None, float]:
    """Mean, reliability-weighted sample sd (None when n_eff < 2), and n_eff."""
    v1, v2 = sum(w), sum(wi * wi for wi in w)
    mean = sum(wi * xi for wi, xi in zip(w, x, strict=True)) / v1
    n_eff = v1 * v1 / v2
    if n_eff < 2:
        return mean, None, n_eff
    var = sum(wi * (xi - mean) ** 2 for wi, xi in zip(w, x, strict=True)) / (v1 - v2 / v1)
    return mean, math.sqrt(var), n_eff


def recommend_from(evidence: list[EvidencePoint], train_size: int,
                   task_type: str | None = None) -> Recommendation:
    train_size, task_type = check_request(train_size, task_type)
    if not evidence:
        raise ConfigError("no evidence to recommend from (no prior and no finished study)")
    x0 = math.log10(train_size)
    typed = task_type is not None and any(p.task_type == task_type for p in evidence)
    weights = []
    for p in evidence:
        k = math.exp(-0.5 * ((math.log10(p.train_size) - x0) / BANDWIDTH) ** 2)
        if typed and p.task_type == task_type:
            k *= SAME_TYPE_FACTOR
        weights.append(max(k, 1e-300))  # far from every point: fall back to equal weights
    best = [p.best_weight for p in evidence]
    mean, sd, n_eff = _weighted_mean_sd(best, weights)
    if sd is None:
        sd = _weighted_mean_sd(best, [1.0] * len(best))[1] or 0.0
    half = sd * math.sqrt(1.0 + 1.0 / n_eff)
    lo, hi = schema.WEIGHT_LOW, schema.WEIGHT_HIGH
    clip = lambda v: round(min(hi, max(lo, v)), 1)  # noqa: E731
    total = sum(weights)
    sources = {p.source for p in evidence}
    return Recommendation(
        central_weight=clip(mean), interval=(clip(mean - half), clip(mean + half)),
        train_size=train_size, task_type=task_type,
        source="both" if len(sources) > 1 else sources.pop(),
        evidence=[{
            "task": p.task, "study": p.study, "train_size": p.train_size,
            "best_weight": p.best_weight, "task_type": p.task_type,
            "kernel_weight": round(w / total, 4), "source": p.source,
        } for p, w in sorted(zip(evidence, weights, strict=True), key=lambda pw: -pw[1])],
        effective_points=round(n_eff, 2),
    )


def recommend(train_size: int, task_type: str | None = None,
              storage_url: str | None = None) -> Recommendation:
    """Recommend a central weight; `storage_url=None` uses the built-in prior alone."""
    train_size, task_type = check_request(train_size, task_type)
    return recommend_from(load_evidence(storage_url), train_size, task_type)


def nearest(weight: float, grid: tuple[float, ...]) -> float:
    return min(grid, key=lambda g: (abs(g - weight), g))


def leave_one_task_out(evidence: list[EvidencePoint]) -> tuple[list[dict], float | None, str]:
    """For each measured task (the prior's tasks when no study is usable): recommend without
    every point of that task, and check whether the grid weight nearest the recommendation is
    among the task's two best weights. Returns (rows, hit rate, which points were evaluated)."""
    targets = [p for p in evidence if p.source == "studies"]
    over = "studies"
    if not targets:
        targets, over = [p for p in evidence if p.source == "prior"], "prior"
    rows = []
    for p in targets:
        rest = [q for q in evidence if q.task.lower() != p.task.lower()]
        if not rest:
            continue
        rec = recommend_from(rest, p.train_size, p.task_type)
        grid = p.grid or schema.DEFAULT_GRID
        snapped = nearest(rec.central_weight, grid)
        rows.append({
            "task": p.task, "study": p.study, "train_size": p.train_size,
            "recommended": rec.central_weight, "recommended_grid": snapped,
            "interval": list(rec.interval), "best_weight": p.best_weight,
            "top2": list(p.top2), "hit": snapped in p.top2,
            "in_interval": rec.interval[0] <= p.best_weight <= rec.interval[1],
        })
    rate = sum(r["hit"] for r in rows) / len(rows) if rows else None
    return rows, rate, over
