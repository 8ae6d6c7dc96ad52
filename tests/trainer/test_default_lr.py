"""The learning rate of a config that gives none: measured for the default MiniLM encoder
(BENCHMARKS.md, "The default encoder's learning rate"), MT-DNN's for any other; runs and studies
begun when every encoder defaulted to 5e-5 continue at 5e-5."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers import run_config
from weightsearch.cli import main
from weightsearch.trainer import load_config
from weightsearch.trainer.config import ENCODER_LRS, MT_DNN_LR
from weightsearch.trainer.resume import resume_problems, resume_record, trained_defaults


def config(sample_data_dir, **extra):
    return load_config({"data_dir": str(sample_data_dir), "tasks": ["rte"], **extra})


def test_the_default_encoder_trains_at_its_measured_rate_and_others_at_mt_dnns(
        sample_data_dir, tiny_encoder):
    minilm = config(sample_data_dir)
    assert minilm.lr is None and minilm.learning_rate == ENCODER_LRS["all-MiniLM-L6-v2"] == 2e-4
    assert minilm.to_dict()["lr"] == 2e-4  # config.yaml and digests record what it trains at
    other = config(sample_data_dir, encoder=tiny_encoder)
    assert other.learning_rate == MT_DNN_LR == 5e-5
    assert config(sample_data_dir, lr=1e-3).learning_rate == 1e-3
    # Fine-tuning without its own rate takes the run's.
    tuned = config(sample_data_dir, finetune={"epochs": 1})
    from weightsearch.trainer.finetune import stage_config

    assert stage_config(tuned, "rte", Path("unused")).learning_rate == 2e-4


def test_a_run_begun_at_the_old_default_resumes_at_it(sample_data_dir):
    old = config(sample_data_dir, lr=5e-5)  # what a run without lr trained at before
    meta = resume_record(old, "fp32")
    now = config(sample_data_dir)  # the same file today: the new default
    assert now.learning_rate == 2e-4
    assert trained_defaults(meta, now).learning_rate == 5e-5
    assert resume_problems(meta, now, "fp32", "out") == []
    # A rate written in the config is the user's: a change is refused, as ever.
    problems = resume_problems(meta, config(sample_data_dir, lr=2e-4), "fp32", "out")
    assert problems and "(lr)" in problems[0]


def test_a_study_launched_before_keeps_its_cells_at_the_old_default(sample_data_dir, tmp_path):
    from weightsearch.sweep.spec import SPEC_VERSION, as_launched, load_study_spec

    raw = {"study": "old", "train": {"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc"],
                                     "epochs": 1},
           "central_tasks": ["rte"], "weights": [1, 9], "workdir": str(tmp_path / "runs")}
    stored = load_study_spec(raw).to_dict()
    assert stored["version"] == SPEC_VERSION and "lr" not in stored["train"]
    assert as_launched(stored) == stored  # today's format: nothing written in
    before = {**stored, "version": 4}
    cell = load_study_spec(as_launched(before)).for_cell("rte", {"weighting.central_weight": 1.0},
                                                         1, str(tmp_path / "x"))
    assert cell.learning_rate == 5e-5
    # A preset that sets the rate keeps its own.
    preset = {**before, "train": {**before["train"], "preset": "siwlm-paper"}}
    assert "lr" not in as_launched(preset)["train"]
    # Nothing is written where nothing changed, so the stored study stays the same study:
    # another encoder (5e-5 then and now), or a searched lr (each cell's point sets it).
    other = {**before, "train": {**before["train"], "encoder": "/some/bert-base"}}
    assert as_launched(other)["train"] == other["train"]
    searched = {**before, "search": {"space": {"lr": [1e-4, 2e-4]}}}
    assert as_launched(searched)["train"] == before["train"]


def test_the_default_encoder_by_its_folder_gets_its_own_rate_and_old_studies_keep_theirs(
        sample_data_dir, tmp_path):
    """The default encoder named by the folder its package ships it in (what a study's regime
    records) is the default encoder: 2e-4, as by its name. A study of format 5 named so trained
    at 5e-5 (a folder was any encoder then), and its remaining cells still do."""
    from weightsearch.sweep.spec import as_launched, load_study_spec
    from weightsearch.trainer.config import default_lr
    from weightsearch.trainer.encoders import default_encoder_path

    folder = default_encoder_path()
    assert default_lr(folder) == default_lr("all-MiniLM-L6-v2") == default_lr("default")
    assert default_lr(folder)[0] == 2e-4
    raw = {"study": "folder", "train": {"data_dir": str(sample_data_dir), "encoder": folder,
                                        "tasks": ["rte", "mrpc"], "epochs": 1},
           "central_tasks": ["rte"], "weights": [1, 9], "workdir": str(tmp_path / "runs")}
    stored = load_study_spec(raw).to_dict()
    assert as_launched(stored) == stored
    five = {**stored, "version": 5}
    assert as_launched(five)["train"]["lr"] == 5e-5
    by_name = {**five, "train": {**five["train"], "encoder": "all-MiniLM-L6-v2"}}
    assert "lr" not in as_launched(by_name)["train"]  # format 5 named it so at 2e-4 already


@pytest.mark.slow
def test_the_run_says_its_rate_and_where_it_came_from(sample_data_dir, tiny_encoder, tmp_path,
                                                     capsys):
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", epochs=1)
    raw = cfg.to_dict()
    del raw["lr"]
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    assert main(["train", "--config", str(tmp_path / "run.yaml")]) == 0
    assert "lr 5e-05 (MT-DNN's, tuned for BERT-base; set lr for a smaller encoder)" in \
        capsys.readouterr().out
