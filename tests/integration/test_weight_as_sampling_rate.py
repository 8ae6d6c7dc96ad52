"""A study whose central weight is the central task's sampling rate, end to end on local Ray:
clipped at 1e-4 every central update is clipped (under the loss weight the grid would be one
treatment, and allow_inert: false would stop it after one cell), yet the rate changes how many
auxiliary batches train, so the launch trains every cell; export writes the regime, import
keeps it, and the recommender answers for it when asked (rate-clip...) and keeps it apart from
the loss weight's regime."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _spec(tmp_path: Path, encoder: str, data: Path) -> object:
    from weightsearch.sweep.spec import load_study_spec

    return load_study_spec({
        "study": "rate", "weight_acts_on": "sampling", "allow_inert": False,
        "storage": f"sqlite:///{tmp_path / 'rate.db'}",
        "train": {"encoder": encoder, "data_dir": str(data), "tasks": ["rte", "mrpc"],
                  "epochs": 2, "batch_size": 8, "max_train_examples": 32,
                  "max_eval_examples": 32, "num_threads": 1, "grad_clip": 1e-4,
                  "cache_dir": str(tmp_path / "cache")},
        "central_tasks": ["rte"], "weights": [1, 15], "seeds": [1],
        "resources": {"cpu": 1, "gpu": 0}, "max_concurrent": 1,
        "workdir": str(tmp_path / "runs"),
    })


def test_a_sampling_rate_study_trains_exports_and_answers_in_its_own_regime(
        local_ray: None, tiny_encoder: str, sample_data_dir: Path, tmp_path: Path) -> None:
    import optuna

    from weightsearch.recommender.evidence import load_evidence
    from weightsearch.recommender.recommend import recommend
    from weightsearch.studies.exporter import export_study
    from weightsearch.studies.importer import import_file
    from weightsearch.studies.reading import read_central
    from weightsearch.studies.treatments import arms
    from weightsearch.sweep.launch import launch

    spec = _spec(tmp_path, tiny_encoder, sample_data_dir)
    summary = launch(spec, progress=False)
    assert summary.ran == 2 and summary.failed == 0  # allow_inert: false did not stop it

    trials = {t.params["central_weight"]: t for t in optuna.load_study(
        study_name="rate/rte", storage=spec.storage).get_trials()}
    records = {w: t.user_attrs["clipping"] for w, t in trials.items()}
    for record in records.values():
        assert record["weight_acts_on"] == "sampling" and record["grad_clip_mode"] == "global"
        assert record["tasks"]["rte"]["clip_share"] == 1.0  # every central update clipped
    # The treatment acted: the same central batches, fewer auxiliary ones at rate 15.
    rte = {w: r["tasks"]["rte"]["updates"] for w, r in records.items()}
    mrpc = {w: r["tasks"].get("mrpc", {}).get("updates", 0) for w, r in records.items()}
    assert rte[1.0] == rte[15.0] and mrpc[15.0] < mrpc[1.0], (rte, mrpc)

    study = read_central(spec.storage, "rate/rte")
    assert study.clipping == "rate-clip0.0001" and arms(study) == []

    from weightsearch.studies.inspection import inspect

    text = inspect(spec.storage, "rate")
    assert "rte: its searched weight is its sampling rate (weight_acts_on: sampling)" in text
    assert "same treatment" not in text

    exported = tmp_path / "rate.csv"
    assert export_study(spec.storage, "rate", exported) == 2
    rows = list(csv.DictReader(exported.open()))
    assert {r["weight_acts_on"] for r in rows} == {"sampling"}

    again = f"sqlite:///{tmp_path / 'again.db'}"
    import_file(exported, "again", again)
    kept = read_central(again, "again/rte")
    assert kept.clipping == "rate-clip0.0001" and arms(kept) == []
    regimes = {p.regime.clipping for p in load_evidence(again)}
    assert "rate-clip0.0001" in regimes

    asked = recommend(32, "classification", again, clipping="rate-clip1e-4")
    assert asked.regime["clipping"] == "rate-clip0.0001"
    assert any(e.get("study") == "again/rte" and e.get("clipping") == "rate-clip0.0001"
               for e in asked.evidence), asked.evidence
