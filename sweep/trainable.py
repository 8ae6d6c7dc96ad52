"""The Ray Tune function trainable: one trial = one trainer run for one cell.

Checkpoints: the trainer writes an epoch checkpoint into the trial's own output folder in the
shared workdir, and `resume=True` continues from it. That folder is the single source of truth,
so no Ray checkpoint is reported: a Ray retry (FailureConfig) and a later `weightsearch resume`
both find the same folder and continue the interrupted cell instead of retraining it.

Results cross the Ray boundary as flat scalars plus JSON strings, because Tune flattens nested
dicts (`metrics/rte/accuracy`) before the searcher sees them.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from typing import Any

from sweep.spec import StudySpec

# Keys of the results this trainable reports (read by sweep.searcher).
OBJECTIVE = "objective"  # the central task's primary metric at this epoch (ASHA's metric)
EPOCH = "epoch"  # ASHA's time attribute
METRICS_JSON = "metrics_json"  # {task: {metric: value}} of this epoch
SUMMARY_JSON = "summary_json"  # only in the last report: the trainer's RunResult, as JSON


def run_cell(config: dict[str, Any], spec: StudySpec) -> None:
    """Train the cell named by `config` (central_task, weight, seed); report every epoch.

    `spec` arrives through `tune.with_parameters`, so Ray puts it in the object store once
    instead of copying it into every trial's config.
    """
    from ray import tune

    import trainer

    central, weight, seed = config["central_task"], config["weight"], config["seed"]
    out = attempt_dir(spec, central, weight, seed, int(config.get("attempt", 0)))
    cfg = trainer.load_config(spec.run_mapping(central, weight, seed, out))
    metric = spec.objective.metric
    metric = cfg.task(central).primary_metric if metric == "primary" else metric

    def report(epoch_report: Any) -> None:
        if epoch_report.stage != "multitask":
            return  # fine-tuning epochs count from 1 again; their scores arrive in the summary
        tune.report({
            EPOCH: int(epoch_report.epoch),
            OBJECTIVE: float(epoch_report.metrics[central][metric]),
            METRICS_JSON: json.dumps(epoch_report.metrics),
            "train_loss": _finite(epoch_report.train_loss),
            "elapsed_s": float(epoch_report.elapsed_s),
        })

    result = trainer.train(cfg, report=report, resume=True, quiet=True)
    summary = result.to_dict()
    last = max((h["epoch"] for h in result.history), default=0)
    tune.report({
        EPOCH: int(last),
        OBJECTIVE: float(result.stage_best(spec.objective.stage)[central][metric]),
        SUMMARY_JSON: json.dumps(summary, default=str),
    })


def attempt_dir(spec: StudySpec, central: str, weight: float, seed: int, attempt: int) -> str:
    """The folder of one attempt at a cell: no two attempts (or drivers) write the same folder.

    A later attempt starts as a copy of the newest earlier attempt's folder, so the trainer
    continues from that attempt's last epoch checkpoint. The copy is made under a temporary
    name and renamed, so a Ray retry of this attempt finds either nothing or the whole copy.
    """
    base = spec.trial_dir(central, weight, seed)
    out = base if attempt == 0 else f"{base}-attempt{attempt}"
    if attempt == 0 or os.path.isdir(out):
        return out
    for earlier in range(attempt - 1, -1, -1):
        source = base if earlier == 0 else f"{base}-attempt{earlier}"
        if os.path.isdir(os.path.join(source, "checkpoints")):
            partial = f"{out}.copying-{os.getpid()}"
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(source, partial)
            os.replace(partial, out)
            break
    return out


def _finite(value: float) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None
