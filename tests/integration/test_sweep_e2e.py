"""End to end: a real study on Ray with the tiny encoder, read back through Optuna's API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from weightsearch.studies import schema as S
from weightsearch.sweep.space import CENTRAL_WEIGHT

pytestmark = pytest.mark.integration


def study_dict(name: str, tiny_encoder: str, data_dir: Path, tmp_path: Path) -> dict:
    return {
        "study": name, "allow_inert": True,
        "storage": f"sqlite:///{tmp_path / 'studies.db'}",
        "train": {
            "encoder": tiny_encoder,
            "data_dir": str(data_dir),
            "tasks": ["rte", "mrpc", "stsb"],
            "epochs": 1,
            "batch_size": 16,
            "max_train_examples": 32,
            "max_eval_examples": 32,
            "tracking": {"tensorboard": True, "mlflow": str(tmp_path / "mlruns")},
        },
        "central_tasks": ["rte", "stsb"],
        "weights": [1, 9],
        "seeds": [1],
        "workdir": str(tmp_path / "runs"),
    }


def test_study_runs_every_cell_exactly_once(
    tiny_encoder: str, sample_data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import optuna
    import ray
    from optuna.trial import TrialState

    from weightsearch.sweep.launch import launch
    from weightsearch.sweep.spec import load_study_spec

    spec = load_study_spec(study_dict("e2e", tiny_encoder, sample_data_dir, tmp_path))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        summary = launch(spec, progress=False)
        assert summary.finished and summary.ran == 4 and summary.failed == 0
        assert {c.central for c in summary.centrals} == {"rte", "stsb"}

        url = spec.storage
        assert sorted(optuna.get_all_study_names(url)) == ["e2e/rte", "e2e/stsb"]
        for central, task_type, metric in (("rte", "classification", "accuracy"),
                                           ("stsb", "regression", "corr")):
            study = optuna.load_study(study_name=f"e2e/{central}", storage=url)
            attrs = S.study_attrs(study)  # the study file is a system attribute
            assert attrs[S.A_CENTRAL] == central and attrs[S.A_TASK_TYPE] == task_type
            assert attrs[S.A_PRIMARY] == metric and attrs[S.A_TRAIN_SIZE] == 32
            assert attrs[S.A_AUX_TASKS] == [t for t in ("rte", "mrpc", "stsb") if t != central]
            assert attrs[S.A_AUX_SIZES] == dict.fromkeys(attrs[S.A_AUX_TASKS], 32)
            assert attrs[S.A_DIGEST] == spec.digest() and attrs[S.A_SOURCE] == S.SOURCE_SWEEP
            assert attrs[S.A_VARIANT] == "reference" and attrs[S.A_ENCODER] == tiny_encoder
            assert attrs[S.A_SPEC] == spec.to_dict()

            trials = study.get_trials()
            assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
            assert sorted(t.params[S.PARAM] for t in trials) == [1.0, 9.0]
            for t in trials:
                ua = t.user_attrs
                assert ua[S.T_CELL] == S.cell_key(t.params[S.PARAM], 1) and ua[S.T_SEED] == 1
                assert ua[S.T_ATTEMPT] == 0 and ua[S.T_BEST_EPOCH] == 1
                assert t.intermediate_values == {1: t.value}
                assert t.value == ua[S.T_METRICS][central][metric]
                assert set(ua[S.T_METRICS]) == {"rte", "mrpc", "stsb"}
                assert ua[S.T_FINAL_METRICS] == ua[S.T_METRICS]
                assert [h["epoch"] for h in ua[S.T_HISTORY]] == [1]
                assert ua[S.T_WALL_TIME] > 0 and ua[S.T_EXAMPLES_PER_S] > 0
                cell_dir = Path(spec.trial_dir(central, {CENTRAL_WEIGHT: t.params[S.PARAM]}, 1))
                assert (cell_dir / "checkpoints").is_dir() or any(cell_dir.iterdir())

        # Ray's own result files are kept: its analysis tools read the study folder.
        from ray.tune import ExperimentAnalysis

        experiments = sorted((Path(spec.workdir) / "ray").iterdir())
        assert len(experiments) == 1 and experiments[0].name.startswith("e2e-")
        frame = ExperimentAnalysis(str(experiments[0])).dataframe()
        assert len(frame) == 4 and set(frame["config/central_task"]) == {"rte", "stsb"}
        assert frame["objective"].notna().all()
        # Tune's conventions: one iteration per epoch, the last one done, every metric its own
        # column, the searched setting its own config key, the trial's study value alone.
        assert (frame["training_iteration"] == 1).all() and frame["done"].all()
        assert {"rte/accuracy", "mrpc/f1", "stsb/corr"} <= set(frame.columns)
        assert sorted(frame["config/weighting.central_weight"]) == [1.0, 1.0, 9.0, 9.0]
        assert frame["value"].notna().all()
        assert list(experiments[0].glob("*/events.out.tfevents.*"))  # TensorBoard reads it

        # Every trial is one MLflow run in the file store, with its cell's settings and
        # curves, and writes TensorBoard events in its own folder.
        from mlflow.tracking import MlflowClient

        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # as the trainer sets it
        client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
        runs = client.search_runs([client.get_experiment_by_name("weightsearch").experiment_id])
        cells = sorted((r.data.params["central_task"],
                        float(r.data.params["weighting.central_weight"])) for r in runs
                       if "central_task" in r.data.params)
        assert cells == [("rte", 1.0), ("rte", 9.0), ("stsb", 1.0), ("stsb", 9.0)]
        # The trials are the children of one parent run named after the study.
        parents = [r for r in runs if r.data.tags.get("weightsearch.parent") == "e2e"]
        assert len(parents) == 1 and parents[0].info.run_name == "e2e"
        runs = [r for r in runs if r not in parents]
        assert {r.data.tags.get("mlflow.parentRunId") for r in runs} == {parents[0].info.run_id}
        for r in runs:
            assert r.info.status == "FINISHED"
            central = r.data.params["central_task"]
            assert client.get_metric_history(r.info.run_id, f"eval/{central}/"
                                             f"{'accuracy' if central == 'rte' else 'corr'}")
            weight = float(r.data.params["weighting.central_weight"])
            folder = Path(spec.trial_dir(central, {CENTRAL_WEIGHT: weight}, 1))
            assert list(folder.rglob("events.out.tfevents.*")), folder

        # Exactly once: a second launch finds nothing pending and trains nothing.
        again = launch(spec, progress=False)
        assert again.ran == 0 and again.finished
        for central in ("rte", "stsb"):
            assert len(optuna.load_study(study_name=f"e2e/{central}", storage=url).trials) == 2

        # Same name, different training setup: refused before anything is written.
        from weightsearch.core.errors import ConfigError

        changed = study_dict("e2e", tiny_encoder, sample_data_dir, tmp_path)
        changed["train"]["epochs"] = 2
        with pytest.raises(ConfigError, match="different configuration"):
            launch(load_study_spec(changed), progress=False)
        # ... whatever central tasks it names: a study is one configuration.
        other = study_dict("e2e", tiny_encoder, sample_data_dir, tmp_path)
        other["central_tasks"] = ["mrpc"]
        with pytest.raises(ConfigError, match=r"study 'e2e/rte' .*different configuration"):
            launch(load_study_spec(other), progress=False)
        assert "e2e/mrpc" not in optuna.get_all_study_names(url)
    finally:
        ray.shutdown()


def test_study_scored_on_the_finetuned_stage(
    tiny_encoder: str, sample_data_dir: Path, tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    import optuna
    import ray

    from weightsearch.studies.inspection import best_rows
    from weightsearch.studies.reading import read_central
    from weightsearch.sweep.launch import launch
    from weightsearch.sweep.spec import load_study_spec

    raw = study_dict("ft", tiny_encoder, sample_data_dir, tmp_path)
    raw["train"]["finetune"] = {"tasks": "central", "epochs": 1}
    # STS-B's correlation differs between the stages (two accuracies on 32 dev rows may not).
    raw["central_tasks"] = ["stsb"]
    raw["objective"] = {"stage": "finetuned", "metric": "primary"}
    spec = load_study_spec(raw)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        summary = launch(spec, progress=True)
        assert summary.finished and summary.failed == 0
    finally:
        ray.shutdown()
    # No silence while a trial fine-tunes: its epochs reach the progress lines.
    assert "[ft] fine-tuning stsb epoch 1 (stsb w=" in capfd.readouterr().err
    study = optuna.load_study(study_name="ft/stsb", storage=spec.storage)
    assert study.user_attrs[S.A_STAGE] == "finetuned"
    for t in study.get_trials():
        tuned, multitask = t.user_attrs[S.T_FINETUNED_METRICS], t.user_attrs[S.T_METRICS]
        assert set(tuned) == {"stsb"}
        assert set(multitask) == {"rte", "mrpc", "stsb"}  # both stages kept
        assert tuned["stsb"]["corr"] != multitask["stsb"]["corr"]  # the stages differ, and
        assert t.value == tuned["stsb"]["corr"]  # the value is the fine-tuned score
        # Optuna's intermediate values are the fine-tuned epochs': they lead to the value.
        assert list(t.intermediate_values) == [1]
        assert t.intermediate_values[1] == t.value
    central = read_central(spec.storage, "ft/stsb")
    assert central.stage == "finetuned" and best_rows([central])[0]["stage"] == "finetuned"
    # inspect says which stage each number comes from.
    from weightsearch.studies.inspection import inspect

    text = inspect(spec.storage, "ft")
    assert "value: stsb corr at the best epoch of the finetuned stage" in text
    header = next(line for line in text.splitlines() if "central_weight" in line)
    assert "multitask.stsb.corr" in header and "finetuned.stsb.corr" in header
    assert "multitask.rte.accuracy" in header


@pytest.mark.parametrize(("objective", "words"), [
    ({"stage": "finetuned"}, "turn it on with train.finetune"),
    ({"stage": "final"}, "objective.stage: 'final' is not one of"),
    ({"goal": 1}, "objective.goal: unknown"),
])
def test_bad_objectives_are_refused(tiny_encoder, sample_data_dir, tmp_path, objective, words):
    from weightsearch.core.errors import ConfigError
    from weightsearch.sweep.spec import load_study_spec

    raw = study_dict("bad", tiny_encoder, sample_data_dir, tmp_path)
    raw["objective"] = objective
    with pytest.raises(ConfigError) as err:
        load_study_spec(raw)
    assert words in str(err.value)


def test_a_reused_worker_trains_what_a_fresh_one_would(
    tiny_encoder: str, sample_data_dir: Path, tmp_path: Path
) -> None:
    """One worker trains the four cells one after another (reuse_workers, the default), and
    again with a fresh process per trial: every cell's score and peak memory come out the
    same way, and the reused worker's process serves more than one trial."""
    import optuna
    import ray

    from weightsearch.sweep.launch import launch
    from weightsearch.sweep.spec import load_study_spec

    values: dict[tuple, list] = {}
    pids: dict[bool, set] = {}
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        for reuse in (True, False):
            raw = study_dict(f"reuse-{reuse}", tiny_encoder, sample_data_dir, tmp_path)
            raw["train"].pop("tracking")
            raw.update(reuse_workers=reuse, max_concurrent=1,
                       storage=f"sqlite:///{tmp_path / f'{reuse}.db'}",
                       workdir=str(tmp_path / f"runs-{reuse}"))
            spec = load_study_spec(raw)
            assert spec.reuse_workers is reuse
            summary = launch(spec, progress=False)
            assert summary.finished and summary.ran == 4 and summary.failed == 0
            for central in ("rte", "stsb"):
                study = optuna.load_study(study_name=f"reuse-{reuse}/{central}",
                                          storage=spec.storage)
                for t in study.get_trials():
                    values.setdefault((central, t.params[S.PARAM]), []).append(t.value)
            # Tune's own result lines name the worker process of every trial.
            pids[reuse] = {json.loads(line)["pid"]
                           for f in (tmp_path / f"runs-{reuse}" / "ray").rglob("result.json")
                           for line in f.read_text().splitlines() if line.strip()}
    finally:
        ray.shutdown()
    assert len(values) == 4 and all(len(v) == 2 and v[0] == v[1] for v in values.values()), \
        values
    assert len(pids[False]) == 4 and len(pids[True]) < 4, pids
