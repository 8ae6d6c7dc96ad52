"""The evidence a recommendation rests on: one point per finished central task study.

Points come from the built-in prior (the SIWLM paper's Table 2, `weightsearch.recommender.prior`,
and this project's shipped studies, `weightsearch.recommender.shipped`) and from the study
database. Several studies of one task all count (the law gives them one shared task effect), and
so do the sizes of one dataset (a ladder: central tasks whose studies record the same `dataset`);
a prior point measured again by a study on the same data and regime (same dataset, a training
size within ~12%) is replaced by it. A study that contributes nothing (one central weight, no
finished trial, no recorded size) is named in the answer's notes (`Evidence.skipped`).

Every point uses all of its task's trials: `weightsearch.recommender.task_curve` turns the scores
per weight and seed into where the best weight lies and how precisely (seed noise from replicates
with Student-t tails, a floor for single runs; a best at an end of the grid is censored; a flat or
tied curve gets almost no say); its docstring gives the model.

A point carries its regime (`weightsearch.recommender.regime`): the encoder, the encoder's size,
the stage its scores come from (multitask | finetuned), the weighting variant and the clipping.
The prior is BERT-base (768x12), fine-tuned, variant reference, single runs; studies without
these attributes count as encoder "unknown", stage multitask. A weight searched as the central
task's sampling rate (a rate- clipping) is another quantity than a loss weight: neither is the
other's evidence (`same_quantity`). Reading the evidence is kept apart from answering from it
(`recommend.recommend_from`): the service keeps one list, refreshed in the background
(`service.database`), and answers every request from it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from weightsearch.recommender import prior
from weightsearch.recommender.prior import PRIOR, PRIOR_STUDY
from weightsearch.recommender.regime import UNKNOWN, Regime, encoder_size
from weightsearch.recommender.shipped import SHIPPED
from weightsearch.recommender.task_curve import locate_best, saturated_top
from weightsearch.studies import schema
from weightsearch.studies.verdict import by_seed, judge

SAME_DATA_DECADES = 0.05  # |log10 size ratio| below which two points are the same data (~12%)
PRIOR_ENCODER, PRIOR_STAGE, PRIOR_VARIANT = prior.ENCODER, prior.STAGE, prior.VARIANT
UNKNOWN_ENCODER = UNKNOWN


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
    # but never what sets the regime answered by default (`asking.choose_regime`).
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


def point_from_scores(task, study, size, task_type, source, values, maximize, encoder, stage,
                      variant, size_of_encoder: str | None = None, paired: bool = False,
                      dataset: str | None = None, clipping: str | None = None,
                      imported: bool = False,
                      plateau_from: float | None = None) -> EvidencePoint | None:
    """A task's point from its scores per weight (`values`: weight -> scores, aligned by seed
    when `paired`); None where they locate no best weight (`task_curve.locate_best`)."""
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
    points = [point_from_scores(t.task, PRIOR_STUDY, t.train_size, t.task_type, "prior",
                                {w: [v] for w, v in t.scores.items()}, True, PRIOR_ENCODER,
                                PRIOR_STAGE, PRIOR_VARIANT, clipping=prior.CLIPPING)
              for t in PRIOR]
    return [p for p in points if p is not None]  # every row of the table has two weights


@functools.cache
def _shipped_points() -> tuple[EvidencePoint, ...]:
    out = []
    for shipped in SHIPPED:
        for task, rows in shipped.tasks().items():
            head = rows[0]
            values, paired = by_seed([(r.weight, r.seed, r.metric) for r in rows])
            point = point_from_scores(
                task, shipped.study, head.train_size, head.task_type, "prior", values, True,
                head.regime.get("encoder"), head.regime.get("stage"), head.regime.get("variant"),
                paired=paired, dataset=head.dataset, clipping=head.regime.get("clipping"),
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
    """Points from `weightsearch.studies.central.CentralStudy` objects: those with a known training
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
        point = None if why else point_from_scores(
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
