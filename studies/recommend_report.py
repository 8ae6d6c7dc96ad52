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
        "",
        f"{'task':<12} {'train size':>10} {'best w':>6} {'kernel w':>8}  source  study",
    ]
    for e in rec.evidence[:shown]:
        lines.append(f"{e['task']:<12} {e['train_size']:>10} {e['best_weight']:>6g} "
                     f"{e['kernel_weight']:>8.3f}  {e['source']:<7} {e['study']}")
    if len(rec.evidence) > shown:
        lines.append(f"... {len(rec.evidence) - shown} more with smaller kernel weights")
    return "\n".join(lines)


def evaluation_text(rows: list[dict], rate: float | None, over: str) -> str:
    if not rows:
        return "nothing to evaluate: no finished central task"
    head = (f"{'task':<12} {'train size':>10} {'recommended':>11} {'grid':>5} {'best':>5} "
            f"{'top-2':>9}  hit")
    where = "the study database's" if over == "studies" else "the built-in prior's"
    lines = [f"leave-one-task-out over {where} central tasks:", head]
    for r in rows:
        top = ",".join(f"{w:g}" for w in r["top2"])
        lines.append(f"{r['task']:<12} {r['train_size']:>10} {r['recommended']:>11g} "
                     f"{r['recommended_grid']:>5g} {r['best_weight']:>5g} {top:>9}  "
                     f"{'yes' if r['hit'] else 'no'}")
    lines.append(f"hit rate (grid weight nearest the recommendation among the task's top 2): "
                 f"{sum(r['hit'] for r in rows)}/{len(rows)} = {rate:.2f} "
                 f"(a random guess on a 6-weight grid: 2/6 = 0.33)")
    return "\n".join(lines)


def plot_recommendation(evidence: list[EvidencePoint], rec: Recommendation | None,
                        path: str | Path, task_type: str | None = None) -> Path:
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
    curve = [recommend_from(evidence, round(x), task_type) for x in xs]
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
