"""Recommend a central weight for a new task from its training-set size.

Evidence: one point per finished central task, from the built-in prior (the SIWLM paper's
Table 2, `studies.prior`) and from the study database. A central task found in both counts once,
with the measured study preferred (same task name and a training size within ~12%, i.e. the same
data); a study on a subsample of a task is a point of its own.

Every point uses all of its task's trials: `studies.task_curve` turns the scores per weight and
seed into where the best weight lies and how precisely (seed noise from replicates, a floor for
single runs; a flat or tied curve gets almost no say). `studies.hierarchy` combines the tasks as
noisy observations of a smooth law in log training size (a Gaussian process with a fitted
task-to-task scatter); both modules' docstrings give the reasoning and the alternatives.

Regimes: a point carries its encoder, the stage its scores come from (multitask | finetuned) and
the weighting variant. The prior is BERT-base, fine-tuned, single runs; studies without these
attributes count as encoder "unknown", stage multitask. The answer is built for one regime (the
one asked for, else the one with the most evidence, i.e. the largest summed precision); points
from other regimes still count, with REGIME_VAR added to their variance (the stated discount).
When the task type is given and has evidence, points of other types get TYPE_VAR added.
Deterministic: no random state outside a fixed-seed draw per task.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

from studies import schema
from studies.hierarchy import REGIME_VAR, fit_law, interval80
from studies.prior import PRIOR, PRIOR_STUDY
from studies.task_curve import locate_best
from weightsearch.errors import ConfigError

TASK_TYPES = ("classification", "regression", "ranking")
SAME_DATA_DECADES = 0.05  # |log10 size ratio| below which two points are the same data (~12%)
TYPE_VAR = 1.0  # extra variance of a point of another task type, when the type is asked for
MAX_TRAIN_SIZE = 10 ** 12  # far beyond any dataset; larger numbers are typos
PRIOR_ENCODER, PRIOR_STAGE = "bert-base-uncased", "finetuned"
UNKNOWN_ENCODER = "unknown"
ENCODER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)?$"  # also the HTTP schema's
_ENCODER_NAME = re.compile(ENCODER_PATTERN)


@dataclass(frozen=True)
class EvidencePoint:
    task: str
    study: str
    train_size: int
    best_weight: float  # the grid weight with the best mean score
    task_type: str | None
    source: str  # "prior" | "studies"
    top2: tuple[float, ...] = ()
    grid: tuple[float, ...] = ()
    n_seeds: int = 1
    location: float = 0.0  # expected best weight, from every trial (`task_curve`)
    variance: float = 1.0  # how imprecisely the trials locate it
    informativeness: float = 1.0
    encoder: str = UNKNOWN_ENCODER
    stage: str = "multitask"
    variant: str | None = None

    @property
    def regime(self) -> tuple[str, str]:
        return self.encoder, self.stage


@dataclass(frozen=True)
class Recommendation:
    central_weight: float
    interval: tuple[float, float]  # 80%: where a new task's best weight lies
    train_size: int
    task_type: str | None
    source: str  # "prior" | "studies" | "both"
    regime: dict = field(default_factory=dict)  # {"encoder", "stage"} the answer is built for
    notes: list[str] = field(default_factory=list)  # what was used and what was discounted
    evidence: list[dict] = field(default_factory=list)
    effective_points: float = 0.0
    method: str = ("hierarchical: each task's best weight located from all its trials, "
                   "combined as a Gaussian process in log10 size")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["interval"] = list(self.interval)
        return d


def _point(task, study, size, task_type, source, values, maximize, encoder, stage, variant,
           ) -> EvidencePoint | None:
    located = locate_best(values, maximize, int(size))
    if located is None:
        return None
    sign = 1.0 if maximize else -1.0
    means = {w: sum(v) / len(v) for w, v in values.items()}
    ranked = sorted(means, key=lambda w: (-sign * means[w], w))
    return EvidencePoint(
        task=task, study=study, train_size=int(size), best_weight=ranked[0], task_type=task_type,
        source=source, top2=tuple(ranked[:2]), grid=tuple(sorted(values)),
        n_seeds=min(len(v) for v in values.values()), location=located.location,
        variance=located.variance, informativeness=located.informativeness,
        encoder=(encoder or UNKNOWN_ENCODER).lower(), stage=stage or "multitask", variant=variant,
    )


def prior_evidence() -> list[EvidencePoint]:
    return [_point(t.task, PRIOR_STUDY, t.train_size, t.task_type, "prior",
                   {w: [v] for w, v in t.scores.items()}, True, PRIOR_ENCODER, PRIOR_STAGE, None)
            for t in PRIOR]


def study_evidence(studies) -> list[EvidencePoint]:
    """Points from `studies.reading.CentralStudy` objects: those with a known training size and
    COMPLETE trials at two or more weights (one weight has no best)."""
    out = []
    for s in studies:
        if not s.train_size or s.train_size <= 0 or len(s.curve) < 2:
            continue
        p = _point(s.central_task, s.name, s.train_size, s.task_type, "studies",
                   s.values_by_weight(), s.maximize, s.encoder, s.stage, s.variant)
        if p is not None:
            out.append(p)
    return out


def _same_data(a: EvidencePoint, b: EvidencePoint) -> bool:
    # A study with no recorded encoder may be a copy of the same results (e.g. the paper's table
    # imported); measured in a known other regime, the task counts once per regime.
    comparable = a.regime == b.regime or UNKNOWN_ENCODER in (a.encoder, b.encoder)
    return comparable and a.task.lower() == b.task.lower() and \
        abs(math.log10(a.train_size / b.train_size)) < SAME_DATA_DECADES


def merge_evidence(prior: list[EvidencePoint],
                   measured: list[EvidencePoint]) -> list[EvidencePoint]:
    """One point per (task, data, regime): measured studies first (the most precise one when
    several studies ran the same task), then prior points that no study replaced."""
    kept: list[EvidencePoint] = []
    measured = sorted(measured, key=lambda p: (p.source != "studies", p.variance, p.study))
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


def check_train_size(train_size) -> int:
    """A whole number of examples in 1..MAX_TRAIN_SIZE (no float conversion: a 400-digit number
    must be refused, not overflow)."""
    if isinstance(train_size, bool):
        train_size = None
    if isinstance(train_size, float) and train_size.is_integer():
        train_size = int(train_size)
    if isinstance(train_size, str) and re.fullmatch(r"\s*\d+\s*", train_size):
        digits = train_size.strip()
        train_size = int(digits) if len(digits) <= 20 else MAX_TRAIN_SIZE + 1
    if not isinstance(train_size, int):
        raise ConfigError(f"train_size must be a positive whole number of examples, "
                          f"got {train_size!r}")
    if train_size <= 0:
        raise ConfigError(f"train_size must be a positive number of examples, got {train_size}")
    if train_size > MAX_TRAIN_SIZE:
        shown = str(train_size) if len(str(train_size)) <= 20 else \
            f"a {len(str(train_size))}-digit number"
        raise ConfigError(f"train_size must be at most {MAX_TRAIN_SIZE:,} examples (10^12), got "
                          f"{shown}; give the number of training examples of the central task")
    return train_size


def check_request(train_size, task_type: str | None) -> tuple[int, str | None]:
    problems = []
    size = None
    try:
        size = check_train_size(train_size)
    except ConfigError as exc:
        problems.extend(exc.problems)
    if task_type is not None and task_type not in TASK_TYPES:
        problems.append(f"task_type must be one of {', '.join(TASK_TYPES)}, got {task_type!r}")
    if problems:
        raise ConfigError(problems)
    return size, task_type  # type: ignore[return-value]


def check_regime(encoder: str | None, stage: str | None) -> tuple[str | None, str | None]:
    problems = []
    if encoder is not None and (not _ENCODER_NAME.match(encoder) or len(encoder) > 200):
        problems.append(f"encoder must be a model name such as bert-base-uncased or "
                        f"sentence-transformers/all-MiniLM-L6-v2 (as studies record it), "
                        f"got {encoder!r}")
    if stage is not None and stage not in schema.STAGES:
        problems.append(f"stage must be one of {', '.join(schema.STAGES)}, got {stage!r}")
    if problems:
        raise ConfigError(problems)
    return (encoder.lower() if encoder else None), stage


def _encoder_matches(asked: str, recorded: str) -> bool:
    return asked == recorded or asked.rsplit("/", 1)[-1] == recorded.rsplit("/", 1)[-1]


def choose_regime(evidence: list[EvidencePoint], encoder: str | None,
                  stage: str | None) -> tuple[tuple[str, str], list[str]]:
    """The regime to answer for, and notes on how it was chosen. Unset parts: the regime with
    the largest summed precision among those that match the set parts."""
    def fits(p: EvidencePoint) -> bool:
        return (encoder is None or _encoder_matches(encoder, p.encoder)) and \
            (stage is None or p.stage == stage)

    precision: dict[tuple[str, str], float] = {}
    for p in evidence:
        if fits(p):
            precision[p.regime] = precision.get(p.regime, 0.0) + 1.0 / p.variance
    if precision:
        regime = max(precision, key=lambda r: (precision[r], r))
        how = "as asked" if encoder and stage else "the strongest evidence available"
        return regime, [f"regime: encoder {regime[0]}, stage {regime[1]} ({how})"]
    regime = (encoder or UNKNOWN_ENCODER, stage or "multitask")
    return regime, [f"no evidence for encoder {regime[0]}, stage {regime[1]}: answered from "
                    f"the other regimes, each discounted"]


_LAWS: list[tuple[list[EvidencePoint], tuple, object]] = []  # the last few fits
_LAWS_KEPT = 8


def _law_for(evidence: list[EvidencePoint], variances: list[float], discounted: list[bool]):
    """The fitted law does not depend on the size asked about: the service, which keeps one
    evidence list until the database changes, fits it once per regime and task type."""
    key = (tuple(variances), tuple(discounted),
           tuple((p.train_size, p.location) for p in evidence))  # in case a list was edited
    for ev, k, law in _LAWS:
        if ev is evidence and k == key:
            return law
    law = fit_law([math.log10(p.train_size) for p in evidence],
                  [p.location for p in evidence], variances, own=[not d for d in discounted])
    _LAWS.insert(0, (evidence, key, law))
    del _LAWS[_LAWS_KEPT:]
    return law


def recommend_from(evidence: list[EvidencePoint], train_size: int,
                   task_type: str | None = None, encoder: str | None = None,
                   stage: str | None = None) -> Recommendation:
    train_size, task_type = check_request(train_size, task_type)
    encoder, stage = check_regime(encoder, stage)
    if not evidence:
        raise ConfigError("no evidence to recommend from (no prior and no finished study)")
    regime, notes = choose_regime(evidence, encoder, stage)
    typed = task_type is not None and any(p.task_type == task_type for p in evidence)
    variances, discounted = [], []
    for p in evidence:
        same = _encoder_matches(regime[0], p.encoder) and p.stage == regime[1]
        extra = (0.0 if same else REGIME_VAR) + \
            (TYPE_VAR if typed and p.task_type != task_type else 0.0)
        variances.append(p.variance + extra)
        discounted.append(not same)
    others = sorted({f"{p.encoder}/{p.stage}" for p, d in zip(evidence, discounted, strict=True)
                     if d})
    if others:
        notes.append(f"discounted (variance +{REGIME_VAR:g}, i.e. sd +{math.sqrt(REGIME_VAR):g} "
                     f"weight units): {', '.join(others)}")
    law = _law_for(evidence, variances, discounted)
    mean, var, influence = law.predict(math.log10(train_size))
    lo, hi = interval80(mean, var)
    clip = lambda v: round(min(schema.WEIGHT_HIGH, max(schema.WEIGHT_LOW, v)), 1)  # noqa: E731
    say = [abs(float(i)) for i in influence]
    total = sum(say) or 1.0
    n_eff = total * total / (sum(s * s for s in say) or 1.0)
    sources = {p.source for p in evidence}
    rows = sorted(zip(evidence, say, variances, discounted, strict=True), key=lambda r: -r[1])
    return Recommendation(
        central_weight=clip(mean), interval=(clip(lo), clip(hi)), train_size=train_size,
        task_type=task_type, source="both" if len(sources) > 1 else sources.pop(),
        regime={"encoder": regime[0], "stage": regime[1]},
        notes=[*notes, f"task scatter around the law: sd {math.sqrt(law.tau2):.2f}"],
        evidence=[{
            "task": p.task, "study": p.study, "train_size": p.train_size,
            "best_weight": p.best_weight, "location": round(p.location, 2),
            "sd": round(math.sqrt(v), 2), "n_seeds": p.n_seeds,
            "informativeness": p.informativeness, "task_type": p.task_type,
            "say": round(s / total, 4), "source": p.source, "encoder": p.encoder,
            "stage": p.stage, "variant": p.variant, "discounted": d,
        } for p, s, v, d in rows],
        effective_points=round(n_eff, 2),
    )


def recommend(train_size: int, task_type: str | None = None,
              storage_url: str | None = None, encoder: str | None = None,
              stage: str | None = None) -> Recommendation:
    """Recommend a central weight; `storage_url=None` uses the built-in prior alone."""
    train_size, task_type = check_request(train_size, task_type)
    check_regime(encoder, stage)
    return recommend_from(load_evidence(storage_url), train_size, task_type, encoder, stage)


def nearest(weight: float, grid: tuple[float, ...]) -> float:
    return min(grid, key=lambda g: (abs(g - weight), g))


def chance_of_top2(grid: tuple[float, ...]) -> float:
    """A random grid weight lands among the task's two best with probability 2/len(grid)."""
    return min(2, len(grid)) / len(grid) if grid else 0.0


def leave_one_task_out(evidence: list[EvidencePoint], encoder: str | None = None,
                       stage: str | None = None) -> tuple[list[dict], float | None, str]:
    """For each measured task (the prior's tasks when no study is usable): recommend without
    every point of that task, and check whether the grid weight nearest the recommendation is
    among the task's two best weights (chance: 2 / that task's grid size), and whether the 80%
    interval holds the task's best weight. Returns (rows, hit rate, which points were
    evaluated)."""
    targets = [p for p in evidence if p.source == "studies"]
    over = "studies"
    if not targets:
        targets, over = [p for p in evidence if p.source == "prior"], "prior"
    rows = []
    for p in targets:
        rest = [q for q in evidence if q.task.lower() != p.task.lower()]
        if not rest:
            continue
        rec = recommend_from(rest, p.train_size, p.task_type, encoder, stage)
        grid = p.grid or schema.DEFAULT_GRID
        snapped = nearest(rec.central_weight, grid)
        rows.append({
            "task": p.task, "study": p.study, "train_size": p.train_size,
            "recommended": rec.central_weight, "recommended_grid": snapped,
            "interval": list(rec.interval), "best_weight": p.best_weight,
            "top2": list(p.top2), "hit": snapped in p.top2, "grid_size": len(grid),
            "chance": round(chance_of_top2(grid), 4),
            "in_interval": rec.interval[0] <= p.best_weight <= rec.interval[1],
        })
    rate = sum(r["hit"] for r in rows) / len(rows) if rows else None
    return rows, rate, over


def evaluation_summary(rows: list[dict]) -> dict:
    """Hit rate against the chance level of the tasks' own grids, and interval coverage."""
    if not rows:
        return {"hit_rate": None, "chance": None, "coverage": None, "tasks": 0}
    n = len(rows)
    return {"hit_rate": sum(r["hit"] for r in rows) / n,
            "chance": sum(r["chance"] for r in rows) / n,
            "coverage": sum(r["in_interval"] for r in rows) / n, "tasks": n}
