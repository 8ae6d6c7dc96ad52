"""`weightsearch inspect` on an imported study: table, CSV, JSON, plot, unknown names."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from tests.helpers import TABLE2
from weightsearch.cli import main
from weightsearch.studies.importer import import_file

SEEDS = """central_task,task_type,train_size,central_weight,seed,metric
rte,classification,2490,3,1,60
rte,classification,2490,3,2,64
rte,classification,2490,9,1,66
rte,classification,2490,9,2,70
rte,classification,2490,9,3,68
"""


@pytest.fixture(scope="module")
def url(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("inspect")
    url = f"sqlite:///{folder / 'studies.db'}"
    import_file(TABLE2, "siwlm-paper", url)
    (folder / "seeds.csv").write_text(SEEDS)
    import_file(folder / "seeds.csv", "seeded", url)
    return url


def test_overview_lists_every_study_with_progress(url, capsys):
    assert main(["inspect", "--storage", url, "--format", "json"]) == 0
    rows = {r["study"]: r for r in json.loads(capsys.readouterr().out)["studies"]}
    assert set(rows) == {"siwlm-paper", "seeded"}
    paper = rows["siwlm-paper"]
    assert paper["complete"] == 48 and paper["running"] == 0 and paper["source"] == "imported"
    assert len(paper["central_tasks"]) == 8 and paper["best_weights"]["rte"] == 15
    assert main(["inspect", "--storage", url]) == 0
    assert "siwlm-paper" in capsys.readouterr().out


def test_one_study_as_table_csv_and_json(url, capsys):
    assert main(["inspect", "seeded", "--storage", url]) == 0
    table = capsys.readouterr().out
    assert "seeded/rte" in table and "best weight per central task" in table

    assert main(["inspect", "seeded/rte", "--storage", url, "--format", "csv"]) == 0
    cells = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert len(cells) == 5
    assert {"central_task", "central_weight", "seed", "state", "value", "rte.metric"} <= \
        set(cells.columns)

    assert main(["inspect", "seeded", "--storage", url, "--format", "json"]) == 0
    (rte,) = json.loads(capsys.readouterr().out)["central_tasks"]
    assert rte["best_weight"] == 9 and rte["best_mean"] == pytest.approx(68)
    assert rte["best_sd"] == pytest.approx(2.0) and rte["best_seeds"] == 3
    assert [c["n"] for c in rte["curve"]] == [2, 3]


def test_plot_is_written(url, tmp_path, capsys):
    png = tmp_path / "fig.png"
    assert main(["inspect", "siwlm-paper", "--storage", url, "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000  # eight panels, not an empty canvas


def test_unknown_study_names_the_fix(url, capsys):
    assert main(["inspect", "nope", "--storage", url]) == 2
    err = capsys.readouterr().err
    assert "no study named 'nope'" in err and f"weightsearch inspect --storage {url}" in err


def test_a_misspelt_study_name_gets_a_did_you_mean(url, capsys):
    # (the module's database holds the paper's table as siwlm-paper)
    assert main(["inspect", "siwlm-papr", "--storage", url]) == 2
    assert "did you mean 'siwlm-paper'?" in capsys.readouterr().err


def test_foreign_studies_are_listed_as_such_and_never_crash(tmp_path, capsys):
    """Another program's studies in the database: multi-objective, a categorical
    `central_weight`, odd attribute types. inspect, recommend and HTTP read around them."""
    import warnings

    import optuna
    from fastapi.testclient import TestClient

    from weightsearch.cli import main
    from weightsearch.service.app import create_app

    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    url = f"sqlite:///{tmp_path / 'foreign.db'}"
    multi = optuna.create_study(study_name="multi", storage=url,
                                directions=["maximize", "minimize"])
    multi.optimize(lambda t: (t.suggest_float("x", 0, 1), t.suggest_float("y", 0, 1)),
                   n_trials=2)
    odd = optuna.create_study(study_name="odd/rte", storage=url)
    odd.set_user_attr("central_task", ["not", "a", "name"])
    odd.set_user_attr("train_size", "many")
    odd.optimize(lambda t: float(len(t.suggest_categorical("central_weight", ["a", "bb"]))),
                 n_trials=2)
    for argv in (["inspect"], ["inspect", "multi"], ["inspect", "odd"],
                 ["recommend", "--train-size", "2500"], ["recommend", "--evaluate"]):
        assert main([*argv, "--storage", url]) == 0, argv
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
    main(["inspect", "--storage", url, "--format", "json"])
    assert '"foreign"' in capsys.readouterr().out
    client = TestClient(create_app(url))
    assert client.get("/studies").status_code == 200
    assert client.get("/studies/multi").status_code == 200
    assert client.get("/recommend", params={"train_size": 2500}).status_code == 200


def test_every_cell_is_counted_and_retried_attempts_are_superseded(tmp_path):
    """A launched grid knows its cells: those no trial reached are `not_started`; a failed
    attempt at a cell that a later attempt completed is `superseded`, not a failure."""
    import optuna
    from optuna.distributions import FloatDistribution

    from weightsearch.studies import schema
    from weightsearch.studies.reading import open_quiet, read_central

    url = f"sqlite:///{tmp_path / 'grid.db'}"
    storage = open_quiet(url)
    study = optuna.create_study(study_name="g/rte", storage=storage)
    for key, value in {schema.A_SOURCE: schema.SOURCE_SWEEP, schema.A_CENTRAL: "rte",
                       schema.A_SPEC: {"weights": [1, 9, 15], "seeds": [1, 2]}}.items():
        study.set_user_attr(key, value)

    def trial(weight, seed, state, value=None):
        study.add_trial(optuna.trial.create_trial(
            params={schema.PARAM: weight},
            distributions={schema.PARAM: FloatDistribution(1, 15)},
            state=state, value=value, user_attrs={schema.T_SEED: seed}))

    states = optuna.trial.TrialState
    trial(1, 1, states.FAIL)
    trial(1, 1, states.COMPLETE, 0.5)  # the retry of the cell above
    trial(9, 1, states.FAIL)  # never retried: a failure
    trial(9, 2, states.COMPLETE, 0.6)
    counts = read_central(storage, "g/rte").counts
    assert (counts["complete"], counts["failed"], counts["superseded"],
            counts["not_started"]) == (2, 1, 1, 3)  # 6 cells: 3 reached, 3 not


def test_panels_of_several_studies_say_which_study_they_show(url, tmp_path, capsys):
    """Both studies have an rte panel: each title names its study, not just "rte"."""
    svg = tmp_path / "all.svg"
    assert main(["inspect", "--storage", url, "--plot", str(svg)]) == 0
    text = svg.read_text()
    assert "seeded/rte (train n=2,490)" in text and "siwlm-paper/rte (train n=2,490)" in text
    one = tmp_path / "one.svg"
    assert main(["inspect", "seeded", "--storage", url, "--plot", str(one)]) == 0
    assert "rte (train n=2,490)" in one.read_text() and "seeded/rte" not in one.read_text()
