"""A look at a run's first updates before a study spends whole cells on it: how far global
clipping leaves the central weight any say.

Under `grad_clip_mode: global` an update at weight w is clipped once w x ||g|| exceeds the clip,
and from there up every weight trains the same step. A study whose every searched weight lies
above that point trains one treatment under many labels. `probe_clipping` trains the first
updates of a cell exactly as the cell would (same config, seed and batch order; nothing
written), reads the central task's unweighted gradient norms, and combines them with every
factor the weighting scheme applies to the central weight over the whole run (SIWLM: 1 in focus,
`off_focus` elsewhere) into the weight above which every central update would be clipped.

A probe is an estimate: it sees the first updates only (past MAX_UPDATES, the central task's
next batches alone), and gradient norms drift as a run trains. The study's first finished
cell judges again from the whole run's record. A distilled central task is not probed (its
loss mixes soft targets the probe does not build).
"""

from __future__ import annotations

import dataclasses
import gc
import math
import tempfile
from dataclasses import dataclass

import torch

from weightsearch.trainer.config import RunConfig
from weightsearch.trainer.graphs import GraphPlan
from weightsearch.trainer.loop import set_up
from weightsearch.trainer.pipeline import silence_libraries
from weightsearch.trainer.stage import StageRun
from weightsearch.trainer.step import train_step
from weightsearch.trainer.weighting import build_scheme

CENTRAL_UPDATES = 8  # the central task's updates a probe reads
MAX_UPDATES = 48  # the most updates it trains to find them


@dataclass(frozen=True)
class ClipProbe:
    central_task: str
    updates: int  # updates the probe trained
    central_updates: int  # of them, the central task's
    smallest_norm: float | None  # the smallest unweighted gradient norm of the central task
    # The central weight above which every central update of the run would be clipped (from
    # the probe's norms and the scheme's factors); None where a clip cannot cut the weight
    # away (no clipping, `unweighted`, SMART's unweighted term, no central update seen, or no
    # update whose weight scales with it).
    saturates_at: float | None


def probe_clipping(cfg: RunConfig, central_updates: int = CENTRAL_UPDATES,
                   max_updates: int = MAX_UPDATES) -> ClipProbe:
    """Train the first updates of the run `cfg` describes until `central_updates` of its
    central task (at most `max_updates` in all), in a temporary folder, and judge its clipping.
    `cfg.output_dir` is not touched."""
    central = cfg.central_task
    if central is None:
        raise ValueError("a clipping probe needs a run with a central task")
    if cfg.distill is not None and central in cfg.distill.sources():
        return ClipProbe(central, 0, 0, None, None)
    if cfg.device == "cuda" and not torch.cuda.is_available():
        cfg = dataclasses.replace(cfg, device="auto")  # a driver without the trials' GPU
    silence_libraries()  # the driver's progress lines, not a loader's bars
    with tempfile.TemporaryDirectory(prefix="weightsearch-probe-") as folder:
        # set_up writes nothing in output_dir; a compile would cost more than the probe
        cfg = dataclasses.replace(cfg, output_dir=folder, compile=False)
        run = set_up(cfg, graphs=GraphPlan(False))
        try:
            trained, norms = _first_updates(run, central, central_updates, max_updates)
            factors = _weight_factors(run, central)
        finally:
            del run
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    smallest = min(norms) if norms else None
    acting = (cfg.grad_clip > 0 and cfg.grad_clip_mode == "global"
              and not cfg.adversarial.enabled)
    saturates = None
    if acting and smallest is not None and smallest > 0 and factors:
        saturates = cfg.grad_clip / (smallest * min(factors))
    return ClipProbe(central, trained, len(norms), smallest, saturates)


def _first_updates(run: StageRun, central: str, wanted: int, most: int
                   ) -> tuple[int, list[float]]:
    """Train the run's first updates (epoch 1's plan, in order), up to `most`; past that, where
    the central task's batches are rare among large auxiliary tasks, its next batches alone,
    until `wanted` of them. The number trained and the central task's unweighted gradient
    norms (read once, at the end)."""
    readings: list[tuple[float, torch.Tensor]] = []
    trained = 0
    run.model.train()  # dropout on, as the run trains
    for step, (task, indices) in enumerate(run.plans[1]):
        if trained >= most and task != central:
            continue
        record, reading = train_step(run, 1, step, task, indices)
        trained += 1
        if task == central and not record["skipped"]:
            readings.append((float(record["weight"]), reading))
            if len(readings) >= wanted:
                break
    if not readings:
        return trained, []
    values = torch.stack([r for _, r in readings]).cpu().tolist()
    norms = [norm / weight for (weight, _), (_, norm, _) in zip(readings, values, strict=True)]
    return trained, [n for n in norms if math.isfinite(n)]


def _weight_factors(run: StageRun, central: str) -> set[float]:
    """The factors the scheme applies to the central weight on the central task's batches,
    over the whole run: applied weight / central weight, for the batches whose weight scales
    with the central weight (a scheme at twice the weight applies twice as much). SIWLM's
    reference variant: 1 and off_focus; its paper variant: off_focus only (its focus batches
    train at 1 whatever the weight)."""
    settings = run.cfg.weighting
    nominal = getattr(settings, "central_weight", None)
    if not isinstance(nominal, int | float) or nominal <= 0:
        return set()
    doubled = build_scheme(dataclasses.replace(settings, central_weight=2 * nominal),
                           run.cfg.task_names, central)
    factors = set()
    for epoch, plan in run.plans.items():
        for step, (task, _) in enumerate(plan):
            if task != central:
                continue
            applied = run.scheme.weight(task, epoch, step)
            if applied > 0 and math.isclose(doubled.weight(task, epoch, step), 2 * applied,
                                            rel_tol=1e-9):
                factors.add(applied / nominal)
    return factors


__all__ = ["CENTRAL_UPDATES", "MAX_UPDATES", "ClipProbe", "probe_clipping"]
