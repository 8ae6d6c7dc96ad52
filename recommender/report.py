"""Text and plot output of `weightsearch recommend` (kept apart so the recommender stays pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from weightsearch.recommender.answer_text import NEAR_DECADES
from weightsearch.recommender.evaluation import CLEAR_GAIN
from weightsearch.recommender.evidence import EvidencePoint
from weightsearch.recommender.prior import PRIOR_STUDY
from weightsearch.recommender.recommend import Recommendation, recommend_from

SOURCE_WORDS = {
    "prior": "built-in only (the SIWLM paper's Table 2 and this project's shipped studies)",
    "studies": "your studies only",
    "both": "your studies and the built-in evidence (the SIWLM paper's Table 2 and this "
            "project's shipped studies)",
}
TABLE_KEY = ("key: best measured = the grid weight with the best mean score; best at = where "
             "all the task's trials put its best weight (>=9: at least 9, the curve still "
             "rising at the grid's top; <=2: at most 2), +- sd; influence = the task's share "
             "of the answer (all tasks sum to 1); (discounted) = measured in another regime "
             "than the one answered for")


# The answer's lines that come before its point: what the evidence can tell at this size.
LEAD_PREFIXES = ("equivalent:", "saturates at:")


def _source_words(rec: Recommendation) -> str:
    """Where the evidence came from; "your studies" only where a launched study is among it."""
    words = SOURCE_WORDS.get(rec.source, rec.source)
    kinds = {bool(e.get("imported")) for e in rec.evidence if e.get("source") == "studies"}
    if kinds == {True}:  # every study in the storage was imported (a published table)
        words = words.replace("your studies", "studies imported into the storage")
    return words


def recommendation_text(rec: Recommendation, shown: int = 8) -> str:
    """The answer first: the weights the evidence at this size cannot tell apart (and whether
    the choice matters), then the point and its range, what decides it (the nearest evidence in
    the asked regime), the notes and the evidence table."""
    lo, hi = rec.interval
    first = [n for n in rec.summary if n.startswith(LEAD_PREFIXES)]
    lines = [
        *first,
        f"recommended central weight: {rec.central_weight:g}  (plausible range {lo:g}-{hi:g}, "
        "never narrower than the equivalent weights) "
        f"for {rec.train_size:,} training examples"
        + (f", task type {rec.task_type}" if rec.task_type else ""),
        *(n for n in rec.summary if n not in first),
        f"evidence: {_source_words(rec)}; together as informative as "
        f"about {rec.effective_points:.1f} tasks counted equally",
        f"method: {rec.method}",
        *(n for n in rec.notes if n not in rec.summary),
        "",
    ]
    table = rec.evidence[:shown]
    regimes = [_regime_cell(e) for e in table]
    width = max([12, *(len(str(e["task"])) for e in table)])
    wide = max([46, *map(len, regimes)])
    lines.append(f"{'task':<{width}} {'train size':>10} {'best measured':>13} {'best at':>7} "
                 f"{'+- sd':>5} {'seeds':>5} {'influence':>9}  {'regime':<{wide}} study")
    for e, regime in zip(table, regimes, strict=True):
        best_at = (f">={e['at_least']:g}" if e.get("at_least") is not None else
                   f"<={e['at_most']:g}" if e.get("at_most") is not None else
                   f"{e['location']:.2f}")
        lines.append(f"{e['task']:<{width}} {e['train_size']:>10} {e['best_weight']:>13g} "
                     f"{best_at:>7} {e['sd']:>5.1f} {e['n_seeds']:>5} {e['say']:>9.3f}"
                     f"  {regime:<{wide}} {e['study']}")
    if len(rec.evidence) > shown:
        lines.append(f"... {len(rec.evidence) - shown} more tasks with less influence "
                     "(--format json lists them all)")
    lines.append(TABLE_KEY)
    return "\n".join(lines)


def _regime_cell(e: dict) -> str:
    return f"{e['encoder']} {e.get('encoder_size', '')}/{e['stage']}" + \
        (f"/{e['variant']}" if e.get("variant") else "") + \
        (f"/{e['clipping']}" if e.get("clipping", "unknown") != "unknown" else "") + \
        (" (discounted)" if e["discounted"] else "")


def evaluation_text(rows: list[dict], rate: float | None, over: str) -> str:
    from weightsearch.recommender.evaluation import evaluation_summary

    if not rows:
        return "nothing to evaluate: no finished central task"
    summary = evaluation_summary(rows)
    head = (f"{'task':<12} {'train size':>10} {'recommended':>11} {'grid':>5} {'best':>5} "
            f"{'top-2':>9} {'chance':>6}  hit  in 80%  {'regret':>6}")
    where = "the study database's" if over == "studies" else "the built-in prior's"
    lines = [f"leave-one-task-out over {where} central tasks:", head]
    for r in rows:
        top = ",".join(f"{w:g}" for w in r["top2"])
        lines.append(f"{r['task']:<12} {r['train_size']:>10} {r['recommended']:>11g} "
                     f"{r['recommended_grid']:>5g} {r['best_weight']:>5g} {top:>9} "
                     f"{r['chance']:>6.2f}  {'yes' if r['hit'] else 'no ':<3}  "
                     f"{'yes' if r['in_interval'] else 'no ':<5}  {_number(r.get('regret')):>6}")
    lines.append(f"hit rate (grid weight nearest the recommendation among the task's top 2): "
                 f"{sum(r['hit'] for r in rows)}/{len(rows)} = {rate:.2f}; chance level (a random "
                 f"weight of each task's own grid, averaged): {summary['chance']:.2f}")
    lines.append(f"point error (mean |recommended - best weight|): "
                 f"{summary['mean_abs_error']:.2f} weight units; chance (a random weight of each "
                 f"task's own grid): {summary['chance_abs_error']:.2f}")
    if summary["mean_regret"] is not None:
        scored = [r for r in rows if r.get("regret") is not None]
        worst = max(scored, key=lambda r: r["regret"])
        lines.append(f"regret (the task's best measured mean score minus its mean score at the "
                     f"grid weight nearest the recommendation, in metric points; scores on a 0-1 "
                     f"scale x100): mean {summary['mean_regret']:.2f} over {len(scored)} tasks, "
                     f"largest {worst['regret']:.2f} ({worst['task']}); chance (a random weight "
                     f"of each task's own grid): {summary['chance_regret']:.2f}")
        lines.append(f"in words: taking the recommended weight cost these tasks "
                     f"{summary['mean_regret']:.2f} points of their metric on average (accuracy "
                     f"points for most) against the best weight their own trials found; a "
                     f"weight drawn at random from the grid cost about "
                     f"{summary['chance_regret']:.2f}")
    lines.append(f"80% interval holds the task's best weight: "
                 f"{sum(r['in_interval'] for r in rows)}/{len(rows)} = {summary['coverage']:.2f}")
    cells = "; ".join(f"{name.replace(':', ' ')} {c['covered']}/{c['tasks']}"
                      for name, c in summary["coverage_by_cell"].items())
    lines.append(f"  by cell (size inside/outside the other tasks' sizes; best at an end "
                 f"(<= 3 or >= 13) or in the middle): {cells}")
    lines.append(f"mean |error| against the simple rules ({len(rows)} tasks): recommender "
                 f"{summary['mean_abs_error']:.2f}; " + "; ".join(
                     f"{BASELINE_LABELS[b]} {v:.2f}" for b, v in summary["baselines"].items()))
    if summary.get("against_best_rule"):
        lines.append(against_rule_text(summary["against_best_rule"]))
    lines.extend(regret_comparison_text(summary["by_regret"]))
    return "\n".join(lines)


def regret_comparison_text(c: dict) -> list[str]:
    """The regret comparison (`regret_comparison`) in plain words: what each method loses at
    the held-out tasks, the recommender's edge over the best rule scored out of sample, and how
    well its weights rank the tasks' best ones."""
    if not c["methods"]:
        return []

    def span(s: dict) -> str:
        if s["low90"] is None:
            return f"{s['mean']:.2f}"
        return f"{s['mean']:.2f} [{s['low90']:.2f}, {s['high90']:.2f}]"

    lines = [f"regret at the held-out tasks, metric points lost against each task's best measured "
             f"weight (mean [90% interval, resampling the {c['datasets']} datasets: the sizes of "
             f"one dataset count once], {c['tasks']} tasks): " + "; ".join(
                 f"{'recommender' if m == 'recommender' else BASELINE_LABELS.get(m, m)} "
                 f"{span(s)}" + (" (in sample: its constants were read from these tasks)"
                                 if m in c["in_sample"] else "")
                 for m, s in c["methods"].items())]
    if c["verdict"] == "cannot judge":
        lines.append(f"the evaluation cannot judge the recommender against the rules: "
                     f"{c['datasets']} held-out dataset(s), fewer than 3")
    elif c["edge"] is not None:
        e = c["edge"]
        rule = BASELINE_LABELS.get(e["rule"], e["rule"])
        words = {"better": "better than", "worse": "worse than",
                 "no better": "no better than"}[c["verdict"]]
        lines.append(f"the recommender is {words} the best rule scored out of sample, {rule}: "
                     f"regret {e['mean']:+.2f} points per task against it (90% interval "
                     f"{e['low90']:+.2f} to {e['high90']:+.2f}"
                     + ("; within noise)" if c["verdict"] == "no better" else ")"))
    if c["spearman"] and c["spearman"]["mean"] is not None:
        lines.append(f"rank correlation (Spearman) of the recommended against the measured best "
                     f"weight across the held-out tasks: {span(c['spearman'])}")
    return lines


def against_rule_text(c: dict) -> str:
    """The recommender against the best simple rule, in plain words (`against_best_rule`)."""
    rule = BASELINE_LABELS.get(c["rule"], c["rule"])
    head = f"the recommender is {c['verdict']} than the best simple rule, {rule}"
    errors = (f"mean |error| {c['recommender_error']:.2f} against {c['rule_error']:.2f} "
              "weight units")
    doubled = c["se"] is not None and 2 * c["se"] >= CLEAR_GAIN
    why = (f"twice the standard error of the per-task differences, {c['se']:.2f}" if doubled
           else f"the smallest gain counted as clear, {CLEAR_GAIN:g} weight units")
    edge = abs(c["edge"])
    if c["verdict"] == "better":
        return (f"{head}: {errors}, {edge:.2f} closer per task on average, a clear gain "
                f"(at least {c['clear_at']:.2f}: {why})")
    if c["verdict"] == "barely better":
        return (f"{head}: {errors}, only {edge:.2f} closer per task on average; a clear gain "
                f"would be {c['clear_at']:.2f} or more ({why})")
    if c["verdict"] == "no better":
        return (f"{head}: {errors}, a difference of {edge:.2f} per task on average, within "
                f"{c['clear_at']:.2f} ({why})")
    return (f"{head}: {errors}, {edge:.2f} farther per task on average (at least "
            f"{c['clear_at']:.2f}: {why})")


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


BASELINE_LABELS = {"constant": "constant 8", "rule_of_thumb": "the paper's rule of thumb",
                   "nearest_neighbour": "nearest task in log size",
                   "random_grid": "random grid weight", "weight_1": "weight 1 (no upweighting)",
                   "size_rule_refit": "the size rule refitted on the other tasks"}


def plot_recommendation(evidence: list[EvidencePoint], rec: Recommendation | None,
                        path: str | Path, task_type: str | None = None,
                        encoder: str | None = None, stage: str | None = None) -> Path:
    """`recommendation_figure`, written to `path` in the format of its extension."""
    from weightsearch.studies.plots import save

    return save(recommendation_figure(evidence, rec, task_type, encoder, stage), path)


def recommendation_figure(evidence: list[EvidencePoint], rec: Recommendation | None,
                          task_type: str | None = None, encoder: str | None = None,
                          stage: str | None = None) -> Any:
    """Where each task's best central weight lies against its training-set size (log x), with
    the recommender's curve and 80% band across sizes, and the requested size marked. A point
    is the weight its trials locate as best, +- 1 sd of that location from the seeds' spread
    (recommender.task_curve); a task with one seed per weight has no bar. Points from another
    regime than the one answered for are hollow."""
    import math

    import numpy as np

    from weightsearch.studies.plots import pyplot, regime_text, train_size_text

    plt = pyplot()
    sizes = [p.train_size for p in evidence]
    lo_x = min([*sizes, rec.train_size if rec else sizes[0]]) / 3
    hi_x = max([*sizes, rec.train_size if rec else sizes[0]]) * 3
    xs = np.logspace(np.log10(lo_x), np.log10(hi_x), 60)
    curve = [recommend_from(evidence, round(x), task_type, encoder, stage) for x in xs]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.fill_between(xs, [c.interval[0] for c in curve], [c.interval[1] for c in curve],
                    alpha=0.2, label="80% range of a new task's best weight")
    ax.plot(xs, [c.central_weight for c in curve], label="recommended weight")
    # Evidence from another regime than the one answered for counts with a discount: hollow.
    discounted = {(e["study"], e["task"]) for e in (rec.evidence if rec else [])
                  if e.get("discounted")}
    groups = sorted({(_source_label(p), (p.study, p.task) in discounted) for p in evidence})
    for (label, other), marker in zip(groups, "osD^v<>p*h", strict=False):
        pts = [p for p in evidence if _source_label(p) == label
               and ((p.study, p.task) in discounted) == other]
        bars = [math.sqrt(p.variance) if p.n_seeds > 1 else 0.0 for p in pts]
        spread = "± 1 sd over seeds" if any(bars) else "(one seed: no bar)"
        ax.errorbar([p.train_size for p in pts], [p.location for p in pts], yerr=bars,
                    fmt=marker, capsize=2, markersize=4, zorder=3,
                    **({"mfc": "none"} if other else {}),
                    label=f"a task's estimated best weight {spread}, {label}"
                    + (" (another regime: discounted)" if other else ""))
    if rec is not None and rec.equivalent is not None:  # what the evidence cannot tell apart
        near = [rec.train_size / 10 ** NEAR_DECADES, rec.train_size * 10 ** NEAR_DECADES]
        ax.fill_between(near, rec.equivalent[0], rec.equivalent[1], color="tab:green",
                        alpha=0.25, zorder=2, label="weights within seed noise of the best at "
                        f"sizes like {train_size_text(rec.train_size)}")
    if rec is not None and rec.saturates_at is not None:
        ax.axhline(rec.saturates_at, color="tab:gray", linestyle="--", linewidth=1,
                   label="clipping saturates the weight from here up")
    if rec is not None:
        ax.errorbar([rec.train_size], [rec.central_weight], color="red", capsize=4,
                    yerr=[[rec.central_weight - rec.interval[0]],
                          [rec.interval[1] - rec.central_weight]],
                    fmt="*", markersize=11, zorder=4,
                    label=f"this task ({train_size_text(rec.train_size)}), 80% range")
    ax.set_xscale("log")
    ax.set_ylim(0, 16)
    ax.set_xlim(lo_x, hi_x)  # fixed before the labels are placed in display coordinates
    _label_points(ax, [(p.task, p.train_size, p.location) for p in evidence])
    ax.set_xlabel("training examples of the central task (count, log scale)")
    ax.set_ylabel("central-task loss weight (×)")
    regime = rec.regime if rec is not None else {}
    ax.set_title("Best central weight vs training-set size: " + regime_text(
        [regime.get("encoder", encoder)], [regime.get("stage", stage)]))
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return fig


def _label_points(ax, points: list[tuple[str, float, float]]) -> None:
    """Name each point beside it, at the first of a few offsets where its label overlaps no
    label placed before (else where it overlaps least): tasks of similar size and weight
    otherwise print over one another."""
    from matplotlib.transforms import Bbox

    renderer = ax.figure.canvas.get_renderer()
    offsets = [((3, 3), "left"), ((3, -9), "left"), ((-3, 3), "right"), ((-3, -9), "right"),
               ((3, 11), "left"), ((-3, 11), "right"), ((3, -17), "left"), ((-3, -17), "right")]
    placed: list = []

    def covered(box) -> float:  # the area it shares with the labels placed so far
        shared = (Bbox.intersection(box, b) for b in placed)
        return sum(c.width * c.height for c in shared if c is not None)

    for name, x, y in sorted(points, key=lambda p: (p[1], p[2])):
        best = None
        for offset, align in offsets:
            text = ax.annotate(name, (x, y), fontsize=7, xytext=offset, ha=align,
                               textcoords="offset points")
            box = text.get_window_extent(renderer)
            overlap = covered(box)
            if best is None or overlap < best[0]:
                if best is not None:
                    best[1].remove()
                best = (overlap, text, box)
            else:
                text.remove()
            if overlap == 0:
                break
        assert best is not None  # offsets is not empty
        placed.append(best[2])


def _source_label(p) -> str:
    """Where a point comes from: the paper's table, a shipped study by name, your studies."""
    if p.source == "studies":
        return "your studies"
    return "SIWLM paper" if p.study == PRIOR_STUDY else f"built-in study {p.study}"


def plot_evaluation(rows: list[dict], path: str | Path) -> Path:
    """Leave-one-task-out: recommended weight (with its 80% interval) against each task's own
    best weight; points on the diagonal are exact."""
    from weightsearch.studies.plots import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 4.2))
    ax.plot([1, 15], [1, 15], color="grey", lw=1, label="recommended = best")
    for hit, color, what in ((True, "tab:green", "among the task's top 2 weights"),
                             (False, "tab:red", "outside the task's top 2")):
        chosen = [r for r in rows if bool(r["hit"]) == hit]
        if not chosen:
            continue
        ax.errorbar([r["best_weight"] for r in chosen], [r["recommended"] for r in chosen],
                    capsize=3, fmt="o", color=color, label=f"recommended, 80% range: {what}",
                    yerr=[[r["recommended"] - r["interval"][0] for r in chosen],
                          [r["interval"][1] - r["recommended"] for r in chosen]])
        for r in chosen:
            ax.annotate(r["task"], (r["best_weight"], r["recommended"]), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
    ax.set_xlim(0, 16)
    ax.set_ylim(0, 16)
    ax.set_xlabel("task's own best central weight (×)")
    ax.set_ylabel("recommended without the task (×)")
    ax.set_title("Leave-one-task-out check")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return save(fig, path)
