"""`weightsearch export`: a study as an import file that rebuilds the same evidence."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pandas as pd
import pytest

from weightsearch.cli import main
from weightsearch.recommender.evidence import load_evidence
from weightsearch.studies.importer import import_file
from weightsearch.studies.reading import open_quiet, read_all

HERE = Path(__file__).resolve().parents[1]  # tests/
RELEASE_DB = HERE / "compat" / "release-0.1.0" / "studies.db"  # a study a sweep made
LADDER = ("central_task,dataset,task_type,train_size,central_weight,seed,metric,encoder,stage,"
          "variant,f1\n"
          + "".join(f"sst2_{n},sst2,classification,{n},{w},{s},"
                    f"{0.5 + w / 100 + s / 1000 + n / 1e5},all-MiniLM-L6-v2,multitask,reference,"
                    f"{0.4 + w / 100}\n"
                    for n in (125, 4000) for w in (1, 9, 15) for s in (1, 2)))


def _curves(url: str, study: str) -> dict:
    return {(s.central_task, s.train_size, s.task_type, s.encoder, s.stage, s.variant,
             s.dataset or s.central_task): {w: sorted(v) for w, v in s.values_by_weight().items()}
            for s in read_all(open_quiet(url)) if s.study == study}


def test_a_swept_study_exports_and_imports_as_the_same_evidence(tmp_path, capsys):
    db = tmp_path / "release.db"
    shutil.copy(RELEASE_DB, db)
    url = f"sqlite:///{db}"
    out = tmp_path / "compat.csv"
    assert main(["export", "compat", "--storage", url, "--output", str(out)]) == 0
    assert "exported 8 trial(s)" in capsys.readouterr().out
    rows = pd.read_csv(out)
    assert list(rows.columns[:6]) == ["central_task", "dataset", "task_type", "train_size",
                                      "central_weight", "seed"]
    target = f"sqlite:///{tmp_path / 'other.db'}"
    import_file(out, "compat-copy", target)
    # A study launched before studies recorded their dataset: read from its stored study file.
    assert {(s.central_task, s.dataset) for s in read_all(open_quiet(url))
            if s.study == "compat"} == {("rte", "rte"), ("stsb", "stsb")}
    before = {k[:1] + k[2:]: v for k, v in _curves(url, "compat").items()}
    after = {k[:1] + k[2:]: v for k, v in _curves(target, "compat-copy").items()}
    assert before == after and before  # same scores per weight, size, type and regime


def test_a_ladder_keeps_its_dataset_and_regime_through_export(tmp_path):
    source = tmp_path / "ladder.csv"
    source.write_text(LADDER)
    url, copy = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    import_file(source, "ladder", url)
    umask = os.umask(0o022)
    try:
        assert main(["export", "ladder", "--storage", url, "-o", str(tmp_path / "x.tsv")]) == 0
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "x.tsv").stat().st_mode) == 0o644  # not the temp file's
    import_file(tmp_path / "x.tsv", "ladder", copy)
    assert _curves(url, "ladder") == _curves(copy, "ladder")
    again = pd.read_csv(tmp_path / "x.tsv", sep="\t")
    assert set(again["dataset"]) == {"sst2"} and set(again["f1"].round(2)) == {0.41, 0.49, 0.55}
    # Both sizes are one task to the recommender: one dataset, two sizes.
    points = [p for p in load_evidence(copy) if p.source == "studies"]
    assert sorted(p.train_size for p in points) == [125, 4000]
    assert {p.family for p in points} == {"sst2"} and {p.task for p in points} == {
        "sst2_125", "sst2_4000"}


@pytest.mark.parametrize(("argv", "code", "needle"), [
    (["export", "nope", "-o", "{tmp}/x.csv"], 2, "no study named 'nope'"),
    (["export", "ladder", "-o", "{tmp}/x.json"], 2, "end the name with .csv or .tsv"),
    (["export", "ladder", "-o", "{tmp}/missing/x.csv"], 2, "does not exist; create it first"),
    (["export", "ladder", "-o", "{tmp}"], 2, "is a folder; name a file in it"),
])
def test_bad_exports_name_the_fix_and_write_nothing(tmp_path, capsys, argv, code, needle):
    (tmp_path / "ladder.csv").write_text(LADDER)
    url = f"sqlite:///{tmp_path / 'a.db'}"
    import_file(tmp_path / "ladder.csv", "ladder", url)
    before = _files(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv] + ["--storage", url]
    assert main(argv) == code
    assert needle in capsys.readouterr().err
    assert _files(tmp_path) == before


def _files(folder: Path) -> list[str]:
    """The folder's files, less the database's -wal/-shm side files: those come and go with
    its connections (the import's close when they are collected), the export writes neither."""
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(("-wal", "-shm")))
