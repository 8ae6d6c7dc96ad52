"""A Ray retry of a fused trial whose members had ended: the worker dies after the first
member's end was reported (before the trial's), Tune retries the trial, and the retry reports
the ended members again from their folders. Each cell is recorded once, as COMPLETE, from the
one training it had; none is trained twice."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, check_siwlm_steps, kill_leftovers, ray_temp_dir, read_jsonl
from tests.helpers import two_cell_study_file as study_file
from weightsearch.studies import schema as S
from weightsearch.sweep.trainable import KILL_AFTER_MEMBER_END

pytestmark = pytest.mark.integration


def test_a_retried_fused_trial_reports_its_ended_members_and_trains_none_twice(
        tiny_encoder: str, sample_data_dir: Path, tmp_path: Path) -> None:
    import optuna
    from optuna.trial import TrialState

    url = f"sqlite:///{tmp_path / 'studies.db'}"
    study = study_file(tmp_path, "retry", tiny_encoder, sample_data_dir)
    raw = yaml.safe_load(study.read_text())
    raw["train"]["precision"] = "fp32"  # fusing refuses bf16, which `auto` picks on some CPUs
    study.write_text(yaml.safe_dump({**raw, "central_tasks": ["rte"], "fuse_cells": 2,
                                     "max_failures": 1}))
    marker = tmp_path / "kill-once"
    marker.write_text("")
    ray_tmp = ray_temp_dir()
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(ROOT),
           "RAY_memory_monitor_refresh_ms": "0", "RAY_AUTH_MODE": "disabled",
           KILL_AFTER_MEMBER_END: str(marker)}
    try:
        proc = subprocess.run([sys.executable, "-m", "weightsearch.cli", "launch", str(study),
                               "--storage", url], cwd=tmp_path, env=env, text=True,
                              capture_output=True, timeout=600)
    finally:
        kill_leftovers(ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert not marker.exists(), "the worker was never killed: the retry was not exercised"
    trials = optuna.load_study(study_name="retry/rte", storage=url).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2, out[-3000:]
    assert sorted(t.user_attrs[S.T_CELL] for t in trials) == [S.cell_key(1, 1),
                                                              S.cell_key(9, 1)]
    # Tune did retry the trial: its folder keeps the killed attempt's error.
    errors = list((tmp_path / "runs" / "ray").glob("retry-*/rte_*/error.txt"))
    assert len(errors) == 1 and "its worker process has died" in errors[0].read_text(), errors
    for t in trials:
        assert sorted(t.user_attrs[S.T_FUSED]) == [S.cell_key(1, 1), S.cell_key(9, 1)]
        assert t.user_attrs[S.T_ATTEMPT] == 0  # the retry continued the same attempt
        folder = Path(t.user_attrs["output_dir"])
        result = json.loads((folder / "result.json").read_text())
        assert t.value == result["best"]["rte"]["accuracy"]
        # One training: every update logged once, in order (a second would restart the log
        # or append to it).
        steps = [r["global_step"] for r in read_jsonl(folder / "steps.jsonl")]
        assert steps == list(range(len(steps))) and steps
        check = check_siwlm_steps(folder)
        assert check.returncode == 0, check.stdout + check.stderr
    assert "LOST" not in out and "claim lost" not in out, out[-3000:]
