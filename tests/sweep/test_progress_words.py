"""The live line speaks of single trials ("top trial"), never of a best weight: only the
summary's verdict, over seeds and drivers, names one."""

from __future__ import annotations

import io

from weightsearch.sweep.progress import Progress


def test_the_live_line_names_the_top_trial_not_a_best_weight():
    out = io.StringIO()
    p = Progress("s", 4, 2, stream=out, metric="accuracy", live=False)
    p.started("a", "rte", "w=1", 1, 2)
    p.finished("a", "COMPLETE", 3.0, 0.52)
    p.started("b", "rte", "w=9", 1, 2)
    p.finished("b", "COMPLETE", 3.0, 0.49)
    line = p.status()
    assert "top trial rte w=1 seed 1 (0.5200)" in line and "best" not in line


def test_an_eta_is_given_from_the_first_epoch_not_only_after_the_first_trial():
    out = io.StringIO()
    p = Progress("s", 6, 2, stream=out, metric="accuracy", live=False)
    p.started("a", "rte", "w=1", 1, 3)
    p.started("b", "rte", "w=9", 1, 3)
    assert p.eta(4) is None  # nothing measured yet
    p.running["a"].started -= 20.0  # its first epoch took 20 s, so a trial takes about 60 s
    p.epoch("a", 1, 0.5)
    assert "ETA" in out.getvalue().splitlines()[-1]
    now = p.running["a"].started + 20.0
    assert p.eta(4, now=now) == 60.0 * (4 + 2) / 2  # three waves of two trials
    p.finished("a", "COMPLETE", 30.0, 0.5)  # measured trial times take over
    assert p.eta(4) == 30.0 * (4 + 1) / 2


def test_each_central_task_says_its_own_metric():
    out = io.StringIO()
    p = Progress("s", 2, 2, stream=out, metric={"sst2": "accuracy", "stsb": "corr"}, live=False)
    p.started("a", "sst2", "w=1", 1, 2)
    p.started("b", "stsb", "w=1", 1, 2)
    p.epoch("a", 1, 0.7)
    p.epoch("b", 1, 0.25)
    p.finished("b", "COMPLETE", 3.0, 0.4)
    lines = out.getvalue().splitlines()
    assert "sst2 w=1 seed 1 accuracy=0.7000" in lines[2]
    assert "stsb w=1 seed 1 corr=0.2500" in lines[3] and "corr=0.4000" in lines[4]
    assert "accuracy/corr" not in out.getvalue()


def test_the_top_trial_is_the_studys_and_a_fine_tuning_trial_shows_its_stage(tmp_path):
    """Trials of another driver count: the searcher reads the study's top trial from the
    database at each trial end. A trial that fine-tunes says so, with its own epochs."""
    import optuna

    from weightsearch.studies import schema as S
    from weightsearch.sweep.searcher import study_best
    from weightsearch.sweep.space import default_space

    space = default_space()
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", direction="maximize")
    assert study_best(study, space) is None
    for value, seed in ((0.68, 1), (0.76, 2)):  # the second by another driver
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs={
            S.T_SEED: seed, S.T_POINT: {S.T_CENTRAL_WEIGHT_PATH: 9.0}}))
    assert study_best(study, space) == (0.76, "w=9 seed 2")
    assert study_best(study) == (0.76, "trial 1 seed 2")  # no space: the point is not named

    out = io.StringIO()
    p = Progress("s", 4, 2, stream=out, metric="accuracy", live=False)
    p.started("a", "rte", "w=1", 1, 2)
    p.finished("a", "COMPLETE", 3.0, 0.68)
    p.study_best("rte", *study_best(study, space))
    assert "top trial rte w=9 seed 2 (0.7600)" in p.status()
    p.started("b", "rte", "w=9", 1, 2)
    p.epoch("b", 2, 0.6)
    p.finetune("b", "rte", 1, 0.7)
    run = p.running["b"]
    assert (run.stage, run.epoch, run.value) == ("fine-tune rte", 1, 0.7)
    table = p._table()
    assert "fine-tune rte" in str(table.renderables[1].columns[2]._cells)


def test_a_trial_has_one_name_in_every_line_row_and_top_trial_mention(tmp_path):
    """Started, each epoch, fine-tuning, finished, the table row and the top trial (this
    driver's, and the study's as read from the database): `w=9 seed 1` each time, never
    `seed=1` in one place and `trial N, seed S` in another."""
    import re

    import optuna

    from weightsearch.studies import schema as S
    from weightsearch.sweep.progress import trial_label
    from weightsearch.sweep.searcher import study_best
    from weightsearch.sweep.space import Dimension, Space, default_space

    assert trial_label("w=9", 1) == "w=9 seed 1"
    out = io.StringIO()
    p = Progress("s", 2, 1, stream=out, metric="accuracy", live=False)
    p.started("a", "rte", default_space().label({S.T_CENTRAL_WEIGHT_PATH: 9.0}), 1, 2)
    row = p._table().renderables[1].columns[1]._cells
    p.epoch("a", 1, 0.5)
    p.epoch("a", 2, 0.6)
    p.finetune("a", "rte", 1, 0.7)
    p.finished("a", "COMPLETE", 3.0, 0.7)
    lines = out.getvalue().splitlines()
    assert len(lines) == 5 and row == ["w=9 seed 1"]
    for line in lines:
        event = line.split(" | ")[0]
        assert "rte w=9 seed 1" in event and "seed=" not in event, line
    assert "top trial rte w=9 seed 1 (0.7000)" in p.status()

    # The study's top trial, read back from the database, is named as the display named it,
    # for a point of several dimensions too.
    space = Space((Dimension(S.T_CENTRAL_WEIGHT_PATH, values=(1.0, 9.0)),
                   Dimension("lr", values=(1e-5, 3e-5))))
    point = {S.T_CENTRAL_WEIGHT_PATH: 9.0, "lr": 3e-5}
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", direction="maximize")
    study.add_trial(optuna.trial.create_trial(value=0.8, user_attrs={S.T_SEED: 2,
                                                                      S.T_POINT: point}))
    p.started("b", "rte", space.label(point), 2, 2)
    started = out.getvalue().splitlines()[-1]
    p.study_best("rte", *study_best(study, space))
    name = re.search(r"start rte (.*?) \|", started).group(1)
    assert name == "w=9 lr=3e-05 seed 2" and f"top trial rte {name} (0.8000)" in p.status()
