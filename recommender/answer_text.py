"""The answer in words: what the evidence near the size asked tells, and where it comes from.

The answer leads with what decides it: which weights the asked regime's evidence at sizes like
the one asked cannot tell apart from the best, whether the choice matters there and where
clipping saturates the weight (`equivalence`, `equivalence_lead`), then the nearest evidence in
plain words (`lead_notes`). Its notes say where it comes from: each regime's share of it and the
law's prior's (how far it moves when that evidence moves, `evidence_shares`), each other
regime's offset (`regime_offsets`), a size asked outside the asked regime's measured sizes
(`asked_regime_sizes`), the prior's pull on the trend's slope (`slope_note`,
`hierarchy.Law.trend`), and the studies that contribute nothing (`evidence_notes`). Each reads
the evidence, the fitted law or its summary, and fits nothing: `recommend.recommend_from` puts
them together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from weightsearch.recommender.evidence import (
    PRIOR_ENCODER,
    PRIOR_STAGE,
    PRIOR_VARIANT,
    SAME_DATA_DECADES,
    EvidencePoint,
)
from weightsearch.recommender.hierarchy import MODEL_NAMES
from weightsearch.recommender.prior import PRIOR_STUDY
from weightsearch.recommender.regime import Regime
from weightsearch.recommender.shipped import SHIPPED
from weightsearch.studies import schema

SKIPPED_SHOWN = 5  # studies that contribute nothing, named in the notes
NEAR_DECADES = 0.5  # "sizes like yours": within a factor of ~3 of the size asked
NEAREST_SHOWN = 3  # asked-regime points at the nearest size, described first


def evidence_row(p: EvidencePoint, say: float, variance: float, discounted: bool) -> dict:
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


def equivalence(evidence: list[EvidencePoint], groups: list[str | None],
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


def equivalence_lead(equivalence: dict[str, Any], train_size: int) -> list[str]:
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


def asked_regime_sizes(evidence: list[EvidencePoint], groups: list[str | None],
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


def lead_notes(evidence: list[EvidencePoint], groups: list[str | None],
               train_size: int, weight: float) -> list[str]:
    """What decides the answer, in plain words: the asked regime's evidence nearest the size
    asked (its task, size, best weight and how flat its curve is). Which weights are within
    seed noise of the best at sizes like the one asked is said before it (`equivalence_lead`)."""
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
    score x100, as `evaluation.regret` counts them)."""
    means = [v for _, v in p.means]
    if len(means) < 2:
        return ""
    scale = 100.0 if p.maximize and all(abs(v) <= 1.0 for v in means) else 1.0
    what = "score" if p.maximize else "loss"
    unit = " points" if p.maximize else ""
    return f"; best and worst mean {what} {scale * (max(means) - min(means)):.2f}{unit} apart"


def evidence_shares(evidence: list[EvidencePoint], groups: list[str | None],
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
    rows: list[dict[str, Any]] = []
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


def shares_note(shares: list[dict]) -> str:
    def on(r: dict) -> str:
        where = "" if r["source"] == "law prior" else \
            f" ({'the asked regime: ' if r['source'] == 'asked regime' else ''}{r['from']})"
        return f"on {r['name']}{where}"

    first, *rest = shares
    return (f"{first['share']:.0%} of this answer rests {on(first)}"
            + "".join(f", {r['share']:.0%} {on(r)}" for r in rest)
            + "; a share is how far the answer moves when that evidence moves by one weight unit")


def slope_note(summary: dict) -> str:
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


def evidence_notes(evidence: list[EvidencePoint], audience: str = "cli") -> list[str]:
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


def regime_offsets(evidence: list[EvidencePoint], groups: list[str | None],
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


def law_summary(law) -> dict:
    trend = law.trend()
    return {**{k: round(v, 3 if k.endswith("share") else 2) if math.isfinite(v) else None
               for k, v in trend.items()},
            "shapes": {name: round(law.probability(i), 3) for i, name in enumerate(MODEL_NAMES)},
            "task_scatter_sd": round(math.sqrt(law.tau2), 2),
            "outlier_share": round(law.outlier_share, 3)}
