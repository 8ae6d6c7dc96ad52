"""One table of bad inputs across every command: a clear message naming the problem, exit code 2,
no traceback, and the study database and output folders exactly as they were."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from weightsearch.cli import main

RUN = """encoder: {encoder}
data_dir: {data}
tasks: [rte, mrpc]
central_task: rte
weighting: {{scheme: siwlm, central_weight: 9}}
epochs: 1
max_train_examples: 16
output_dir: {out}
"""

STUDY = """study: bad
storage: {db}
train:
  encoder: {encoder}
  data_dir: {data}
  tasks: [rte, mrpc]
  epochs: 1
  max_train_examples: 16
central_tasks: [rte]
weights: {weights}
workdir: {work}
"""

IMPORT_HEADER = "central_task,task_type,train_size,central_weight,seed,metric\n"


def _snapshot(root: Path) -> dict[str, str]:
    """Every file's digest. A SQLite database is digested by its logical content (a dump): its
    bytes change whenever a closing connection checkpoints the write-ahead log into it, and its
    -wal/-shm side files come and go with connections."""
    return {
        str(p.relative_to(root)): _digest(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }


def _digest(path: Path) -> str:
    if path.suffix != ".db":
        return hashlib.sha256(path.read_bytes()).hexdigest()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return hashlib.sha256("\n".join(conn.iterdump()).encode()).hexdigest()


def _studies(url: str) -> dict[str, list]:
    import optuna

    storage = optuna.storages.RDBStorage(url)
    return {
        s.study_name: [(t.number, t.state.name, t.value, t.params) for t in s.trials]
        for s in (optuna.load_study(study_name=n, storage=storage)
                  for n in optuna.get_all_study_names(storage))
    }


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        return int(exc.code or 0)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Path:
    """A folder with studies.db holding the imported study `existing` and the CSV it came
    from, imported once for the module; each test gets a copy."""
    folder = tmp_path_factory.mktemp("seeded")
    seed_csv = folder / "seed.csv"
    seed_csv.write_text(IMPORT_HEADER + "rte,classification,2490,9,1,0.61\n"
                        "rte,classification,2490,1,1,0.55\n")
    url = f"sqlite:///{folder / 'studies.db'}"
    assert main(["import", str(seed_csv), "--study", "existing", "--storage", url]) == 0
    return folder


@pytest.fixture
def world(tmp_path, sample_data_dir, tiny_encoder, seeded):
    """A data folder to corrupt, a populated study database, and places for outputs."""
    data = tmp_path / "data"
    shutil.copytree(sample_data_dir, data)
    for name in ("seed.csv", "studies.db"):
        shutil.copy(seeded / name, tmp_path / name)
    db = tmp_path / "studies.db"
    url = f"sqlite:///{db}"
    return {"tmp": tmp_path, "data": data, "db": db, "url": url, "encoder": tiny_encoder,
            "out": tmp_path / "out", "work": tmp_path / "work"}


def run_yaml(w, **fmt) -> str:
    return RUN.format(**{"encoder": w["encoder"], "data": w["data"], "out": w["out"], **fmt})


def study_yaml(w, weights="[1, 9]") -> str:
    return STUDY.format(db=w["url"], encoder=w["encoder"], data=w["data"], weights=weights,
                        work=w["work"])


def _write(w, name: str, text: str) -> str:
    path = w["tmp"] / name
    path.write_text(text)
    return str(path)


def _corrupt(w, rel: str, text: str) -> None:
    (w["data"] / rel).write_text(text)


# (case id, setup(w) -> argv, expected words in the message)
CASES = [
    ("truncated yaml", lambda w: ["train", "--config", _write(w, "r.yaml", run_yaml(w)[:60])],
     ["YAML"]),
    ("malformed yaml", lambda w: ["train", "--config", _write(w, "r.yaml", "tasks: [rte\n: :")],
     ["YAML", "line"]),
    ("missing config", lambda w: ["train", "--config", str(w["tmp"] / "nope.yaml")],
     ["does not exist"]),
    ("wrong type", lambda w: ["train", "--config", _write(w, "r.yaml", run_yaml(w)),
                              "--set", "epochs=three"], ["epochs"]),
    ("unknown key", lambda w: ["train", "--config", _write(w, "r.yaml", run_yaml(w)),
                               "--set", "epoch=3"], ["epoch", "unknown"]),
    ("weight -1", lambda w: ["train", "--config", _write(w, "r.yaml", run_yaml(w)),
                             "--set", "weighting.central_weight=-1"], ["central_weight"]),
    ("weight NaN", lambda w: ["train", "--config", _write(w, "r.yaml", run_yaml(w)),
                              "--set", "weighting.central_weight=.nan"], ["central_weight"]),
    ("unknown preset", lambda w: ["train", "--config", _write(w, "r.yaml", run_yaml(w)),
                                  "--set", "tasks=[rte, mrpcc]"], ["mrpcc"]),
    ("missing column", lambda w: (_corrupt(w, "RTE/train.tsv", "index\tpremise\tlabel\n"
                                           "0\ta\tentailment\n"),
                                  ["train", "--config", _write(w, "r.yaml", run_yaml(w))])[1],
     ["train.tsv", "sentence"]),
    ("ragged row", lambda w: (_corrupt(w, "RTE/train.tsv", "index\tsentence1\tsentence2\tlabel\n"
                                       "0\ta\tb\tentailment\n1\ta\tb\n"),
                              ["train", "--config", _write(w, "r.yaml", run_yaml(w))])[1],
     ["train.tsv", "line"]),
    ("empty training file", lambda w: (_corrupt(w, "RTE/train.tsv",
                                                "index\tsentence1\tsentence2\tlabel\n"),
                                       ["train", "--config",
                                        _write(w, "r.yaml", run_yaml(w))])[1],
     ["train.tsv"]),
    ("label outside set", lambda w: (_corrupt(w, "RTE/train.tsv",
                                              "index\tsentence1\tsentence2\tlabel\n"
                                              "0\ta\tb\tmaybe\n"),
                                     ["train", "--config", _write(w, "r.yaml", run_yaml(w))])[1],
     ["maybe"]),
    ("duplicate run key", lambda w: ["train", "--config",
                                     _write(w, "r.yaml", run_yaml(w) + "epochs: 3\n")],
     ["epochs", "duplicate key"]),
    ("yaml alias", lambda w: ["launch", _write(w, "s.yaml", study_yaml(w, "&w [1, 9]")
                                               + "warm_start: *w\n")], ["aliases"]),
    ("finetune unknown task", lambda w: ["train", "--config", _write(w, "r.yaml", run_yaml(w)),
                                         "--set", "finetune.tasks=[qnli]"], ["finetune.tasks"]),
    ("bad preset", lambda w: ["train", "--config", _write(w, "r.yaml", run_yaml(w)),
                              "--set", "preset=mtdnn"], ["preset"]),
    ("init_from missing", lambda w: ["train", "--config", _write(w, "r.yaml", run_yaml(w)),
                                     "--set", "init_from=/no/such/run"], ["init_from"]),
    ("study weight 0", lambda w: ["launch", _write(w, "s.yaml", study_yaml(w, "[0, 9]"))],
     ["weights"]),
    ("study weight 16", lambda w: ["launch", _write(w, "s.yaml", study_yaml(w, "[9, 16]"))],
     ["weights"]),
    ("study weight NaN", lambda w: ["launch", _write(w, "s.yaml", study_yaml(w, "[.nan]"))],
     ["weights"]),
    ("study weight text", lambda w: ["launch", _write(w, "s.yaml", study_yaml(w, "[nine]"))],
     ["weights"]),
    ("empty grid", lambda w: ["launch", _write(w, "s.yaml", study_yaml(w, "[]"))], ["weights"]),
    ("wrong storage url", lambda w: ["launch", _write(w, "s.yaml", study_yaml(w)),
                                     "--storage", "postgresql+psycopg://nobody@127.0.0.1:1/x"],
     ["storage"]),
    ("malformed storage url", lambda w: ["inspect", "--storage", "not a url"], ["storage"]),
    ("wrong ray address", lambda w: ["launch", _write(w, "s.yaml", study_yaml(w)),
                                     "--ray-address", "127.0.0.1:9"], ["127.0.0.1:9"]),
    ("resume unknown study", lambda w: ["resume", "nosuch", "--storage", w["url"]], ["nosuch"]),
    ("inspect unknown study", lambda w: ["inspect", "nosuch", "--storage", w["url"]], ["nosuch"]),
    ("import missing column", lambda w: ["import", _write(w, "i.csv",
                                         "central_task,train_size,central_weight,seed,metric\n"
                                         "x,10,9,1,0.5\n"),
                                         "--study", "imp", "--storage", w["url"]],
     ["task_type"]),
    ("import non-numeric", lambda w: ["import", _write(w, "i.csv", IMPORT_HEADER +
                                      "x,classification,ten,9,1,0.5\n"),
                                      "--study", "imp", "--storage", w["url"]], ["train_size"]),
    ("import weight 16", lambda w: ["import", _write(w, "i.csv", IMPORT_HEADER +
                                    "x,classification,10,16,1,0.5\n"),
                                    "--study", "imp", "--storage", w["url"]],
     ["central_weight"]),
    ("recommend non-integer size", lambda w: ["recommend", "--train-size", "2.5k",
                                              "--storage", w["url"]], ["train-size"]),
    ("recommend unknown type", lambda w: ["recommend", "--train-size", "2500", "--task-type",
                                          "clustering", "--storage", w["url"]], ["clustering"]),
    ("duplicate yaml key", lambda w: ["launch", _write(w, "s.yaml", study_yaml(w) +
                                      "weights: [3]\n")], ["duplicate key", "weights"]),
    ("study name ..", lambda w: ["launch", _write(w, "s.yaml",
                                 study_yaml(w).replace("study: bad", "study: .."))], ["study"]),
    ("study name 300 chars", lambda w: ["launch", _write(w, "s.yaml", study_yaml(w).replace(
        "study: bad", "study: " + "x" * 300))], ["study", "100"]),
    ("guided trials beyond grid", lambda w: ["launch", _write(w, "s.yaml", study_yaml(
        w, "{low: 1, high: 4, step: 1, n_trials: 10, sampler: random}"))], ["n_trials", "4"]),
    ("warm start outside range", lambda w: ["launch", _write(w, "s.yaml", study_yaml(
        w, "{low: 1, high: 4, n_trials: 2, sampler: random}") + "warm_start: [9]\n")],
     ["warm_start", "outside"]),
    ("mysql without driver", lambda w: ["inspect", "--storage", "mysql://u@127.0.0.1/db"],
     ["MySQLdb", "install"]),
    # The baselines' settings (uncertainty and DWA weighting, sampling rules by size).
    ("temperature 0", lambda w: ["train", "--config", _write(w, "r.yaml", run_yaml(w)),
                                 "--set", "sampling={scheme: temperature, T: 0}"],
     ["sampling.T", "> 0"]),
    ("temperature cap 0", lambda w: ["train", "--config", _write(w, "r.yaml", run_yaml(w)),
                                     "--set", "sampling={scheme: temperature, T: 2, cap: 0}"],
     ["sampling.cap", ">= 1"]),
    ("unimax max_epochs 0", lambda w: ["train", "--config", _write(w, "r.yaml", run_yaml(w)),
                                       "--set", "sampling={scheme: unimax, max_epochs: 0}"],
     ["sampling.max_epochs", ">= 1"]),
    ("dwa temperature 0", lambda w: ["train", "--config", _write(w, "r.yaml", run_yaml(w)),
                                     "--set", "weighting={scheme: dwa, temperature: 0}"],
     ["weighting.temperature", "> 0"]),
    ("uncertainty with a central weight", lambda w: [
        "train", "--config", _write(w, "r.yaml", run_yaml(w)),
        "--set", "weighting={scheme: uncertainty, central_weight: 9}"],
     ["weighting.central_weight", "cannot take central_weight", "siwlm"]),
    ("uncertainty in a weight search", lambda w: ["launch", _write(w, "s.yaml", study_yaml(
        w).replace("  epochs: 1\n", "  epochs: 1\n  weighting: {scheme: uncertainty}\n"))],
     ["train.weighting", "central weight", "siwlm"]),
    ("unknown scheme in a search dimension", lambda w: ["launch", _write(
        w, "s.yaml", study_yaml(w).replace("weights: [1, 9]\n", "search: {space: {"
                                           "weighting.scheme: {choices: [equal, dwaa]}}}\n"))],
     ["weighting.scheme", "unknown scheme 'dwaa'", "choose one of"]),
    ("unknown sampling rule in a search dimension", lambda w: ["launch", _write(
        w, "s.yaml", study_yaml(w).replace("weights: [1, 9]\n", "search: {space: {"
                                           "sampling.scheme: {choices: [shuffle, sqroot]}}}\n"))],
     ["sampling.scheme", "unknown scheme 'sqroot'", "choose one of"]),
]


@pytest.mark.parametrize(("case", "argv_of", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_cleanly(world, capsys, case, argv_of, words):
    argv = argv_of(world)
    files_before, studies_before = _snapshot(world["tmp"]), _studies(world["url"])
    code = _run(argv)
    err = capsys.readouterr().err
    assert code == 2, (case, err)
    assert "Traceback" not in err, err
    low = err.lower()
    assert all(word.lower() in low for word in words), (case, err)
    assert _studies(world["url"]) == studies_before, f"{case}: the database changed"
    assert _snapshot(world["tmp"]) == files_before, f"{case}: files changed"
    assert not world["out"].exists() and not world["work"].exists(), case


def test_http_non_integer_train_size(world):
    from fastapi.testclient import TestClient

    from weightsearch.service.app import create_app

    before = _studies(world["url"])
    client = TestClient(create_app(world["url"]))
    for bad in ("2.5k", "-3", "0", "1e3"):
        resp = client.get("/recommend", params={"train_size": bad})
        assert resp.status_code in (400, 422), (bad, resp.text)
        assert "train_size" in resp.text
    assert _studies(world["url"]) == before
