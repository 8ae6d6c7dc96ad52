"""What a live cell's Tune results become in its Optuna trial: the epochs it reports on the way
(intermediate values), and at its end its value, user attributes and the values still owed,
read from its run's summary; a stopped or failed cell's history; a failed trial's error text.
The searcher writes them (`sweep/searcher.py`, through `sweep/trial_end.py`)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from weightsearch.studies import schema as S
from weightsearch.sweep.driver_state import LiveCell
from weightsearch.sweep.trainable import (
    EPOCH,
    METRICS_JSON,
    OBJECTIVE,
    STINT_END,
    SUMMARY_JSON,
    epoch_objective,
)


def absorb(live: LiveCell, result: dict[str, Any], check_file: Callable[[], None]) -> None:
    """Keep what one Tune result says of `live`: its summary, or an epoch's metrics and
    objective, reported to Optuna as an intermediate value once (`check_file` first)."""
    if SUMMARY_JSON in result:
        live.summary = json.loads(result[SUMMARY_JSON])
        if METRICS_JSON not in result:  # a summary alone: its objective is no epoch's
            return
    if EPOCH not in result or OBJECTIVE not in result:
        return
    epoch, value = int(result[EPOCH]), float(result[OBJECTIVE])
    if METRICS_JSON in result:
        live.history[epoch] = json.loads(result[METRICS_JSON])
    if result.get(STINT_END):
        live.stint_end = True
    if epoch not in live.values and math.isfinite(value):
        live.values[epoch] = value
        if live.plan.stage == "multitask":  # Optuna's intermediate values: the scored stage's
            check_file()
            live.trial.report(value, step=epoch)  # a retried trial re-reports nothing twice


def completed(live: LiveCell, weight_acts_on: str
              ) -> tuple[float, dict[str, Any], dict[int, float]]:
    """The trial's value, its user attributes and the intermediate values not yet
    reported, from its summary."""
    summary, central = live.summary or {}, live.plan.central
    history = summary.get("history") or []
    if live.plan.primary_metric == S.GROUP_MEAN:
        return _completed_group(live, summary, history)
    best_epoch = int(summary["best_epoch"][central])
    at_best: dict[str, Any] = next(
        (h["metrics"] for h in history if h["epoch"] == best_epoch), {})
    tuned = summary.get("finetuned") or {}
    scored = tuned[central]["best"] if live.plan.stage == "finetuned" else summary["best"]
    value = float(scored[central][live.plan.primary_metric])
    attrs: dict[str, Any] = {}
    steps: dict[int, float] = {}
    if tuned:
        attrs[S.T_FINETUNED_METRICS] = {t: run["best"][t] for t, run in tuned.items()}
    for h in history:  # epochs trained before a resume reach Optuna here
        if h["epoch"] not in live.values:
            live.values[h["epoch"]] = float(h["metrics"][central][live.plan.primary_metric])
            if live.plan.stage == "multitask":
                steps[h["epoch"]] = live.values[h["epoch"]]
    if live.plan.stage == "finetuned":  # its epochs, so that the values lead to the value
        for h in tuned[central].get("history") or []:
            score = h["metrics"][central][live.plan.primary_metric]
            if isinstance(score, int | float) and math.isfinite(score):
                steps[h["epoch"]] = float(score)
    attrs.update(_end_attrs(summary, at_best, best_epoch))
    if weight_acts_on != "loss" and S.T_CLIPPING in attrs:
        # the clip cut SIWLM's loss weight of 1, not the searched sampling rate: readers
        # must not judge weights one treatment from this record (`treatments.clipped_away`)
        attrs[S.T_CLIPPING] = {**attrs[S.T_CLIPPING], S.WEIGHT_ACTS_ON: weight_acts_on}
    if live.fused and (live.alone_after_all or summary.get("fused_members", 1) <= 1):
        attrs[S.T_FUSED] = []  # created fused, it trained alone after all: say so
    return value, attrs, steps


def _completed_group(live: LiveCell, summary: dict[str, Any], history: list[dict[str, Any]]
                     ) -> tuple[float, dict[str, Any], dict[int, float]]:
    """A network of a budgeted grouping study: one epoch for all its tasks, the one where
    the mean of their primary metrics peaks (the first on a tie); every task's metrics
    at that epoch are its scores in this network."""
    steps: dict[int, float] = {}
    for h in history:  # epochs trained before a resume reach Optuna here
        if h["epoch"] not in live.values:
            live.values[h["epoch"]] = epoch_objective(h["metrics"], h["primary"], "",
                                                      S.GROUP_MEAN)
            steps[h["epoch"]] = live.values[h["epoch"]]
    means = {h["epoch"]: epoch_objective(h["metrics"], h["primary"], "", S.GROUP_MEAN)
             for h in history}
    best_epoch = max(means, key=lambda e: (means[e], -e))
    at_best = next(h["metrics"] for h in history if h["epoch"] == best_epoch)
    return means[best_epoch], _end_attrs(summary, at_best, best_epoch), steps


def history_attrs(live: LiveCell) -> dict[str, Any]:
    """What a stopped or failed trial got through, for inspection."""
    if not live.history:
        return {}
    history = [{"epoch": e, "metrics": m, "primary": {live.plan.central: live.values.get(e)}}
               for e, m in sorted(live.history.items())]
    best = max(live.values, key=lambda e: (live.values[e], -e))
    return {S.T_HISTORY: history, S.T_BEST_EPOCH: best, S.T_EPOCHS: len(history),
            S.T_METRICS: live.history.get(best, {}),
            S.T_FINAL_METRICS: history[-1]["metrics"]}


def error_text(tune_trial: Any) -> str:
    """The last line of the trial's error file: usually the exception and its message."""
    path = getattr(tune_trial, "error_file", None)
    if not path or not Path(path).is_file():
        return "the trial raised an error (see the Ray trial folder)"
    lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("Failure #")]
    return lines[-1][:500] if lines else "the trial raised an error"


def _end_attrs(summary: dict[str, Any], at_best: dict[str, Any],
               best_epoch: int) -> dict[str, Any]:
    """A finished trial's user attributes, from its run's summary."""
    return {
        S.T_METRICS: at_best,
        S.T_FINAL_METRICS: summary.get("final", {}),
        S.T_HISTORY: summary.get("history") or [],
        S.T_BEST_EPOCH: best_epoch,
        S.T_EPOCHS: len(summary.get("history") or []),
        S.T_WALL_TIME: float(summary.get("wall_time_s", 0.0)),
        S.T_EXAMPLES_PER_S: float(summary.get("train_examples_per_s", 0.0)),
        "output_dir": summary.get("output_dir"),
        **({S.T_CLIPPING: summary["clipping"]} if summary.get("clipping") else {}),
        **({S.T_MAJORITY: summary["majority"]} if summary.get("majority") else {}),
        **({S.T_SAME_TREATMENT: summary["same_treatment"]}
           if summary.get("same_treatment") else {}),
    }
