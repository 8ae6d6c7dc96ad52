"""`recommend --format optuna|ray`: the answer as another tuner's first points. The printed
Optuna code runs against a real study and enqueues the points; the Ray list is what Ray
Tune's searchers take as `points_to_evaluate`."""

from __future__ import annotations

import json

import pytest

from weightsearch.cli import main


def _answer(capsys: pytest.CaptureFixture, *args: str) -> str:
    assert main(["recommend", "--train-size", "2500", *args]) == 0
    return capsys.readouterr().out


def test_the_optuna_code_enqueues_the_answer_and_the_ends_of_its_range(
        capsys: pytest.CaptureFixture) -> None:
    import optuna

    answer = json.loads(_answer(capsys, "--format", "json"))
    code = _answer(capsys, "--format", "optuna", "--param", "w")
    scope: dict = {}
    exec(compile(code, "<recommend --format optuna>", "exec"), scope)
    study = scope["study"]
    assert len(study.get_trials(states=(optuna.trial.TrialState.WAITING,))) >= 2
    ends = answer["equivalent"] or answer["interval"]
    expected = []
    for w in (answer["central_weight"], *ends):
        if round(w, 2) not in expected:
            expected.append(round(w, 2))
    # The enqueued trials are the first the study hands out, in this order.
    asked = [study.ask().suggest_float("w", 1, 15) for _ in expected]
    assert asked == expected


def test_the_ray_list_is_points_to_evaluate(capsys: pytest.CaptureFixture) -> None:
    from ray.tune.search import BasicVariantGenerator

    points = json.loads(_answer(capsys, "--format", "ray"))
    assert points and all(set(p) == {"central_weight"} for p in points)
    BasicVariantGenerator(points_to_evaluate=points)  # Ray's own check of the form


@pytest.mark.parametrize(("args", "says"), [
    (["--format", "optuna", "--param", "1w"], "--param must be a parameter name"),
    (["--format", "ray", "--param", "w\n"], "--param must be a parameter name"),
    (["--format", "optuna", "--evaluate"], "--evaluate prints text or json"),
])
def test_bad_handover_requests_exit_2_naming_the_flag(
        capsys: pytest.CaptureFixture, args: list[str], says: str) -> None:
    size = [] if "--evaluate" in args else ["--train-size", "2500"]
    assert main(["recommend", *size, *args]) == 2
    assert says in capsys.readouterr().err
