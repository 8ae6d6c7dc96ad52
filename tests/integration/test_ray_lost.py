"""The raylet under a launch dies mid-trial: the launch notices within seconds (not Ray's
minute), says so in one weightsearch line with the command that continues the study, exits
with its own code (3), leaves its cells interrupted (not RUNNING, not failed), and a `resume`
on a fresh Ray finishes every cell exactly once."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import (
    ROOT,
    kill_leftovers,
    processes_under,
    ray_temp_dir,
    two_cell_study_file,
)
from weightsearch.studies import schema as S

pytestmark = pytest.mark.integration

CMD = [sys.executable, "-m", "weightsearch.cli"]
NO_OOM_KILLS = {"RAY_memory_monitor_refresh_ms": "0"}


def _running(url: str, name: str) -> bool:
    import optuna
    from optuna.trial import TrialState

    try:
        study = optuna.load_study(study_name=S.study_name(name, "rte"), storage=url)
    except Exception:  # not created yet
        return False
    return any(t.state == TrialState.RUNNING for t in study.get_trials(deepcopy=False))


def test_a_lost_raylet_ends_the_launch_with_the_resume_command(
        tiny_encoder: str, sample_data_dir: Path, tmp_path: Path) -> None:
    import optuna
    from optuna.trial import TrialState

    name = "lost"
    study = two_cell_study_file(tmp_path, name, tiny_encoder, sample_data_dir)
    raw = yaml.safe_load(study.read_text())
    raw["train"]["epochs"] = 30  # long enough to be killed mid-trial
    raw["central_tasks"] = ["rte"]
    study.write_text(yaml.safe_dump(raw))
    url = f"sqlite:///{tmp_path / 'lost.db'}"
    ray_tmp = ray_temp_dir()
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(ROOT), **NO_OOM_KILLS}
    driver = subprocess.Popen([*CMD, "launch", str(study), "--storage", url, "--quiet"],
                              cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 300
        while not _running(url, name):
            assert driver.poll() is None, driver.stdout.read()[-3000:]
            assert time.time() < deadline, "no trial started"
            time.sleep(0.2)
        raylets = [p for p in processes_under(ray_tmp) if "raylet/raylet" in
                   Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
        assert raylets, "no raylet of this launch's Ray found"
        for pid in raylets:
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        out = driver.communicate(timeout=120)[0]
        took = time.monotonic() - killed
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        kill_leftovers(ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert driver.returncode == 3, out[-3000:]
    assert "weightsearch launch: error: the Ray cluster this launch ran on was lost" in out
    assert f"`weightsearch resume {name}`" in out
    assert took < 60, took  # Ray's own client waits a minute for the GCS
    trials = optuna.load_study(study_name=S.study_name(name, "rte"), storage=url).get_trials()
    assert TrialState.RUNNING not in {t.state for t in trials}
    assert all(t.user_attrs.get(S.T_ERROR) == S.DRIVER_STOPPED
               for t in trials if t.state == TrialState.FAIL)
    assert any(t.state == TrialState.FAIL for t in trials)  # recorded as interrupted
    print(f"launch ended {took:.1f} s after its raylet was killed")
    # What the message says to do: on a fresh Ray, every cell finishes, each once.
    ray_tmp = ray_temp_dir()
    env["RAY_TMPDIR"] = ray_tmp
    try:
        done = subprocess.run([*CMD, "resume", name, "--storage", url, "--quiet"], cwd=tmp_path,
                              env=env, text=True, capture_output=True, timeout=600)
    finally:
        kill_leftovers(ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    trials = optuna.load_study(study_name=S.study_name(name, "rte"), storage=url).get_trials()
    complete = sorted(t.user_attrs[S.T_CELL] for t in trials if t.state == TrialState.COMPLETE)
    assert complete == sorted([S.cell_key(1, 1), S.cell_key(9, 1)])
