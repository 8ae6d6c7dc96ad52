"""Validating configs and study files stays light: no torch, so that `launch` checks a study in
milliseconds and the HTTP service answers its first POST at once."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT


def test_config_and_study_parsing_do_not_import_torch():
    code = ("import sys, trainer.config, sweep.spec, service.app; "
            "print(sorted(m for m in ('torch', 'ray', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip()
    assert out == "[]"


def test_recommend_for_a_task_preset_does_not_import_torch(tmp_path):
    code = ("import sys; from weightsearch.cli import main; "
            f"rc = main(['recommend', '--task', 'rte', '--data-dir', 'data/glue_sample', "
            f"'--storage', 'sqlite:///{tmp_path}/none.db']); "
            "print(rc, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip().splitlines()[-1]
    assert out == "0 False"


def test_absurd_train_sizes_are_refused_on_the_command_line_and_over_http(capsys):
    from fastapi.testclient import TestClient

    from service.app import create_app
    from weightsearch.cli import main

    huge = "9" * 400
    assert main(["recommend", "--train-size", huge]) == 2
    assert "--train-size" in capsys.readouterr().err
    client = TestClient(create_app("sqlite:///:memory:"))
    for size in (huge, str(10**30), "1e30"):
        r = client.get("/recommend", params={"train_size": size})
        assert 400 <= r.status_code < 500, (size, r.status_code, r.text[:200])
