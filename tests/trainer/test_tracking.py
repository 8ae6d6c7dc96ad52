"""TensorBoard and MLflow tracking on real tiny-encoder runs, read back with TensorBoard's event
reader and MLflow's client on a local file store."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.helpers import read_jsonl
from weightsearch.core.errors import ConfigError
from weightsearch.trainer import load_config, train

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")

from mlflow.tracking import MlflowClient
from tensorboard.backend.event_processing.event_accumulator import (
    EventAccumulator,
)


@pytest.fixture(autouse=True)
def _file_store(monkeypatch):
    # What the tracker sets for a file:// URI, set here too for the test's own client.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")


def _config(sample_data_dir, tiny_encoder, out: Path, mlruns: Path, **extra):
    return load_config({
        "encoder": tiny_encoder, "data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc"],
        "weighting": {"scheme": "siwlm", "central_weight": 9, "focus_span": 2},
        "epochs": 2, "batch_size": 16, "max_train_examples": 48, "max_eval_examples": 32,
        "output_dir": str(out), "log_every": 4, "precision": "fp32",
        "tracking": {"tensorboard": True, "mlflow": mlruns.as_uri()}, **extra})


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep them all
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)]
            for tag in events.Tags()["scalars"]}


def _check_against_logs(out: Path, scalars: dict, history: dict) -> None:
    steps = read_jsonl(out / "steps.jsonl")
    assert [s for s, _ in scalars["train/loss"]] == [r["global_step"] for r in steps]
    for key in ("loss", "lr", "weight"):
        for (step, value), row in zip(scalars[f"train/{key}"], steps, strict=True):
            assert value == pytest.approx(row[key], rel=1e-6), (key, step)
    rte_steps = [r["global_step"] for r in steps if r["task"] == "rte"]
    assert [s for s, _ in scalars["train/task_loss/rte"]] == rte_steps
    metrics = [r for r in read_jsonl(out / "metrics.jsonl") if r["task"] == "rte"]
    expected = [(r["epoch"], r["accuracy"]) for r in metrics]
    assert [(s, pytest.approx(v, abs=1e-6)) for s, v in scalars["eval/rte/accuracy"]] == expected
    assert [s for s, _ in history["eval/rte/accuracy"]] == [1, 2]
    assert [v for _, v in history["eval/rte/accuracy"]] == pytest.approx(
        [v for _, v in expected], abs=1e-9)
    assert [s for s, _ in history["train/weight"]] == [r["global_step"] for r in steps]


def _mlflow_run(mlruns: Path):
    client = MlflowClient(tracking_uri=mlruns.as_uri())
    experiment = client.get_experiment_by_name("weightsearch")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1, runs
    run = runs[0]
    history = {key: sorted((m.step, m.value) for m in client.get_metric_history(
        run.info.run_id, key)) for key in ("eval/rte/accuracy", "train/weight")}
    return run, history


@pytest.mark.slow
def test_a_run_logs_to_tensorboard_and_mlflow(sample_data_dir, tiny_encoder, tmp_path, capsys):
    out, mlruns = tmp_path / "run", tmp_path / "mlruns"
    train(_config(sample_data_dir, tiny_encoder, out, mlruns))
    printed = capsys.readouterr()
    # The epoch summary names each task's primary metric.
    assert "rte accuracy=" in printed.out + printed.err

    scalars = _scalars(out / "tensorboard")
    assert {"train/loss", "train/lr", "train/weight", "train/task_loss/mrpc", "eval/mrpc/f1",
            "train/epoch_loss"} <= set(scalars)
    run, history = _mlflow_run(mlruns)
    _check_against_logs(out, scalars, history)
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    assert run.data.params["central_task"] == "rte"
    assert float(run.data.params["weighting.central_weight"]) == 9
    assert run.data.tags["weightsearch.stage"] == "multitask"


@pytest.mark.slow
def test_a_resumed_run_continues_the_same_records(sample_data_dir, tiny_encoder, tmp_path):
    out, mlruns = tmp_path / "run", tmp_path / "mlruns"
    cfg = _config(sample_data_dir, tiny_encoder, out, mlruns)

    class Crash(Exception):
        pass

    def crash_after_first_epoch(report):
        if report.epoch == 1:
            raise Crash

    with pytest.raises(Crash):
        train(cfg, report=crash_after_first_epoch, quiet=True)
    train(cfg, resume=True, quiet=True)

    run, history = _mlflow_run(mlruns)  # one run, not one per attempt
    assert run.info.status == "FINISHED"
    _check_against_logs(out, _scalars(out / "tensorboard"), history)


def test_tracking_settings_are_checked_up_front(sample_data_dir, tmp_path):
    base = {"data_dir": str(sample_data_dir), "tasks": ["rte"]}
    with pytest.raises(ConfigError) as caught:
        load_config({**base, "tracking": {"tensorboard": "yes", "mlflow": "", "wandb": True,
                                          "mlflow_parent": "x' OR '1'='1"}})
    problems = caught.value.problems
    assert any(p.startswith("tracking.mlflow_parent: expected a run name") for p in problems)
    assert any(p.startswith("tracking.tensorboard: expected true or false") for p in problems)
    assert any(p.startswith("tracking.mlflow: expected a tracking URI") for p in problems)
    assert any(p.startswith("tracking.wandb: unknown setting") for p in problems)

    # A folder in a config file is a file store beside the file; a URI stays as it is.
    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / "run.yaml").write_text(
        f"data_dir: {sample_data_dir}\ntasks: [rte]\ntracking: {{mlflow: mlruns}}\n")
    cfg = load_config(folder / "run.yaml")
    assert cfg.tracking.mlflow == (folder / "mlruns").as_uri()
    cfg = load_config({**base, "tracking": {"mlflow": "sqlite:///mlflow.db"}})
    assert cfg.tracking.mlflow == "sqlite:///mlflow.db"
    # Off by default, and then absent from config.yaml (digests stay as they were).
    assert "tracking" not in load_config(base).to_dict()


def test_a_uri_mlflow_cannot_store_runs_at_is_refused_before_a_study_starts(
        sample_data_dir, tmp_path, capsys):
    from weightsearch.cli import main

    base = {"data_dir": str(sample_data_dir), "tasks": ["rte"]}
    with pytest.raises(ConfigError, match=r"tracking.mlflow: MLflow cannot store runs at "
                                          r"'ftp://host/runs'"):
        load_config({**base, "tracking": {"mlflow": "ftp://host/runs"}})
    assert load_config({**base, "tracking": {"mlflow": "postgresql+psycopg://u@h/db"}}) \
        .tracking.mlflow == "postgresql+psycopg://u@h/db"
    study = tmp_path / "s.yaml"
    study.write_text(f"study: s\ntrain:\n  data_dir: {sample_data_dir}\n  tasks: [rte]\n"
                     "  tracking: {mlflow: 'ftp://host/runs'}\n")
    assert main(["launch", str(study), "--storage", f"sqlite:///{tmp_path / 's.db'}"]) == 2
    err = capsys.readouterr().err
    assert "MLflow cannot store runs at 'ftp://host/runs'" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


@pytest.mark.slow
def test_runs_naming_one_parent_nest_under_one_parent_run(sample_data_dir, tiny_encoder,
                                                          tmp_path):
    from weightsearch.trainer.tracking import _parent_run

    mlruns = tmp_path / "mlruns"
    for name in ("a", "b"):
        cfg = _config(sample_data_dir, tiny_encoder, tmp_path / name, mlruns)
        train(dataclasses.replace(cfg, tracking=dataclasses.replace(
            cfg.tracking, mlflow_parent="study-1")), quiet=True)
    client = MlflowClient(tracking_uri=mlruns.as_uri())
    experiment = client.get_experiment_by_name("weightsearch").experiment_id
    runs = client.search_runs([experiment])
    parents = [r for r in runs if r.data.tags.get("weightsearch.parent") == "study-1"]
    assert len(parents) == 1 and parents[0].info.run_name == "study-1"
    children = sorted(r.info.run_name for r in runs
                      if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id)
    assert children == ["rte-a", "rte-b"]  # a study's cells: w9_s1 under every central task
    # Two creators racing without a lock: each keeps the older parent, the newer one goes.
    late = client.create_run(experiment, run_name="study-1",
                             tags={"weightsearch.parent": "study-1"})
    assert _parent_run(client, experiment, "study-1") == parents[0].info.run_id
    client.delete_run(late.info.run_id)


@pytest.mark.slow
def test_a_run_stopped_by_its_report_closes_its_writers(sample_data_dir, tiny_encoder,
                                                         tmp_path):
    """A report that stops the run (a halving stint, ASHA, a diverged loss) still closes its
    TensorBoard writer: a Ray worker that trains trial after trial keeps no thread per stop."""
    import threading

    class Stop(Exception):
        pass

    def stop(_report):
        raise Stop

    threads = []
    for i in range(3):
        cfg = _config(sample_data_dir, tiny_encoder, tmp_path / f"run{i}", tmp_path / "mlruns",
                      tracking={"tensorboard": True})
        with pytest.raises(Stop):
            train(cfg, report=stop, quiet=True)
        threads.append(threading.active_count())
    assert threads[0] == threads[1] == threads[2], threads
    assert _scalars(tmp_path / "run0" / "tensorboard")["train/loss"]  # what it wrote is there
