"""`resources.gpu: auto` through real Ray Tune, on a GPU Ray is told exists (`num_gpus=1`; the
trials train nothing, so none is needed): the first trial asks for the whole GPU and runs
alone; once its measurement is in the study database (SQLite), the next trials are created
with half a GPU each and run at the same time."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

optuna = pytest.importorskip("optuna")
ray = pytest.importorskip("ray")

from optuna.trial import TrialState  # noqa: E402
from ray.tune.search import Searcher  # noqa: E402

from weightsearch.studies import schema as S  # noqa: E402
from weightsearch.studies.storage import open_storage  # noqa: E402
from weightsearch.sweep.gpu_gate import GpuGate  # noqa: E402
from weightsearch.sweep.gpu_share import GpuShares, TrialResources  # noqa: E402
from weightsearch.sweep.trainable import SUMMARY_JSON  # noqa: E402
from weightsearch.sweep.trial_end import finish_trial  # noqa: E402

pytestmark = pytest.mark.integration

# (3400 + 600) x 1.15 = 4,600 MiB a trial: two fit on 9,200 MiB.
MEASURED = {"peak_gpu_mib": 3_000.0, "peak_gpu_reserved_mib": 3_400.0, "gpu_total_mib": 9_200.0}


class Cells(Searcher):
    """One RUNNING Optuna trial of `packed/rte` per Tune trial, ended with the trial."""

    def __init__(self, study: optuna.Study) -> None:
        super().__init__(metric="objective", mode="max")
        self.study = study
        self.numbers: dict[str, int] = {}

    def suggest(self, trial_id: str) -> dict[str, Any]:
        self.numbers[trial_id] = self.study.ask().number
        return {"central_task": "rte", "cell": trial_id, "trial_number": self.numbers[trial_id]}

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        trial = self.study.get_trials()[self.numbers.pop(trial_id)]
        finish_trial(self.study, trial._trial_id, TrialState.COMPLETE, 0.7)


def test_trials_created_after_the_first_measurement_share_the_gpu(tmp_path: Path) -> None:
    from ray import tune

    def train(config: dict[str, Any]) -> None:
        started = time.time()
        time.sleep(4.0)
        share = tune.get_context().get_trial_resources().required_resources.get("GPU", 0.0)
        tune.report({"objective": 0.7, "started": started, "ended": time.time(),
                     "gpu": share, SUMMARY_JSON: json.dumps({**MEASURED, "finetuned": {}})})

    storage = open_storage(f"sqlite:///{tmp_path / 'packed.db'}")
    study = optuna.create_study(study_name="packed/rte", storage=storage, direction="maximize")
    gate = GpuGate(Cells(study), 2, gpu=0.0, gpus=1.0,
                   shares=GpuShares(storage.engine, "packed", print), studies={"rte": study},
                   tell=print)
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        results = tune.Tuner(
            tune.with_resources(train, TrialResources(1.0)),
            tune_config=tune.TuneConfig(search_alg=gate, num_samples=3),
            run_config=tune.RunConfig(storage_path=str(tmp_path / "ray"), verbose=0),
        ).fit()
    finally:
        ray.shutdown()
    runs = sorted((r.metrics for r in results), key=lambda m: m["started"])
    assert [m["gpu"] for m in runs] == [1.0, 0.5, 0.5]
    first, a, b = runs
    assert first["ended"] <= min(a["started"], b["started"])  # it measured alone
    assert a["started"] < b["ended"] and b["started"] < a["ended"]  # two at once
    trials = study.get_trials()
    assert sorted(t.user_attrs[S.T_GPU_SHARE] for t in trials) == [0.5, 0.5, 1.0]
    assert all(t.user_attrs[S.T_PEAK_GPU_RESERVED] == 3_400.0 for t in trials)
