"""What each page of the site shows, read from the same functions as the JSON routes (so a page
and its route give the same numbers) and drawn as SVG: the studies, one study's curves, the
recommendation, and the best weights across tasks against their training sizes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from weightsearch.service.ui.svg import Chart, bar_chart, weight_band

CELLS_PER_PAGE = 200  # a study's cell table, per central task
MAX_SEED_POINTS = 2_000  # per chart; past it the chart shows each weight's mean and range only
LAW_SIZES = tuple(10 ** (e / 2) for e in range(4, 13))  # 100 to a million, half decades


def _rounded(value: Any, digits: int = 4) -> Any:
    return round(value, digits) if isinstance(value, float) and math.isfinite(value) else value


def study_rows(overview: Sequence[dict], studies: Sequence[Any]) -> list[dict]:
    """One row per study: its counts, central tasks and regime (encoders and stages seen).
    `left`: the cells no trial has finished or started, pending ones and, for a launched
    grid, those not started yet (running ones have their own column)."""
    from weightsearch.studies.schema import split_study_name

    regimes: dict[str, set[str]] = {}
    stored: dict[str, dict[str, str]] = {}  # study -> central task -> its stored name
    for s in studies:  # by the stored name, as the overview's rows are
        base = split_study_name(s.name)[0]
        regimes.setdefault(base, set()).add(
            f"{s.encoder or 'encoder not recorded'}, {s.stage or 'multitask'}")
        stored.setdefault(base, {})[s.central_task] = s.name
    return [{**row, "regime": "; ".join(sorted(regimes.get(row["study"], ()))),
             "left": row["pending"] + row.get("not_started", 0),
             # a link opens what is stored, whatever another tool named its central task
             "links": {task: stored.get(row["study"], {}).get(task, f"{row['study']}/{task}")
                       for task in row["central_tasks"]}}
            for row in overview]


def seed_points(cells: Sequence[dict]) -> list[tuple[float, Any, float, int]]:
    """(weight, seed, score, trials) per weight and seed, as the curve counts them
    (`weightsearch.studies.central.seed_scores`): the complete trials of one seed at one weight
    (other searched settings, a cell trained twice) averaged into that seed's score; a trial
    without a recorded seed stands alone. So every point lies within its weight's range."""
    groups: dict[tuple, list[float]] = {}
    for i, c in enumerate(cells):
        value, weight = c.get("value"), c.get("central_weight")
        if c.get("state") == "complete" and isinstance(value, int | float) \
                and math.isfinite(value) and weight is not None:
            key = (weight, c["seed"]) if c.get("seed") is not None else (weight, None, i)
            groups.setdefault(key, []).append(float(value))
    return [(key[0], key[1], sum(v) / len(v), len(v)) for key, v in groups.items()]


def _point_tip(weight: float, seed: Any, score: float, trials: int) -> str:
    of = f" (mean of {trials} trials)" if trials > 1 else ""
    return f"weight {weight:g}, seed {seed if seed is not None else 'not recorded'}: " \
        f"{score:.4g}{of}"


def curve_chart(task: dict, cells: Sequence[dict]) -> tuple[str, int, int]:
    """A central task's score against its weight: each seed's score (up to MAX_SEED_POINTS),
    each weight's mean and seed range, the constant prediction's level, and the weights that
    trained the same updates shaded as one treatment. Returns the SVG, the points drawn and the
    seed scores there are."""
    curve = task["curve"]
    scored = seed_points(cells)
    ys = [p[2] for p in scored] + [w["low"] for w in curve] + [w["high"] for w in curve]
    if task.get("majority") is not None:
        ys.append(task["majority"])
    weights = [w["weight"] for w in curve] or [p[0] for p in scored] or [1.0]
    metric = task.get("primary_metric") or "score"
    chart = Chart((min(weights), max(weights)), (min(ys, default=0.0), max(ys, default=1.0)),
                  "central weight", metric, f"{task['name']}: {metric} against the central "
                  "weight")
    for arm in task.get("same_updates") or []:
        chart.x_span(min(arm["weights"]), max(arm["weights"]), "same-updates", arm["text"])
    if task.get("majority") is not None:
        chart.hline(task["majority"], "majority", f"constant prediction {task['majority']:.4g}")
    for w in curve:
        chart.interval(w["weight"], w["low"], w["high"], "seed-range",
                       f"weight {w['weight']:g}: mean {w['mean']:.4g}, seeds {w['n']}, "
                       f"range {w['low']:.4g} to {w['high']:.4g}")
    chart.line([(w["weight"], w["mean"]) for w in curve], "mean")
    shown = scored if len(scored) <= MAX_SEED_POINTS else []
    chart.points([(p[0], p[2]) for p in shown], "seed", [_point_tip(*p) for p in shown])
    return chart.render(), len(shown), len(scored)


def study_page(detail: dict, page: int) -> dict:
    """The template's view of GET /studies/{name}'s answer: per central task its chart, its
    verdict, its clipping table and one page of its cells."""
    tasks = []
    for task in detail["central_tasks"]:
        cells = task["cells"]
        pages = max(1, math.ceil(len(cells) / CELLS_PER_PAGE))
        shown_page = min(max(page, 1), pages)
        svg, drawn, scores = curve_chart(task, cells)
        first = (shown_page - 1) * CELLS_PER_PAGE
        tasks.append({**task, "chart": svg, "points_drawn": drawn,
                      "points_hidden": scores - drawn,
                      "page": shown_page, "pages": pages,
                      "cell_page": [{k: _rounded(v) for k, v in c.items()}
                                    for c in cells[first:first + CELLS_PER_PAGE]],
                      "clipping": [{k: _rounded(v) for k, v in row.items()}
                                   for row in task.get("clipping") or []]})
    return {"study": detail["study"], "tasks": tasks}


def recommend_page(answer: dict) -> dict:
    """The recommendation as GET /recommend gives it, with its evidence shares as bars."""
    shares = [(f"{row['name']} ({row['source']})", row["share"])
              for row in answer.get("evidence_shares") or []]
    return {"answer": answer,
            "band_chart": weight_band(answer["central_weight"], answer["interval"],
                                      answer.get("law_interval"), answer.get("equivalent")),
            "shares_chart": bar_chart(shares, "share of the answer by evidence") if shares
            else ""}


def law_band(answers: Sequence[dict]) -> dict:
    """The recommender's law across sizes: at each size its centre and its 80% interval."""
    return {"sizes": [a["train_size"] for a in answers],
            "centre": [a["central_weight"] for a in answers],
            "low": [a["law_interval"][0] for a in answers if a.get("law_interval")],
            "high": [a["law_interval"][1] for a in answers if a.get("law_interval")]}


def across_chart(evidence: Sequence[dict], band: dict) -> tuple[str, list[dict]]:
    """Every task's located best weight against its training size (log scale), one class per
    regime, with the law's centre and 80% band for the asked regime."""
    located = [e for e in evidence if _finite(e.get("train_size")) and e["train_size"] > 0
               and _finite(e.get("location"))]  # a log axis: positive sizes only
    sizes = [e["train_size"] for e in located] + list(band["sizes"])
    ys = [e["location"] for e in located] + list(band["low"]) + list(band["high"])
    chart = Chart((min(sizes), max(sizes)), (min(ys, default=1.0), max(ys, default=15.0)),
                  "training examples of the central task", "best central weight",
                  "best central weight against training size", log_x=True)
    if len(band["low"]) == len(band["sizes"]):
        chart.band(band["sizes"], band["low"], band["high"], "law-band")
    chart.line(list(zip(band["sizes"], band["centre"], strict=True)), "law")
    regimes = sorted({_regime(e) for e in located})
    legend = []
    for i, regime in enumerate(regimes):
        mine = [e for e in located if _regime(e) == regime]
        css = f"regime regime-{i % 6}"
        chart.points([(e["train_size"], e["location"]) for e in mine], css,
                     [f"{e['task']} ({e.get('study') or e['source']}): {e['train_size']:,} "
                      f"examples, best weight located at {e['location']:g}"
                      + (f" +- {e['sd']:g}" if _finite(e.get("sd")) else "") for e in mine])
        legend.append({"regime": regime, "css": css, "count": len(mine)})
    return chart.render(), legend


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _regime(point: dict) -> str:
    return (f"{point.get('encoder') or 'unknown'}, {point.get('stage') or 'unknown'}, "
            f"clipping {point.get('clipping') or 'unknown'}")
