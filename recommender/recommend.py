"""Recommend a central weight for a new task from its training-set size.

Evidence: one point per finished central task study, from the built-in prior (the SIWLM paper's
Table 2, `weightsearch.recommender.prior`, and this project's shipped studies,
`weightsearch.recommender.shipped`) and from the study database. Several studies of one task all
count (the law gives them one shared task effect), and so do the sizes of one dataset (a ladder:
central tasks whose studies record the same `dataset`); a prior point measured again by a study on
the same data and regime (same dataset, a training size within ~12%) is replaced by it. A
study that contributes nothing (one central weight, no finished trial, no recorded size) is
named in the answer's notes.

Every point uses all of its task's trials: `weightsearch.recommender.task_curve` turns the scores
per weight and seed into where the best weight lies and how precisely (seed noise from replicates
with Student-t tails, a floor for single runs; a best at an end of the grid is censored; a flat or
tied curve gets almost no say). `weightsearch.recommender.hierarchy` combines the tasks as noisy
observations of a law in log training size: a trend (a line, a sharp transition, or the paper's
rule), a smooth deviation whose size and length come from the data, a task scatter with an outlier
component, and a shared offset per other regime; both modules' docstrings give the model and
its priors, docs/recommender.md what was tried and rejected.

Regimes (`weightsearch.recommender.regime`): a point carries its encoder, the encoder's size, the
stage its scores come from (multitask | finetuned) and the weighting variant. The prior is BERT-base
(768x12), fine-tuned, variant reference, single runs; studies without these attributes count as
encoder "unknown", stage multitask. The answer is built for one regime: the one asked for; else
that of the studies you trained (launched, not imported; among several, the one with the most
evidence, i.e. the largest summed precision of the points compatible with it), else the default
encoder's. Imported results (the paper's table among them) are evidence, never the default regime;
points from each other regime count through a shared offset from it (prior sd REGIME_SD,
estimated from the tasks both regimes measured and reported in the notes). An encoder with no
evidence is answered from the others, and the answer says so (`unmatched_encoder`), listing the
encoders the evidence has; a name nobody used and this tool does not know, spelt almost like one
that is, is refused as a likely typo.
When the task type is given and has evidence, points of other types get TYPE_VAR added.
The answer says where it comes from: each regime's share of it and the law's prior's (how far
it moves when that evidence moves, `_evidence_shares`), a size asked outside the asked regime's
measured sizes, and the prior's pull on the trend's slope (`hierarchy.Law.trend`).
Deterministic: no random state outside a fixed-seed draw per task.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from weightsearch.core.errors import ConfigError
from weightsearch.recommender import prior
from weightsearch.recommender.baselines import (
    BASELINES,
    POINT_RULES,
    baseline_errors,
    cells,
    rule_points,
)
from weightsearch.recommender.hierarchy import MODEL_NAMES, REGIME_SD, fit_law
from weightsearch.recommender.prior import PRIOR, PRIOR_STUDY
from weightsearch.recommender.regime import (
    DEFAULT_ENCODER,
    KNOWN_ENCODERS,
    UNKNOWN,
    VARIANTS,
    Regime,
    encoder_size,
    is_known,
    short_name,
)
from weightsearch.recommender.shipped import SHIPPED
from weightsearch.recommender.task_curve import locate_best, saturated_top
from weightsearch.studies import schema
from weightsearch.studies.verdict import by_seed, judge
from weightsearch.trainer.clipping import DEFAULT_GRAD_CLIP, DEFAULT_GRAD_CLIP_MODE
from weightsearch.trainer.task_types import (
    TASK_TYPES,  # a live view: registered types count at once
)

SAME_DATA_DECADES = 0.05  # |log10 size ratio| below which two points are the same data (~12%)
SKIPPED_SHOWN = 5  # studies that contribute nothing, named in the notes
TYPE_VAR = 1.0  # extra variance of a point of another task type, when the type is asked for
MAX_TRAIN_SIZE = 10 ** 12  # far beyond any dataset; larger numbers are typos
PRIOR_ENCODER, PRIOR_STAGE, PRIOR_VARIANT = prior.ENCODER, prior.STAGE, prior.VARIANT
UNKNOWN_ENCODER = UNKNOWN
DEFAULT_CLIPPING = schema.clipping_label(DEFAULT_GRAD_CLIP, DEFAULT_GRAD_CLIP_MODE)  # clip1
ENCODER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)?$"  # also the HTTP schema's
_ENCODER_NAME = re.compile(ENCODER_PATTERN)
AUDIENCES = ("cli", "http")  # who reads the notes: their hints name CLI flags or HTTP parameters
NEAR_DECADES = 0.5  # "sizes like yours": within a factor of ~3 of the size asked
NEAREST_SHOWN = 3  # asked-regime points at the nearest size, described first
# `--evaluate`: a lead in mean |error| over the best simple rule smaller than this (weight
# units), or than twice its standard error over the tasks, is no clear gain ("barely better").
CLEAR_GAIN = 0.5


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
    at_least: float | None = None  # censored at the grid's top: the best is at least this
    at_most: float | None = None  # censored at the grid's bottom: at most this
    encoder: str = UNKNOWN_ENCODER
    stage: str = "multitask"
    variant: str | None = None
    encoder_size: str = UNKNOWN  # hidden x layers, e.g. "768x12"
    dataset: str | None = None  # the data the task is drawn from (None: the task itself)
    means: tuple[tuple[float, float], ...] = ()  # (weight, mean score) over the grid
    maximize: bool = True  # of the score: False for a loss
    # The gradient clipping its trials trained with (studies.schema.clipping_label): clip1 is
    # the reference's; under it a weight above ||g|| acts no more (studies.treatments).
    clipping: str = UNKNOWN
    # From a study `weightsearch import` wrote (not one you trained): evidence like any other,
    # but never what sets the regime answered by default (`choose_regime`).
    imported: bool = False
    # The grid weights its trials do not separate from the best at 95% (the best included;
    # `studies.verdict.judge`): how flat its curve is. None where seed noise is unknown (one
    # seed per weight, no spread between seeds, a score that is not a number).
    within_noise: tuple[float, ...] | None = None
    # Under global clipping, the smallest grid weight from which every weight up clipped all
    # its central updates (`task_curve.saturated_top`): the weight acts below it at most.
    saturated_from: float | None = None

    @property
    def family(self) -> str:
        """What makes points one task to the law: sizes of one dataset share its scatter."""
        return (self.dataset or self.task).lower()

    @property
    def regime(self) -> Regime:
        return Regime(self.encoder, self.encoder_size, self.stage, self.variant or UNKNOWN,
                      self.clipping)


@dataclass(frozen=True)
class Recommendation:
    central_weight: float
    interval: tuple[float, float]  # 80%: where a new task's best weight lies
    train_size: int
    task_type: str | None
    source: str  # "prior" | "studies" | "both"
    # {"encoder", "encoder_size", "stage", "variant", "clipping"}: the regime the answer is for
    regime: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what was used and what was discounted
    evidence: list[dict] = field(default_factory=list)
    effective_points: float = 0.0
    # Set when the encoder asked for has no evidence: {"asked", "known_encoder",
    # "encoders_with_evidence"}; the answer then comes from the other regimes.
    unmatched_encoder: dict | None = None
    # Each other regime's shared offset from the asked one: {"regime", "differs_in", "offset",
    # "sd"} in weight units.
    regime_offsets: list[dict] = field(default_factory=list)
    # The fitted law: trend slope and level (mean and sd), the slope the data alone give and
    # the prior's share of its precision, the probability of each shape, the task scatter's sd
    # and the share of tasks that ignore the law.
    law: dict = field(default_factory=dict)
    # How much of the answer rests on each regime's evidence and on the law's prior (summing to
    # 1): {"source", "regime", "name", "from", "points", "share", "say"}, largest first.
    evidence_shares: list[dict] = field(default_factory=list)
    # The sizes measured in the asked regime: {"smallest", "largest", "points", "position"}
    # with position inside | below | above | no evidence.
    asked_regime_sizes: dict = field(default_factory=dict)
    # What decides the answer, in plain words (also the first notes): the nearest evidence in
    # the asked regime, its best weight and how flat its curve is, and whether the weight
    # hardly matters at sizes like the one asked (`_lead_notes`).
    summary: list[str] = field(default_factory=list)
    # What the evidence at sizes like the one asked can and cannot tell (`_equivalence`): the
    # weights no measurement there separates from its best ([low, high], None where nothing
    # near was measured with seed noise known or the measurements disagree), whether the choice
    # matters there (a weight measured worse than the best by more than seed noise), and the
    # weight from which clipping left every central update the same (None: not seen).
    equivalent: list[float] | None = None
    choice_matters: bool | None = None
    saturates_at: float | None = None
    # The law's own 80% interval, before `interval` was widened to the equivalent weights: what
    # the calibration benchmark scores (recommender.synthetic).
    law_interval: tuple[float, float] = (0.0, 0.0)
    method: str = ("hierarchical: each task's best weight estimated from all its trials, "
                   "combined as a trend in log10 size plus a Gaussian-process deviation")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["interval"] = list(self.interval)
        d["law_interval"] = list(self.law_interval)
        return d


def _point(task, study, size, task_type, source, values, maximize, encoder, stage, variant,
           size_of_encoder: str | None = None, paired: bool = False,
           dataset: str | None = None, clipping: str | None = None,
           imported: bool = False, plateau_from: float | None = None) -> EvidencePoint | None:
    located = locate_best(values, maximize, int(size), paired, plateau_from)
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
        at_least=located.at_least, at_most=located.at_most,
        encoder=(encoder or UNKNOWN_ENCODER).lower(), stage=stage or "multitask", variant=variant,
        encoder_size=size_of_encoder or encoder_size(encoder),
        dataset=dataset if dataset and dataset.lower() != str(task).lower() else None,
        means=tuple(sorted(means.items())), maximize=maximize,
        clipping=clipping if clipping and clipping != "mixed" else UNKNOWN, imported=imported,
        within_noise=_within_noise(values, maximize, paired), saturated_from=plateau_from,
    )


def _within_noise(values: dict[float, list[float]], maximize: bool,
                  paired: bool) -> tuple[float, ...] | None:
    """The weights not separated from the best by the seeds' noise (`EvidencePoint`)."""
    if not all(math.isfinite(v) for vs in values.values() for v in vs):
        return None
    verdict = judge({float(w): list(vs) for w, vs in values.items()}, paired, maximize)
    if verdict.best is None or verdict.seeds < 2 or "unknown" in verdict.reason:
        return None
    return tuple(sorted({verdict.best, *verdict.not_separated}))


def prior_evidence() -> list[EvidencePoint]:
    return [_point(t.task, PRIOR_STUDY, t.train_size, t.task_type, "prior",
                   {w: [v] for w, v in t.scores.items()}, True, PRIOR_ENCODER, PRIOR_STAGE,
                   PRIOR_VARIANT, clipping=prior.CLIPPING)
            for t in PRIOR]


@functools.cache
def _shipped_points() -> tuple[EvidencePoint, ...]:
    out = []
    for shipped in SHIPPED:
        for task, rows in shipped.tasks().items():
            head = rows[0]
            values, paired = by_seed([(r.weight, r.seed, r.metric) for r in rows])
            point = _point(task, shipped.study, head.train_size, head.task_type, "prior",
                           values, True, head.regime.get("encoder"), head.regime.get("stage"),
                           head.regime.get("variant"), paired=paired, dataset=head.dataset,
                           clipping=head.regime.get("clipping"),
                           plateau_from=_saturated_rows(rows))
            if point is not None:
                out.append(point)
    return tuple(out)


def shipped_evidence() -> list[EvidencePoint]:
    """The shipped studies' points (read once per process)."""
    return list(_shipped_points())


def builtin_evidence() -> list[EvidencePoint]:
    """What the recommender knows before any study of yours: Table 2 and the shipped studies."""
    return prior_evidence() + shipped_evidence()


class Evidence(list):
    """Evidence points, and a note for each study that contributed nothing, saying why."""

    def __init__(self, points=(), skipped=()) -> None:
        super().__init__(points)
        self.skipped: list[str] = list(skipped)


def _why_nothing(s, values: dict[float, list[float]]) -> str | None:
    """Why a study (with `values`, its scores per weight) gives no evidence point, or None
    when it gives one."""
    weights = {w for w, vs in values.items() if vs}
    if getattr(s, "grouping", False):
        why = "chooses networks of tasks under a budget; it searches no central weight"
    elif not s.train_size or s.train_size <= 0:
        why = "records no training size (import it with a train_size column)"
    elif not weights and s.counts.get("complete", 0):
        why = "has no finished trial with a usable score"
    elif not weights:
        done = (s.counts.get("failed", 0) or s.counts.get("interrupted", 0)) \
            and not s.counts.get("running", 0)
        why = "has no finished trial: every trial failed" if done else \
            "has no finished trial yet"
    elif len(weights) < 2:
        why = (f"has finished trials at one central weight only ({min(weights):g}); a best "
               "weight needs two or more")
    else:
        return None
    return f"study {s.name} contributes nothing: it {why}"


def study_evidence(studies) -> Evidence:
    """Points from `weightsearch.studies.reading.CentralStudy` objects: those with a known training
    size and COMPLETE trials at two or more weights (one weight has no best); the others are
    noted."""
    out = Evidence()
    # Stored values no reader can use (another tool's infinities, an edited database) were left
    # out when the studies were read; say so beside the answer.
    out.skipped.extend(note for study in studies for note in getattr(study, "notes", ()))
    # A study that searched the clipping is one study per clipping regime: each its own point.
    for s in (part for study in studies for part in study.by_clipping()):
        values = s.values_by_weight()
        why = _why_nothing(s, values) or _clipped_away(s)
        paired = None if why else s.paired_values()
        point = None if why else _point(
            s.central_task, s.name, s.train_size, s.task_type, "studies", paired or values,
            s.maximize, s.encoder, s.stage, s.variant, s.encoder_size,
            paired=paired is not None, dataset=s.dataset, clipping=s.clipping,
            imported=s.source == schema.SOURCE_IMPORTED, plateau_from=_saturated_cells(s))
        if point is not None:
            out.append(point)
        else:
            out.skipped.append(why or f"study {s.name} contributes nothing")
    return out


def _saturated_cells(s) -> float | None:
    """Where a study's saturated top begins: the weights from which every complete cell
    clipped all its central updates under global clipping (`task_curve.saturated_top`)."""
    from weightsearch.studies.treatments import clipped_away

    by_weight: dict[float, list[bool]] = {}
    for c in s.cells:
        if c.state == "complete" and c.weight is not None:
            by_weight.setdefault(float(c.weight), []).append(clipped_away(c))
    return saturated_top({w: all(flags) for w, flags in by_weight.items()})


def _saturated_rows(rows) -> float | None:
    """`_saturated_cells` for a shipped file's rows: a row is saturated when its run clipped
    globally at a positive norm and every central update was clipped (clip_share 1)."""
    by_weight: dict[float, list[bool]] = {}
    for r in rows:
        clip, mode = r.clipping or (0.0, "")
        by_weight.setdefault(float(r.weight), []).append(
            mode == "global" and clip > 0 and r.clip_share == 1.0 and r.acts_on == "loss")
    return saturated_top({w: all(flags) for w, flags in by_weight.items()})


def _clipped_away(s) -> str | None:
    """Why a study whose every weight trained the same updates locates no best weight."""
    from weightsearch.studies.treatments import rest_of

    inert = [a for a in s.arms if a.whole_grid]
    rests = {rest_of(c.point) for c in s.cells if c.state == "complete"}
    if not inert or rests != {a.rest for a in inert}:
        return None
    return (f"study {s.name}: {inert[0].text()}; its scores differ by rounding only, so it "
            "says nothing about where the best weight lies")


def _same_data(a: EvidencePoint, b: EvidencePoint) -> bool:
    # A study with no recorded encoder may be a copy of the same results (e.g. the paper's table
    # imported); measured in a known other regime, the task counts once per regime.
    comparable = not a.regime.differences(b.regime) or UNKNOWN_ENCODER in (a.encoder, b.encoder)
    return comparable and a.family == b.family and \
        abs(math.log10(a.train_size / b.train_size)) < SAME_DATA_DECADES


def merge_evidence(prior: list[EvidencePoint], measured: list[EvidencePoint]) -> Evidence:
    """Every measured study (several studies of one task pool: they share the task's scatter
    in the law), then the prior points that no study measured on the same data and regime (an
    imported copy of the paper's table replaces the built-in one)."""
    kept = Evidence(sorted(measured, key=lambda p: (p.task.lower(), p.study)),
                    getattr(measured, "skipped", ()))
    kept.extend(p for p in prior if not any(_same_data(p, k) for k in measured))
    return kept


def load_evidence(storage_url: str | None) -> Evidence:
    """The prior plus every usable study in `storage_url` (None, or a SQLite file that does not
    exist yet: the prior alone)."""
    measured: list[EvidencePoint] = Evidence()
    if storage_url:
        from weightsearch.studies.reading import open_quiet, read_all, sqlite_file_missing

        if not sqlite_file_missing(storage_url):
            measured = study_evidence(read_all(open_quiet(storage_url)))
    return merge_evidence(builtin_evidence(), measured)


def check_train_size(train_size) -> int:
    """A whole number of examples in 1..MAX_TRAIN_SIZE (no float conversion: a 400-digit number
    must be refused, not overflow)."""
    if isinstance(train_size, bool):
        train_size = None
    if isinstance(train_size, float) and train_size.is_integer():
        train_size = int(train_size)
    digits = None  # how many digits a huge number has, to say so without converting it
    if isinstance(train_size, str) and re.fullmatch(r"\s*\d+\s*", train_size):
        text = train_size.strip().lstrip("0") or "0"
        if len(text) <= 20:
            train_size = int(text)
        else:  # int() of thousands of digits is slow, and refused beyond 4,300
            digits, train_size = len(text), MAX_TRAIN_SIZE + 1
    if not isinstance(train_size, int):
        raise ConfigError(f"train_size must be a positive whole number of examples, "
                          f"got {train_size!r}")
    if train_size <= 0:
        raise ConfigError(f"train_size must be a positive number of examples, got {train_size}")
    if train_size > MAX_TRAIN_SIZE:
        if digits is None:  # str() of an int is refused beyond 4,300 digits: estimate those
            digits = len(str(train_size)) if train_size.bit_length() < 14_000 else \
                int(train_size.bit_length() * math.log10(2)) + 1
        shown = str(train_size) if digits <= 20 else f"a {digits}-digit number"
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


# A norm > 0 as a decimal literal: some digit 1-9 before any exponent, an exponent of at most two
# digits (so the norm stays finite), which is what normalize_clipping accepts.
_NORM = r"([0-9]*[1-9][0-9]*(\.[0-9]*)?|[0-9]*\.[0-9]*[1-9][0-9]*)([eE][+-]?[0-9]{1,2})?"
CLIPPING_PATTERN = rf"^(rate-)?(noclip|u?clip{_NORM})$"
_CLIPPING = re.compile(CLIPPING_PATTERN)
_ZERO_NORM = re.compile(r"^(rate-)?u?clip(0+(\.0*)?|\.0+)([eE][+-]?[0-9]+)?$")  # 0: noclip


def normalize_clipping(clipping: str | None) -> str | None:
    """A clipping regime as `weightsearch.studies.schema.clipping_label` spells it (clip1.0 ->
    clip1), so that it meets the evidence's; raises ConfigError for what names no regime."""
    if clipping is None:
        return None
    fix = ("clipping must be clip<norm> (the weighted gradient clipped, as the reference does; "
           "clip1 by default), uclip<norm> (the unweighted gradient clipped) or noclip, each "
           "led by rate- where the weight was the central task's sampling rate, got "
           f"{clipping!r}")
    if not isinstance(clipping, str) or len(clipping) > 40:
        raise ConfigError([fix])
    if _ZERO_NORM.match(clipping):
        raise ConfigError([fix + "; a norm of 0 is noclip"])
    if not _CLIPPING.match(clipping):
        raise ConfigError([fix])
    acts_on = "sampling" if clipping.startswith("rate-") else "loss"
    clipping = clipping.removeprefix("rate-")
    if clipping == "noclip":
        return schema.clipping_label(0.0, None, acts_on)
    unweighted = clipping.startswith("u")
    norm = float(clipping[5 if unweighted else 4:])  # the pattern spells a finite norm > 0
    return schema.clipping_label(norm, "unweighted" if unweighted else "global", acts_on)


def check_regime(encoder: str | None, stage: str | None,
                 variant: str | None = None, clipping: str | None = None
                 ) -> tuple[str | None, str | None]:
    problems = []
    try:
        normalize_clipping(clipping)
    except ConfigError as err:
        problems.extend(err.problems)
    if _is_folder_path(encoder):
        # A local model folder, as a study of it records it: asked for as studies are
        # matched, by the folder's own name (`Regime.encoder_matches`).
        encoder = asked_encoder(os.path.expanduser(encoder))
        if encoder is None:
            problems.append("encoder: the folder's name must be a model name (letters, digits, "
                            "_ . -); ask by that name")
    elif encoder is not None and (not isinstance(encoder, str) or len(encoder) > 200
                                  or not _ENCODER_NAME.match(encoder)):
        problems.append(f"encoder must be a model name such as bert-base-uncased or "
                        f"sentence-transformers/all-MiniLM-L6-v2 (as studies record it), or a "
                        f"local model folder (/path/to/encoder, ./encoder), got {encoder!r}")
    if stage is not None and stage not in schema.STAGES:
        problems.append(f"stage must be one of {', '.join(schema.STAGES)}, got {stage!r}")
    if variant is not None and variant not in VARIANTS:
        problems.append(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if problems:
        raise ConfigError(problems)
    return (encoder.lower() if encoder else None), stage


def _is_folder_path(encoder: object) -> bool:
    """A local folder as a user types it: absolute, relative to here, or under ~; printable."""
    return (isinstance(encoder, str) and 0 < len(encoder) <= 4096 and encoder.isprintable()
            and encoder.startswith(("/", "./", "../", "~/")))


def asked_encoder(recorded: str | None) -> str | None:
    """A study's recorded encoder (a name, or a local folder) as the recommender is asked for
    it: the name itself when well-formed, else the folder's last part; None when neither is."""
    if not recorded:
        return None
    for name in (recorded, short_name(recorded)):
        if len(name) <= 200 and _ENCODER_NAME.match(name):
            return name
    return None


USABLE_INFORMATIVENESS = 0.1  # below it a point's curve locates no best weight (task_curve)


def _passed_over(launched: list[EvidencePoint], usable: list[EvidencePoint]) -> str:
    """A note naming the regimes of launched studies that could not set the regime, since
    none of their points locates a best weight."""
    kept = {p.regime for p in usable}
    skipped = sorted({p.regime.label() for p in launched if p.regime not in kept})
    if not skipped:
        return ""
    return ("; passed over as the regime, since no study of it locates a best weight (flat "
            "within seed noise, or one weight): " + "; ".join(skipped))


def _encoder_matches(asked: str, recorded: str) -> bool:
    return asked == recorded or short_name(asked) == short_name(recorded)


def choose_regime(evidence: list[EvidencePoint], encoder: str | None, stage: str | None,
                  variant: str | None = None, size: str | None = None,
                  clipping: str | None = None,
                  audience: str = "cli") -> tuple[Regime, list[str]]:
    """The regime to answer for, and notes on how it was chosen. Unset parts: among the regimes
    of the points that match the set parts, the one whose compatible points have the largest
    summed precision (ties: the one with more parts recorded). With no encoder asked, the
    candidates are first the regimes of the studies the user trained (launched, not imported),
    else the default encoder's: a user asks about the setting they train in, not the one with
    the most published rows, so an imported table (the paper's) never sets the regime unless
    asked for by --encoder/--stage; it counts as another regime's evidence. `audience`: the
    notes' hints name CLI flags ("cli") or HTTP query parameters ("http")."""
    def fits(p: EvidencePoint) -> bool:
        return (encoder is None or _encoder_matches(encoder, p.encoder)) and \
            (stage is None or p.stage == stage) and \
            (variant is None or p.regime.variant in (variant, UNKNOWN)) and \
            (size in (None, UNKNOWN) or p.regime.size in (size, UNKNOWN)) and \
            (clipping is None or p.clipping in (clipping, UNKNOWN))

    fitting = [p for p in evidence if fits(p)]
    why = "the strongest evidence available"
    if encoder is None:
        launched = [p for p in fitting if p.source == "studies" and not p.imported]
        # A study whose curve locates nothing (flat within noise, one weight) has no say in
        # the answer, so it must not set the regime either.
        own = [p for p in launched if p.informativeness >= USABLE_INFORMATIVENESS]
        default = [p for p in fitting if _encoder_matches(DEFAULT_ENCODER, p.encoder)]
        imported = "" if not any(p.imported for p in evidence) else \
            "; imported results count as another regime's evidence, never as the regime"
        imported += _passed_over(launched, own)
        if own:
            fitting = own
            count = len({p.family for p in own})
            why = (f"the regime of your own studies ({count} central "
                   f"task{'s' if count != 1 else ''}), those you launched{imported}; "
                   f"{_ask(audience, 'encoder', 'stage')} to answer for another")
        elif default:
            fitting = default
            why = (f"the default encoder's, {DEFAULT_ENCODER}: no studies of your own "
                   f"(launched, not imported) in the storage{imported}; "
                   f"{_ask(audience, 'encoder', 'stage')} to answer for another")
    candidates = {p.regime for p in fitting}
    if clipping is None:  # unasked: the trainer's default (or unrecorded), where measured
        candidates = {r for r in candidates
                      if r.clipping in (DEFAULT_CLIPPING, UNKNOWN)} or candidates
    # A regime with an unknown size or variant stands only where no recorded one refines it.
    candidates = {r for r in candidates if not any(
        o != r and not r.differences(o) and o.known_parts() > r.known_parts()
        for o in candidates)} or candidates
    if candidates:
        def support(r: Regime) -> tuple:
            total = sum(1.0 / p.variance for p in evidence if not r.differences(p.regime))
            return total, r.known_parts(), r.label()

        regime = max(candidates, key=support)
        if variant is not None and regime.variant == UNKNOWN:
            regime = dataclasses.replace(regime, variant=variant)
        if size not in (None, UNKNOWN) and regime.size == UNKNOWN:
            regime = dataclasses.replace(regime, size=size)
        if clipping is not None and regime.clipping == UNKNOWN:
            regime = dataclasses.replace(regime, clipping=clipping)
        how = "as asked" if encoder and stage else why
        return regime, [f"regime: encoder {regime.encoder} ({regime.size}), stage "
                        f"{regime.stage}, variant {regime.variant}, clipping "
                        f"{regime.clipping} ({how})"]
    regime = Regime(encoder or UNKNOWN_ENCODER, size or encoder_size(encoder),
                    stage or "multitask", variant or UNKNOWN, clipping or DEFAULT_CLIPPING)
    return regime, [f"no evidence for encoder {regime.encoder}, stage {regime.stage}"
                    + (f", variant {variant}" if variant else "")
                    + (f", clipping {clipping}" if clipping else "")
                    + ": answered from the other regimes, each discounted"]


def _unmatched_encoder(evidence: list[EvidencePoint], encoder: str | None) -> dict | None:
    """What to say when no point was measured with the encoder asked for."""
    if encoder is None or any(_encoder_matches(encoder, p.encoder) for p in evidence):
        return None
    return {"asked": encoder, "known_encoder": is_known(encoder),
            "encoders_with_evidence": sorted({p.encoder for p in evidence})}


def _refuse_a_misspelling(encoder: str, with_evidence: list[str],
                          audience: str = "cli") -> None:
    """An encoder no study used and this tool does not know, spelt almost like one that is
    (robertta-base): most likely a typo, which would silently answer from other regimes. A name
    unlike any (a lab's own encoder) is answered from the others, with a note."""
    names = sorted(set(KNOWN_ENCODERS) | {short_name(e) for e in with_evidence})
    close = difflib.get_close_matches(short_name(encoder), names, n=3, cutoff=0.85)
    if close:
        shows = ("GET /studies/{name} shows a study's encoder" if audience == "http"
                 else "inspect shows each study's encoder")
        raise ConfigError(f"encoder {encoder!r} is not one any study used nor one this tool "
                          f"knows; did you mean {' or '.join(close)}? Give the name as studies "
                          f"record it ({shows})")


_LAWS: list[tuple[list[EvidencePoint], tuple, object]] = []  # the last few fits
_LAWS_KEPT = 8
_LAWS_LOCK = threading.Lock()  # the service answers from several worker threads
_FIT_LOCK = threading.Lock()


def _cached_law(evidence: list[EvidencePoint], key: tuple):
    with _LAWS_LOCK:
        for ev, k, law in _LAWS:
            if ev is evidence and k == key:
                return law
    return None


def _law_for(evidence: list[EvidencePoint], variances: list[float],
             groups: list[str | None]):
    """The fitted law does not depend on the size asked about: the service, which keeps one
    evidence list until the database changes, fits it once per regime and task type. Fits run
    one at a time, so requests that arrive during a fit wait for it instead of repeating it."""
    key = (tuple(variances), tuple(groups),
           tuple((p.train_size, p.location, p.at_least, p.at_most)
                 for p in evidence))  # in case a list was edited
    law = _cached_law(evidence, key)
    if law is not None:
        return law
    with _FIT_LOCK:
        law = _cached_law(evidence, key)
        if law is None:
            law = fit_law([math.log10(p.train_size) for p in evidence],
                          [p.location for p in evidence], variances,
                          tasks=[p.family for p in evidence], groups=groups,
                          bounds=[(p.at_least, p.at_most) for p in evidence])
            with _LAWS_LOCK:
                _LAWS.insert(0, (evidence, key, law))
                del _LAWS[_LAWS_KEPT:]
    return law


def recommend_from(evidence: list[EvidencePoint], train_size: int,
                   task_type: str | None = None, encoder: str | None = None,
                   stage: str | None = None, variant: str | None = None,
                   encoder_size: str | None = None, typed_by_user: bool = True,
                   clipping: str | None = None, audience: str = "cli") -> Recommendation:
    """`encoder_size` (hidden x layers) narrows the regime where one encoder name was measured
    at several sizes; a launch passes its study's, and `typed_by_user=False`: its encoder is one
    it loads, so a name close to a known one is no typo. `audience`: who reads the notes, the
    command line ("cli": hints name its flags) or the HTTP service ("http": its parameters)."""
    _ask(audience)  # a known audience
    train_size, task_type = check_request(train_size, task_type)
    encoder, stage = check_regime(encoder, stage, variant, clipping)
    clipping = normalize_clipping(clipping)
    if not evidence:
        raise ConfigError("no evidence to recommend from (no prior and no finished study)")
    regime, notes = choose_regime(evidence, encoder, stage, variant, encoder_size, clipping,
                                  audience)
    evidence = _of_its_quantity(evidence, regime.clipping, notes, audience)
    unmatched = _unmatched_encoder(evidence, encoder)
    if unmatched and not unmatched["known_encoder"] and typed_by_user:
        _refuse_a_misspelling(encoder, unmatched["encoders_with_evidence"], audience)
    if unmatched:
        notes.append(
            f"no study used encoder {encoder}"
            + ("" if unmatched["known_encoder"] else " (nor is it an encoder this tool knows: "
               "check the spelling)")
            + f"; the evidence has encoders {', '.join(unmatched['encoders_with_evidence'])}")
    typed = task_type is not None and any(p.task_type == task_type for p in evidence)
    variances, groups, why = [], [], []
    for p in evidence:
        differs = regime.differences(p.regime)
        variances.append(p.variance + (TYPE_VAR if typed and p.task_type != task_type else 0.0))
        groups.append(p.regime.label() if differs else None)
        why.append(differs)
    notes += _evidence_notes(evidence, audience)
    law = _law_for(evidence, variances, groups)
    regime_offsets = _regime_offsets(evidence, groups, why, law)
    notes += [f"discounted: {o['name']} (differs in {', '.join(o['differs_in'])}) shares one "
              f"offset from the asked regime, estimated {o['offset']:+.1f} +- {o['sd']:.1f} "
              f"weight units (prior sd {REGIME_SD:g}) from the tasks both regimes measured"
              for o in regime_offsets]
    summary = _law_summary(law)
    notes.append(f"trend: {summary['slope']:+.1f} +- {summary['slope_sd']:.1f} weight units "
                 f"per decade of training size; level at 10,000 examples "
                 f"{summary['level']:.1f} +- {summary['level_sd']:.1f}; probability of each "
                 "shape of the law: " + ", ".join(f"{name} {p:.2f}"
                                                   for name, p in summary["shapes"].items()))
    notes.append(_slope_note(summary))
    answer = law.predict(math.log10(train_size))
    sizes, size_notes = _asked_regime_sizes(evidence, groups, train_size)
    shares = _evidence_shares(evidence, groups, answer.influence, regime)
    notes += [*size_notes, _shares_note(shares)]
    clip = lambda v: round(min(schema.WEIGHT_HIGH, max(schema.WEIGHT_LOW, v)), 1)  # noqa: E731
    say = [abs(float(i)) for i in answer.influence]
    total = sum(say) or 1.0
    n_eff = total * total / (sum(s * s for s in say) or 1.0)
    sources = {p.source for p in evidence}
    rows = sorted(zip(evidence, say, variances, groups, strict=True), key=lambda r: -r[1])
    equivalence = _equivalence(evidence, groups, train_size)
    low, high = clip(answer.low), clip(answer.high)
    if equivalence["equivalent"] is not None:  # never exclude what the evidence cannot tell
        low = min(low, equivalence["equivalent"][0])  # from the best
        high = max(high, equivalence["equivalent"][1])
    lead = [*_equivalence_lead(equivalence, train_size),
            *_lead_notes(evidence, groups, train_size, clip(answer.median))]
    notes = [*lead, *notes]
    return Recommendation(
        central_weight=clip(answer.median), interval=(low, high),
        train_size=train_size, task_type=task_type,
        source="both" if len(sources) > 1 else sources.pop(), regime=regime.as_dict(),
        notes=[*notes, f"task scatter around the law: sd {math.sqrt(law.tau2):.2f}"],
        evidence=[_evidence_row(p, s / total, v, g is not None) for p, s, v, g in rows],
        effective_points=round(n_eff, 2), unmatched_encoder=unmatched,
        regime_offsets=[{k: v for k, v in o.items() if k != "name"} for o in regime_offsets],
        law=summary, evidence_shares=shares, asked_regime_sizes=sizes, summary=lead,
        equivalent=equivalence["equivalent"], choice_matters=equivalence["choice_matters"],
        saturates_at=equivalence["saturates_at"],
        law_interval=(clip(answer.low), clip(answer.high)),
    )


def _evidence_row(p: EvidencePoint, say: float, variance: float, discounted: bool) -> dict:
    """One task of the answer's evidence list, as JSON and the table show it."""
    return {
        "task": p.task, "study": p.study, "train_size": p.train_size,
        "best_weight": p.best_weight, "location": round(p.location, 2),
        "sd": round(math.sqrt(variance), 2), "n_seeds": p.n_seeds,
        "informativeness": p.informativeness, "task_type": p.task_type,
        "at_least": p.at_least, "at_most": p.at_most,
        "say": round(say, 4), "source": p.source, "encoder": p.encoder,
        "encoder_size": p.encoder_size, "stage": p.stage, "variant": p.variant,
        "clipping": p.clipping, "imported": p.imported, "discounted": discounted,
        "within_seed_noise": None if p.within_noise is None else list(p.within_noise),
    }


def _equivalence(evidence: list[EvidencePoint], groups: list[str | None],
                 train_size: int) -> dict[str, Any]:
    """What the asked regime's evidence at sizes like the one asked (within NEAR_DECADES) says
    about the choice: `equivalent`, the weights every such measurement places within seed noise
    of its best (their common range; None where none is near, seed noise is unknown, or the
    measurements disagree); `choice_matters`, whether some weight there measured worse than
    the best by more than seed noise (None: unknown); `saturates_at`, the smallest weight that
    clipping saturated there; `near`, the tasks it rests on."""
    near = [p for p, g in zip(evidence, groups, strict=True)
            if g is None and abs(math.log10(p.train_size / train_size)) <= NEAR_DECADES]
    known = [p for p in near if p.within_noise]
    saturated = [p.saturated_from for p in near if p.saturated_from is not None]
    out: dict[str, Any] = {"equivalent": None, "choice_matters": None,
                           "saturates_at": min(saturated) if saturated else None,
                           "near": sorted({p.task for p in known}), "disagree": False}
    if not known:
        return out
    runs = [_run_around_best(p) for p in known]
    low = max(lo for lo, _ in runs)
    high = min(hi for _, hi in runs)
    if low > high:
        out["disagree"] = True
    else:
        out["equivalent"] = [max(schema.WEIGHT_LOW, float(low)),
                             min(schema.WEIGHT_HIGH, float(high))]
    out["choice_matters"] = any(set(p.grid) - set(p.within_noise or ()) for p in known)
    return out


def _run_around_best(p: EvidencePoint) -> tuple[float, float]:
    """The neighbouring grid weights around the point's best that are all within seed noise
    of it: a weight measured worse between two that are not is no part of the range."""
    grid = sorted(p.grid)
    within = set(p.within_noise or ())
    at = grid.index(p.best_weight)
    lo = hi = at
    while lo > 0 and grid[lo - 1] in within:
        lo -= 1
    while hi < len(grid) - 1 and grid[hi + 1] in within:
        hi += 1
    return grid[lo], grid[hi]


def _equivalence_lead(equivalence: dict[str, Any], train_size: int) -> list[str]:
    """The answer's first lines: which weights the evidence at this size cannot tell apart,
    whether the choice matters, and where clipping saturates the weight."""
    near = ", ".join(equivalence["near"])
    if equivalence["equivalent"] is not None:
        low, high = equivalence["equivalent"]
        span = f"weight {low:g}" if low == high else f"weights {low:g}-{high:g}"
        line = (f"equivalent: {span} cannot be told apart from the best at sizes like yours "
                f"({near}); ")
        line += ("some weight measured there did worse by more than seed noise: the choice "
                 "matters, within this range it does not" if equivalence["choice_matters"]
                 else "no weight measured there did worse by more than seed noise: the choice "
                 "hardly matters")
        lines = [line]
    elif equivalence["disagree"]:
        lines = [f"equivalent: the measurements at sizes like yours ({near}) disagree on which "
                 "weights are within seed noise of the best"]
    else:
        lines = [f"equivalent: not measured here (no evidence of the asked regime within a "
                 f"factor of 3 of {train_size:,} examples with its seed noise known); the "
                 "answer comes from other sizes, other regimes and the prior"]
    if equivalence["saturates_at"] is not None:
        lines.append(f"saturates at: from weight {equivalence['saturates_at']:g} up every central "
                     "update was clipped at sizes like yours (global clipping): larger weights "
                     "train the same updates")
    return lines


def _asked_regime_sizes(evidence: list[EvidencePoint], groups: list[str | None],
                        train_size: int) -> tuple[dict, list[str]]:
    """The sizes measured in the asked regime, and a note when the size asked lies outside
    them: there the answer is the trend carried past its evidence (or other regimes' evidence,
    each through its offset)."""
    mine = [p.train_size for p, g in zip(evidence, groups, strict=True) if g is None]
    others = [p.train_size for p, g in zip(evidence, groups, strict=True) if g is not None]
    if not mine:
        return ({"smallest": None, "largest": None, "points": 0, "position": "no evidence",
                 "sizes": []},
                [f"no training size was measured in the asked regime: the evidence behind the "
                 f"answer at {train_size:,} examples is other regimes' (sizes {min(others):,} "
                 f"to {max(others):,}), each counting through its offset"])
    low, high = min(mine), max(mine)
    position = "below" if train_size < low else "above" if train_size > high else "inside"
    sizes = {"smallest": low, "largest": high, "points": len(mine), "position": position,
             "sizes": sorted(set(mine))}
    if position == "inside":
        return sizes, []
    above = position == "above"
    edge, side = (high, "above the largest") if above else (low, "below the smallest")
    note = (f"train size {train_size:,} lies {side} size measured in this regime ({edge:,}): "
            "the answer extrapolates the trend")
    reach = (max(others) if above else min(others)) if others else edge
    if (reach > edge) if above else (reach < edge):
        note += f"; other regimes measured sizes to {reach:,}, each counting through its offset"
    return sizes, [note]


def _lead_notes(evidence: list[EvidencePoint], groups: list[str | None],
                train_size: int, weight: float) -> list[str]:
    """What decides the answer, in plain words: the asked regime's evidence nearest the size
    asked (its task, size, best weight and how flat its curve is). Which weights are within
    seed noise of the best at sizes like the one asked is said before it (`_equivalence_lead`)."""
    mine = [p for p, g in zip(evidence, groups, strict=True) if g is None]
    if not mine:
        return ["nothing was measured in the asked regime: the answer rests on other regimes' "
                "evidence, each counted with a discount (below)"]

    def distance(p: EvidencePoint) -> float:
        return abs(math.log10(p.train_size / train_size))

    closest = min(map(distance, mine))
    nearest = sorted((p for p in mine if distance(p) <= closest + SAME_DATA_DECADES),
                     key=lambda p: (distance(p), p.variance, p.task))[:NEAREST_SHOWN]
    lines = [f"nearest evidence in the asked regime: {_point_text(p, train_size)}"
             for p in nearest]
    return lines


def _flat(p: EvidencePoint) -> bool:
    """Most of the point's grid, a run of neighbouring weights, within seed noise of its best."""
    within = p.within_noise or ()
    grid = sorted(p.grid)
    index = sorted(grid.index(w) for w in within if w in grid)
    run = bool(index) and index == list(range(index[0], index[0] + len(index)))
    return run and len(index) >= max(2, math.ceil(len(grid) / 2))


def _point_text(p: EvidencePoint, train_size: int) -> str:
    """A point in plain words: task, size, where from, seeds, best weight, how flat."""
    ratio = max(p.train_size, train_size) / min(p.train_size, train_size)
    size = f"{p.train_size:,} training examples"
    if ratio >= 10 ** SAME_DATA_DECADES:
        size += (f", {ratio:.1f}x" if ratio < 10 else f", {ratio:,.0f}x") + \
            (" fewer than yours" if p.train_size < train_size else " more than yours")
    origin = f"your study {p.study}" if p.source == "studies" else _origin([p])
    seeds = f"{p.n_seeds} seed{'s' * (p.n_seeds != 1)} per weight"
    best = f"best measured weight {p.best_weight:g}"
    within = p.within_noise
    if within is None:
        unknown = "with one seed" if p.n_seeds < 2 else "without spread between its seeds"
        curve = f"{best} (seed noise is unknown {unknown}: how flat its curve is cannot be told)"
    elif len(within) == 1:
        curve = f"{best}, ahead of every other weight by more than seed noise: a clear peak"
    elif set(within) >= set(p.grid):
        curve = (f"{best}, but its curve is flat: every weight measured "
                 f"({_weights_text(p.grid, p.grid)}) is within seed noise of the best")
    else:
        others = [w for w in p.grid if w not in within]
        curve = (f"{best}; weights {_weights_text(within, p.grid)} are within seed noise of "
                 f"the best, {'weights' if len(others) > 1 else 'weight'} "
                 f"{_weights_text(others, p.grid)} {'do' if len(others) > 1 else 'does'} worse")
    return f"{p.task}, {size} ({origin}, {seeds}): {curve}{_gap_text(p)}"


def _weights_text(weights: Sequence[float], grid: Sequence[float]) -> str:
    """"3-15" for a run of neighbouring grid weights, else "1, 6 and 9"."""
    order = sorted(grid)
    chosen = sorted(weights)
    index = [order.index(w) for w in chosen if w in order]
    if len(chosen) > 1 and len(index) == len(chosen) and \
            index == list(range(index[0], index[0] + len(index))):
        return f"{chosen[0]:g}-{chosen[-1]:g}"
    shown = [f"{w:g}" for w in chosen]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"


def _gap_text(p: EvidencePoint) -> str:
    """How far apart the best and worst weights' mean scores lie, in metric points (a 0-1
    score x100, as `regret` counts them)."""
    means = [v for _, v in p.means]
    if len(means) < 2:
        return ""
    scale = 100.0 if p.maximize and all(abs(v) <= 1.0 for v in means) else 1.0
    what = "score" if p.maximize else "loss"
    unit = " points" if p.maximize else ""
    return f"; best and worst mean {what} {scale * (max(means) - min(means)):.2f}{unit} apart"


def _evidence_shares(evidence: list[EvidencePoint], groups: list[str | None],
                     influence: Sequence[float], regime: Regime) -> list[dict]:
    """How much of the answer rests on each regime's evidence and on the law's prior. The
    predictive mean is linear in the points' locations (each component's kriging weights
    C^-1 k, mixed by the components' posterior weights: `Prediction.influence`), so a regime's
    share is how far the answer moves when every point of it moves by one weight unit. The
    rest, 1 minus the points' summed weight, is the prior's level: moving it and every point by
    one moves the answer by one, so the shares sum to 1. A share may be negative (points on the
    far side of an extrapolated trend). The median reported follows them to first order.
    Another regime's offset takes up most of a shift of all its points, so a regime that mainly
    shapes the trend has a small share; `say` (its points' summed say: the text's influence, the
    absolute weights) shows that part."""
    total = float(sum(abs(i) for i in influence)) or 1.0
    members: dict[str | None, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    rows = []
    for g, idx in members.items():
        points = [evidence[i] for i in idx]
        head = points[0]
        rows.append({"source": "asked regime" if g is None else "other regime",
                     "regime": regime.label() if g is None else g,
                     "name": (f"{regime.encoder}/{regime.stage}" if g is None
                              else f"{head.encoder}/{head.stage}"),
                     "from": _origin(points), "points": len(idx),
                     "share": float(sum(influence[i] for i in idx)),
                     "say": round(float(sum(abs(influence[i]) for i in idx)) / total, 4)})
    rows.append({"source": "law prior", "regime": None, "name": "the law's prior level",
                 "from": "the prior on the law's level", "points": 0,
                 "share": 1.0 - float(sum(influence)), "say": None})
    names = [r["name"] for r in rows]
    for r in rows:  # two regimes alike in encoder and stage are told apart by the full label
        if names.count(r["name"]) > 1 and r["regime"]:
            r["name"] = r["regime"]
        r["share"] = round(r["share"], 4)
    return sorted(rows, key=lambda r: -r["share"])


def _origin(points: list[EvidencePoint]) -> str:
    """Where points come from: the paper's table, the shipped studies by name, your studies."""
    parts = ["the SIWLM paper's Table 2"] if any(
        p.source == "prior" and p.study == PRIOR_STUDY for p in points) else []
    parts += [f"built-in study {s}" for s in sorted(
        {p.study for p in points if p.source == "prior" and p.study != PRIOR_STUDY})]
    own = len({p.study for p in points if p.source == "studies" and not p.imported})
    if own:
        parts.append(f"{own} of your studies" if own > 1 else "one of your studies")
    imported = len({p.study for p in points if p.source == "studies" and p.imported})
    if imported:
        parts.append(f"{imported} imported stud{'ies' if imported > 1 else 'y'}")
    return ", ".join(parts)


def _shares_note(shares: list[dict]) -> str:
    def on(r: dict) -> str:
        where = "" if r["source"] == "law prior" else \
            f" ({'the asked regime: ' if r['source'] == 'asked regime' else ''}{r['from']})"
        return f"on {r['name']}{where}"

    first, *rest = shares
    return (f"{first['share']:.0%} of this answer rests {on(first)}"
            + "".join(f", {r['share']:.0%} {on(r)}" for r in rest)
            + "; a share is how far the answer moves when that evidence moves by one weight unit")


def _slope_note(summary: dict) -> str:
    rule = summary["shapes"][MODEL_NAMES[2]]
    note = f"the prior's pull on the slope: {summary['slope']:+.1f} per decade with the prior"
    if summary["slope_data_alone"] is not None:
        note += (f", {summary['slope_data_alone']:+.1f} +- {summary['slope_data_alone_sd']:.1f} "
                 "from the data alone")
    else:
        note += "; the data alone do not inform it"
    if summary["slope_prior_share"] is not None:
        note += (f"; the prior gives {summary['slope_prior_share']:.0%} of the slope's "
                 f"precision in the lines and transitions (the paper's rule, probability "
                 f"{rule:.2f}, fixes it at 0)")
    return note


def _evidence_notes(evidence: list[EvidencePoint], audience: str = "cli") -> list[str]:
    """The studies that contribute nothing, and where the prior comes from."""
    skipped = getattr(evidence, "skipped", [])
    notes = skipped[:SKIPPED_SHOWN]
    if len(skipped) > SKIPPED_SHOWN:
        lists = "GET /studies" if audience == "http" else "inspect"
        notes.append(f"... and {len(skipped) - SKIPPED_SHOWN} more studies that contribute "
                     f"nothing ({lists} lists every study)")
    if any(p.source == "prior" and p.study == PRIOR_STUDY for p in evidence):
        notes.append(f"the built-in prior: the SIWLM paper's Table 2, encoder {PRIOR_ENCODER} "
                     f"(768x12), stage {PRIOR_STAGE}, variant {PRIOR_VARIANT}, single runs "
                     f"(one seed per weight)")
    notes += [f"built-in study {s.study}: {s.summary}" for s in SHIPPED
              if any(p.source == "prior" and p.study == s.study for p in evidence)]
    return notes


def _ask(audience: str, *names: str) -> str:
    """How a reader sets these request parameters: CLI flags, or HTTP query parameters."""
    if audience not in AUDIENCES:
        raise ValueError(f"audience must be one of {', '.join(AUDIENCES)}, got {audience!r}")
    if audience == "http":
        plural = "s" if len(names) > 1 else ""
        return "set the " + "/".join(f"`{n}`" for n in names) + f" query parameter{plural}"
    return "pass " + "/".join(f"--{n.replace('_', '-')}" for n in names)


def _regime_offsets(evidence: list[EvidencePoint], groups: list[str | None],
                    why: list[list[str]], law) -> list[dict]:
    """Each other regime's estimated offset: its label, a short name, how it differs."""
    offsets = law.offsets()
    shown: dict[str, tuple[str, tuple[str, ...]]] = {}
    for p, g, d in zip(evidence, groups, why, strict=True):
        if g is not None:
            shown.setdefault(g, (f"{p.encoder}/{p.stage}", tuple(d)))
    return [{"regime": label, "name": name, "differs_in": list(differs),
             "offset": round(offsets[label][0], 2), "sd": round(offsets[label][1], 2)}
            for label, (name, differs) in sorted(shown.items())]


def _law_summary(law) -> dict:
    trend = law.trend()
    return {**{k: round(v, 3 if k.endswith("share") else 2) if math.isfinite(v) else None
               for k, v in trend.items()},
            "shapes": {name: round(law.probability(i), 3) for i, name in enumerate(MODEL_NAMES)},
            "task_scatter_sd": round(math.sqrt(law.tau2), 2),
            "outlier_share": round(law.outlier_share, 3)}


def recommend(train_size: int, task_type: str | None = None,
              storage_url: str | None = None, encoder: str | None = None,
              stage: str | None = None, variant: str | None = None,
              encoder_size: str | None = None, typed_by_user: bool = True,
              clipping: str | None = None) -> Recommendation:
    """Recommend a central weight; `storage_url=None` uses the built-in prior alone."""
    train_size, task_type = check_request(train_size, task_type)
    check_regime(encoder, stage, variant, clipping)
    return recommend_from(load_evidence(storage_url), train_size, task_type, encoder, stage,
                          variant, encoder_size, typed_by_user, clipping)


def start_weights(grid, weight: float, interval, least: int = 2) -> list[float]:
    """The grid weights a search seeded by a recommendation starts with, nearest first: those
    inside its 80% interval, and at least the `least` nearest (benchmarks/bench_search.py
    measures the choice)."""
    order = sorted({float(g) for g in grid}, key=lambda g: (abs(g - weight), g))
    return [g for i, g in enumerate(order) if i < least or interval[0] <= g <= interval[1]]


def nearest(weight: float, grid: tuple[float, ...]) -> float:
    return min(grid, key=lambda g: (abs(g - weight), g))


def chance_of_top2(grid: tuple[float, ...]) -> float:
    """A random grid weight lands among the task's two best with probability 2/len(grid)."""
    return min(2, len(grid)) / len(grid) if grid else 0.0


def is_rate(clipping: str | None) -> bool:
    """Whether a regime's searched weight was the central task's sampling rate."""
    return isinstance(clipping, str) and clipping.startswith("rate-")


def same_quantity(evidence: list[EvidencePoint], clipping: str | None
                  ) -> tuple[list[EvidencePoint], int]:
    """The points whose weight is the same quantity as the regime's (a loss weight, or a
    sampling rate: never each other's evidence), and how many tasks were left out."""
    kept = Evidence([p for p in evidence if is_rate(p.clipping) == is_rate(clipping)],
                    getattr(evidence, "skipped", ()))  # the notes on studies that gave nothing
    return kept, len(evidence) - len(kept)


def _of_its_quantity(evidence: list[EvidencePoint], clipping: str, notes: list[str],
                     audience: str) -> list[EvidencePoint]:
    """`same_quantity`, with a note on what was left out; refused where nothing is left."""
    kept, other_kind = same_quantity(evidence, clipping)
    if other_kind:
        what = "a loss weight" if is_rate(clipping) else "a sampling rate"
        other = "clip1" if is_rate(clipping) else "rate-clip1"
        ask = f"clipping={other}" if audience == "http" else f"--clipping {other}"
        notes.append(f"left out: {other_kind} task(s) whose searched weight was {what} "
                     f"(another quantity, not a scale of this one; ask {ask} to answer for it)")
    if not kept:
        raise ConfigError(f"no evidence for clipping {clipping}: no study measured that "
                          "quantity")
    return kept


def leave_one_task_out(evidence: list[EvidencePoint], encoder: str | None = None,
                       stage: str | None = None) -> tuple[list[dict], float | None, str]:
    """For each measured task (the prior's tasks when no study is usable): recommend without
    every point of that task, and check whether the grid weight nearest the recommendation is
    among the task's two best weights (chance: 2 / that task's grid size), how far the
    recommendation lies from the task's best weight (chance: the mean distance of that task's
    grid weights from it), whether the 80% interval holds the task's best weight, and the regret
    in metric points (`regret`: the best measured mean score less the one at the grid weight
    nearest the recommendation; chance: a random grid weight's). Returns (rows, hit rate, which
    points were evaluated). Loss weights only: a sampling rate is another quantity, and the
    shipped rate ladder is one dataset, which nothing else predicts out of sample."""
    evidence, _ = same_quantity(evidence, None)
    targets = [p for p in evidence if p.source == "studies"]
    over = "studies"
    if not targets:
        targets, over = [p for p in evidence if p.source == "prior"], "prior"
    rows = []
    for p in targets:
        rest = [q for q in evidence if q.family != p.family]
        if not rest:
            continue
        rec = recommend_from(rest, p.train_size, p.task_type, encoder, stage)
        grid = p.grid or schema.DEFAULT_GRID
        snapped = nearest(rec.central_weight, grid)
        measured = [(q.train_size, q.best_weight) for q in rest]
        rows.append({
            "task": p.task, "study": p.study, "train_size": p.train_size,
            "recommended": rec.central_weight, "recommended_grid": snapped,
            "interval": list(rec.interval), "best_weight": p.best_weight,
            "top2": list(p.top2), "hit": snapped in p.top2, "grid_size": len(grid),
            "chance": round(chance_of_top2(grid), 4),
            "abs_error": round(abs(rec.central_weight - p.best_weight), 3),
            "chance_abs_error": round(sum(abs(g - p.best_weight) for g in grid) / len(grid), 3),
            # the law's own 80% interval: what its coverage is a claim about
            "in_interval": rec.law_interval[0] <= p.best_weight <= rec.law_interval[1],
            "regret": _rounded(regret(p, snapped)),
            "chance_regret": _rounded(_mean([regret(p, g) for g in grid])),
            "baselines": {k: round(v, 3) for k, v in baseline_errors(
                p.train_size, p.best_weight, measured, grid).items()},
            "cells": cells(p.train_size, p.best_weight, [q.train_size for q in rest]),
            "family": p.family,
            # the paper's own tasks: its rule of thumb's constants were read from them
            "rule_in_sample": p.study == PRIOR_STUDY or p.study.startswith("siwlm-paper/"),
            "rule_regrets": {name: _rounded(regret(p, nearest(w, grid))) for name, w in
                             rule_points(p.train_size, measured).items()},
        })
    rate = sum(r["hit"] for r in rows) / len(rows) if rows else None
    return rows, rate, over


def regret(p: EvidencePoint, weight: float) -> float | None:
    """What training at `weight` (a weight of the task's grid) loses against the task's best
    measured weight: the difference of their mean scores, in metric points, not negative. A
    maximised score on a 0-1 scale (accuracy, F1, a correlation) counts x100, as percent; tables
    in percent and losses count as measured. None where the task's scores are not known."""
    means = dict(p.means)
    if weight not in means:
        return None
    sign = 1.0 if p.maximize else -1.0
    scale = 100.0 if p.maximize and all(abs(v) <= 1.0 for v in means.values()) else 1.0
    return scale * (max(sign * v for v in means.values()) - sign * means[weight])


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def evaluation_summary(rows: list[dict]) -> dict:
    """Hit rate against the chance level of the tasks' own grids, the point error (mean
    absolute distance of the recommended from the best weight) against a random grid weight's
    and the other simple rules' (`weightsearch.recommender.baselines`), the mean regret in metric
    points against a random grid weight's (`regret`), and interval coverage, overall and by
    cell (size inside / outside the other tasks' sizes; best weight at an end / in the
    middle)."""
    if not rows:
        return {"hit_rate": None, "chance": None, "mean_abs_error": None,
                "chance_abs_error": None, "mean_regret": None, "chance_regret": None,
                "coverage": None, "tasks": 0, "baselines": {}, "coverage_by_cell": {},
                "against_best_rule": None}
    n = len(rows)
    names = [b for b in BASELINES if all(b in r["baselines"] for r in rows)]
    by_cell: dict[str, dict] = {}
    for axis in ("size", "best"):
        for r in rows:
            cell = by_cell.setdefault(f"{axis}:{r['cells'][axis]}", {"tasks": 0, "covered": 0})
            cell["tasks"] += 1
            cell["covered"] += bool(r["in_interval"])
    return {"hit_rate": sum(r["hit"] for r in rows) / n,
            "chance": sum(r["chance"] for r in rows) / n,
            "mean_abs_error": sum(r["abs_error"] for r in rows) / n,
            "chance_abs_error": sum(r["chance_abs_error"] for r in rows) / n,
            # Over the tasks whose scores per weight are known (all but hand-made points).
            "mean_regret": _mean([r["regret"] for r in rows]),
            "chance_regret": _mean([r["chance_regret"] for r in rows]),
            "coverage": sum(r["in_interval"] for r in rows) / n, "tasks": n,
            "baselines": {b: sum(r["baselines"][b] for r in rows) / n for b in names},
            "coverage_by_cell": {k: {**v, "coverage": v["covered"] / v["tasks"]}
                                 for k, v in sorted(by_cell.items())},
            "against_best_rule": against_best_rule(rows),
            "by_regret": regret_comparison(rows)}


MIN_DATASETS = 3  # held-out datasets below which the evaluation cannot judge
BOOTSTRAP = 2000


def regret_comparison(rows: list[dict]) -> dict:
    """The recommender and each point rule (`baselines.POINT_RULES`) on regret at the held-out
    tasks, in metric points, with 90% intervals from a bootstrap that resamples datasets (the
    sizes of one dataset are correlated cells: each dataset counts once), the recommender's
    edge over the best rule (its regret minus the rule's, negative: the recommender loses less)
    with its interval, and the Spearman rank correlation of the recommended against the
    measured best weight across the held-out tasks. The best rule is chosen among the rules
    scored out of sample: the paper's rule of thumb is reported but not chosen where the tasks
    include the paper's own (`in_sample`). `verdict`: "cannot judge" with fewer than
    MIN_DATASETS datasets, else "better" / "worse" where the edge's interval excludes 0, else
    "no better"."""
    import numpy as np
    from scipy import stats

    scored = [r for r in rows if r.get("regret") is not None
              and all(r["rule_regrets"].get(m) is not None for m in POINT_RULES
                      if m in r["rule_regrets"])]
    families = sorted({r["family"] for r in scored})
    methods = ["recommender", *(m for m in POINT_RULES
                                if scored and all(m in r["rule_regrets"] for r in scored))]
    in_sample = ["rule_of_thumb"] if any(r.get("rule_in_sample") for r in scored) else []
    out: dict[str, Any] = {"tasks": len(scored), "datasets": len(families), "methods": {},
                           "spearman": None, "edge": None, "verdict": "cannot judge",
                           "in_sample": in_sample}
    if not scored:
        return out

    def value(r: dict, method: str) -> float:
        return r["regret"] if method == "recommender" else r["rule_regrets"][method]

    def spearman(sample: list[dict]) -> float | None:
        got = [r["recommended"] for r in sample]
        best = [r["best_weight"] for r in sample]
        if len(sample) < 3 or len(set(got)) < 2 or len(set(best)) < 2:
            return None
        return float(stats.spearmanr(got, best).statistic)

    rng = np.random.default_rng(0)
    by_family = {f: [r for r in scored if r["family"] == f] for f in families}
    draws = [[r for f in rng.choice(families, len(families)) for r in by_family[f]]
             for _ in range(BOOTSTRAP)] if len(families) >= 2 else []

    def summary(stat: Any) -> dict[str, Any]:
        point = stat(scored)
        boot = [v for v in (stat(d) for d in draws) if v is not None]
        low, high = (np.percentile(boot, [5, 95]) if boot else (None, None))
        return {"mean": None if point is None else round(point, 3),
                "low90": None if low is None else round(float(low), 3),
                "high90": None if high is None else round(float(high), 3)}

    for m in methods:
        out["methods"][m] = summary(lambda s, m=m: float(np.mean([value(r, m) for r in s])))
    out["spearman"] = summary(spearman)
    rules = [m for m in methods if m != "recommender" and m not in in_sample]
    if rules:
        best = min(rules, key=lambda m: out["methods"][m]["mean"])
        out["edge"] = {"rule": best, **summary(
            lambda s: float(np.mean([value(r, "recommender") - value(r, best) for r in s])))}
        if len(families) >= MIN_DATASETS:
            low, high = out["edge"]["low90"], out["edge"]["high90"]
            out["verdict"] = ("better" if high is not None and high < 0 else
                              "worse" if low is not None and low > 0 else "no better")
    return out


def against_best_rule(rows: list[dict]) -> dict | None:
    """The recommender's point error against the best simple rule's (the one with the smallest
    mean |error| over `rows`), task by task: `edge`, the mean of the per-task differences (the
    rule's |error| minus the recommender's: positive when the recommender is closer), its
    standard error `se` (None with one task), and `verdict`: "better" when the edge reaches
    `clear_at` (CLEAR_GAIN or twice the standard error, whichever is larger), "barely better"
    when it is positive but smaller, "no better" when it is not positive but less than
    `clear_at` below zero, "worse" beyond. None without rules to compare."""
    import statistics

    names = [b for b in BASELINES if rows and all(b in r["baselines"] for r in rows)]
    if not names:
        return None
    n = len(rows)
    means = {b: sum(r["baselines"][b] for r in rows) / n for b in names}
    rule = min(names, key=lambda b: (means[b], BASELINES.index(b)))
    diffs = [r["baselines"][rule] - r["abs_error"] for r in rows]
    edge = sum(diffs) / n
    se = statistics.stdev(diffs) / math.sqrt(n) if n > 1 else None
    clear = max(CLEAR_GAIN, 2 * se if se is not None else 0.0)
    verdict = ("better" if edge >= clear else "barely better" if edge > 0 else
               "no better" if edge > -clear else "worse")
    return {"rule": rule, "rule_error": round(means[rule], 3),
            "recommender_error": round(sum(r["abs_error"] for r in rows) / n, 3),
            "edge": round(edge, 3), "se": None if se is None else round(se, 3),
            "clear_at": round(clear, 3), "verdict": verdict}
