"""Search strategies and spaces through real Ray runs with the tiny encoder: successive halving
against the grid on the same cells, a task-grouping study read back by `inspect`, and a study
that sweeps a sampling weight (the shipped QA example)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import EXAMPLES, check_siwlm_steps
from weightsearch.studies import schema as S
from weightsearch.sweep.space import CENTRAL_WEIGHT

pytestmark = pytest.mark.integration



def _study(name: str, tiny_encoder: str, data_dir: Path, tmp_path: Path, search: dict,
           epochs: int = 2, tasks=("rte", "mrpc")) -> dict:
    return {
        "study": name, "allow_inert": True, "storage": f"sqlite:///{tmp_path / 'studies.db'}",
        "train": {"encoder": tiny_encoder, "data_dir": str(data_dir), "tasks": list(tasks),
                  "weighting": {"scheme": "siwlm"}, "epochs": epochs, "batch_size": 16,
                  "max_train_examples": 32, "max_eval_examples": 32, "max_seq_len": 64},
        "central_tasks": ["rte"], "search": search, "max_concurrent": 2,
        "workdir": str(tmp_path / "runs"),
    }


def _trial_epochs(workdir: Path, study: str) -> int:
    """Epochs trained, counted from Ray's own result files (one row per epoch report)."""
    rows = 0
    for result in (workdir / "ray").glob(f"{study}-*/*/result.json"):
        rows += sum(1 for line in result.read_text().splitlines()
                    if line.strip() and "metrics_json" in json.loads(line))
    return rows


def test_halving_trains_fewer_epochs_than_the_grid_on_the_same_cells(
        ray_session, tiny_encoder: str, sample_data_dir: Path, tmp_path: Path) -> None:
    import optuna
    from optuna.trial import TrialState

    from weightsearch.sweep.launch import launch
    from weightsearch.sweep.spec import load_study_spec

    space = {CENTRAL_WEIGHT: [1, 3, 6, 9]}
    grid = load_study_spec(_study("grid", tiny_encoder, sample_data_dir, tmp_path,
                                  {"strategy": "grid", "space": space}))
    halving = load_study_spec(_study("halving", tiny_encoder, sample_data_dir, tmp_path,
                                     {"strategy": "halving", "space": space, "min_epochs": 1,
                                      "reduction_factor": 2}))
    assert launch(grid, progress=False).finished
    summary = launch(halving, progress=False)
    assert summary.finished and summary.failed == 0, summary.lines()
    assert "6/6 stints done" in summary.lines()[0]

    workdir = Path(grid.workdir)
    assert _trial_epochs(workdir, "grid") == 4 * 2
    assert _trial_epochs(workdir, "halving") == 4 * 1 + 2 * 1

    trials = optuna.load_study(study_name="halving/rte", storage=halving.storage).get_trials()
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(pruned) == 4 and len(complete) == 2
    assert all(t.user_attrs[S.T_BUDGET] == 1 and list(t.intermediate_values) == [1]
               for t in pruned)
    # The survivors continued from their rung-0 checkpoints, in their own attempt folders,
    # and their logged weights are SIWLM's over both epochs.
    for t in complete:
        folder = t.user_attrs["output_dir"]
        assert folder.endswith("-attempt1") and t.user_attrs[S.T_ATTEMPT] == 1
        assert sorted(t.intermediate_values) == [1, 2]
        check = check_siwlm_steps(folder)
        assert check.returncode == 0, check.stdout + check.stderr
    # The survivors are the two best points at epoch 1.
    at_one = sorted(pruned, key=lambda t: -t.intermediate_values[1])
    assert {t.params[S.PARAM] for t in complete} == {t.params[S.PARAM] for t in at_one[:2]}


def test_task_grouping_study_names_the_best_group(
        ray_session, tiny_encoder: str, sample_data_dir: Path, tmp_path: Path) -> None:
    import optuna

    from weightsearch.studies.inspection import inspect
    from weightsearch.sweep.launch import launch
    from weightsearch.sweep.spec import load_study_spec

    raw = _study("grp", tiny_encoder, sample_data_dir, tmp_path,
                 {"space": {"tasks": {"subsets_of": ["mrpc", "stsb", "cola"]}}}, epochs=1,
                 tasks=("rte", "mrpc", "stsb", "cola"))
    raw["train"]["weighting"] = {"scheme": "siwlm", "central_weight": 9}
    spec = load_study_spec(raw)
    summary = launch(spec, progress=False)
    assert summary.finished and summary.complete == 8, summary.lines()
    line = summary.lines()[1]
    # One seed per group: no group is named best, and the gain over rte alone is still said.
    assert "no point is clearly better (" in line and "1 seed per point" in line, line

    study = optuna.load_study(study_name="grp/rte", storage=spec.storage)
    assert study.metric_names == ["accuracy"]
    assert study.user_attrs[S.A_SPACE] == ["tasks"]
    groups = sorted(tuple(t.user_attrs[S.T_GROUP]) for t in study.get_trials())
    assert len(groups) == 8 and () in groups and ("mrpc", "stsb", "cola") in groups
    for t in study.get_trials():
        ran = json.loads((Path(t.user_attrs["output_dir"]) / "data.json").read_text())
        assert sorted(ran["train_sizes"]) == sorted(["rte", *t.user_attrs[S.T_GROUP]])
        assert t.params == {f"tasks.{c}": int(c in t.user_attrs[S.T_GROUP])
                            for c in ("mrpc", "stsb", "cola")}
    text = inspect(spec.storage, "grp")
    assert "highest-scoring group (not separated) for rte:" in text, text
    assert "rte: no point is clearly better" in text, text


def test_a_sampling_weight_study_runs(ray_session, tiny_encoder: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture) -> None:
    import optuna

    from weightsearch.sweep.launch import launch
    from weightsearch.sweep.spec import load_study_spec

    spec = load_study_spec(EXAMPLES / "study-qa-weight-sample.yaml", overrides=[
        f"storage=sqlite:///{tmp_path / 'qa.db'}", f"workdir={tmp_path / 'runs'}",
        f"train.encoder={tiny_encoder}", "train.max_train_examples=24",
        "train.max_eval_examples=16",
    ])
    summary = launch(spec, progress=False)
    assert summary.finished and summary.failed == 0, summary.lines()
    study = optuna.load_study(study_name="qa-weight-sample/squad2", storage=spec.storage)
    trials = study.get_trials()
    weights = sorted(t.params["sampling.weights.squad2"] for t in trials)
    assert weights == [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]  # He 2019's grid, each point once
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    for t in study.get_trials():
        cfg = (Path(t.user_attrs["output_dir"]) / "config.yaml").read_text()
        assert f"squad2: {t.params['sampling.weights.squad2']}" in cfg
    # inspect shows the score against the QA weight, one row per weight.
    import csv
    import io

    from weightsearch.cli import main

    capsys.readouterr()
    assert main(["inspect", "qa-weight-sample", "--storage", spec.storage,
                 "--format", "csv"]) == 0
    printed = capsys.readouterr().out
    rows = list(csv.DictReader(io.StringIO(printed)))
    assert rows and "sampling.weights.squad2" in rows[0], printed
    by_weight = {float(r["sampling.weights.squad2"]): r for r in rows}
    assert sorted(by_weight) == weights
    for t in trials:  # each row carries its trial's SQuAD 2.0 figures
        row = by_weight[t.params["sampling.weights.squad2"]]
        assert float(row["value"]) == pytest.approx(t.value)
        assert row["state"] == "complete" and "squad2.f1" in row, row


def test_fused_cells_score_as_cells_trained_alone_in_a_grid_and_in_halving(
        ray_session, tiny_encoder: str, sample_data_dir: Path, tmp_path: Path) -> None:
    """`fuse_cells`: one Ray trial trains a grid's weights (a halving rung's stints) as one
    stacked model; each cell is still its own Optuna trial, with the score it gets alone."""
    import optuna
    from optuna.trial import TrialState

    from weightsearch.studies.inspection import cell_rows
    from weightsearch.studies.reading import read_all
    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep.launch import launch
    from weightsearch.sweep.spec import load_study_spec

    space = {CENTRAL_WEIGHT: [1, 3, 6, 9]}
    def fp32(raw: dict) -> dict:  # fusing refuses bf16, which `auto` picks on some CPUs
        return {**raw, "train": {**raw["train"], "precision": "fp32"}}

    specs = {
        name: load_study_spec({**fp32(_study(name, tiny_encoder, sample_data_dir, tmp_path,
                                             search)), **({"fuse_cells": 4} if fused else {})})
        for name, search, fused in (
            ("alone", {"strategy": "grid", "space": space}, False),
            ("fused", {"strategy": "grid", "space": space}, True),
            ("fhalving", {"strategy": "halving", "space": space, "min_epochs": 1,
                          "reduction_factor": 2}, True))}
    for spec in specs.values():
        summary = launch(spec, progress=False)
        assert summary.finished and summary.failed == 0, summary.lines()
    workdir, url = Path(specs["alone"].workdir), specs["alone"].storage

    def trials(name: str) -> list:
        return optuna.load_study(study_name=f"{name}/rte", storage=url).get_trials()

    alone = {t.params[S.PARAM]: t for t in trials("alone")}
    fused = {t.params[S.PARAM]: t for t in trials("fused")}
    assert sorted(fused) == sorted(alone) == [1, 3, 6, 9]
    cells = sorted(S.cell_key(w, 1) for w in (1, 3, 6, 9))
    for weight, t in fused.items():
        assert t.state == TrialState.COMPLETE and sorted(t.user_attrs[S.T_FUSED]) == cells
        assert t.value == pytest.approx(alone[weight].value, abs=1e-6)
        for epoch, value in alone[weight].intermediate_values.items():
            assert t.intermediate_values[epoch] == pytest.approx(value, abs=1e-6)
        assert S.T_FUSED not in alone[weight].user_attrs
        # Trained fused indeed, not one after another in the trial.
        result = json.loads((Path(t.user_attrs["output_dir"]) / "result.json").read_text())
        assert result["fused_members"] == 4
    # One Ray trial for the grid's four cells; halving's rungs: one trial of 4, one of 2.
    assert len(list((workdir / "ray").glob("fused-*/*/result.json"))) == 1
    assert len(list((workdir / "ray").glob("fhalving-*/*/result.json"))) == 2
    assert _trial_epochs(workdir, "fhalving") == 4 * 1 + 2 * 1

    halved = trials("fhalving")
    pruned = [t for t in halved if t.state == TrialState.PRUNED]
    complete = [t for t in halved if t.state == TrialState.COMPLETE]
    assert len(pruned) == 4 and len(complete) == 2
    # The survivors are the best at epoch 1, by the scores the cells get alone.
    assert min(alone[t.params[S.PARAM]].intermediate_values[1] for t in complete) >= \
        max(alone[t.params[S.PARAM]].intermediate_values[1] for t in pruned
            if t.params[S.PARAM] not in {c.params[S.PARAM] for c in complete})
    for t in complete:
        assert t.value == pytest.approx(alone[t.params[S.PARAM]].value, abs=1e-6)
        assert len(t.user_attrs[S.T_FUSED]) == 2 and t.user_attrs[S.T_ATTEMPT] == 1
    # inspect says which cells trained together.
    [study] = [s for s in read_all(open_storage(url)) if s.name == "fused/rte"]
    assert {row["fused_with"] for row in cell_rows([study])} == {"1; 3; 6; 9"}


def test_fused_cells_of_one_treatment_train_once_and_score_as_every_cell_trained(
        ray_session, tiny_encoder: str, sample_data_dir: Path, tmp_path: Path, capfd) -> None:
    """Under a clip every update of the grid's larger weights exceeds, a fused unit trains
    them once (`same_treatment: once`, the default): their trials say which cell trained for
    them and get the scores of a study that trains every cell (`same_treatment: all`)."""
    import optuna

    from weightsearch.sweep.launch import launch
    from weightsearch.sweep.spec import load_study_spec

    space = {CENTRAL_WEIGHT: [1, 3, 6, 9]}
    values = {}
    for name, how in (("once", "once"), ("every", "all")):
        raw = _study(name, tiny_encoder, sample_data_dir, tmp_path,
                     {"strategy": "grid", "space": space})
        raw["train"] = {**raw["train"], "precision": "fp32", "grad_clip": 0.02}
        summary = launch(load_study_spec({**raw, "fuse_cells": 4, "same_treatment": how}),
                         progress=name == "once")
        assert summary.finished and summary.failed == 0, summary.lines()
        trials = optuna.load_study(study_name=f"{name}/rte",
                                   storage=raw["storage"]).get_trials()
        values[name] = {t.params[S.PARAM]: t for t in trials}
    followers = [t for t in values["once"].values() if S.T_SAME_TREATMENT in t.user_attrs]
    assert followers and not any(S.T_SAME_TREATMENT in t.user_attrs
                                 for t in values["every"].values())
    notes = [ln for ln in capfd.readouterr().err.splitlines()
             if "trained the same updates as weight" in ln]
    assert len(notes) == len(followers), notes
    by_folder = {t.user_attrs["output_dir"]: t for t in values["once"].values()}
    for t in followers:
        record = t.user_attrs[S.T_SAME_TREATMENT]
        assert record["from_epoch"] == 2
        assert by_folder[record["trained_by"]].params[S.PARAM] < t.params[S.PARAM]
    for weight, t in values["once"].items():
        assert t.value == pytest.approx(values["every"][weight].value, abs=1e-6)
        assert t.intermediate_values == pytest.approx(
            values["every"][weight].intermediate_values, abs=1e-6)
    # inspect names the weight whose run trained each follower's updates
    from weightsearch.studies.inspection import cell_rows
    from weightsearch.studies.reading import read_all
    from weightsearch.studies.storage import open_storage

    [study] = [s for s in read_all(open_storage(raw["storage"])) if s.name == "once/rte"]
    shown = {row["central_weight"]: row["trained_by"] for row in cell_rows([study])}
    assert shown == {w: (by_folder[t.user_attrs[S.T_SAME_TREATMENT]["trained_by"]]
                         .params[S.PARAM] if S.T_SAME_TREATMENT in t.user_attrs else None)
                     for w, t in values["once"].items()}


def test_a_retried_fused_trial_reports_how_its_members_ended_without_training_them(
        ray_session, tiny_encoder: str, sample_data_dir: Path, tmp_path: Path) -> None:
    """A Ray retry of a fused trial (or a next attempt copying a finished member's folder)
    finds members that ended before: a result, an error, a stint at its budget. Each is
    reported as it ended and none is trained again."""
    from ray import tune

    from weightsearch.sweep import trainable as T
    from weightsearch.trainer import load_config, train

    def member(name: str, budget: int | None = None, attempt: int = 0) -> dict:
        base = tmp_path / name
        cfg = load_config({"encoder": tiny_encoder, "data_dir": str(sample_data_dir),
                           "tasks": ["rte", "mrpc"], "central_task": "rte", "epochs": 1,
                           "weighting": {"scheme": "siwlm", "central_weight": 9},
                           "max_train_examples": 32, "max_eval_examples": 32,
                           "precision": "fp32", "output_dir": str(base)})
        return {"base_dir": str(base), "attempt": attempt, "budget": budget, "metric": "accuracy",
                "stage": "multitask", T.RUN_CONFIG: T.Carried(cfg)}

    # `done` finished in its first attempt, which a driver killed before it recorded it; this
    # is its second attempt, which starts as a copy of the first's folder.
    done, failed, stint = member("done", attempt=1), member("failed"), member("stint", budget=1)
    train(done[T.RUN_CONFIG].cfg, quiet=True)
    steps = (tmp_path / "done" / "steps.jsonl").read_text()
    for folder, ended in (("failed", {"end": "error", "attempt": 0, "error": "boom: diverged"}),
                          ("stint", {"end": "stint", "attempt": 0})):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / T.MEMBER_END_FILE).write_text(json.dumps(ended))

    results = tune.Tuner(T.run_trial, param_space={T.MEMBERS: [done, failed, stint]},
                         run_config=tune.RunConfig(storage_path=str(tmp_path / "ray"),
                                                   verbose=0)).fit()
    assert not results.errors
    rows = results[0].metrics_dataframe.to_dict("records")
    ends = {int(r[T.MEMBER]): r for r in rows if isinstance(r.get(T.MEMBER_END), str)}
    assert {k: r[T.MEMBER_END] for k, r in ends.items()} == {0: "complete", 1: "error",
                                                             2: "stint"}
    assert ends[1][T.MEMBER_ERROR] == "boom: diverged"
    assert ends[0][T.VALUE] == json.loads((tmp_path / "done" / "result.json").read_text()
                                          )["best"]["rte"]["accuracy"]
    # Its result names the attempt's own folder, not the first attempt's it was copied from.
    assert json.loads(ends[0][T.SUMMARY_JSON])["output_dir"] == str(tmp_path / "done-attempt1")
    # Nothing trained again: the finished run's log is as it was, the others have none.
    assert (tmp_path / "done" / "steps.jsonl").read_text() == steps
    assert not (tmp_path / "failed" / "steps.jsonl").exists()
    assert not (tmp_path / "stint" / "steps.jsonl").exists()
