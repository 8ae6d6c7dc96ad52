"""Relative paths in a run-config file start at the file's folder; --set and mappings at the
working directory. The shipped examples load and train from any working directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import EXAMPLES, ROOT
from weightsearch.cli import main
from weightsearch.core.errors import ConfigError
from weightsearch.trainer import load_config, train

RUN_EXAMPLES = sorted(p for p in EXAMPLES.glob("*.yaml") if not p.name.startswith("study-"))


def test_paths_in_a_file_start_at_its_folder(tmp_path, monkeypatch, sample_data_dir):
    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    shutil.copytree(sample_data_dir / "RTE", project / "glue" / "RTE")
    shutil.copytree(sample_data_dir / "MRPC", project / "qa" / "MRPC")
    (project / "teacher").mkdir()
    (project / "configs" / "run.yaml").write_text(
        "data_dir: ../glue\n"
        "tasks: [rte, {preset: mrpc, data_dir: ../qa}]\n"
        "output_dir: ../runs/a\n"
        "cache_dir: ../cache\n"
        "init_from: ../teacher\n"
        "distill: {teachers: {mrpc: [../teacher]}}\n"
        "tracking: {mlflow: ../mlruns}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(Path("..") / "project" / "configs" / "run.yaml")
    assert cfg.data_dir == str(project / "glue")
    assert cfg.output_dir == str(project / "runs" / "a")
    assert cfg.cache_dir == str(project / "cache")
    assert cfg.init_from == str(project / "teacher")
    assert cfg.distill.teachers == (("mrpc", (str(project / "teacher"),)),)
    assert cfg.tracking.mlflow == (project / "mlruns").as_uri()
    assert cfg.task("mrpc").train_file == str(project / "qa" / "MRPC" / "train.tsv")
    assert cfg.task("rte").train_file == "RTE/train.tsv"  # still relative to data_dir

    # --set values start at the working directory, as paths on a command line do.
    (elsewhere / "glue2").mkdir()
    cfg = load_config(project / "configs" / "run.yaml",
                      ["data_dir=glue2", "output_dir=out", "distill=null"])
    assert cfg.data_dir == str(elsewhere / "glue2") and cfg.output_dir == str(elsewhere / "out")
    # So do a mapping's: a sweep's trial config, a script's dict.
    assert load_config({"data_dir": "glue2", "tasks": ["rte"]}).data_dir == str(elsewhere / "glue2")


def test_a_missing_folder_names_where_it_was_looked_for(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "run.yaml").write_text("data_dir: data/glue_sample\ntasks: [rte]\n")
    monkeypatch.chdir(ROOT)  # where data/glue_sample does exist: the file's folder counts
    with pytest.raises(ConfigError) as caught:
        load_config(folder / "run.yaml")
    [problem] = caught.value.problems
    assert str(folder / "data" / "glue_sample") in problem
    assert "start at the file's folder" in problem
    assert "e.g. data/glue_sample" not in problem  # never suggest the value that failed
    assert main(["train", "--config", str(folder / "run.yaml")]) == 2
    err = capsys.readouterr().err
    assert "data_dir:" in err and "Traceback" not in err


@pytest.mark.parametrize("example", RUN_EXAMPLES, ids=lambda p: p.name)
def test_every_run_example_loads_from_another_folder(example, tmp_path, monkeypatch):
    needs = [line.split(":", 1)[1].split("#")[0].strip() for line in example.read_text()
             .splitlines() if line.strip().startswith("data_dir:")]
    missing = [d for d in needs if not (EXAMPLES / d).is_dir()]
    if missing:
        pytest.skip(f"{example.name} needs {missing[0]}, which is not here")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(example, ["init_from=null", "distill=null"])
    assert Path(cfg.output_dir).is_relative_to(ROOT)
    assert cfg.data_dir is None or Path(cfg.data_dir).is_dir()


def test_the_sample_example_trains_from_another_folder(tmp_path, monkeypatch, tiny_encoder):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(EXAMPLES / "run-sample.yaml", [
        f"encoder={tiny_encoder}", "epochs=1", "max_train_examples=16", "max_eval_examples=16",
        "tasks=[rte, mrpc]", "output_dir=out"])
    result = train(cfg, quiet=True)
    assert result.output_dir == tmp_path / "out"
    report = json.loads((tmp_path / "out" / "data.json").read_text())
    # The rows drawn: those trained plus those over max_seq_len (dropped by default).
    drawn = {t: n + report["truncated"][t]["train"] for t, n in report["train_sizes"].items()}
    assert drawn == {"rte": 16, "mrpc": 16}


@pytest.mark.parametrize("written", ["models/tiny", "./models/tiny", "~/models/tiny"])
def test_run_configs_and_study_files_anchor_an_encoder_folder_alike(
        written, tmp_path, monkeypatch, tiny_encoder, sample_data_dir):
    """One rule for both files: an encoder written as a path, or naming a folder that exists
    beside the file, starts at the file's folder; a model id stays as written."""
    from weightsearch.sweep.spec import load_study_spec

    project = tmp_path / "project"
    monkeypatch.setenv("HOME", str(project))  # `~/models/tiny` is then the same folder
    shutil.copytree(tiny_encoder, project / "models" / "tiny")
    shutil.copytree(sample_data_dir / "RTE", project / "RTE")
    shutil.copytree(sample_data_dir / "MRPC", project / "MRPC")
    run = f"encoder: {written}\ndata_dir: .\ntasks: [rte, mrpc]\n"
    (project / "run.yaml").write_text(run)
    (project / "study.yaml").write_text(
        "study: s\ntrain:\n" + "".join(f"  {line}\n" for line in run.splitlines()))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    folder = str((project / "models" / "tiny").resolve())
    assert load_config(project / "run.yaml").encoder == folder
    assert load_study_spec(project / "study.yaml").train["encoder"] == folder


def test_a_model_id_is_not_a_path(tmp_path, monkeypatch):
    from weightsearch.trainer.config.paths import anchor_paths

    monkeypatch.chdir(tmp_path)
    assert anchor_paths({"encoder": "org/model"}, tmp_path)["encoder"] == "org/model"
    (tmp_path / "org" / "model").mkdir(parents=True)  # unless such a folder is there
    assert anchor_paths({"encoder": "org/model"}, tmp_path)["encoder"] == str(
        tmp_path / "org" / "model")
