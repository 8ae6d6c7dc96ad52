"""The first hour with the tool: a study of your own, then the paper's table imported, then
`recommend` (the regime answered is the one you train in), and `recommend --data` row counts."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import create_trial

from tests.helpers import ROOT
from weightsearch.cli import main
from weightsearch.studies import schema as S

TABLE2 = ROOT / "recommender" / "data" / "siwlm_table2.csv"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def _trained_study(url: str, task: str, size: int, means: dict[float, float],
                   encoder: str = MINILM, encoder_size: str = "384x6") -> None:
    """A study as a launch leaves it after its trials: source sweep, the run template's
    clipping (the trainer's default, clip1), stage multitask."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=S.study_name("mine", task), storage=url,
                                direction="maximize")
    for k, v in {S.A_STUDY: "mine", S.A_CENTRAL: task, S.A_SOURCE: S.SOURCE_SWEEP,
                 S.A_TASK_TYPE: "classification", S.A_PRIMARY: "accuracy",
                 S.A_TRAIN_SIZE: size, S.A_STAGE: "multitask", S.A_ENCODER: encoder,
                 S.A_ENCODER_SIZE: encoder_size, S.A_VARIANT: "reference",
                 S.A_SPEC: {"study": "mine", "train": {}}}.items():
        study.set_user_attr(k, v)
    for w, m in means.items():
        for seed, noise in ((1, -0.4), (2, 0.0), (3, 0.4)):
            study.add_trial(create_trial(
                value=m + noise, params={S.PARAM: w},
                distributions={S.PARAM: FloatDistribution(1.0, 15.0)},
                user_attrs={S.T_SEED: seed}))


def _recommend(url: str, capsys, *extra: str) -> dict:
    capsys.readouterr()
    assert main(["recommend", "--train-size", "2490", "--storage", url, "--format", "json",
                 *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("encoder, size", [(MINILM, "384x6"), ("distilroberta-base", "768x6")])
def test_importing_the_papers_table_keeps_the_regime_you_train_in(encoder: str, size: str,
                                                                  tmp_path: Path, capsys):
    """One study you trained (an encoder the shipped evidence has, and one it has not), then
    Table 2 imported: the answer stays in your regime; the table counts as another regime."""
    url = f"sqlite:///{tmp_path / 'w.db'}"
    _trained_study(url, "rte", 2490, {1.0: 60.0, 9.0: 61.0}, encoder, size)
    before = _recommend(url, capsys)
    assert before["regime"]["encoder"] == encoder.lower()
    assert main(["import", str(TABLE2), "--study", "paper", "--storage", url]) == 0
    after = _recommend(url, capsys)
    assert after["regime"] == before["regime"]
    assert abs(after["central_weight"] - before["central_weight"]) < 0.3
    regime_note = next(n for n in after["notes"] if n.startswith("regime:"))
    assert "your own studies (1 central task), those you launched" in regime_note
    assert "imported results count as another regime's evidence" in regime_note
    # Table 2 counts, as another regime: discounted, the paper's encoder and stage.
    paper = [e for e in after["evidence"] if e["study"].startswith("paper/")]
    assert paper and all(e["imported"] and e["discounted"] for e in paper)
    assert {(e["encoder"], e["stage"]) for e in paper} == {("bert-base-uncased", "finetuned")}
    assert not any(e["discounted"] for e in after["evidence"] if e["study"] == "mine/rte")
    if encoder == MINILM:
        return
    # Asked for, the paper's regime is answered.
    asked = _recommend(url, capsys, "--encoder", "bert-base-uncased", "--stage", "finetuned")
    assert asked["regime"]["encoder"] == "bert-base-uncased"


def test_imported_results_alone_do_not_set_the_regime(tmp_path: Path, capsys):
    url = f"sqlite:///{tmp_path / 'w.db'}"
    assert main(["import", str(TABLE2), "--study", "paper", "--storage", url]) == 0
    got = _recommend(url, capsys)
    assert got["regime"]["stage"] == "multitask" and "minilm" in got["regime"]["encoder"]
    assert any("no studies of your own (launched, not imported)" in n for n in got["notes"])


def test_launch_of_a_missing_study_file_is_refused_before_ray_is_imported(tmp_path: Path):
    """Exit 2 at once; ray (seconds of CPU to import) is not imported to find that out."""
    import subprocess
    import sys

    code = ("import sys, time; from weightsearch.cli import main; t = time.process_time(); "
            "rc = main(['launch', '/no/such.yaml']); "
            "print(rc, 'ray' in sys.modules, round(time.process_time() - t, 2))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    rc, ray_loaded, seconds = done.stdout.split()
    assert (rc, ray_loaded) == ("2", "False"), done.stderr
    assert float(seconds) < 3.0  # CPU-seconds: a busy machine slows the clock, not the work
    assert "study file /no/such.yaml does not exist" in done.stderr


def test_export_writes_the_shortest_number_that_reads_back(tmp_path: Path, capsys):
    table = tmp_path / "in.csv"
    table.write_text("central_task,task_type,train_size,central_weight,seed,metric\n"
                     "rte,classification,2490,1,1,0.72\nrte,classification,2490,9,1,0.1\n")
    url = f"sqlite:///{tmp_path / 'e.db'}"
    assert main(["import", str(table), "--study", "mine", "--storage", url]) == 0
    out = tmp_path / "out.csv"
    assert main(["export", "mine", "--output", str(out), "--storage", url]) == 0
    text = out.read_text()
    assert ",0.72," in text or text.rstrip().endswith(",0.72") or ",0.72\n" in text, text
    assert "0.7199999" not in text and "0.1000000" not in text
    import csv

    rows = list(csv.DictReader(text.splitlines()))
    assert {float(r["metric"]) for r in rows} == {0.72, 0.1}
    assert {r["central_weight"] for r in rows} == {"1", "9"}


def test_recommend_data_counts_a_headerless_file_whole(tmp_path: Path, capsys):
    headerless = tmp_path / "train.csv"
    headerless.write_text("a fine film,1\nawful,0\nfine,1\n")
    assert main(["recommend", "--data", str(headerless), "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["train_size"] == 3
    assert "read as data, not as a header" in captured.err
    with_header = tmp_path / "with_header.csv"
    with_header.write_text("sentence,label\na fine film,1\nawful,0\nfine,1\n")
    assert main(["recommend", "--data", str(with_header), "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["train_size"] == 3
    assert "is read as the header" in captured.err and "--train-size" in captured.err


def test_the_license_is_an_spdx_string_naming_the_license_file():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_an_imported_table_is_called_imported_not_yours(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    url = f"sqlite:///{tmp_path / 'imp.db'}"
    assert main(["import", str(TABLE2), "--study", "paper", "--storage", url]) == 0
    capsys.readouterr()
    assert main(["recommend", "--train-size", "2500", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert "evidence: studies imported into the storage and the built-in evidence" in out
    assert "(8 imported studies)" in out
    assert "your studies" not in out.replace("no studies of your own", "")
