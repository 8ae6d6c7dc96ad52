"""A budgeted grouping study (`tasks: {groups_of: [...]}`): the study file's rules, and
`inspect` of its study (per budget: the groups, every task's score, the total) on study
databases written here, through the real command line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from weightsearch.cli import main
from weightsearch.core.errors import ConfigError
from weightsearch.studies import schema as S
from weightsearch.studies.grouping import ScoreTable, all_groups, select_each
from weightsearch.sweep.spec import load_study_spec

TASKS = ("rte", "mrpc", "stsb", "cola")
METRICS = {"rte": "accuracy", "mrpc": "accuracy", "stsb": "corr", "cola": "mcc"}


def _spec(sample_data_dir: Path, tmp_path: Path, **extra) -> dict:
    return {"study": "budget", "storage": f"sqlite:///{tmp_path / 'x.db'}",
            "train": {"data_dir": str(sample_data_dir), "tasks": list(TASKS), "epochs": 1},
            "search": {"space": {"tasks": {"groups_of": list(TASKS)}}},
            "workdir": str(tmp_path / "runs"), **extra}


def test_a_grouping_study_has_one_study_and_trains_each_group_alone(sample_data_dir,
                                                                    tmp_path) -> None:
    spec = load_study_spec(_spec(sample_data_dir, tmp_path))
    assert spec.central_tasks == (S.GROUPS_STUDY,) and spec.search.strategy == "grid"
    points = spec.space.grid(S.GROUPS_STUDY)
    assert [p["tasks"] for p in points] == all_groups(TASKS) and len(points) == 15
    cfg = spec.for_cell(S.GROUPS_STUDY, {"tasks": ("mrpc", "cola")}, 1, str(tmp_path / "o"))
    assert [t.name for t in cfg.tasks] == ["mrpc", "cola"] and cfg.central_task == "mrpc"
    assert cfg.weighting.scheme == "equal"
    assert spec.trial_dir(S.GROUPS_STUDY, {"tasks": ("mrpc", "cola")}, 1).endswith(
        "budget/groups/mrpc+cola_s1")
    # The stored file loads back to the same study (resume, growing).
    again = load_study_spec({**spec.to_dict(), "storage": spec.storage})
    assert again.digest() == spec.digest()
    pairs = load_study_spec(_spec(sample_data_dir, tmp_path, search={
        "space": {"tasks": {"groups_of": list(TASKS), "max_size": 2}}}))
    assert len(pairs.space.grid(S.GROUPS_STUDY)) == 10


def test_a_network_is_one_0_1_param_per_task_and_scores_the_mean_of_its_tasks(
        sample_data_dir, tmp_path) -> None:
    from weightsearch.sweep.trainable import epoch_objective

    spec = load_study_spec(_spec(sample_data_dir, tmp_path))
    space, point = spec.space, {"tasks": ("rte", "stsb")}
    params = space.params(point, S.GROUPS_STUDY)
    assert params == {"tasks.rte": 1, "tasks.mrpc": 0, "tasks.stsb": 1, "tasks.cola": 0}
    assert space.point_from_params(params, S.GROUPS_STUDY) == point
    assert space.point_from_params(dict.fromkeys(params, 0), S.GROUPS_STUDY) is None
    assert set(space.distributions(S.GROUPS_STUDY)) == set(params)
    metrics = {"rte": {"accuracy": 0.6}, "stsb": {"corr": 0.8, "pearson": 0.9}}
    assert epoch_objective(metrics, {"rte": 0.6, "stsb": 0.8}, "rte", S.GROUP_MEAN) == \
        pytest.approx(0.7)
    assert epoch_objective(metrics, {"rte": 0.6, "stsb": 0.8}, "stsb", "pearson") == 0.9


@pytest.mark.parametrize("change, words", [
    ({"search": {"space": {"tasks": {"groups_of": ["rte", "mrpc", "stsb"]}}}},
     "no group contains cola"),
    ({"search": {"space": {"tasks": {"groups_of": list(TASKS), "max_size": 1}}}},
     "max_size: expected a whole number from 2"),
    ({"search": {"space": {"tasks": {"groups_of": [*TASKS, "qqp"]}}}}, "'qqp' is not among"),
    ({"central_tasks": ["rte"]}, "has no central task"),
    ({"aux_tasks": ["rte"]}, "remove aux_tasks"),
    ({"search": {"strategy": "guided", "n_trials": 3,
                 "space": {"tasks": {"groups_of": list(TASKS)}}}}, "use strategy: grid"),
    ({"search": {"space": {"tasks": {"groups_of": list(TASKS)}, "lr": [1e-4, 2e-4]}}},
     "searches the groups alone"),
    ({"objective": {"stage": "multitask", "metric": "f1"}}, "remove objective"),
    ({"scheduler": "asha"}, "use scheduler: fifo"),
])
def test_bad_grouping_studies_are_refused(sample_data_dir, tmp_path, change, words) -> None:
    with pytest.raises(ConfigError, match=words) as refused:
        load_study_spec(_spec(sample_data_dir, tmp_path, **change))
    assert len(refused.value.problems) == 1, refused.value.problems  # one message


def test_a_weighting_with_a_central_weight_is_refused(sample_data_dir, tmp_path) -> None:
    raw = _spec(sample_data_dir, tmp_path)
    raw["train"]["weighting"] = {"scheme": "siwlm", "central_weight": 9}
    with pytest.raises(ConfigError, match="weighs every task of a network alike"):
        load_study_spec(raw)


# --- inspect ---------------------------------------------------------------------------------
def _write_study(url: str, scores: dict, failed: tuple = (), max_size: int | None = None,
                 seeds: tuple[int, ...] = (1,)) -> None:
    """A grouping study as a launch leaves it: one trial per (group, seed), every member's
    primary metric in `metrics`; the groups in `failed` end FAIL."""
    import optuna
    from optuna.distributions import IntDistribution
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=S.study_name("budget", S.GROUPS_STUDY),
                                storage=url, direction="maximize")
    attrs = {S.A_STUDY: "budget", S.A_CENTRAL: S.GROUPS_STUDY, S.A_SOURCE: S.SOURCE_SWEEP,
             S.A_PRIMARY: S.GROUP_MEAN, S.A_STAGE: "multitask", S.A_GROUP_TASKS: list(TASKS),
             S.A_GROUP_METRICS: METRICS, S.A_SPACE: ["tasks"], S.A_STRATEGY: "grid"}
    if max_size is not None:
        attrs[S.A_GROUP_MAX_SIZE] = max_size
    for k, v in attrs.items():
        study.set_user_attr(k, v)
    dists = {f"tasks.{t}": IntDistribution(0, 1) for t in TASKS}
    for group, by_task in scores.items():
        for seed in seeds:
            params = {f"tasks.{t}": int(t in group) for t in TASKS}
            ua = {S.T_SEED: seed, S.T_POINT: {"tasks": list(group)},
                  S.T_METRICS: {t: {METRICS[t]: v + 0.01 * (seed - 1)}
                                for t, v in by_task.items()}}
            if group in failed:
                study.add_trial(create_trial(state=TrialState.FAIL, params=params,
                                             distributions=dists, user_attrs=ua))
            else:
                study.add_trial(create_trial(value=sum(by_task.values()) / len(by_task),
                                             params=params, distributions=dists,
                                             user_attrs=ua))


def _scores(max_size: int | None = None, seed: int = 0) -> dict:
    rng = random.Random(seed)
    return {g: {t: round(rng.uniform(0.2, 0.9), 3) for t in g}
            for g in all_groups(TASKS, max_size)}


def _inspect(url: str, *args: str, capsys) -> tuple[int, str, str]:
    code = main(["inspect", "budget", "--storage", url, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_inspect_prints_the_choice_for_every_budget(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    scores = _scores()
    _write_study(url, scores)
    code, out, _ = _inspect(url, capsys=capsys)
    assert code == 0
    assert "networks per budget" in out and "single run" in out
    assert "in-sample: the networks (and each network's epoch) are chosen on these same dev" in out
    expected = select_each(ScoreTable(TASKS, scores))
    for b in range(1, 5):
        groups = " | ".join("+".join(g) for g in expected[b].groups)
        assert groups in out and f"{expected[b].total:.6g}" in out
    assert "singles" in out and "rte+mrpc+stsb+cola" in out

    code, text, _ = _inspect(url, "--format", "json", capsys=capsys)
    grouping = json.loads(text)["central_tasks"][0]["grouping"]
    assert grouping["tasks"] == list(TASKS) and grouping["unusable"] == []
    for b in range(1, 5):
        assert grouping["budgets"][str(b)]["total"] == pytest.approx(expected[b].total)
    singles = sum(scores[(t,)][t] for t in TASKS)
    assert grouping["single_task_networks"]["total"] == pytest.approx(singles)
    assert grouping["all_task_network"]["total"] == pytest.approx(sum(scores[TASKS].values()))

    code, text, _ = _inspect(url, "--format", "csv", "--budget", "2", capsys=capsys)
    lines = text.strip().splitlines()
    assert lines[0].startswith("study,budget,networks,groups,rte,mrpc,stsb,cola,total,mean")
    assert [ln.split(",")[1] for ln in lines[1:]] == ["2", "singles", "all"]


def test_inspect_of_a_pairwise_study_estimates_the_larger_groups(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    _write_study(url, _scores(max_size=2, seed=1), max_size=2, seeds=(1, 2))
    code, out, _ = _inspect(url, capsys=capsys)
    assert code == 0 and "estimated (*)" in out and "rte+mrpc+stsb+cola*" in out
    assert "means over 2-2 seeds" in out
    code, text, _ = _inspect(url, "--format", "json", capsys=capsys)
    grouping = json.loads(text)["central_tasks"][0]["grouping"]
    estimated = [g["group"] for g in grouping["groups"] if g["estimated"]]
    assert len(estimated) == 5 and grouping["budgets"]["1"]["estimated"] == [list(TASKS)]


def test_inspect_names_the_groups_without_a_finished_trial(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'f.db'}"
    _write_study(url, _scores(seed=2), failed=(TASKS, ("rte", "mrpc")))
    code, out, _ = _inspect(url, capsys=capsys)
    assert code == 0
    assert "not usable by the selection: rte+mrpc, rte+mrpc+stsb+cola (no finished trial)" in out
    assert "no choice serves every task" in out  # budget 1 needs the all-task network


@pytest.mark.parametrize("budget, words", [("0", "give at least 1"),
                                           ("5", "5 networks for 4 tasks")])
def test_a_budget_outside_1_to_the_task_count_is_refused(tmp_path, capsys, budget,
                                                         words) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    _write_study(url, _scores())
    plot = tmp_path / "budget.png"
    code, out, err = _inspect(url, "--budget", budget, "--plot", str(plot), capsys=capsys)
    assert code == 2 and words in err and out == "" and not plot.exists()


def test_budget_is_refused_for_a_weight_search(tmp_path, capsys) -> None:
    import optuna

    url = f"sqlite:///{tmp_path / 'w.db'}"
    study = optuna.create_study(study_name="budget/rte", storage=url, direction="maximize")
    study.set_user_attr(S.A_SOURCE, S.SOURCE_SWEEP)
    code, _, err = _inspect(url, "--budget", "2", capsys=capsys)
    assert code == 2 and "applies to a grouping study" in err


@pytest.mark.slow
def test_the_plot_shows_total_score_against_budget(tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    url = f"sqlite:///{tmp_path / 'b.db'}"
    _write_study(url, _scores())
    plot = tmp_path / "budget.png"
    code, _, _ = _inspect(url, "--plot", str(plot), capsys=capsys)
    assert code == 0 and plot.stat().st_size > 10_000
