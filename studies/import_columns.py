"""The columns of an import file (`weightsearch import`), the rules of their cells and the row
they make.

File format (CSV, TSV or JSONL), one row per (central task, central weight, seed):
    central_task, task_type, train_size, central_weight, seed, metric
Optional: `metric_name` (the primary metric's name, one per task; default "metric"), the
regime the results were measured in, one per task: `encoder`, `stage` (multitask | finetuned),
`variant` (the weighting variant) and the gradient clipping, `grad_clip` (0: none) with
`grad_clip_mode` (global, the default, or unweighted); without them the recommender counts the
task as encoder "unknown", stage multitask, clipping unknown; per row, `clip_share` (the share
of the central task's updates clipped, 0..1) and `central_norm` (their median unweighted
gradient norm); and `dataset`, one per task: the data the task is drawn from, when
several central tasks are sizes of one dataset (e.g. sst2_125 and sst2_4000, dataset sst2), so
that the recommender counts them as one task (default: the central task). Any other
column with numbers is kept as a further metric of the central task (e.g. f1); others are ignored.

Each cell is checked by its column's rule: numbers finite and in their range (a metric by its
name: `metric_range`; train_size below 10**12; seed within the trainer's range), names one
printable line.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from weightsearch.core.fields import MAX_SEED, setting
from weightsearch.studies import schema
from weightsearch.trainer import (
    task_types,  # NAMES is read when a row is checked: the registry is live
)
from weightsearch.trainer.clipping import GRAD_CLIP_MODES

NAME_MAX = 200  # characters of a task, metric, encoder, variant or dataset name
TRAIN_SIZE_LIMIT = 10**12  # training examples: more is a typo or an overflow
# The largest magnitude of a number the file may give where no tighter range is known (a
# metric of an unknown name, a gradient norm): far inside what the readers use
# (`weightsearch.studies.reading.USABLE_LIMIT`), so a sum over millions of trials stays finite.
VALUE_LIMIT = 1e9


def finite_number(text: Any) -> float | None:
    """A finite number written in a cell, else None."""
    try:
        v = float(text)
    except (TypeError, ValueError, OverflowError):
        return None
    return v if math.isfinite(v) else None


def _whole(text: Any) -> int | None:
    """A whole number written in a cell, read exactly: "18446744073709551617" stays itself
    (through a float it would become another number); "3.0" and "1e3" are whole too."""
    try:
        return int(str(text).strip())
    except ValueError:  # not digits (or beyond int's 4,300 digits)
        number = finite_number(text)
        return int(number) if number is not None and number.is_integer() else None


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


# --- the rules of a cell (every cell of an import file is read as text) --------------------
@dataclass(frozen=True)
class _Numeral:
    """A finite number written in a cell: a whole one where `whole`, above 0 where
    `positive`, within `bounds` where given; `fix` says what a valid one is."""

    whole: bool = False
    positive: bool = False
    bounds: tuple[float, float] | None = None
    fix: str = ""

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        number = _whole(value) if self.whole else finite_number(value)
        if number is None or (self.positive and number <= 0):
            kind = f"a {'positive ' * self.positive}{'whole ' * self.whole}number"
            return None, f"{key} {value!r} is not {kind}"
        if self.bounds is not None and not self.bounds[0] <= number <= self.bounds[1]:
            shown = str(number) if isinstance(number, int) and abs(number) < 10**30 \
                else f"{float(number):g}"
            return None, (f"{key} {shown} is outside {_bound(self.bounds[0])}.."
                          f"{_bound(self.bounds[1])}{self.fix}")
        return number, None


@dataclass(frozen=True)
class _OneOf:
    """One of the names `names()` gives when the cell is checked, in their letter case."""

    names: Callable[[], tuple[str, ...]]

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        text = str(value).strip()
        if text not in self.names():
            return None, f"{key} {text!r} is not one of {', '.join(self.names())}"
        return text, None


def _name_problem(key: str, text: str) -> str | None:
    """What makes `text` no name: blank, a control character (a newline, NUL, ...), too long."""
    if not text:
        return f"{key} is blank; give a name"
    if not text.isprintable():
        bad = next(c for c in text if not c.isprintable())
        return (f"{key} {text[:40]!r} holds the control character {bad!r}; names are one "
                "line of printable characters")
    if len(text) > NAME_MAX:
        return f"{key} {text[:40]!r}... has {len(text)} characters; shorten it to {NAME_MAX}"
    return None


@dataclass(frozen=True)
class _Name:
    """A name: one line of printable characters, at most NAME_MAX, kept stripped; with
    `study_part`, without the study-name separator (it becomes part of a study name)."""

    study_part: bool = False

    def check(self, key: str, value: Any) -> tuple[Any, str | None]:
        text = str(value).strip()
        if self.study_part and (not text or schema.SEPARATOR in text):
            return None, f"{key} {text!r} must be a non-empty name without {schema.SEPARATOR!r}"
        problem = _name_problem(key, text)
        return (None, problem) if problem else (text, None)


# --- the range of a metric, by its name ----------------------------------------------------
# The names the trainer's metrics go by (trainer/metrics.py, the task types' SQuAD metrics) and
# the paper's table's. Scores may be fractions or percentages (the paper's table is in %).
_CORRELATIONS = {"mcc", "matthews", "pearson", "spearman", "corr", "correlation", "kendall"}
_SCORES = {"accuracy", "acc", "f1", "exact", "em", "precision", "recall", "auc", "roc",
           "bleu", "rouge", "map", "mrr", "ndcg"}
_LOSSES = {"loss", "nll", "perplexity", "ppl", "mse", "mae", "rmse"}


def metric_range(name: str) -> tuple[float, float, str]:
    """(low, high, what it is) for a metric called `name`: by the words of its name."""
    words = set(re.split(r"[^a-z0-9]+", name.lower()))
    if "thresh" in words or "threshold" in words:  # SQuAD's best_f1_thresh: a log-odds cut
        return -VALUE_LIMIT, VALUE_LIMIT, "a threshold"
    if words & _LOSSES:
        return 0.0, VALUE_LIMIT, "a loss or error (not negative)"
    if words & _CORRELATIONS:
        return -100.0, 100.0, "a correlation (-1..1, or -100..100 in percent)"
    if words & _SCORES:
        return 0.0, 100.0, "a score (0..1, or 0..100 in percent)"
    return -VALUE_LIMIT, VALUE_LIMIT, "a metric of an unknown kind"


def metric_problem(key: str, name: str, value: float) -> str | None:
    low, high, what = metric_range(name)
    if low <= value <= high:
        return None
    return (f"{key} {value:g} is outside {low:g}..{high:g}, the range of {name} ({what}); "
            "check the value, or name the metric in metric_name")


@dataclass(frozen=True)
class ImportColumns:
    """The columns of an import file, in the order their problems are listed: the required
    ones, then the optional ones with the value a blank cell leaves."""

    central_task: str = setting(rule=_Name(study_part=True))
    task_type: str = setting(rule=_OneOf(lambda: task_types.NAMES))
    train_size: int = setting(rule=_Numeral(
        whole=True, positive=True, bounds=(1, TRAIN_SIZE_LIMIT - 1),
        fix="; give the central task's number of training examples"))
    central_weight: float = setting(rule=_Numeral(bounds=(schema.WEIGHT_LOW,
                                                          schema.WEIGHT_HIGH)))
    seed: int = setting(rule=_Numeral(whole=True, bounds=(0, MAX_SEED),
                                      fix="; give the seed the run used (the trainer's range)"))
    metric: float = setting(rule=_Numeral())  # its range by metric_name: `metric_problem`
    metric_name: str = setting("metric", _Name())  # the primary metric's name
    # The regime the results were measured in; absent: encoder "unknown", stage multitask.
    encoder: str | None = setting(None, _Name())
    stage: str | None = setting(None, _OneOf(lambda: schema.STAGES))
    variant: str | None = setting(None, _Name())
    dataset: str | None = setting(None, _Name())  # the data the task is drawn from
    # The gradient clipping the scores were trained with (trainer.clipping), one per task;
    # absent: not recorded. grad_clip alone means the reference's global clipping.
    grad_clip: float | None = setting(None, _Numeral(bounds=(0.0, VALUE_LIMIT)))
    grad_clip_mode: str | None = setting(None, _OneOf(lambda: GRAD_CLIP_MODES))
    # Per row: the share of the central task's updates clipped, and the median norm of its
    # unweighted gradient (what `weightsearch export` writes from a run's record).
    clip_share: float | None = setting(None, _Numeral(bounds=(0.0, 1.0)))
    central_norm: float | None = setting(None, _Numeral(bounds=(0.0, VALUE_LIMIT)))
    # The weights above which every in-focus, every off-focus central update was clipped
    # (global clipping; trainer.clipping.clip_summary).
    saturates_in_focus: float | None = setting(None, _Numeral(bounds=(0.0, VALUE_LIMIT)))
    saturates_off_focus: float | None = setting(None, _Numeral(bounds=(0.0, VALUE_LIMIT)))
    # What the searched weight set: loss (SIWLM's loss weight; also when blank) or sampling
    # (the central task's sampling rate, `weight_acts_on` of the study file).
    weight_acts_on: str | None = setting(None, _OneOf(lambda: ("loss", "sampling")))


_COLUMNS = dataclasses.fields(ImportColumns)
REQUIRED = tuple(f.name for f in _COLUMNS if f.default is dataclasses.MISSING)
OPTIONAL = tuple(f.name for f in _COLUMNS if f.default is not dataclasses.MISSING)
REGIME = ("encoder", "stage", "variant")


@dataclass(frozen=True)
class ImportRow:
    line: int
    central_task: str
    task_type: str
    train_size: int
    weight: float
    seed: int
    metric: float
    metric_name: str
    extra: dict[str, float]
    regime: dict[str, str] = field(default_factory=dict)  # encoder/stage/variant when given
    dataset: str | None = None
    clipping: tuple[float, str] | None = None  # (grad_clip, grad_clip_mode) when given
    clip_share: float | None = None
    central_norm: float | None = None
    saturates: tuple[float | None, float | None] = (None, None)  # in focus, off focus
    acts_on: str = "loss"  # what the weight set: loss, or sampling (the central task's rate)
