"""`weightsearch import`: validation of every row before any write, and what lands in Optuna."""

from __future__ import annotations

import optuna
import pytest

from tests.helpers import TABLE2
from weightsearch.core.errors import DataError, StorageError
from weightsearch.studies import schema
from weightsearch.studies.importer import import_file
from weightsearch.studies.reading import open_quiet, read_central, study_names

HEADER = "central_task,task_type,train_size,central_weight,seed,metric\n"
GOOD = "rte,classification,2490,1,0,70.1\nrte,classification,2490,9,0,71.5\n"


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'studies.db'}"


@pytest.fixture(scope="module")
def held_url(tmp_path_factory) -> str:
    """A database that already holds a study (shared: a rejected import writes nothing)."""
    folder = tmp_path_factory.mktemp("held")
    (folder / "ok.csv").write_text(HEADER + GOOD)
    url = f"sqlite:///{folder / 'studies.db'}"
    import_file(folder / "ok.csv", "before", url)
    return url


def _names(url: str) -> list[str]:
    return study_names(open_quiet(url))


def test_paper_table_imports_as_one_study_per_central_task(url):
    names = import_file(TABLE2, "siwlm-paper", url)
    assert sorted(names) == sorted(f"siwlm-paper/{t}" for t in
                                   ("mnli", "qqp", "qnli", "sst2", "cola", "stsb", "mrpc", "rte"))
    storage = open_quiet(url)
    study = optuna.load_study(study_name="siwlm-paper/stsb", storage=storage)
    assert study.user_attrs[schema.A_SOURCE] == schema.SOURCE_IMPORTED
    assert study.user_attrs[schema.A_TRAIN_SIZE] == 5749
    assert study.user_attrs[schema.A_TASK_TYPE] == "regression"
    assert study.user_attrs[schema.A_PRIMARY] == "pearson_spearman_mean"
    assert study.metric_names == ["pearson_spearman_mean"]  # optuna-dashboard's label
    trials = study.get_trials()
    assert len(trials) == 6 and {t.state.name for t in trials} == {"COMPLETE"}
    nine = next(t for t in trials if t.params[schema.PARAM] == 9.0)
    assert nine.value == pytest.approx(88.11)
    assert nine.user_attrs[schema.T_CELL] == "9|0"
    assert nine.user_attrs[schema.T_METRICS]["stsb"]["spearman"] == pytest.approx(88.20)
    cola = read_central(storage, "siwlm-paper/cola")
    assert cola.best.weight == 12 and cola.best.mean == pytest.approx(53.64)
    # The shipped table imports with its regime: the recommender sees the paper's evidence as
    # the paper's (BERT-base, fine-tuned), in place of its built-in copy, not beside it.
    assert (cola.encoder, cola.stage) == ("bert-base-uncased", "finetuned")
    from weightsearch.recommender.evidence import load_evidence

    evidence = load_evidence(url)
    rte = [p for p in evidence if p.task == "rte"]
    assert len(rte) == 1 and rte[0].source == "studies"
    assert (rte[0].encoder, rte[0].stage) == ("bert-base-uncased", "finetuned")


def test_importing_into_an_existing_study_name_is_refused(url, tmp_path):
    f = tmp_path / "a.csv"
    f.write_text(HEADER + GOOD)
    import_file(f, "mine", url)
    with pytest.raises(StorageError, match=r"already exists.*delete-study"):
        import_file(f, "mine", url)
    assert _names(url) == ["mine/rte"]


@pytest.mark.parametrize("body,message", [
    ("central_task,task_type,train_size,central_weight,metric\nrte,classification,2490,1,70\n",
     "missing column.*seed"),
    (HEADER + "rte,classification,2490,1,0,seventy\n", r"line 2: metric 'seventy' is not a number"),
    (HEADER + GOOD + "rte,classification,2490,16,0,70\n", r"line 4: central_weight 16 is outside"),
    (HEADER + "rte,classification,2490,0,0,70\n" + GOOD, r"line 2: central_weight 0 is outside"),
    (HEADER + GOOD + "rte,classification,2490,9,0,72\n", r"line 4: duplicate of line 3"),
    (HEADER + "rte,generation,2490,1,0,70\n", "task_type 'generation'"),
    (HEADER + "rte,classification,-3,1,0,70\n", "train_size '-3' is not a positive"),
])
def test_malformed_files_are_rejected_and_nothing_is_written(held_url, tmp_path, body, message):
    before = _names(held_url)
    f = tmp_path / "bad.csv"
    f.write_text(body)
    with pytest.raises(DataError, match=message):
        import_file(f, "after", held_url)
    assert _names(held_url) == before == ["before/rte"]


def test_every_problem_is_reported_at_once(url, tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text(HEADER + "rte,classification,2490,0,0,x\nmrpc,classification,3668,20,0,1\n")
    with pytest.raises(DataError) as err:
        import_file(f, "s", url)
    text = str(err.value)
    assert "3 problem(s), nothing was imported" in text
    assert "line 2: central_weight 0" in text and "line 2: metric 'x'" in text
    assert "line 3: central_weight 20" in text


def test_a_task_with_two_datasets_is_refused(url, tmp_path):
    f = tmp_path / "two.csv"
    f.write_text("central_task,task_type,train_size,central_weight,seed,metric,dataset\n"
                 "rte_a,classification,100,1,0,0.5,rte\nrte_a,classification,100,9,0,0.6,mnli\n")
    with pytest.raises(DataError, match="dataset mnli differs from line 2 \\(rte\\)"):
        import_file(f, "two", url)
    assert _names(url) == []


CLIP_HEADER = HEADER.rstrip("\n") + ",grad_clip,grad_clip_mode,clip_share,central_norm\n"


@pytest.mark.parametrize("rows,message", [
    ("rte,classification,2490,1,0,70,1,global,1.5,2\n", r"line 2: clip_share 1.5 is outside 0..1"),
    ("rte,classification,2490,1,0,70,1,global,-0.1,2\n", r"clip_share -0.1 is outside 0..1"),
    ("rte,classification,2490,1,0,70,1,per-task,,\n", r"grad_clip_mode 'per-task' is not one of"),
    ("rte,classification,2490,1,0,70,0,unweighted,,\n", r"unweighted' with grad_clip 0"),
    ("rte,classification,2490,1,0,70,,unweighted,,\n", r"given without grad_clip"),
    ("rte,classification,2490,1,0,70,-1,global,,\n", r"grad_clip -1 is outside"),
    ("rte,classification,2490,1,0,70,1,global,0.5,-2\n", r"central_norm -2 is outside"),
    # a clipping that differs between cells of one task: two regimes are two tasks
    ("rte,classification,2490,1,0,70,1,global,,\nrte,classification,2490,9,0,71,0,,,\n",
     r"line 3: task rte: clipping noclip differs from line 2 \(clip1\).*own central_task name"),
])
def test_bad_clipping_columns_are_refused_and_nothing_is_written(held_url, tmp_path, rows,
                                                                 message):
    before = _names(held_url)
    f = tmp_path / "bad.csv"
    f.write_text(CLIP_HEADER + rows)
    with pytest.raises(DataError, match=message):
        import_file(f, "after", held_url)
    assert _names(held_url) == before


def test_clipping_columns_round_trip_through_export(url, tmp_path, capsys):
    """Two clipping regimes of one dataset import as two tasks, keep their regime, clip shares
    and the weights that trained the same updates, and export back to the same rows."""
    from weightsearch.cli import main
    from weightsearch.studies.exporter import export_study

    f = tmp_path / "clip.csv"
    f.write_text(
        CLIP_HEADER.rstrip("\n") + ",dataset\n"
        + "".join(f"sst2_700-clip1,classification,700,{w},{s},{0.8 + s / 100},1,global,1,2.5,"
                  "sst2\n" for w in (6, 15) for s in (1, 2))
        + "".join(f"sst2_700-noclip,classification,700,{w},{s},{0.8 + w / 1000 + s / 100},0,,"
                  "0,2.5,sst2\n" for w in (6, 15) for s in (1, 2)))
    assert main(["import", str(f), "--study", "clip", "--storage", url]) == 0
    storage = open_quiet(url)
    clipped = read_central(storage, "clip/sst2_700-clip1")
    free = read_central(storage, "clip/sst2_700-noclip")
    assert clipped.clip_template == (1.0, "global") and free.clip_template == (0.0, "global")
    assert [a.weights for a in clipped.arms] == [(6.0, 15.0)] and free.arms == []
    assert clipped.arms[0].acts_below == pytest.approx(0.4)
    out = tmp_path / "back.csv"
    export_study(url, "clip", out)
    import pandas as pd

    back = pd.read_csv(out)
    assert set(back["central_task"]) == {"sst2_700-clip1", "sst2_700-noclip"}
    assert back.set_index(["central_task", "central_weight", "seed"])["clip_share"].to_dict() \
        == pd.read_csv(f).set_index(["central_task", "central_weight", "seed"])[
            "clip_share"].to_dict()
    assert set(zip(back["grad_clip"], back["grad_clip_mode"].fillna(""), strict=True)) == {
        (1.0, "global"), (0.0, "global")}


def test_the_live_range_per_focus_group_round_trips_and_names_the_arm(url, tmp_path):
    """saturates_in_focus / saturates_off_focus import into the runs' clipping records, state
    the arm's live range, and export back unchanged."""
    import pandas as pd

    from weightsearch.studies.exporter import export_study

    f = tmp_path / "live.csv"
    f.write_text(
        CLIP_HEADER.rstrip("\n") + ",saturates_in_focus,saturates_off_focus\n"
        + "".join(f"sst2_700-clip1,classification,700,{w},{s},{0.8 + s / 100},1,global,1,3,"
                  f"{0.3 + s / 100},{3 + s / 10}\n" for w in (6, 15) for s in (1, 2, 3)))
    import_file(f, "live", url)
    [arm] = read_central(open_quiet(url), "live/sst2_700-clip1").arms
    assert (arm.saturates_in_focus, arm.saturates_off_focus) == (pytest.approx(0.32),
                                                                pytest.approx(3.2))
    assert "every in-focus update from about 0.32 and every off-focus update from about 3.2" \
        in arm.text()
    out = tmp_path / "back.csv"
    export_study(url, "live", out)
    key = ["central_weight", "seed"]
    for column in ("saturates_in_focus", "saturates_off_focus"):
        assert pd.read_csv(out).set_index(key)[column].to_dict() == \
            pd.read_csv(f).set_index(key)[column].to_dict()


def test_a_bad_clip_share_exits_2_from_the_command_line(url, tmp_path, capsys):
    from weightsearch.cli import main

    f = tmp_path / "bad.csv"
    f.write_text(CLIP_HEADER + "rte,classification,2490,1,0,70,1,global,2,1\n")
    assert main(["import", str(f), "--study", "bad", "--storage", url]) == 2
    err = capsys.readouterr().err
    assert "clip_share 2 is outside 0..1" in err and "Traceback" not in err
    assert _names(url) == []


@pytest.mark.parametrize("rows,message", [
    ("rte,classification,2490,1,0,70,,,0.5,\n", r"clip_share given without grad_clip"),
    ("rte,classification,2490,1,0,70,0,,0.5,\n", r"clip_share 0.5 with grad_clip 0"),
    ("rte,classification,2490,1,0,70,1e9,,,1e-300\n", r"not a finite number"),
])
def test_clip_columns_that_contradict_each_other_are_refused(held_url, tmp_path, rows, message):
    f = tmp_path / "bad.csv"
    f.write_text(CLIP_HEADER + rows)
    with pytest.raises(DataError, match=message):
        import_file(f, "after", held_url)


@pytest.mark.parametrize("value", [{"a": 1}, ["rte"]])
def test_a_jsonl_name_that_is_an_object_or_a_list_is_refused(url, tmp_path, value):
    """A JSON object in central_task was stored as its JSON text (a study `x/{"a": 1}`)."""
    import json

    f = tmp_path / "objects.jsonl"
    f.write_text("".join(json.dumps({"central_task": value, "task_type": "classification",
                                     "train_size": 100, "central_weight": w, "seed": 1,
                                     "metric": 0.5}) + "\n" for w in (1, 9)))
    kind = "object" if isinstance(value, dict) else "list"
    with pytest.raises(DataError, match=f"line 1: central_task holds a JSON {kind}"):
        import_file(f, "objects", url)
    assert _names(url) == []
