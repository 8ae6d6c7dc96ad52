"""A central task that never beat a constant prediction: `inspect` leads its verdict with it
(not "a tie" a newcomer reads as "the weight does not matter"), its JSON carries `majority`
and `beat_majority`, and the plot draws the level. Trials are written as the launch writes
them (its own study creation, the trainer's `majority` record), read by the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from tests.helpers import launched_study
from weightsearch.cli import main
from weightsearch.studies import schema as S

MAJORITY = 0.6875  # MRPC-like: a dev set where two thirds are paraphrases


def _study(tmp_path: Path, data_dir: Path, scores: dict[float, list[float]]) -> str:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    launched_study(url, "maj", data_dir, tmp_path / "work")
    study = optuna.load_study(study_name=S.study_name("maj", "rte"), storage=url)
    for weight, values in scores.items():
        for seed, value in enumerate(values, start=1):
            study.add_trial(create_trial(
                state=TrialState.COMPLETE, value=value, params={S.PARAM: weight},
                distributions={S.PARAM: FloatDistribution(1.0, 15.0)},
                user_attrs={S.T_SEED: seed, S.T_POINT: {"weighting.central_weight": weight},
                            S.T_METRICS: {"rte": {"accuracy": value}},
                            S.T_MAJORITY: {"rte": {"accuracy": MAJORITY},
                                           "mrpc": {"accuracy": 0.5}}}))
    return url


def _inspect(url: str, capsys: pytest.CaptureFixture, *extra: str) -> str:
    capsys.readouterr()
    assert main(["inspect", "maj", "--storage", url, *extra]) == 0
    return capsys.readouterr().out


def test_a_task_stuck_at_its_majority_class_says_so_before_any_tie(
        tmp_path: Path, sample_data_dir: Path, capsys: pytest.CaptureFixture) -> None:
    url = _study(tmp_path, sample_data_dir, {1.0: [MAJORITY, MAJORITY],
                                             9.0: [MAJORITY, MAJORITY]})
    text = _inspect(url, capsys)
    verdict = next(line for line in text.splitlines() if line.startswith("rte: "))
    assert verdict.startswith("rte: the central task did not beat a constant prediction "
                              "(accuracy 0.6875"), verdict
    assert verdict.index("did not beat") < verdict.index("tie")
    (study,) = json.loads(_inspect(url, capsys, "--format", "json"))["central_tasks"]
    assert study["majority"] == MAJORITY and study["beat_majority"] is False
    assert study["verdict"].startswith("the central task did not beat")


def test_a_task_that_learned_keeps_its_verdict_and_the_plot_draws_the_level(
        tmp_path: Path, sample_data_dir: Path, capsys: pytest.CaptureFixture) -> None:
    url = _study(tmp_path, sample_data_dir, {1.0: [0.70, 0.71], 9.0: [MAJORITY, 0.69]})
    (study,) = json.loads(_inspect(url, capsys, "--format", "json"))["central_tasks"]
    assert study["majority"] == MAJORITY and study["beat_majority"] is True
    assert "constant prediction" not in study["verdict"]
    from weightsearch.studies.plots import plot_study
    from weightsearch.studies.reading import read_central

    central = read_central(url, S.study_name("maj", "rte"))
    svg = plot_study([central], "maj", tmp_path / "p.svg").read_text()
    assert "constant prediction" in svg  # the legend names the drawn line


def test_without_a_record_nothing_is_claimed(tmp_path: Path, sample_data_dir: Path,
                                             capsys: pytest.CaptureFixture) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    launched_study(url, "maj", sample_data_dir, tmp_path / "work")
    study = optuna.load_study(study_name=S.study_name("maj", "rte"), storage=url)
    study.add_trial(create_trial(
        state=TrialState.COMPLETE, value=0.5, params={S.PARAM: 1.0},
        distributions={S.PARAM: FloatDistribution(1.0, 15.0)},
        user_attrs={S.T_SEED: 1, S.T_MAJORITY: {"rte": {"accuracy": float("nan")}}}))
    (found,) = json.loads(_inspect(url, capsys, "--format", "json"))["central_tasks"]
    assert found["majority"] is None and found["beat_majority"] is None
