"""`fuse_cells: auto` through a real launch on CPUs, with the tiny encoder: the driver asks a
Ray task on a worker with a trial's resources what the trial's device is, learns it is a CPU,
and hands every cell out alone (fusing saves no work on a CPU); the scores are those of the
same study launched without `fuse_cells`. On a GPU the same task measures the members
(`tests/trainer/test_fuse_size.py -m gpu`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from weightsearch.studies import schema as S
from weightsearch.sweep.space import CENTRAL_WEIGHT

pytestmark = pytest.mark.integration




def _study(name: str, tiny_encoder: str, data_dir: Path, tmp_path: Path, **extra) -> dict:
    return {
        "study": name, "allow_inert": True, "storage": f"sqlite:///{tmp_path / 'studies.db'}",
        "train": {"encoder": tiny_encoder, "data_dir": str(data_dir), "tasks": ["rte", "mrpc"],
                  "weighting": {"scheme": "siwlm"}, "epochs": 1, "batch_size": 16,
                  "max_train_examples": 32, "max_eval_examples": 32, "max_seq_len": 64,
                  "precision": "fp32"},
        "central_tasks": ["rte"], "search": {"strategy": "grid",
                                             "space": {CENTRAL_WEIGHT: [1, 9, 15]}},
        "max_concurrent": 2, "workdir": str(tmp_path / "runs"), **extra,
    }


def test_auto_on_cpus_trains_each_cell_alone_and_says_why(
        ray_session, tiny_encoder: str, sample_data_dir: Path, tmp_path: Path, capsys) -> None:
    import optuna
    from optuna.trial import TrialState

    from weightsearch.sweep.fuse_auto import FUSE_MEMORY
    from weightsearch.sweep.launch import launch
    from weightsearch.sweep.spec import load_study_spec

    specs = {name: load_study_spec(_study(name, tiny_encoder, sample_data_dir, tmp_path,
                                          **extra))
             for name, extra in (("auto", {"fuse_cells": "auto"}), ("alone", {}))}
    for spec in specs.values():
        summary = launch(spec, progress=True)
        assert summary.finished and summary.failed == 0, summary.lines()
    err = capsys.readouterr().err
    assert err.count("note: fuse_cells: auto trains one cell per trial on CPUs") == 1, err
    assert "fused rte" not in err  # no unit was handed out fused
    url = specs["auto"].storage

    def trials(name: str) -> dict:
        study = optuna.load_study(study_name=f"{name}/rte", storage=url)
        return {t.params[S.PARAM]: t for t in study.get_trials()}

    auto, alone = trials("auto"), trials("alone")
    assert sorted(auto) == sorted(alone) == [1, 9, 15]
    for weight, t in auto.items():
        assert t.state == TrialState.COMPLETE and S.T_FUSED not in t.user_attrs
        assert t.value == pytest.approx(alone[weight].value, abs=1e-6)
    # one Ray trial per cell, and nothing measured to store on a CPU
    assert len(list((tmp_path / "runs" / "ray").glob("auto-*/*/result.json"))) == 3
    study = optuna.load_study(study_name="auto/rte", storage=url)
    assert not [a for a in study.user_attrs if a.startswith(FUSE_MEMORY)]
