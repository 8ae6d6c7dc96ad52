"""Partial clipping said per central task: weight 1 with 96% of its central updates clipped and
weight 9 with all of them (the demo's STS-B), for two central tasks of one study, each named
in the clipping table and each with its own sentence; nothing said where little was clipped
or where the weight was a sampling rate."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from weightsearch.cli import main
from weightsearch.studies import schema as S


def _study(tmp_path: Path, data_dir: Path, shares: dict[str, dict[float, float]],
           **record) -> str:
    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep import study_db
    from weightsearch.sweep.spec import load_study_spec

    url = f"sqlite:///{tmp_path / 'p.db'}"
    spec = load_study_spec({"study": "part", "train": {"data_dir": str(data_dir),
                            "tasks": ["rte", "stsb"], "epochs": 1},
                            "weights": [1, 9], "workdir": str(tmp_path / "work")})
    study_db.create_studies(spec, open_storage(url), url,
                            [study_db.describe(spec, c) for c in spec.central_tasks], {})
    for central, by_weight in shares.items():
        study = optuna.load_study(study_name=S.study_name("part", central), storage=url)
        for weight, share in by_weight.items():
            for seed in (1, 2):
                clipping = {"grad_clip": 1.0, "grad_clip_mode": "global", **record,
                            "tasks": {central: {"updates": 100, "clipped": round(100 * share),
                                                "clip_share": share}}}
                study.add_trial(create_trial(
                    state=TrialState.COMPLETE, value=0.6 + 0.01 * seed,
                    params={S.PARAM: weight},
                    distributions={S.PARAM: FloatDistribution(1.0, 15.0)},
                    user_attrs={S.T_SEED: seed, S.T_CLIPPING: clipping}))
    return url


def _run(url: str, capsys: pytest.CaptureFixture, *args: str) -> str:
    capsys.readouterr()
    assert main(["inspect", "part", "--storage", url, *args]) == 0
    return capsys.readouterr().out


def test_each_central_task_gets_its_share_per_weight(
        tmp_path: Path, sample_data_dir: Path, capsys: pytest.CaptureFixture) -> None:
    url = _study(tmp_path, sample_data_dir, {"stsb": {1.0: 0.96, 9.0: 1.0},
                                             "rte": {1.0: 0.77, 9.0: 1.0}})
    text = _run(url, capsys)
    table = text[text.index("gradient clipping of the central task"):]
    assert "central_task" in table.splitlines()[1]
    assert sum(line.split()[:1] == ["stsb"] for line in table.splitlines()) == 2
    assert ("stsb: global clipping at 1 cut 96% at 1, 100% at 9 of the central updates; a "
            "clipped update is the same whatever the weight, so the weight changed only the "
            "updates left unclipped (4% at 1); from 9 every central update was clipped") in text
    assert "rte: global clipping at 1 cut 77% at 1, 100% at 9" in text
    found = json.loads(_run(url, capsys, "--format", "json"))["central_tasks"]
    by_task = {s["central_task"]: s["partial_clipping"] for s in found}
    assert by_task["stsb"].startswith("global clipping at 1 cut 96% at 1")


@pytest.mark.parametrize(("shares", "record"), [
    ({1.0: 0.2, 9.0: 0.4}, {}),  # little clipped: the weight acted
    ({1.0: 0.96, 9.0: 1.0}, {"weight_acts_on": "sampling"}),  # the clip cut no searched weight
])
def test_nothing_is_said_where_the_clip_did_not_take_the_weight(
        tmp_path: Path, sample_data_dir: Path, capsys: pytest.CaptureFixture,
        shares: dict, record: dict) -> None:
    url = _study(tmp_path, sample_data_dir, {"stsb": shares}, **record)
    found = json.loads(_run(url, capsys, "--format", "json"))["central_tasks"]
    assert [s["partial_clipping"] for s in found if s["central_task"] == "stsb"] == [None]


def test_the_csv_rows_say_what_each_cell_measured(
        tmp_path: Path, sample_data_dir: Path, capsys: pytest.CaptureFixture) -> None:
    import csv
    import io

    url = _study(tmp_path, sample_data_dir, {"stsb": {1.0: 0.96, 9.0: 1.0}})
    rows = list(csv.DictReader(io.StringIO(_run(url, capsys, "--format", "csv"))))
    stsb = [r for r in rows if r["central_task"] == "stsb"]
    assert len(stsb) == 4
    for r in stsb:
        assert r["stage"] == "multitask" and r["clipping"] == "clip1"
        assert float(r["clip_share"]) == (0.96 if r["central_weight"] == "1.0" else 1.0)
        assert r["verdict"].startswith("no weight is clearly better")
        assert "encoder" in r and "variant" in r
