"""Read weight-search studies through Optuna's public API (never its tables, whose schema migrates).

One Optuna study holds one central task (`<study>/<central_task>`); a *cell* is one trial
(central weight, seed). A task's *curve* is the mean value over seeds per central weight, from
COMPLETE trials only; its best weight is the weight with the best mean (ties: the smaller weight,
i.e. the one closer to equal weighting).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import statistics
from dataclasses import dataclass, field
from typing import Any

from weightsearch.core.errors import StorageError
from weightsearch.studies import schema
from weightsearch.studies.bulk import read_trials, state_counts
from weightsearch.studies.storage import shown_url, sqlite_path
from weightsearch.studies.verdict import Verdict, by_seed, judge

STATE_KEYS = {"COMPLETE": "complete", "RUNNING": "running", "FAIL": "failed",
              "WAITING": "pending", "PRUNED": "pruned"}
# A stored score beyond this (or not finite) is no measurement: another tool, or an edited
# database, wrote it. Left out with a note, since means and variances of such values overflow
# (statistics.fmean raised OverflowError on two trials at 1e308). The importer's own limits are
# far inside it.
USABLE_LIMIT = 1e12
# A weight "beats" the constant prediction by more than this (metrics on a 0..1 scale): a
# score equal to it up to float rounding is not learning.
MAJORITY_MARGIN = 1e-9
TRAIN_SIZE_LIMIT = 10**12  # training examples: a stored size at or above it is unknown
# Studies an import is still writing (`weightsearch.studies.importer`): hidden from every
# reader until the import renames them, all at once, to their final names. A study name may
# not start with ".", so no study of a user's can carry this prefix.
STAGING_PREFIX = ".weightsearch-import/"


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
        clip = _as_float(cell.point.get("grad_clip", self.clip_template[0]))
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
                self, name=f"{self.name}-{regime}", cells=tuple(cells), curve=_curve(cells),
                counts=_counts(cells, {}), clip_template=self.cell_clipping(cells[0])))
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


def open_quiet(url: str, serving: bool = False):
    """`weightsearch.studies.storage.open_storage` without Optuna's chatter on the console (the
    experimental-feature warning about heartbeats, INFO lines per created study): the output of
    `inspect` and `recommend` is meant to be read or parsed."""
    import warnings

    import optuna

    from weightsearch.studies.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return open_storage(url, serving=serving)


def sqlite_file_missing(url: str) -> bool:
    """True for a SQLite URL whose file does not exist (reading it would create an empty one)."""
    path = sqlite_path(url)
    return path is not None and not os.path.exists(path)


def usable(v) -> float | None:
    """A stored number as a score the readers can average: finite and within USABLE_LIMIT
    (a bool, a string or an int too large for a float is none); else None."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        number = float(v)
    except OverflowError:  # an int beyond a float's range, from another tool's JSON
        return None
    return number if math.isfinite(number) and abs(number) <= USABLE_LIMIT else None


def _flatten(metrics, dropped: list[str] | None = None) -> dict[str, float]:
    """{"<task>.<metric>": value} of the usable values; the others' names go to `dropped`."""
    flat: dict[str, float] = {}
    if not isinstance(metrics, dict):
        return flat
    for task, values in metrics.items():
        pairs = ([(f"{task}.{metric}", v) for metric, v in values.items()]
                 if isinstance(values, dict) else [(str(task), values)])
        for name, v in pairs:
            number = usable(v)
            if number is not None:
                flat[name] = number
            elif isinstance(v, int | float) and not isinstance(v, bool) and dropped is not None:
                dropped.append(name)
    return flat


def _point(raw) -> dict:
    """A trial's search point, as far as it is plain data (foreign studies may hold anything)."""
    if not isinstance(raw, dict):
        return {}
    return {str(k): v for k, v in raw.items()
            if isinstance(v, str | int | float | bool) or (
                isinstance(v, list) and all(isinstance(x, str) for x in v))}


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


def _curve(cells: list[Cell]) -> tuple[WeightStats, ...]:
    by_weight: dict[float, list[float]] = {}
    for weight, _seed, score in seed_scores(cells):
        by_weight.setdefault(weight, []).append(score)
    return tuple(
        WeightStats(weight=w, mean=statistics.fmean(v),
                    sd=statistics.stdev(v) if len(v) > 1 else None, n=len(v),
                    low=min(v), high=max(v))
        for w, v in sorted(by_weight.items())
    )


def _as_int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):  # int(inf) overflows
        return None


def _as_float(v) -> float | None:
    """A finite float, or None (an infinite or NaN stored value means nothing here)."""
    try:
        number = float(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError, OverflowError):
        return None
    return number if number is not None and math.isfinite(number) else None


def _train_size(v) -> int | None:
    """A stored training-set size, when it is a whole number of examples below the limit."""
    number = _as_float(v)
    if number is None or not number.is_integer() or not 0 < number < TRAIN_SIZE_LIMIT:
        return None
    return int(number)


def _as_str(v) -> str | None:
    return v if isinstance(v, str) else None


def build_central(name: str, attrs: dict, directions, trials) -> CentralStudy:
    """A CentralStudy from a study's user attributes, its directions and its FrozenTrials.

    Anything may share the database: another program's study (no weightsearch source, or
    several objectives) comes back marked `foreign`, with its counts but no curve, and odd
    attribute or parameter values are read as unknown instead of failing.
    """
    base, central = schema.split_study_name(name)
    directions = list(directions)
    source = attrs.get(schema.A_SOURCE)
    foreign = len(directions) != 1 or source not in (schema.SOURCE_SWEEP,
                                                     schema.SOURCE_IMPORTED)
    maximize = directions[0].name != "MINIMIZE" if directions else True
    central = _as_str(attrs.get(schema.A_CENTRAL)) or central or name
    notes: list[str] = []
    cells = _cells(name, central, foreign, trials, notes)
    train_size = _train_size(attrs.get(schema.A_TRAIN_SIZE))
    if train_size is None and attrs.get(schema.A_TRAIN_SIZE) is not None:
        notes.append(f"study {name}: its train_size {_shown(attrs[schema.A_TRAIN_SIZE])} is no "
                     f"number of examples (a whole number from 1 to {TRAIN_SIZE_LIMIT - 1}); "
                     "read as unknown")
    counts = _counts(cells, attrs)
    return CentralStudy(
        name=name, study=_as_str(attrs.get(schema.A_STUDY)) or base, central_task=central,
        task_type=_as_str(attrs.get(schema.A_TASK_TYPE)),
        train_size=train_size,
        primary_metric=_as_str(attrs.get(schema.A_PRIMARY)),
        source=schema.SOURCE_FOREIGN if foreign else source, maximize=maximize,
        counts=counts, curve=_curve(cells), cells=tuple(cells),
        encoder=_as_str(attrs.get(schema.A_ENCODER)), stage=_as_str(attrs.get(schema.A_STAGE)),
        variant=_as_str(attrs.get(schema.A_VARIANT)),
        encoder_size=_as_str(attrs.get(schema.A_ENCODER_SIZE)),
        dataset=_as_str(attrs.get(schema.A_DATASET)) or _dataset_from_spec(attrs, central),
        group_metrics=_group_metrics(attrs),
        group_max_size=_as_int(attrs.get(schema.A_GROUP_MAX_SIZE)),
        epochs=_spec_epochs(attrs),
        clip_template=_clip_template(attrs), notes=tuple(notes),
    )


def _fused(value: Any) -> tuple[str, ...]:
    """A trial's fused unit as its cell keys; anything else (absent, another tool's) is none."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value) and len(value) > 1:
        return tuple(value)
    return ()


def _cells(name: str, central: str, foreign: bool, trials, notes: list[str]) -> list[Cell]:
    """The study's cells; a stored value no reader can use (`usable`) is left out of its cell,
    and `notes` says which."""
    cells, bad_values, bad_metrics = [], [], []
    for t in trials:
        complete = t.state.name == "COMPLETE" and len(t.values or ()) == 1
        value = usable(t.values[0]) if complete else None
        if complete and value is None:
            bad_values.append(f"trial {t.number}: {_shown(t.values[0])}")
        dropped: list[str] = []
        cells.append(Cell(
            study=name, central_task=central, number=t.number,
            weight=None if foreign else _as_float(t.params.get(schema.PARAM)),
            seed=_as_int(t.user_attrs.get(schema.T_SEED)),
            state=_state(t),
            value=value,
            metrics=_flatten(t.user_attrs.get(schema.T_METRICS), dropped),
            point=_point(t.user_attrs.get(schema.T_POINT)),
            finetuned=_flatten(t.user_attrs.get(schema.T_FINETUNED_METRICS), dropped),
            epochs=_as_count(t.user_attrs.get(schema.T_EPOCHS)),
            wall_s=_as_float(t.user_attrs.get(schema.T_WALL_TIME)),
            clipping=_clipping(t.user_attrs.get(schema.T_CLIPPING)),
            fused=_fused(t.user_attrs.get(schema.T_FUSED)),
            majority=_majority(t.user_attrs.get(schema.T_MAJORITY), central),
            unit=u if isinstance(u := t.user_attrs.get(schema.T_UNIT), str) else None,
        ))
        bad_metrics += [f"trial {t.number}: {m}" for m in dropped]
    limit = f"not finite, or beyond +-{USABLE_LIMIT:g}"
    if bad_values:
        notes.append(f"study {name}: {len(bad_values)} complete trial(s) left out, their value "
                     f"is no usable score ({limit}): {_listed(bad_values)}")
    if bad_metrics:
        notes.append(f"study {name}: {len(bad_metrics)} stored metric(s) left out ({limit}): "
                     f"{_listed(bad_metrics)}")
    return cells


def _shown(v) -> str:
    """A stored value in a note: numbers short, anything else clipped."""
    if isinstance(v, float):
        return f"{v:g}"
    text = repr(v)
    return text if len(text) <= 24 else f"{text[:21]}..."


def _listed(items: list[str], shown: int = 3) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def _clip_template(attrs: dict) -> tuple[float, str] | None:
    """The clipping of a launched study's run template (the trainer's defaults where it says
    nothing), or the one an import file gave."""
    from weightsearch.trainer.clipping import DEFAULT_GRAD_CLIP, DEFAULT_GRAD_CLIP_MODE

    train = _spec_train(attrs)
    if train is not None:
        clip = train.get("grad_clip", DEFAULT_GRAD_CLIP)
        mode = train.get("grad_clip_mode", DEFAULT_GRAD_CLIP_MODE)
    else:
        clip = attrs.get(schema.A_GRAD_CLIP)
        mode = attrs.get(schema.A_GRAD_CLIP_MODE, DEFAULT_GRAD_CLIP_MODE)
    clip = _as_float(clip)
    return (clip, mode) if clip is not None and isinstance(mode, str) else None


def _clipping(raw) -> dict:
    """A trial's clipping record, as far as it is well-formed (anything may share the database)."""
    from weightsearch.trainer.clipping import GRAD_CLIP_MODES

    if not isinstance(raw, dict):
        return {}
    clip, mode, tasks = _as_float(raw.get("grad_clip")), raw.get("grad_clip_mode"), \
        raw.get("tasks")
    if clip is None or not math.isfinite(clip) or clip < 0 or mode not in GRAD_CLIP_MODES:
        return {}
    kept = {}
    for task, values in (tasks.items() if isinstance(tasks, dict) else ()):
        if isinstance(values, dict):  # finite non-negative numbers only; the rest unknown
            kept[str(task)] = {k: v for k, v in values.items()
                               if isinstance(v, int | float) and not isinstance(v, bool)
                               and math.isfinite(v) and v >= 0}
    return {"grad_clip": clip, "grad_clip_mode": mode, "tasks": kept,
            **({"adversarial": True} if raw.get("adversarial") is True else {}),
            **({schema.WEIGHT_ACTS_ON: "sampling"}
               if raw.get(schema.WEIGHT_ACTS_ON) == "sampling" else {})}


def _state(trial) -> str:
    """A trial's state as readers name it: a FAIL its driver caused by stopping (Ctrl-C, a
    lost driver) is "interrupted", since resuming continues it from its checkpoint."""
    if trial.state.name == "FAIL" and trial.user_attrs.get(schema.T_ERROR) == \
            schema.DRIVER_STOPPED:
        return "interrupted"
    return STATE_KEYS.get(trial.state.name, trial.state.name.lower())


def _majority(raw, central: str) -> dict:
    """The central task's constant-prediction metrics, as far as they are finite numbers."""
    found = raw.get(central) if isinstance(raw, dict) else None
    if not isinstance(found, dict):
        return {}
    return {str(k): float(v) for k, v in found.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}


def weight_acts_on(record: dict | None) -> str:
    """What a cell's searched weight set, by its clipping record: "sampling" (the central
    task's sampling rate) or "loss" (SIWLM's loss weight; also where nothing says)."""
    return "sampling" if (record or {}).get(schema.WEIGHT_ACTS_ON) == "sampling" else "loss"


def _as_count(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _spec_train(attrs: dict) -> dict | None:
    """The run template (`train:`) of a launched study's stored study file."""
    spec = attrs.get(schema.A_SPEC)
    train = spec.get("train") if isinstance(spec, dict) else None
    return train if attrs.get(schema.A_SOURCE) == schema.SOURCE_SWEEP \
        and isinstance(train, dict) else None


def _spec_epochs(attrs: dict) -> int | None:
    """The multi-task epochs of a launched study's run template."""
    epochs = (_spec_train(attrs) or {}).get("epochs")
    return epochs if isinstance(epochs, int) and not isinstance(epochs, bool) \
        and epochs > 0 else None


def _group_metrics(attrs: dict) -> dict[str, str] | None:
    """A grouping study's {task: primary metric}, in the study's task order."""
    metrics, tasks = attrs.get(schema.A_GROUP_METRICS), attrs.get(schema.A_GROUP_TASKS)
    if not isinstance(metrics, dict) or not isinstance(tasks, list):
        return None
    return {t: str(metrics[t]) for t in tasks if isinstance(t, str) and t in metrics}


def _dataset_from_spec(attrs: dict, central: str) -> str | None:
    """A launched study that predates the dataset attribute: its stored study file names the
    central task's definition (a preset with a cap of its own is the preset's data)."""
    train = _spec_train(attrs)
    if train is None:
        return None
    from weightsearch.trainer.task_parsing import parse_tasks
    from weightsearch.trainer.tasks import dataset_name

    problems: list[str] = []
    tasks = parse_tasks(train.get("tasks"), problems)
    found = [t for t in tasks if t.name == central]
    return dataset_name(found[0]) if found and not problems else None


def _counts(cells: list[Cell], attrs: dict) -> dict[str, int]:
    """Trials per state, with two more: `superseded`, failed or interrupted attempts at a cell
    that a later attempt completed (not failures of the study), and `not_started`, the cells
    of a launched grid that no trial has reached yet (absent where the cells are not known
    in advance, as for adaptive searches and imports)."""
    counts = {k: 0 for k in (*STATE_KEYS.values(), "interrupted")}
    done = {_cell_key(c) for c in cells if c.state == "complete"}
    counts["superseded"] = 0
    for c in cells:
        state = "superseded" if c.state in ("failed", "interrupted") and _cell_key(c) in done \
            else c.state
        counts[state] = counts.get(state, 0) + 1
    total = _grid_cells(attrs)
    if total is not None:
        counts["not_started"] = max(0, total - len({_cell_key(c) for c in cells}))
    return counts


def _cell_key(c: Cell) -> tuple:
    return c.weight, c.seed, repr(sorted(c.point.items()))


def _grid_cells(attrs: dict) -> int | None:
    """The cells per central task of a launched grid: as the launch recorded them (a grid over
    any dimensions), else, for studies launched before that was recorded, a `weights:` grid's
    weights x seeds; None where the cells are not known up front."""
    spec = attrs.get(schema.A_SPEC)
    if attrs.get(schema.A_SOURCE) != schema.SOURCE_SWEEP or not isinstance(spec, dict):
        return None
    recorded = _as_count(attrs.get(schema.A_GRID_CELLS))
    if recorded is not None:
        return recorded
    weights, seeds = spec.get("weights"), spec.get("seeds")
    if "search" in spec or not isinstance(weights, list) or not isinstance(seeds, list):
        return None
    return len(set(map(str, weights))) * len(set(map(str, seeds)))


# What `build_central` reads of a trial (`weightsearch.studies.bulk` reads nothing else).
CELL_PARAMS = (schema.PARAM,)
CELL_ATTRS = (schema.T_SEED, schema.T_METRICS, schema.T_POINT, schema.T_FINETUNED_METRICS,
              schema.T_EPOCHS, schema.T_WALL_TIME, schema.T_CLIPPING, schema.T_FUSED,
              schema.T_MAJORITY, schema.T_ERROR, schema.T_UNIT)


def cell_trials(storage, study_id: int) -> list:
    return read_trials(storage, study_id, CELL_PARAMS, CELL_ATTRS)


def read_central(storage, name: str) -> CentralStudy:
    """Load one `<study>/<central>` Optuna study with its cells and curve."""
    import optuna

    study = optuna.load_study(study_name=name, storage=storage)  # a storage or its URL
    return build_central(name, schema.study_attrs(study), study.directions,
                         cell_trials(study._storage, study._study_id))


def is_staging(name: str) -> bool:
    """A study an import is still writing (or one a killed import left): no reader's."""
    return name.startswith(STAGING_PREFIX)


def study_names(storage) -> list[str]:
    # storage.get_all_studies, not optuna.get_all_study_summaries: the latter loads every trial
    # of every study (seconds for 10,000 trials) to count them.
    return sorted(s.study_name for s in storage.get_all_studies()
                  if not is_staging(s.study_name))


def read_all(storage) -> list[CentralStudy]:
    return StudyCache(storage).refresh()[1]


class StudyCache:
    """Every study of a storage, kept loaded: a refresh rebuilds only the studies whose trials
    changed state or number since the last one (one grouped count tells which)."""

    def __init__(self, storage) -> None:
        self.storage = storage
        self._seen: dict[str, tuple] = {}
        self._built: dict[str, CentralStudy] = {}

    def refresh(self) -> tuple[bool, list[CentralStudy]]:
        """(whether anything changed since the last refresh, every study, sorted by name)."""
        frozen = {s.study_name: s for s in self.storage.get_all_studies()
                  if not is_staging(s.study_name)}
        changed = set(frozen) != set(self._built)
        for name in list(self._built):
            if name not in frozen:  # deleted
                self._built.pop(name)
                self._seen.pop(name, None)
        counts = state_counts(self.storage)
        for name, fs in frozen.items():
            # A study deleted and made again under its name has a new id.
            seen = (fs._study_id, counts.get(fs._study_id, ()))
            if seen != self._seen.get(name) or name not in self._built:
                trials = cell_trials(self.storage, fs._study_id)
                attrs = schema.with_stored_spec(fs.user_attrs, fs.system_attrs)
                self._built[name] = build_central(name, attrs, fs.directions, trials)
                self._seen[name] = seen
                changed = True
        return changed, [self._built[n] for n in sorted(self._built)]


def resolve(storage, url: str, name: str) -> list[str]:
    """Optuna study names for `name`: a full `<study>/<central>` name or a base study name."""
    names = study_names(storage)
    if name in names:
        return [name]
    matches = [n for n in names if schema.split_study_name(n)[0] == name]
    if not matches:
        import difflib

        # A base name is compared with base names, a full `<study>/<central>` with full ones.
        known = sorted(set(names) if schema.SEPARATOR in name
                       else {schema.split_study_name(n)[0] for n in names})
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise StorageError(
            f"no study named {name!r} in {shown_url(url)}; {hint}`weightsearch inspect "
            f"--storage {shown_url(url)}` lists them"
        )
    return matches
