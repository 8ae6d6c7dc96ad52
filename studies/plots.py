"""Figures for a paper: `inspect --plot` (metric vs central weight per central task) and the
shared style of `recommend --plot`.

The format follows the file's extension (.pdf, .svg and .eps are vector; fonts stay text, so a
journal's tools can edit them); legends sit outside the data; axis labels say what is measured
and on which scale; error bars are mean +- 1 sample sd over seeds (the legend says so, and how
many seeds); titles carry the stage and the encoder the scores come from.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from weightsearch.studies.central import seed_scores
from weightsearch.studies.treatments import live_bound

VECTOR = (".pdf", ".svg", ".eps")
RASTER_DPI = 200
WEIGHT_LABEL = "central-task loss weight (× its batch loss)"


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({
        "pdf.fonttype": 42, "ps.fonttype": 42,  # TrueType: text stays text in PDF and EPS
        "svg.fonttype": "none", "font.size": 9, "axes.titlesize": 9, "legend.fontsize": 8,
    })
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: str | Path) -> Path:
    """Written in the format of the extension, the legends outside the axes included."""
    path = Path(path)
    dpi = None if path.suffix.lower() in VECTOR else RASTER_DPI
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def regime_text(encoders: Iterable[str | None], stages: Iterable[str | None]) -> str:
    """'multitask stage, encoder all-MiniLM-L6-v2' for the title; several values joined."""
    stage = " + ".join(sorted({s or "multitask" for s in stages})) or "multitask"
    named = sorted({e for e in encoders if e and e != "unknown"})
    encoder = f"encoder {' + '.join(named)}" if named else "encoder not recorded"
    return f"{stage} stage, {encoder}"


def metric_label(metric: str | None, values: Iterable[float]) -> str:
    """The metric, the split, and its scale: 0-1 or percent (imported tables use percent)."""
    finite = [abs(v) for v in values]
    scale = "%" if finite and max(finite) > 1.0 else "0–1"
    return f"{metric or 'score'} on dev ({scale})"


# A y axis is at least this tall (of a 0-1 scale; x100 for percent), so that a difference of a
# few thousandths, within any seed noise, is not drawn as a steep line.
MIN_SPAN = 0.05
_CORRELATIONS = ("mcc", "matthews", "pearson", "spearman", "corr")
_FRACTIONS = ("acc", "f1", "exact", "em")


def metric_bounds(metric: str | None, percent: bool) -> tuple[float, float] | None:
    """The range a score can take by its definition: correlations -1..1, accuracy-type 0..1
    (x100 on a percent scale); None for a metric without known bounds."""
    name = (metric or "").lower()
    if any(part in name for part in _CORRELATIONS):
        low, high = -1.0, 1.0
    elif any(part in name for part in _FRACTIONS):
        low, high = 0.0, 1.0
    else:
        return None
    scale = 100.0 if percent else 1.0
    return low * scale, high * scale


def clipped_errors(means: list[float], sds: list[float], bounds: tuple[float, float] | None
                   ) -> list[list[float]]:
    """[below, above] error-bar lengths: +-1 sd, cut where the score's range ends (an accuracy
    interval past 1.0 is drawn to 1.0)."""
    if bounds is None:
        return [list(sds), list(sds)]
    return [[max(0.0, min(sd, m - bounds[0])) for m, sd in zip(means, sds, strict=True)],
            [max(0.0, min(sd, bounds[1] - m)) for m, sd in zip(means, sds, strict=True)]]


def y_limits(values: list[float], bounds: tuple[float, float] | None,
             percent: bool) -> tuple[float, float]:
    """The y axis: the data with a margin, at least MIN_SPAN tall, inside the score's range."""
    low, high = min(values), max(values)
    span = MIN_SPAN * (100.0 if percent else 1.0)
    if high - low < span:
        middle = (low + high) / 2
        low, high = middle - span / 2, middle + span / 2
    margin = 0.05 * (high - low)
    low, high = low - margin, high + margin
    if bounds is not None:  # slide the window inside the range, then cut what still sticks out
        if low < bounds[0]:
            low, high = bounds[0], high + (bounds[0] - low)
        if high > bounds[1]:
            low, high = low - (high - bounds[1]), bounds[1]
        low = max(low, bounds[0])
    return low, high


def train_size_text(n: int | None) -> str:
    return f"train n={n:,}" if n else "train n unknown"


def plot_study(studies: list[Any], title: str, path: str | Path) -> Path:
    """Primary metric vs central weight, one panel per central task (CentralStudy objects):
    each seed as a dot, mean +- 1 sd over seeds at each weight, the best weight marked."""
    plt = pyplot()
    ncols = min(4, len(studies))
    nrows = -(-len(studies) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 2.8 * nrows), squeeze=False)
    seeds = sorted({c.n for s in studies for c in s.curve})
    several = len({s.study for s in studies}) > 1  # panels then say which study they show
    for ax, s in zip(axes.flat, studies, strict=False):
        w = [c.weight for c in s.curve]
        sd = [c.sd or 0.0 for c in s.curve]
        # One dot per seed: the points of other searched dimensions averaged within it.
        dots = [(weight, score) for weight, _seed, score in seed_scores(s.cells)]
        means = [c.mean for c in s.curve]
        percent = max((abs(v) for v in means), default=0.0) > 1.0
        bounds = metric_bounds(s.primary_metric, percent)
        errors = clipped_errors(means, sd, bounds)
        ax.errorbar(w, means, yerr=errors, fmt="o-", color="tab:blue",
                    capsize=3, markersize=4, zorder=3, label=_mean_label(seeds))
        # Seeds a little to the right of their weight, beside the error bar, not under it.
        shift = 0.02 * (max(w) - min(w) or 1.0)
        fused = {(c.weight, c.seed) for c in s.cells if c.fused and c.state == "complete"}
        alone = [(weight, score) for weight, seed, score in seed_scores(s.cells)
                 if (weight, seed) not in fused]
        together = [(weight, score) for weight, seed, score in seed_scores(s.cells)
                    if (weight, seed) in fused]
        if alone or not together:
            ax.scatter([weight + shift for weight, _ in alone], [score for _, score in alone],
                       s=8, color="0.45", zorder=2, label="one seed")
        if together:  # how it trained; on the CPU the same scores as alone (training.md)
            ax.scatter([weight + shift for weight, _ in together],
                       [score for _, score in together], s=12, facecolors="none",
                       edgecolors="0.3", zorder=2,
                       label="one seed, trained with other weights as one model (fuse_cells)")
        level = s.majority
        if level is not None:  # a run that learned nothing scores this
            shown = level * 100 if percent else level
            ax.axhline(shown, color="tab:red", linestyle=":", zorder=1,
                       label="constant prediction (training labels' majority class or mean)")
        bound = live_bound(s)
        # Below it the weight scales the update; above, it is clipped away (far beyond the
        # grid: nothing to shade).
        if bound is not None and bound <= 10 * max(w):
            ax.axvspan(0, bound, color="tab:green", alpha=0.12, zorder=0,
                       label="live range: the median central update is not clipped")
            ax.set_xlim(left=0, right=max(max(w), bound) + shift * 3)
        verdict = s.verdict
        if verdict.clear:
            ax.axvline(verdict.best, color="tab:red", linestyle=":", zorder=1,
                       label="best weight (separated from every other, 95%)")
        elif verdict.best is not None:
            ax.axvline(verdict.best, color="0.6", linestyle=":", zorder=1,
                       label="highest mean, not separated from the others")
            # Under the axis label, not over the data.
            ax.text(0.0, -0.3, verdict.reason, transform=ax.transAxes, fontsize=6,
                    color="0.4", va="top", wrap=True)
        ax.set_title(f"{s.name if several else s.central_task} "
                     f"({train_size_text(s.train_size)})")
        ax.set_xlabel(WEIGHT_LABEL)
        ax.set_ylabel(metric_label(s.primary_metric, [score for _, score in dots]))
        ax.set_xticks(w)
        ends = [m - e for m, e in zip(means, errors[0], strict=True)] + \
            [m + e for m, e in zip(means, errors[1], strict=True)]
        ax.set_ylim(*y_limits(ends + [score for _, score in dots], bounds, percent))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(studies):]:
        ax.axis("off")
    found: dict[str, Any] = {}
    for ax in axes.flat:  # every kind of mark, whichever panel has it
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(label, handle)
    handles, labels = list(found.values()), list(found)
    regime = regime_text((s.encoder for s in studies), (s.stage for s in studies))
    fig.suptitle(f"{title}: {regime}")
    fig.tight_layout()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=len(labels), frameon=False)
    return save(fig, path)


def _mean_label(seeds: list[int]) -> str:
    if seeds and max(seeds) > 1:
        n = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]}"
        return f"mean ± 1 sd over seeds (n={n} per weight)"
    return "mean (one seed per weight: no error bar)"


def plot_budget(reports: list[Any], title: str, path: str | Path) -> Path:
    """Total score against the budget (networks), one panel per grouping study (BudgetReport
    objects): the best choice at each budget, the groups it chose listed beside the panel, and
    the two fixed answers (one network per task, one for all tasks) as lines."""
    plt = pyplot()
    fig, axes = plt.subplots(len(reports), 1, figsize=(7.0, 3.0 * len(reports)),
                             squeeze=False)
    for ax, report in zip(axes.flat, reports, strict=False):
        shown = [(b, c) for b, c in report.choices.items() if c is not None]
        ax.plot([b for b, _ in shown], [c.total for _, c in shown], "o-", color="tab:blue",
                zorder=3, label="best choice of networks")
        for fixed, style, label in ((report.singles, "--", "one network per task"),
                                    (report.everything, ":", "one network for all tasks")):
            if fixed is not None:
                ax.axhline(fixed.total, color="0.5", linestyle=style, zorder=1, label=label)
        # The choices as text beside the axes: group names are too long to label points.
        listing = "\n".join(f"{b}: " + " | ".join("+".join(g) + ("*" if g in c.estimated
                                                                 else "") for g in c.groups)
                            for b, c in shown)
        ax.text(1.03, 1.0, "networks chosen\n" + listing, transform=ax.transAxes,
                fontsize=7, va="top", ha="left", family="monospace")
        ax.set_title(f"{report.study} ({len(report.tasks)} tasks: {', '.join(report.tasks)})")
        ax.set_xlabel("budget: networks trained and served")
        ax.set_ylabel("sum of the tasks' primary\nmetrics on dev")
        ax.set_xticks(range(1, len(report.tasks) + 1))
        ax.grid(alpha=0.3)
    found: dict[str, Any] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(label, handle)
    single = all(set(r.seeds.values()) <= {1} for r in reports)
    estimated = any(r.table.estimated for r in reports)
    fig.suptitle(f"{title}: " + ("one seed per network (single runs)" if single
                                 else "means over seeds")
                 + ("; * estimated from the pairwise networks" if estimated else ""))
    fig.tight_layout()
    fig.legend(list(found.values()), list(found), loc="upper center",
               bbox_to_anchor=(0.5, 0.0), ncol=len(found), frameon=False)
    return save(fig, path)



def plot_methods(panels: list[tuple[Any, list[dict]]], title: str, path: str | Path) -> Path:
    """One panel per central task of a methods study ((CentralStudy,
    `weightsearch.studies.methods.method_rows`) pairs): each method's mean with its 95% t-interval
    over seeds, one row per method (best first), its compute in trial-epochs per seed in the label;
    the best method's mean as a line."""
    plt = pyplot()
    ncols = min(2, len(panels))
    nrows = -(-len(panels) // ncols)
    height = max(len(rows) for _, rows in panels) * 0.32 + 1.2
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, height * nrows), squeeze=False)
    styles = {"one run per seed": ("o", "tab:blue"),
              "weight search, weight chosen on the other seeds": ("s", "tab:red"),
              "weight search, best weight in-sample (optimistic)": ("s", "0.6")}
    found: dict[str, Any] = {}
    several = len({s.study for s, _ in panels}) > 1  # panels then say which study they show
    for ax, (s, rows) in zip(axes.flat, panels, strict=False):
        labels = []
        for y, r in enumerate(rows):
            kind = ("weight search, best weight in-sample (optimistic)"
                    if (r["choice"] or "").startswith("best w")
                    else "weight search, weight chosen on the other seeds" if r["choice"]
                    else "one run per seed")
            err = None if r["low"] is None else [[r["mean"] - r["low"]], [r["high"] - r["mean"]]]
            marker, color = styles[kind]
            found.setdefault(kind, ax.errorbar([r["mean"]], [y], xerr=err, fmt=marker,
                                               color=color, capsize=3, markersize=5))
            what = r["method"] + (f" [{r['choice'].split(' (')[0]}]" if r["choice"] else "")
            cost = "" if r["per_seed"] is None else f" · {r['per_seed']:g} ep/seed"
            labels.append(f"{what}{cost}")
            if r["best"]:
                ax.axvline(r["mean"], color="tab:red", linestyle=":", linewidth=1, zorder=1)
        ax.set_yticks(range(len(rows)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{s.name if several else s.central_task} "
                     f"({train_size_text(s.train_size)}, {max(r['seeds'] for r in rows)} seeds)")
        ax.set_xlabel(metric_label(s.primary_metric, [r["mean"] for r in rows]))
        ax.grid(axis="x", alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    studies = [s for s, _ in panels]
    regime = regime_text((s.encoder for s in studies), (s.stage for s in studies))
    fig.suptitle(f"{title}: {regime}\nmean and 95% t-interval over seeds; "
                 "ep/seed: multi-task epochs per seed")
    fig.tight_layout()
    fig.legend(list(found.values()), list(found), loc="upper center",
               bbox_to_anchor=(0.5, 0.0), ncol=len(found), frameon=False)
    return save(fig, path)
