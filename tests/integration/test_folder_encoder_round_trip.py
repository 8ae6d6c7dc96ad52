"""A study of a local encoder folder, asked for by that folder: `recommend --encoder PATH`
answers for its regime, and the study exported and imported elsewhere answers the same (the
import is evidence like the launch, asked for by the same path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from weightsearch.cli import main

pytestmark = pytest.mark.integration


def test_export_import_and_recommend_by_the_encoder_folder(
        local_ray: None, tiny_encoder: str, sample_data_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture) -> None:
    from weightsearch.sweep.launch import launch
    from weightsearch.sweep.spec import load_study_spec

    url = f"sqlite:///{tmp_path / 'own.db'}"
    spec = load_study_spec({
        "study": "folder", "allow_inert": True, "storage": url,
        "train": {"encoder": tiny_encoder, "data_dir": str(sample_data_dir),
                  "tasks": ["rte", "mrpc"], "epochs": 1, "batch_size": 16,
                  "max_train_examples": 48, "max_eval_examples": 32, "num_threads": 1,
                  "cache_dir": str(tmp_path / "cache")},
        "central_tasks": ["rte"], "weights": [1, 4, 15], "seeds": [1, 2],
        "resources": {"cpu": 1, "gpu": 0}, "max_concurrent": 2,
        "workdir": str(tmp_path / "runs")})
    assert launch(spec, progress=False).failed == 0
    exported = tmp_path / "folder.csv"
    assert main(["export", "folder", "--storage", url, "-o", str(exported)]) == 0
    again = f"sqlite:///{tmp_path / 'again.db'}"
    assert main(["import", str(exported), "--study", "folder", "--storage", again]) == 0
    capsys.readouterr()

    def answer(storage: str, encoder: str) -> dict:
        assert main(["recommend", "--train-size", "48", "--encoder", encoder,
                     "--storage", storage, "--format", "json"]) == 0, capsys.readouterr().err
        return json.loads(capsys.readouterr().out)

    for asked in (tiny_encoder, tiny_encoder.rstrip("/") + "/", Path(tiny_encoder).name):
        own, imported = answer(url, asked), answer(again, asked)
        assert own["regime"] == imported["regime"]
        assert Path(own["regime"]["encoder"]).name == Path(tiny_encoder).name.lower()
        assert (own["central_weight"], own["interval"]) == \
            (imported["central_weight"], imported["interval"])
        mine = [e for e in own["evidence"] if e["study"] == "folder/rte"]
        assert mine and not mine[0]["discounted"]  # the asked regime is the study's
