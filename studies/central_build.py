"""A CentralStudy from what the study database stores: a study's attributes, its directions
and its trials. Anything may share the database, so every stored value is read defensively: an
odd one is read as unknown, and a score no reader can use is left out with a note."""

from __future__ import annotations

import math
from typing import Any

from weightsearch.studies import schema
from weightsearch.studies.central import (
    STATE_KEYS,
    Cell,
    CentralStudy,
    cell_counts,
    weight_curve,
)
from weightsearch.studies.stored_values import (
    USABLE_LIMIT,
    as_count,
    as_float,
    as_int,
    as_str,
    usable,
)

TRAIN_SIZE_LIMIT = 10**12  # training examples: a stored size at or above it is unknown


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
    central = as_str(attrs.get(schema.A_CENTRAL)) or central or name
    notes: list[str] = []
    cells = _cells(name, central, foreign, trials, notes)
    train_size = _train_size(attrs.get(schema.A_TRAIN_SIZE))
    if train_size is None and attrs.get(schema.A_TRAIN_SIZE) is not None:
        notes.append(f"study {name}: its train_size {_shown(attrs[schema.A_TRAIN_SIZE])} is no "
                     f"number of examples (a whole number from 1 to {TRAIN_SIZE_LIMIT - 1}); "
                     "read as unknown")
    counts = cell_counts(cells, _grid_cells(attrs))
    return CentralStudy(
        name=name, study=as_str(attrs.get(schema.A_STUDY)) or base, central_task=central,
        task_type=as_str(attrs.get(schema.A_TASK_TYPE)),
        train_size=train_size,
        primary_metric=as_str(attrs.get(schema.A_PRIMARY)),
        source=schema.SOURCE_FOREIGN if foreign else str(source), maximize=maximize,
        counts=counts, curve=weight_curve(cells), cells=tuple(cells),
        encoder=as_str(attrs.get(schema.A_ENCODER)), stage=as_str(attrs.get(schema.A_STAGE)),
        variant=as_str(attrs.get(schema.A_VARIANT)),
        encoder_size=as_str(attrs.get(schema.A_ENCODER_SIZE)),
        dataset=as_str(attrs.get(schema.A_DATASET)) or _dataset_from_spec(attrs, central),
        group_metrics=_group_metrics(attrs),
        group_max_size=as_int(attrs.get(schema.A_GROUP_MAX_SIZE)),
        epochs=_spec_epochs(attrs),
        clip_template=_clip_template(attrs), notes=tuple(notes),
    )


def _fused(value: Any) -> tuple[str, ...]:
    """A trial's fused unit as its cell keys; anything else (absent, another tool's) is none."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value) and len(value) > 1:
        return tuple(value)
    return ()


def _trained_by(value: Any, central: str) -> float | None:
    """The central weight of the cell that trained a follower's updates; None for anything else
    (absent, another tool's)."""
    weights = value.get("weights") if isinstance(value, dict) else None
    return as_float(weights.get(central)) if isinstance(weights, dict) else None


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
            weight=None if foreign else as_float(t.params.get(schema.PARAM)),
            seed=as_int(t.user_attrs.get(schema.T_SEED)),
            state=_state(t),
            value=value,
            metrics=_flatten(t.user_attrs.get(schema.T_METRICS), dropped),
            point=_point(t.user_attrs.get(schema.T_POINT)),
            finetuned=_flatten(t.user_attrs.get(schema.T_FINETUNED_METRICS), dropped),
            epochs=as_count(t.user_attrs.get(schema.T_EPOCHS)),
            wall_s=as_float(t.user_attrs.get(schema.T_WALL_TIME)),
            clipping=_clipping(t.user_attrs.get(schema.T_CLIPPING)),
            fused=_fused(t.user_attrs.get(schema.T_FUSED)),
            majority=_majority(t.user_attrs.get(schema.T_MAJORITY), central),
            unit=u if isinstance(u := t.user_attrs.get(schema.T_UNIT), str) else None,
            trained_by=_trained_by(t.user_attrs.get(schema.T_SAME_TREATMENT), central),
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
    clip = as_float(clip)
    return (clip, mode) if clip is not None and isinstance(mode, str) else None


def _clipping(raw) -> dict:
    """A trial's clipping record, as far as it is well-formed (anything may share the database)."""
    from weightsearch.trainer.clipping import GRAD_CLIP_MODES

    if not isinstance(raw, dict):
        return {}
    clip, mode, tasks = as_float(raw.get("grad_clip")), raw.get("grad_clip_mode"), \
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


def _train_size(v) -> int | None:
    """A stored training-set size, when it is a whole number of examples below the limit."""
    number = as_float(v)
    if number is None or not number.is_integer() or not 0 < number < TRAIN_SIZE_LIMIT:
        return None
    return int(number)


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


def _grid_cells(attrs: dict) -> int | None:
    """The cells per central task of a launched grid: as the launch recorded them (a grid over
    any dimensions), else, for studies launched before that was recorded, a `weights:` grid's
    weights x seeds; None where the cells are not known up front."""
    spec = attrs.get(schema.A_SPEC)
    if attrs.get(schema.A_SOURCE) != schema.SOURCE_SWEEP or not isinstance(spec, dict):
        return None
    recorded = as_count(attrs.get(schema.A_GRID_CELLS))
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
              schema.T_MAJORITY, schema.T_ERROR, schema.T_UNIT, schema.T_SAME_TREATMENT)
