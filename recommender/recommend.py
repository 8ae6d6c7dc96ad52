"""Recommend a central weight for a new task from its training-set size.

`recommend` reads the evidence (`weightsearch.recommender.evidence`: one point per finished
central task study, from the built-in prior and the study database) and `recommend_from` answers
from it: it checks the request and chooses the regime to answer for
(`weightsearch.recommender.asking`), fits the law, and words the answer
(`weightsearch.recommender.answer_text`). `weightsearch.recommender.evaluation` scores the
answers task by task (`recommend --evaluate`).

`weightsearch.recommender.hierarchy` combines the tasks as noisy observations of a law in log
training size: a trend (a line, a sharp transition, or the paper's rule), a smooth deviation
whose size and length come from the data, a task scatter with an outlier component, and a shared
offset per other regime (prior sd REGIME_SD, estimated from the tasks both regimes measured and
reported in the notes); its docstring gives the model and its priors, docs/recommender.md what
was tried and rejected. When the task type is given and has evidence, points of other types get
TYPE_VAR added. The law does not depend on the size asked: the last few fits are kept
(`_law_for`). `start_weights`, `nearest` and `chance_of_top2` place an answer on a grid.
Deterministic: no random state outside a fixed-seed draw per task.
"""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass, field

from weightsearch.core.errors import ConfigError
from weightsearch.recommender.answer_text import (
    asked_regime_sizes,
    equivalence,
    equivalence_lead,
    evidence_notes,
    evidence_row,
    evidence_shares,
    law_summary,
    lead_notes,
    regime_offsets,
    shares_note,
    slope_note,
)
from weightsearch.recommender.asking import (
    check_regime,
    check_request,
    choose_regime,
    how_to_ask,
    normalize_clipping,
    of_its_quantity,
    refuse_a_misspelling,
    unmatched_encoder,
)
from weightsearch.recommender.evidence import EvidencePoint, load_evidence
from weightsearch.recommender.hierarchy import REGIME_SD, fit_law
from weightsearch.studies import schema

TYPE_VAR = 1.0  # extra variance of a point of another task type, when the type is asked for


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
    # hardly matters at sizes like the one asked (`answer_text.lead_notes`).
    summary: list[str] = field(default_factory=list)
    # What the evidence at sizes like the one asked can and cannot tell
    # (`answer_text.equivalence`): the weights no measurement there separates from its best
    # ([low, high], None where nothing near was measured with seed noise known or the
    # measurements disagree), whether the choice matters there (a weight measured worse than
    # the best by more than seed noise), and the weight from which clipping left every central
    # update the same (None: not seen).
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


_LAWS: list[tuple[tuple, object]] = []  # the last few fits, by what they were fitted to
_LAWS_KEPT = 8
_LAWS_LOCK = threading.Lock()  # the service answers from several worker threads
_FIT_LOCK = threading.Lock()


def _cached_law(key: tuple):
    with _LAWS_LOCK:
        for k, law in _LAWS:
            if k == key:
                return law
    return None


def _law_for(evidence: list[EvidencePoint], variances: list[float],
             groups: list[str | None]):
    """The fitted law does not depend on the size asked about: the service, which keeps one
    evidence list until the database changes, fits it once per regime and task type. Fits run
    one at a time, so requests that arrive during a fit wait for it instead of repeating it.
    Fits are kept by everything a fit reads, not by the list: each request filters the
    evidence into a list of its own."""
    key = (tuple(variances), tuple(groups),
           tuple((p.train_size, p.location, p.at_least, p.at_most, p.family)
                 for p in evidence))
    law = _cached_law(key)
    if law is not None:
        return law
    with _FIT_LOCK:
        law = _cached_law(key)
        if law is None:
            law = fit_law([math.log10(p.train_size) for p in evidence],
                          [p.location for p in evidence], variances,
                          tasks=[p.family for p in evidence], groups=groups,
                          bounds=[(p.at_least, p.at_most) for p in evidence])
            with _LAWS_LOCK:
                _LAWS.insert(0, (key, law))
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
    how_to_ask(audience)  # a known audience
    train_size, task_type = check_request(train_size, task_type)
    encoder, stage = check_regime(encoder, stage, variant, clipping)
    clipping = normalize_clipping(clipping)
    if not evidence:
        raise ConfigError("no evidence to recommend from (no prior and no finished study)")
    regime, notes = choose_regime(evidence, encoder, stage, variant, encoder_size, clipping,
                                  audience)
    evidence = of_its_quantity(evidence, regime.clipping, notes, audience)
    unmatched = unmatched_encoder(evidence, encoder)
    if unmatched and not unmatched["known_encoder"] and typed_by_user and encoder is not None:
        refuse_a_misspelling(encoder, unmatched["encoders_with_evidence"], audience)
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
    notes += evidence_notes(evidence, audience)
    law = _law_for(evidence, variances, groups)
    offsets = regime_offsets(evidence, groups, why, law)
    notes += [f"discounted: {o['name']} (differs in {', '.join(o['differs_in'])}) shares one "
              f"offset from the asked regime, estimated {o['offset']:+.1f} +- {o['sd']:.1f} "
              f"weight units (prior sd {REGIME_SD:g}) from the tasks both regimes measured"
              for o in offsets]
    summary = law_summary(law)
    notes.append(f"trend: {summary['slope']:+.1f} +- {summary['slope_sd']:.1f} weight units "
                 f"per decade of training size; level at 10,000 examples "
                 f"{summary['level']:.1f} +- {summary['level_sd']:.1f}; probability of each "
                 "shape of the law: " + ", ".join(f"{name} {p:.2f}"
                                                   for name, p in summary["shapes"].items()))
    notes.append(slope_note(summary))
    answer = law.predict(math.log10(train_size))
    sizes, size_notes = asked_regime_sizes(evidence, groups, train_size)
    shares = evidence_shares(evidence, groups, answer.influence, regime)
    notes += [*size_notes, shares_note(shares)]
    clip = lambda v: round(min(schema.WEIGHT_HIGH, max(schema.WEIGHT_LOW, v)), 1)  # noqa: E731
    say = [abs(float(i)) for i in answer.influence]
    total = sum(say) or 1.0
    n_eff = total * total / (sum(s * s for s in say) or 1.0)
    sources = {p.source for p in evidence}
    rows = sorted(zip(evidence, say, variances, groups, strict=True), key=lambda r: -r[1])
    near = equivalence(evidence, groups, train_size)
    low, high = clip(answer.low), clip(answer.high)
    if near["equivalent"] is not None:  # never exclude what the evidence cannot tell
        low = min(low, near["equivalent"][0])  # from the best
        high = max(high, near["equivalent"][1])
    lead = [*equivalence_lead(near, train_size),
            *lead_notes(evidence, groups, train_size, clip(answer.median))]
    notes = [*lead, *notes]
    return Recommendation(
        central_weight=clip(answer.median), interval=(low, high),
        train_size=train_size, task_type=task_type,
        source="both" if len(sources) > 1 else sources.pop(), regime=regime.as_dict(),
        notes=[*notes, f"task scatter around the law: sd {math.sqrt(law.tau2):.2f}"],
        evidence=[evidence_row(p, s / total, v, g is not None) for p, s, v, g in rows],
        effective_points=round(n_eff, 2), unmatched_encoder=unmatched,
        regime_offsets=[{k: v for k, v in o.items() if k != "name"} for o in offsets],
        law=summary, evidence_shares=shares, asked_regime_sizes=sizes, summary=lead,
        equivalent=near["equivalent"], choice_matters=near["choice_matters"],
        saturates_at=near["saturates_at"],
        law_interval=(clip(answer.low), clip(answer.high)),
    )


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
