"""Counting by what things are: seeds are seeds (not points of another searched dimension), and an
interrupted grid over any dimensions counts the cells it has not started."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from weightsearch.cli import main
from weightsearch.studies import schema as S

WEIGHT = "weighting.central_weight"
SAMPLING = "sampling.scheme"


def _launch(url: str, data_dir: Path, workdir: Path, search: dict, seeds: list[int]) -> None:
    """A grid study as `weightsearch launch` creates it, by the launch's own functions (no Ray)."""
    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep import study_db
    from weightsearch.sweep.spec import load_study_spec

    spec = load_study_spec({"study": "grid", "train": {"data_dir": str(data_dir),
                            "tasks": ["rte", "mrpc"], "epochs": 1},
                            "central_tasks": ["rte"], "search": search, "seeds": seeds,
                            "workdir": str(workdir)})
    centrals = [study_db.describe(spec, c) for c in spec.central_tasks]
    study_db.create_studies(spec, open_storage(url), url, centrals, {})


def _add(url: str, weight: float, sampling: str, seed: int, state: TrialState,
         value: float | None = None) -> None:
    study = optuna.load_study(study_name=S.study_name("grid", "rte"), storage=url)
    study.add_trial(create_trial(
        state=state, value=value,
        params={S.PARAM: weight, SAMPLING: sampling},
        distributions={S.PARAM: FloatDistribution(1.0, 15.0),
                       SAMPLING: CategoricalDistribution(["shuffle", "sqrt"])},
        user_attrs={S.T_SEED: seed, S.T_POINT: {WEIGHT: weight, SAMPLING: sampling}}))


SEARCH = {"strategy": "grid", "space": {WEIGHT: [1, 9], SAMPLING: {"choices": ["shuffle",
                                                                           "sqrt"]}}}
# weight -> sampling -> seed -> score: 2 weights x 2 schemes x 2 seeds
SCORES = {1.0: {"shuffle": {1: 0.60, 2: 0.64}, "sqrt": {1: 0.62, 2: 0.70}},
          9.0: {"shuffle": {1: 0.66, 2: 0.68}, "sqrt": {1: 0.70, 2: 0.72}}}


def test_points_of_another_dimension_are_not_seeds(tmp_path, sample_data_dir, capsys):
    url = f"sqlite:///{tmp_path / 's.db'}"
    _launch(url, sample_data_dir, tmp_path / "work", SEARCH, [1, 2])
    for w, by_scheme in SCORES.items():
        for scheme, by_seed in by_scheme.items():
            for seed, v in by_seed.items():
                _add(url, w, scheme, seed, TrialState.COMPLETE, v)
    assert main(["inspect", "grid", "--storage", url, "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)["central_tasks"][0]
    # Each seed's score at a weight is its mean over the sampling schemes: 2 seeds, not 4.
    assert [c["n"] for c in got["curve"]] == [2, 2]
    assert got["curve"][0]["mean"] == pytest.approx((0.61 + 0.67) / 2)
    assert got["best_seeds"] == 2 and "2 paired seeds" in got["verdict"]

    assert main(["inspect", "grid", "--storage", url]) == 0
    assert "4 seeds" not in capsys.readouterr().out

    from weightsearch.recommender.evidence import study_evidence
    from weightsearch.studies.reading import open_quiet, read_all

    (point,) = study_evidence(read_all(open_quiet(url)))
    assert point.n_seeds == 2


def test_an_interrupted_grid_over_two_dimensions_counts_its_unstarted_cells(
        tmp_path, sample_data_dir, capsys):
    url = f"sqlite:///{tmp_path / 'g.db'}"
    search = {"strategy": "grid", "space": {WEIGHT: [1, 3, 6, 9, 12], SAMPLING: {
        "choices": ["shuffle", "sqrt"]}}}
    _launch(url, sample_data_dir, tmp_path / "work", search, [1, 2])  # 5 x 2 x 2 = 20 cells
    done = [(1, "shuffle", 1), (1, "shuffle", 2), (1, "sqrt", 1), (1, "sqrt", 2),
            (3, "shuffle", 1), (3, "shuffle", 2), (3, "sqrt", 1)]
    for w, scheme, seed in done:
        _add(url, w, scheme, seed, TrialState.COMPLETE, 0.5 + w / 100)
    _add(url, 3, "sqrt", 2, TrialState.FAIL)  # Ctrl-C: the two running trials failed
    _add(url, 6, "shuffle", 1, TrialState.FAIL)
    assert main(["inspect", "--storage", url, "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["studies"]
    assert (row["complete"], row["failed"], row["pending"], row["not_started"]) == (7, 2, 0, 11)

    assert main(["inspect", "--storage", url, "--format", "csv"]) == 0
    header, line = capsys.readouterr().out.splitlines()[:2]
    assert dict(zip(header.split(","), line.split(","), strict=False))["not_started"] == "11"


def test_an_adaptive_search_has_no_unstarted_count(tmp_path, sample_data_dir, capsys):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    _launch(url, sample_data_dir, tmp_path / "work",
            {"strategy": "guided", "n_trials": 4, "space": {WEIGHT: {"low": 1, "high": 15}}}, [1])
    assert main(["inspect", "--storage", url, "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["studies"]
    assert "not_started" not in row


def test_csv_counts_stay_whole_numbers_beside_a_study_without_them(tmp_path, sample_data_dir,
                                                                   capsys):
    """An imported study has no `not_started`; the grid's count beside it is 0, not 0.0."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    _launch(url, sample_data_dir, tmp_path / "work", SEARCH, [1])
    for w in (1.0, 9.0):
        for scheme in ("shuffle", "sqrt"):
            _add(url, w, scheme, 1, TrialState.COMPLETE, 0.6)
    table = tmp_path / "t.csv"
    table.write_text("central_task,task_type,train_size,central_weight,seed,metric\n"
                     "rte,classification,2490,1,1,0.6\nrte,classification,2490,9,1,0.7\n")
    assert main(["import", str(table), "--study", "mine", "--storage", url]) == 0
    capsys.readouterr()
    assert main(["inspect", "--storage", url, "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {r.split(",")[0]: dict(zip(lines[0].split(","), r.split(","), strict=False))
            for r in lines[1:]}
    assert rows["grid"]["not_started"] == "0" and rows["mine"]["not_started"] == ""
    assert rows["grid"]["complete"] == "4"
