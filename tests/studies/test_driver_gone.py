"""Running cells whose driver is gone: two RUNNING trials written as a launch writes them, one
unit still leased by a live driver, the other's lease lapsed (its driver stopped renewing).
`inspect` shows the second as driver_gone, counts it so, and says how to finish it; with no
claims table (nothing launched) nothing is claimed."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.helpers import launched_study
from weightsearch.cli import main
from weightsearch.studies import schema as S


def _running(url: str, units: list[str]) -> None:
    study = optuna.load_study(study_name=S.study_name("gone", "rte"), storage=url)
    for seed, unit in enumerate(units, start=1):
        trial = study.ask({S.PARAM: optuna.distributions.FloatDistribution(1.0, 15.0)})
        for key, value in {S.T_SEED: seed, S.T_UNIT: unit}.items():
            trial.set_user_attr(key, value)
        assert trial.params  # asked with the weight, as the searcher creates its trials


def test_a_cell_whose_lease_lapsed_is_shown_driver_gone(
        tmp_path: Path, sample_data_dir: Path, capsys: pytest.CaptureFixture) -> None:
    from sqlalchemy import text

    from weightsearch.studies.claims import Claims
    from weightsearch.studies.storage import open_storage

    url = f"sqlite:///{tmp_path / 'g.db'}"
    launched_study(url, "gone", sample_data_dir, tmp_path / "work")
    _running(url, ["1|1", "9|2"])
    engine = open_storage(url).engine
    claims = Claims(engine, ttl=600)
    name = S.study_name("gone", "rte")
    assert claims.claim(name, "1|1") and claims.claim(name, "9|2")
    with engine.begin() as conn:  # the second driver stopped renewing long ago
        conn.execute(text("UPDATE weightsearch_claims SET expires = 0 WHERE unit = '9|2'"))
    assert main(["inspect", "gone", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert "note: 1 cell(s) of gone show driver_gone" in out
    assert "`weightsearch resume gone` continues them" in out
    assert main(["inspect", "gone", "--storage", url, "--format", "json"]) == 0
    (study,) = json.loads(capsys.readouterr().out)["central_tasks"]
    states = sorted(c["state"] for c in study["cells"])
    assert states == ["driver_gone", "running"]
    assert study["running"] == 1 and study["driver_gone"] == 1
    assert optuna.load_study(study_name=name, storage=url).get_trials()[1].state \
        == TrialState.RUNNING  # readers change nothing in the database


def test_without_leases_running_cells_stay_running(
        tmp_path: Path, sample_data_dir: Path, capsys: pytest.CaptureFixture) -> None:
    url = f"sqlite:///{tmp_path / 'g.db'}"
    launched_study(url, "gone", sample_data_dir, tmp_path / "work")
    _running(url, ["1|1"])
    assert main(["inspect", "gone", "--storage", url, "--format", "json"]) == 0
    (study,) = json.loads(capsys.readouterr().out)["central_tasks"]
    assert [c["state"] for c in study["cells"]] == ["running"]
