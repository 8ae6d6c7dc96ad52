"""Validating configs and study files stays light: no torch, so that `launch` checks a study in
milliseconds and the HTTP service answers its first POST at once."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import ROOT


def test_config_and_study_parsing_do_not_import_torch():
    code = ("import sys, trainer.config, sweep.spec, service.app; "
            "print(sorted(m for m in ('torch', 'ray', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip()
    assert out == "[]"


def test_absurd_train_sizes_are_refused_on_the_command_line_and_over_http(capsys):
    from fastapi.testclient import TestClient

    from weightsearch.cli import main
    from weightsearch.service.app import create_app

    huge = "9" * 400
    assert main(["recommend", "--train-size", huge]) == 2
    assert "--train-size" in capsys.readouterr().err
    client = TestClient(create_app("sqlite:///:memory:"))
    for size in (huge, str(10**30), "1e30"):
        r = client.get("/recommend", params={"train_size": size})
        assert 400 <= r.status_code < 500, (size, r.status_code, r.text[:200])


def test_a_study_driver_sizes_every_task_type_without_torch():
    """The driver records each task's training rows and starts Tune's loggers without loading
    torch, transformers or datasets (seconds of imports and hundreds of MB per driver); the
    counts are those the trainer's heads parse."""
    code = (
        "import sys, json; from weightsearch.sweep.spec import load_study_spec; "
        "from weightsearch.sweep import study_db; "
        "from weightsearch.sweep.tuning import _tensorboardx_without_torch; "
        "from weightsearch import trainer; "
        "spec = load_study_spec('examples/study-sample.yaml'); "
        "sizes = {c: study_db.describe(spec, c).sizes for c in spec.central_tasks}; "
        "qa = trainer.task_sizes('examples/run-qa-mix-sample.yaml'); "
        "_tensorboardx_without_torch(); import tensorboardX; "
        "print(json.dumps([sizes, qa, sorted(m for m in ('torch', 'transformers', 'datasets') "
        "if m in sys.modules)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip().splitlines()[-1]
    sizes, qa, loaded = json.loads(out)
    assert loaded == []
    assert sizes == {c: {"sst2": 200, "stsb": 200, "mrpc": 200} for c in ("sst2", "stsb")}

    # The same rows as the heads' own parse (which loads torch) gives.
    from weightsearch.trainer.config import load_config
    from weightsearch.trainer.data.readers import read_task_table, resolve_path
    from weightsearch.trainer.heads import head_class
    from weightsearch.trainer.task_rows import train_subset

    cfg = load_config(ROOT / "examples/run-qa-mix-sample.yaml")
    for spec in cfg.tasks:
        table = read_task_table(spec, resolve_path(cfg.data_dir, spec.train_file))
        rows = train_subset(cfg, spec).apply(head_class(spec.type).parse(spec, table))
        assert qa[spec.name] == len(rows) > 0
