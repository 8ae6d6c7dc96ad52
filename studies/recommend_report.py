"""Text and plot output of `weightsearch recommend` (kept apart so the recommender stays pure)."""

from __future__ import annotations

from pathlib import Path

from studies.recommend import EvidencePoint, Recommendation, recommend_from


def recommendation_text(rec: Recommendation, shown: int = 8) -> str:
    lo, hi = rec.interval
    lines = [
        f"recommended central weight: {rec.central_weight:g}  (plausible range {lo:g}-{hi:g})",
        f"for {rec.train_size} training examples"
        + (f", task type {rec.task_type}" if rec.task_type else "")
        + f"; evidence: {rec.source}, {rec.effective_points:g} effective points",
        f"method: {rec.method}",
        *rec.notes,
        "",
        f"{'task':<12} {'train size':>10} {'best w':>6} {'located':>7} {'sd':>5} {'seeds':>5} "
        f"{'say':>6}  {'regime':<28} study",
    ]
    for e in rec.evidence[:shown]:
        regime = f"{e['encoder']}/{e['stage']}" + (" (disc.)" if e["discounted"] else "")
        lines.append(f"{e['task']:<12} {e['train_size']:>10} {e['best_weight']:>6g} "
                     f"{e['location']:>7.2f} {e['sd']:>5.1f} {e['n_seeds']:>5} {e['say']:>6.3f}"
                     f"  {regime:<28} {e['study']}")
    if len(rec.evidence) > shown:
        lines.append(f"... {len(rec.evidence) - shown} more with less say")
    return "\n".join(lines)


def evaluation_text(rows: list[dict], rate: float | None, over: str) -> str:
    from studies.recommend import evaluation_summary

    if not rows:
        return "nothing to evaluate: no finished central task"
    summary = evaluation_summary(rows)
    head = (f"{'task':<12} {'train size':>10} {'recommended':>11} {'grid':>5} {'best':>5} "
            f"{'top-2':>9} {'chance':>6}  hit  in 80%")
    where = "the study database's" if over == "studies" else "the built-in prior's"
    lines = [f"leave-one-task-out over {where} central tasks:", head]
    for r in rows:
        top = ",".join(f"{w:g}" for w in r["top2"])
        lines.append(f"{r['task']:<12} {r['train_size']:>10} {r['recommended']:>11g} "
                     f"{r['recommended_grid']:>5g} {r['best_weight']:>5g} {top:>9} "
                     f"{r['chance']:>6.2f}  {'yes' if r['hit'] else 'no ':<3}  "
                     f"{'yes' if r['in_interval'] else 'no'}")
    lines.append(f"hit rate (grid weight nearest the recommendation among the task's top 2): "
                 f"{sum(r['hit'] for r in rows)}/{len(rows)} = {rate:.2f}; chance level (a random "
                 f"weight of each task's own grid, averaged): {summary['chance']:.2f}")
    lines.append(f"80% interval holds the task's best weight: "
                 f"{sum(r['in_interval'] for r in rows)}/{len(rows)} = {summary['coverage']:.2f}")
    return "\n".join(lines)


def plot_recommendation(evidence: list[EvidencePoint], rec: Recommendation | None,
                        path: str | Path, task_type: str | None = None,
                        encoder: str | None = None, stage: str | None = None) -> Path:
    """Best central weight vs training-set size (log x) for every point, with the recommender's
    curve and its interval band across sizes, and the requested size marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sizes = [p.train_size for p in evidence]
    lo_x = min([*sizes, rec.train_size if rec else sizes[0]]) / 3
    hi_x = max([*sizes, rec.train_size if rec else sizes[0]]) * 3
    xs = np.logspace(np.log10(lo_x), np.log10(hi_x), 60)
    curve = [recommend_from(evidence, round(x), task_type, encoder, stage) for x in xs]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.fill_between(xs, [c.interval[0] for c in curve], [c.interval[1] for c in curve],
                    alpha=0.2, label="plausible range")
    ax.plot(xs, [c.central_weight for c in curve], label="recommendation")
    for source, marker in (("prior", "o"), ("studies", "s")):
        pts = [p for p in evidence if p.source == source]
        if pts:
            ax.scatter([p.train_size for p in pts], [p.best_weight for p in pts], marker=marker,
                       zorder=3, label=f"best weight ({source})")
            for p in pts:
                ax.annotate(p.task, (p.train_size, p.best_weight), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
    if rec is not None:
        ax.errorbar([rec.train_size], [rec.central_weight], color="red", capsize=4,
                    yerr=[[rec.central_weight - rec.interval[0]],
                          [rec.interval[1] - rec.central_weight]],
                    fmt="*", markersize=12, zorder=4, label="this task")
    ax.set_xscale("log")
    ax.set_ylim(0, 16)
    ax.set_xlabel("training examples of the central task")
    ax.set_ylabel("central weight")
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_evaluation(rows: list[dict], path: str | Path) -> Path:
    """Leave-one-task-out: recommended weight (with its 80% interval) against each task's own
    best weight; points on the diagonal are exact."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([1, 15], [1, 15], color="grey", lw=1, label="recommended = best")
    for r in rows:
        lo, hi = r["interval"]
        ax.errorbar([r["best_weight"]], [r["recommended"]], capsize=3, fmt="o",
                    color="tab:green" if r["hit"] else "tab:red",
                    yerr=[[r["recommended"] - lo], [hi - r["recommended"]]])
        ax.annotate(r["task"], (r["best_weight"], r["recommended"]), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    ax.set_xlim(0, 16)
    ax.set_ylim(0, 16)
    ax.set_xlabel("best central weight of the task (its own trials)")
    ax.set_ylabel("recommended without the task (80% interval)")
    ax.set_title("leave-one-task-out (green: among the task's top 2)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
