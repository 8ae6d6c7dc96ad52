"""Is the weight search worth it? A study that searches the loss-weighting or sampling scheme
(`weighting.scheme`, `sampling.scheme`) compares methods per central task on one footing.

A *method* is a search point without its central weight: `weighting.scheme=dwa
sampling.scheme=sqrt`, or SIWLM, whose central weight the study searches. Per central task and
method, over seeds (COMPLETE trials):

- `mean` and its 95% Student-t interval over seeds (`low`, `high`);
- `diff`: the seed-paired difference from the best method (the same seed's run of each), mean and
  95% t-interval over the seeds both finished (`diff_low`, `diff_high`); no interval with one
  seed;
- `trial_epochs`: the compute that produced the method's score, in multi-task epochs summed over
  its trials, and `per_seed` the same divided by its seeds. A weight search pays for every weight
  it tried; a dynamic method or a fixed rule for one run per seed. `wall_s`: the trials' own wall
  time summed, where every trial recorded it.

A searched central weight gives two rows. `best w` is the weight with the best mean over all
seeds, scored on those same seeds: its choice and its score use the same runs, so it is an
optimistic score (the winner's curse). `search` is the compute-fair one: for each seed, the weight
with the best mean over the *other* seeds, scored on that seed (leave one seed out; needs two or
more seeds), i.e. what the weight search delivers on a run whose score did not choose it; a
seed whose run at the chosen weight did not finish has no such score. The best method (the
reference of `diff`) is the best of the fair rows (`search` and the methods without a search,
those with two or more seeds first), so that an in-sample choice never sets the bar.

What the intervals do not cover: they are over seeds of this study's data subsample and dev
set; the `search` scores of different seeds share the runs that chose their weights, so their
interval is somewhat narrow; and the reference is the best of several methods, so a method
"clearly behind" it is judged against a winner (an optimistic bar), not a fixed one. Only
COMPLETE trials count, in score and in compute (a study that compares methods refuses early
stopping, so every trial trains its full epochs).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from weightsearch.studies.central import Cell, CentralStudy
from weightsearch.studies.schema import T_CENTRAL_WEIGHT_PATH as CENTRAL
from weightsearch.studies.schema import T_SCHEME_PATHS as SCHEME_PATHS
from weightsearch.studies.verdict import mean_interval

IN_SAMPLE, SEARCH = "best w", "search"


def is_methods_study(s: CentralStudy) -> bool:
    """Whether the study searches a loss-weighting or sampling scheme."""
    return any(p in c.point for c in s.cells for p in SCHEME_PATHS)


@dataclass
class _Method:
    label: str
    cells: list[Cell]  # its COMPLETE trials with a finite value

    @property
    def searched(self) -> bool:
        return any(c.weight is not None for c in self.cells)


def method_label(point: dict) -> str:
    """A point without its central weight, as `path=value` words."""
    words = [f"{k}={'+'.join(map(str, v)) if isinstance(v, list) else v}"
             for k, v in point.items() if k != CENTRAL]
    return " ".join(words) or "(template)"


def _methods(s: CentralStudy) -> list[_Method]:
    found: dict[str, _Method] = {}
    for c in s.cells:
        if c.state == "complete" and c.value is not None and math.isfinite(c.value) \
                and c.seed is not None:
            label = method_label(c.point)
            found.setdefault(label, _Method(label, [])).cells.append(c)
    return list(found.values())


def _per_seed(cells: Sequence[Cell]) -> dict[int, float]:
    """One score per seed (the mean, if a seed finished twice)."""
    out: dict[int, list[float]] = {}
    for c in cells:
        assert c.seed is not None and c.value is not None  # a method's cells have both
        out.setdefault(c.seed, []).append(c.value)
    return {seed: statistics.fmean(v) for seed, v in out.items()}


def _by_weight(cells: Sequence[Cell]) -> dict[float, dict[int, float]]:
    out: dict[float, list[Cell]] = {}
    for c in cells:
        if c.weight is not None:
            out.setdefault(c.weight, []).append(c)
    return {w: _per_seed(v) for w, v in out.items()}


def _best_weight(scores: dict[float, dict[int, float]], sign: float,
                 skip: int | None = None) -> float | None:
    """The weight with the best mean over its seeds (`skip` left out); ties: the smaller."""
    means = {w: statistics.fmean(v for s, v in by.items() if s != skip)
             for w, by in scores.items() if any(s != skip for s in by)}
    return min(means, key=lambda w: (-sign * means[w], w)) if means else None


def _held_out(scores: dict[float, dict[int, float]], sign: float) -> tuple[dict[int, float],
                                                                             dict[int, float]]:
    """Per seed, the score at the weight the other seeds chose, and that weight; a seed whose
    run at that weight did not finish has no score here."""
    out, chosen = {}, {}
    for seed in sorted({s for by in scores.values() for s in by}):
        weight = _best_weight(scores, sign, seed)
        if weight is not None and seed in scores[weight]:
            out[seed], chosen[seed] = scores[weight][seed], weight
    return out, chosen


def _compute(cells: Sequence[Cell], default_epochs: int | None) -> tuple[int | None,
                                                                          float | None]:
    epochs = [c.epochs if c.epochs is not None else default_epochs for c in cells]
    walls = [c.wall_s for c in cells if c.wall_s is not None and math.isfinite(c.wall_s)]
    known = [e for e in epochs if e is not None]
    total = sum(known) if len(known) == len(epochs) else None
    return total, (sum(walls) if len(walls) == len(cells) else None)


def method_rows(s: CentralStudy) -> list[dict]:
    """The compute-fair comparison of one central task's methods (module docstring)."""
    sign = 1.0 if s.maximize else -1.0
    rows: list[tuple[dict, dict[int, float]]] = []
    for m in _methods(s):
        trial_epochs, wall_s = _compute(m.cells, s.epochs)
        seeds = {c.seed for c in m.cells}
        base = {"central_task": s.central_task, "method": m.label,
                "trial_epochs": trial_epochs,
                "per_seed": None if trial_epochs is None else trial_epochs / len(seeds),
                "wall_s": wall_s}
        if not m.searched:
            rows.append(({**base, "choice": None, "weights": None}, _per_seed(m.cells)))
            continue
        scores = _by_weight(m.cells)
        best = _best_weight(scores, sign)
        assert best is not None  # a searched method has cells with a weight
        rows.append(({**base, "choice": f"{IN_SAMPLE}={best:g} (in-sample)",
                      "weights": len(scores)}, scores[best]))
        fair, chosen = _held_out(scores, sign)
        if fair:
            picks = ",".join(f"{chosen[k]:g}" for k in sorted(chosen))
            rows.append(({**base, "choice": f"{SEARCH} (w per seed: {picks})",
                          "weights": len(scores)}, fair))
    if not rows:
        return []
    # The reference is a fair row (never an in-sample choice), with two seeds or more if any.
    candidates = [(r, v) for r, v in rows if not (r["choice"] or "").startswith(IN_SAMPLE)]
    candidates = [(r, v) for r, v in candidates if len(v) >= 2] or candidates
    ref, ref_scores = max(candidates, key=lambda rv: sign * statistics.fmean(rv[1].values())) \
        if candidates else (None, {})
    out = []
    for row, seed_scores in rows:
        values = [seed_scores[k] for k in sorted(seed_scores)]
        low, high = mean_interval(values) or (None, None)
        common = sorted(set(seed_scores) & set(ref_scores))
        diffs = [seed_scores[k] - ref_scores[k] for k in common]
        d_low, d_high = (mean_interval(diffs) if row is not ref else None) or (None, None)
        out.append({"central_task": row["central_task"], "method": row["method"],
                    "choice": row["choice"], "primary_metric": s.primary_metric,
                    "mean": statistics.fmean(values), "low": low, "high": high,
                    "seeds": len(values),
                    "diff": statistics.fmean(diffs) if diffs and row is not ref else None,
                    "diff_low": d_low, "diff_high": d_high,
                    "paired_seeds": len(common) if row is not ref else None,
                    "best": row is ref, "weights": row["weights"],
                    "trial_epochs": row["trial_epochs"], "per_seed": row["per_seed"],
                    "wall_s": row["wall_s"]})
    return sorted(out, key=lambda r: -sign * r["mean"])


def _name(row: dict) -> str:
    return row["method"] + (" (search)" if (row["choice"] or "").startswith(SEARCH) else "")


def conclusion(rows: list[dict], maximize: bool) -> str:
    """One plain sentence per central task: which methods the seeds cannot tell from the best."""
    if not rows:
        return ""
    ref = next((r for r in rows if r["best"]), None)
    if ref is None:
        return (f"{rows[0]['central_task']}: no fair comparison yet: the weight search's own "
                "choice is scored on other seeds, so it needs two or more")
    task, metric = ref["central_task"], ref["primary_metric"] or "score"
    behind, tied, unknown = [], [], []
    for r in rows:
        if r["best"] or (r["choice"] or "").startswith(IN_SAMPLE):
            continue
        if r["diff_low"] is None:
            unknown.append(_name(r))
        elif (r["diff_high"] < 0) if maximize else (r["diff_low"] > 0):  # worse at 95%
            behind.append(_name(r))
        else:
            tied.append(_name(r))
    parts = [f"{task}: {_name(ref)} has the best {metric} ({ref['mean']:.4f} over {ref['seeds']} "
             f"seed{'s' * (ref['seeds'] != 1)})"]
    if behind:
        parts.append(f"clearly behind it (95% seed-paired interval): {', '.join(behind)}")
    if tied:
        parts.append(f"not separated from it by these seeds: {', '.join(tied)}")
    if unknown:
        parts.append(f"not comparable (fewer than two shared seeds): {', '.join(unknown)}")
    return "; ".join(parts)


def comparison(s: CentralStudy, rows: list[dict]) -> dict:
    """The comparison as `inspect --format json` and the service give it."""
    return {"methods": rows, "methods_conclusion": conclusion(rows, s.maximize)}


def study_epochs_note(s: CentralStudy) -> str:
    """How compute is counted, for the table's heading."""
    source = "each trial's recorded epochs" if any(c.epochs is not None for c in s.cells) \
        else f"the template's {s.epochs} epochs per trial" if s.epochs else "unknown"
    return f"trial_epochs: multi-task epochs summed over the method's trials ({source})"
