"""The recommender on a database filled by `import`: blending, leave-one-task-out, the CLI."""

from __future__ import annotations

import json

import pytest

from tests.helpers import SAMPLE, TABLE2
from weightsearch.cli import main
from weightsearch.recommender.evaluation import leave_one_task_out
from weightsearch.recommender.evidence import load_evidence
from weightsearch.recommender.prior import PRIOR_STUDY
from weightsearch.recommender.recommend import recommend
from weightsearch.studies.importer import import_file

# A measured RTE (same data as the paper's) whose best weight is 3, over two seeds.
RTE_AT_3 = "central_task,task_type,train_size,central_weight,seed,metric\n" + "".join(
    f"rte,classification,2490,{w},{s},{m + s}\n"
    for w, m in ((1, 60), (3, 70), (9, 62), (15, 61)) for s in (1, 2)
)


@pytest.fixture(scope="module")
def paper_url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('rec') / 'paper.db'}"
    import_file(TABLE2, "siwlm-paper", url)
    return url


def test_imported_paper_table_replaces_the_prior_points(paper_url):
    evidence = load_evidence(paper_url)
    paper = [p for p in evidence if p.study == PRIOR_STUDY or p.study.startswith("siwlm-paper/")]
    assert len(paper) == 8  # each task once: the measured study wins over the prior copy
    assert {p.source for p in paper} == {"studies"}
    # The imported copy is the paper's regime: it replaces the built-in one, not a new regime.
    assert {(p.encoder, p.stage) for p in paper} == {("bert-base-uncased", "finetuned")}
    rec = recommend(2500, storage_url=paper_url, encoder="bert-base-uncased")
    assert rec.source == "both" and rec.central_weight >= 9
    # The asked regime carries the most say, through the paper's tasks nearest in size.
    assert rec.evidence_shares[0]["name"] == "bert-base-uncased/finetuned"
    nearest = [e["study"] for e in rec.evidence[:3]]
    assert {"siwlm-paper/rte", "siwlm-paper/mrpc"} <= set(nearest), nearest
    assert recommend(300_000, storage_url=paper_url).central_weight < rec.central_weight


def test_a_measured_study_moves_the_recommendation(tmp_path):
    url = f"sqlite:///{tmp_path / 'own.db'}"
    f = tmp_path / "rte.csv"
    f.write_text(RTE_AT_3)
    import_file(f, "mine", url)
    evidence = load_evidence(url)
    rte = [p for p in evidence if p.task == "rte"]
    assert len(rte) == 1 and rte[0].source == "studies" and rte[0].best_weight == 3
    assert rte[0].n_seeds == 2
    blended = recommend(2490, storage_url=url)
    assert blended.source == "both"
    assert blended.central_weight < recommend(2490).central_weight


def test_leave_one_task_out_on_the_paper_table(paper_url):
    rows, rate, over = leave_one_task_out(load_evidence(paper_url))
    assert over == "studies" and len(rows) == 8
    assert {"task", "recommended", "recommended_grid", "best_weight", "top2", "hit"} <= set(rows[0])
    assert all(len(r["top2"]) == 2 and r["best_weight"] == r["top2"][0] for r in rows)
    assert 0.0 <= rate <= 1.0
    print(f"leave-one-task-out hit rate on Table 2: {rate:.3f}")


@pytest.mark.slow
def test_cli_json_text_plot_and_evaluate(paper_url, tmp_path, capsys):
    assert main(["recommend", "--train-size", "2500", "--storage", paper_url,
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"central_weight", "interval", "train_size", "task_type", "source", "evidence"} <= \
        set(out)
    assert out["central_weight"] >= 9 and len(out["interval"]) == 2

    png = tmp_path / "rec.png"
    assert main(["recommend", "--train-size", "300000", "--task-type", "classification",
                 "--storage", paper_url, "--plot", str(png)]) == 0
    assert "recommended central weight" in capsys.readouterr().out
    assert png.stat().st_size > 10_000

    assert main(["recommend", "--evaluate", "--storage", paper_url, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["tasks"]) == 8 and 0 <= report["hit_rate"] <= 1
    # Point error against a random weight of each task's grid (Table 2's own figures).
    for r in report["tasks"]:
        assert r["abs_error"] == pytest.approx(abs(r["recommended"] - r["best_weight"]), abs=1e-3)
        grid = (1, 3, 6, 9, 12, 15)
        assert r["chance_abs_error"] == pytest.approx(
            sum(abs(g - r["best_weight"]) for g in grid) / 6, abs=1e-3)
    assert report["mean_abs_error"] < report["chance_abs_error"]
    assert main(["recommend", "--evaluate", "--storage", paper_url]) == 0
    assert "point error (mean |recommended - best weight|)" in capsys.readouterr().out


def test_cli_counts_a_data_file(tmp_path, capsys):
    tsv = tmp_path / "train.tsv"  # a GLUE-like TSV with a stray quote: quoting must be off
    tsv.write_text("index\tsentence\tlabel\n" + "".join(f'{i}\tsay "hi\t1\n' for i in range(1234)))
    empty_db = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["recommend", "--data", str(tsv), "--storage", empty_db, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["train_size"] == 1234 and out["source"] == "prior"
    assert not (tmp_path / "none.db").exists()  # reading never creates a database


def test_cli_counts_a_preset_task(capsys):
    pytest.importorskip("weightsearch.trainer.task_data")
    assert main(["recommend", "--task", "rte", "--data-dir", str(SAMPLE),
                 "--storage", "sqlite:///" + str(SAMPLE / "absent.db"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["train_size"] > 0 and out["task_type"] == "classification"


def test_cli_usage_errors_exit_2(capsys):
    assert main(["recommend", "--train-size", "0"]) == 2
    assert "positive" in capsys.readouterr().err
    assert main(["recommend", "--data", "/no/such/file.csv"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["recommend", "--task", "nosuchtask", "--data-dir", "."]) == 2
    assert "not a preset" in capsys.readouterr().err
