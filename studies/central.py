"""A weight-search study as its readers see it: its cells (trials), the curve of mean score
per central weight, and what they say (the best weight, the verdict, whether anything was
learned).

One Optuna study holds one central task (`<study>/<central_task>`); a *cell* is one trial
(central weight, seed). A task's *curve* is the mean value over seeds per central weight, from
COMPLETE trials only; its best weight is the weight with the best mean (ties: the smaller weight,
i.e. the one closer to equal weighting).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from weightsearch.studies import schema
from weightsearch.studies.stored_values import as_float
from weightsearch.studies.verdict import Verdict, by_seed, judge

# Optuna's trial states as the readers name them (`Cell.state`).
STATE_KEYS = {"COMPLETE": "complete", "RUNNING": "running", "FAIL": "failed",
              "WAITING": "pending", "PRUNED": "pruned"}
# A weight "beats" the constant prediction by more than this (metrics on a 0..1 scale): a
# score equal to it up to float rounding is not learning.
MAJORITY_MARGIN = 1e-9


@dataclass(frozen=True)
class Cell:
    """One trial of a central-task study."""

    study: str
    central_task: str
    number: int
    weight: float | None
    seed: int | None
    state: str  # complete | running | failed | pending | pruned
    value: float | None
    metrics: dict[str, float]  # flattened "<task>.<metric>", the multi-task stage's best epoch
    # {run-config path: value} of a study searching more than the central weight (a task
    # group as a list of auxiliary tasks); empty for the classic weight search.
    point: dict = field(default_factory=dict)
    # flattened "<task>.<metric>": each fine-tuned task's best, in a study with that stage
    finetuned: dict[str, float] = field(default_factory=dict)
    epochs: int | None = None  # multi-task epochs trained; None: not recorded
    wall_s: float | None = None  # the trial's own training time; None: not recorded
    # The run's gradient clipping (schema.T_CLIPPING): {grad_clip, grad_clip_mode, tasks:
    # {task: {clip_share, median_norm, acts_below, ...}}}; empty: not recorded.
    clipping: dict = field(default_factory=dict)
    # The cells (schema.cell_key) it trained with as one stacked model (`fuse_cells`), itself
    # included; empty: it trained alone.
    fused: tuple[str, ...] = ()
    # The central task's metrics for a constant prediction (trainer.majority); empty: not
    # recorded (imports, trials from before it was).
    majority: dict = field(default_factory=dict)
    unit: str | None = None  # the unit of work a launch leased for it (studies/claims.py)
    # The central weight of the fused cell that trained its updates from an epoch on, the two
    # one treatment (schema.T_SAME_TREATMENT); None: it trained its own.
    trained_by: float | None = None

    def task_clipping(self, task: str | None = None) -> dict:
        """One task's clipping record (default the central task); empty when not recorded."""
        tasks = self.clipping.get("tasks")
        found = tasks.get(task or self.central_task) if isinstance(tasks, dict) else None
        return found if isinstance(found, dict) else {}


@dataclass(frozen=True)
class WeightStats:
    weight: float
    mean: float
    sd: float | None  # sample standard deviation over seeds; None with a single seed
    n: int  # seeds with a COMPLETE trial at this weight (other searched points not counted)
    low: float
    high: float


@dataclass(frozen=True)
class CentralStudy:
    """One Optuna study, i.e. one central task of a weight-search study."""

    name: str  # the Optuna study name, `<study>/<central_task>`
    study: str
    central_task: str
    task_type: str | None
    train_size: int | None
    primary_metric: str | None
    source: str  # "sweep" | "imported"
    maximize: bool
    counts: dict[str, int]
    curve: tuple[WeightStats, ...]  # sorted by weight
    cells: tuple[Cell, ...] = field(default=(), repr=False)
    encoder: str | None = None  # None: not recorded (imported results)
    stage: str | None = None  # multitask | finetuned; None: not recorded (a sweep: multitask)
    variant: str | None = None  # weighting variant, e.g. reference | paper
    dataset: str | None = None  # the data the central task is drawn from; None: the task itself
    encoder_size: str | None = None  # hidden x layers, e.g. "768x12"; None: not recorded
    # A budgeted grouping study (`tasks: {groups_of: [...]}`): {task: its primary metric} in
    # task order, and the largest group trained (None: every group); None elsewhere.
    group_metrics: dict[str, str] | None = None
    group_max_size: int | None = None
    epochs: int | None = None  # a launched study's multi-task epochs per trial (its template)
    # (grad_clip, grad_clip_mode) of the run template, or of the import file; None: unknown
    clip_template: tuple[float, str] | None = None
    # What was left out of the stored values because no reader can use it (`usable`), in words
    notes: tuple[str, ...] = ()

    def cell_clipping(self, cell: Cell) -> tuple[float, str] | None:
        """The clipping a cell trained with: its run's record, else its search point over the
        study's template; None when nothing says."""
        record = cell.clipping
        if record:
            return record["grad_clip"], record["grad_clip_mode"]
        if self.clip_template is None:
            return None
        clip = as_float(cell.point.get("grad_clip", self.clip_template[0]))
        mode = cell.point.get("grad_clip_mode", self.clip_template[1])
        return (clip, mode) if clip is not None and isinstance(mode, str) else None

    def cell_regime(self, cell: Cell) -> str:
        """The cell's clipping in one word (schema.clipping_label), "rate-" before it where the
        searched weight was the central task's sampling rate."""
        found = self.cell_clipping(cell)
        if not found:
            return schema.clipping_label(None, None)
        return schema.clipping_label(*found, acts_on=weight_acts_on(cell.clipping))

    @property
    def clipping(self) -> str:
        """The clipping its cells trained with, in one word (the template's when no cell
        finished; "mixed" for a study that searched it: `by_clipping` parts it)."""
        regimes = {self.cell_regime(c) for c in self.cells}
        if not regimes:
            return schema.clipping_label(*(self.clip_template or (None, None)))
        return regimes.pop() if len(regimes) == 1 else "mixed"

    def by_clipping(self) -> list[CentralStudy]:
        """The study parted by the clipping its cells trained with: itself when they agree; else
        one study per regime, named `<name>-<regime>` (as `export` names its tasks)."""
        regimes = sorted({self.cell_regime(c) for c in self.cells})
        if len(regimes) <= 1:
            return [self]
        parts = []
        for regime in regimes:
            cells = [c for c in self.cells if self.cell_regime(c) == regime]
            parts.append(dataclasses.replace(
                self, name=f"{self.name}-{regime}", cells=tuple(cells), curve=weight_curve(cells),
                counts=cell_counts(cells), clip_template=self.cell_clipping(cells[0])))
        return parts

    @property
    def grouping(self) -> bool:
        """A budgeted grouping study: its cells are networks, it has no central task."""
        return self.group_metrics is not None

    def paired_values(self) -> dict[float, list[float]] | None:
        """Every COMPLETE trial's value per central weight, each list in seed order, when the
        same seeds (two or more) finished at every weight once each; else None."""
        values, paired = by_seed(self._scores())
        return values if paired else None

    def _scores(self) -> list[tuple[float, int | None, float]]:
        return seed_scores(self.cells)

    def values_by_weight(self) -> dict[float, list[float]]:
        """Each seed's score per central weight (`seed_scores`: the points of other searched
        dimensions averaged within a seed, not counted as seeds)."""
        out: dict[float, list[float]] = {}
        for weight, _seed, score in seed_scores(self.cells):
            out.setdefault(weight, []).append(score)
        return out

    @property
    def best(self) -> WeightStats | None:
        if not self.curve:
            return None
        sign = 1.0 if self.maximize else -1.0
        return max(self.curve, key=lambda s: (sign * s.mean, -s.weight))

    @property
    def majority(self) -> float | None:
        """The central task's score, on the study's metric, for a constant prediction (the
        training labels' most frequent class, or their mean for regression): the median over
        its complete cells; None where no cell recorded it."""
        metric = self.primary_metric
        found = [c.majority[metric] for c in self.cells
                 if c.state == "complete" and metric in c.majority]
        return float(statistics.median(found)) if found else None

    @property
    def beat_majority(self) -> bool | None:
        """Whether some weight's mean score beats the constant prediction; None: unknown."""
        level = self.majority
        if level is None or not self.curve:
            return None
        sign = 1.0 if self.maximize else -1.0
        return any(sign * (w.mean - level) > MAJORITY_MARGIN for w in self.curve)

    def majority_text(self) -> str | None:
        """The sentence that leads a verdict where nothing was learned; None otherwise."""
        if self.beat_majority is not False:
            return None
        return (f"the central task did not beat a constant prediction ({self.primary_metric} "
                f"{self.majority:.4f}: the training labels' most frequent class, or their "
                "mean) at any weight: these runs learned nothing the weight could change, so "
                "no comparison of weights below says anything about the weight; train longer, "
                "with more data or another learning rate first")

    def top_weights(self, k: int = 2) -> list[float]:
        sign = 1.0 if self.maximize else -1.0
        ranked = sorted(self.curve, key=lambda s: (-sign * s.mean, s.weight))
        return [s.weight for s in ranked[:k]]

    @functools.cached_property
    def arms(self) -> list:
        """Weights that trained the same updates, clipping having taken the weight away
        (`weightsearch.studies.treatments`)."""
        from weightsearch.studies.treatments import arms

        return arms(self)

    @functools.cached_property
    def verdict(self) -> Verdict:
        """Whether the trials separate the best weight from the others
        (`weightsearch.studies.verdict`), an arm of weights that trained the same updates counted
        once; computed once per study read (inspect, plots and summaries all ask for it)."""
        from weightsearch.studies.treatments import merge, rest_of

        scores = self._scores()
        names: dict[Any, Any] = {}  # a merged arm's weight -> the weights it stands for
        rests = {rest_of(c.point) for c in self.cells if c.state == "complete"}
        if len(rests) == 1:  # one grid of weights; other points compare in `inspect`'s points
            scores, names = merge(scores, self.arms, rests.pop())
        values, paired = by_seed(scores)
        return judge(values, paired, self.maximize, names=names, left_out=self.pruned_weights())

    def pruned_weights(self) -> tuple[float, ...]:
        """Weights whose every trial was pruned: no score stands for them."""
        scored = {c.weight for c in self.cells if c.state == "complete"}
        return tuple(sorted({c.weight for c in self.cells if c.state == "pruned"
                             and c.weight is not None and c.weight not in scored}))

    def summary(self) -> dict:
        from weightsearch.studies.treatments import clip_rows, partial_text

        best, verdict = self.best, self.verdict
        return {
            "name": self.name, "study": self.study, "central_task": self.central_task,
            "task_type": self.task_type, "train_size": self.train_size,
            "primary_metric": self.primary_metric, "stage": self.stage, "encoder": self.encoder,
            "source": self.source, **self.counts,
            # an arm's stand-in where the verdict merged weights that trained the same updates
            "best_weight": verdict.best if verdict.best in verdict.names
            else best.weight if best else None,
            "best_mean": best.mean if best else None,
            "best_sd": best.sd if best else None,
            "best_seeds": best.n if best else 0,
            # whether the trials separate best_weight from every other weight, and the words
            "best_clear": verdict.clear,
            "verdict": "; ".join(filter(None, [self.majority_text(),
                                              verdict.text(self.primary_metric or "score")])),
            "not_separated": list(verdict.not_separated),
            "ties": list(verdict.ties),
            # weights that trained the same updates (every central update clipped), and the
            # central task's clipping per weight
            "same_updates": [a.to_dict() for a in self.arms],
            # the score of a constant prediction, and whether some weight beat it
            "majority": self.majority, "beat_majority": self.beat_majority,
            "clipping": clip_rows(self),
            # where global clipping cut most but not all central updates: what it means
            "partial_clipping": partial_text(self),
            "notes": list(self.notes),
        }


def seed_scores(cells) -> list[tuple[float, int | None, float]]:
    """(weight, seed, score) of the COMPLETE cells, one per weight and seed: where a study
    searches more than the weight, the points of the other dimensions at a weight and seed are
    averaged into that seed's score, since they are no replicates of it (2 seeds x 2 sampling
    schemes are 2 seeds per weight, not 4). A cell without a recorded seed stands alone."""
    groups: dict[tuple, list[float]] = {}
    for c in cells:
        if c.state == "complete" and c.weight is not None and c.value is not None \
                and math.isfinite(c.value):
            key = (c.weight, c.seed) if c.seed is not None else (c.weight, None, c.number)
            groups.setdefault(key, []).append(c.value)
    return [(key[0], key[1], statistics.fmean(v)) for key, v in groups.items()]


def weight_curve(cells: list[Cell]) -> tuple[WeightStats, ...]:
    """The curve: the mean, spread and count of each weight's seed scores (`seed_scores`)."""
    by_weight: dict[float, list[float]] = {}
    for weight, _seed, score in seed_scores(cells):
        by_weight.setdefault(weight, []).append(score)
    return tuple(
        WeightStats(weight=w, mean=statistics.fmean(v),
                    sd=statistics.stdev(v) if len(v) > 1 else None, n=len(v),
                    low=min(v), high=max(v))
        for w, v in sorted(by_weight.items())
    )


def cell_counts(cells: list[Cell], grid_cells: int | None = None) -> dict[str, int]:
    """Trials per state, with two more: `superseded`, failed or interrupted attempts at a cell
    that a later attempt completed (not failures of the study), and `not_started`, the cells
    of a launched grid (`grid_cells` of them) that no trial has reached yet (absent where the
    cells are not known in advance, as for adaptive searches and imports)."""
    counts = {k: 0 for k in (*STATE_KEYS.values(), "interrupted")}
    done = {_cell_key(c) for c in cells if c.state == "complete"}
    counts["superseded"] = 0
    for c in cells:
        state = "superseded" if c.state in ("failed", "interrupted") and _cell_key(c) in done \
            else c.state
        counts[state] = counts.get(state, 0) + 1
    if grid_cells is not None:
        counts["not_started"] = max(0, grid_cells - len({_cell_key(c) for c in cells}))
    return counts


def _cell_key(c: Cell) -> tuple:
    return c.weight, c.seed, repr(sorted(c.point.items()))


def weight_acts_on(record: dict | None) -> str:
    """What a cell's searched weight set, by its clipping record: "sampling" (the central
    task's sampling rate) or "loss" (SIWLM's loss weight; also where nothing says)."""
    return "sampling" if (record or {}).get(schema.WEIGHT_ACTS_ON) == "sampling" else "loss"
