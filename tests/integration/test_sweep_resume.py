"""Kill the driver mid-study (SIGKILL, whole process group), then `weightsearch resume`."""

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

from tests.helpers import ROOT, complete_count, kill_leftovers, ray_temp_dir, two_cell_study_file
from weightsearch.studies import schema as S

pytestmark = pytest.mark.integration


def test_killed_driver_resumes_every_cell_once(
    tiny_encoder: str, sample_data_dir: Path, tmp_path: Path
) -> None:
    import optuna
    from optuna.trial import TrialState

    url = f"sqlite:///{tmp_path / 'studies.db'}"
    study_file = two_cell_study_file(tmp_path, "crash", tiny_encoder, sample_data_dir)
    ray_tmp = ray_temp_dir()
    # Short claim leases: the resume takes the killed driver's cells over once they expire.
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(ROOT),
           "WEIGHTSEARCH_CLAIM_TTL": "6"}
    cmd = [sys.executable, "-m", "weightsearch.cli"]
    driver = subprocess.Popen(
        [*cmd, "launch", str(study_file), "--storage", url, "--quiet"], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.time() + 180
        while complete_count(url) < 1:
            assert driver.poll() is None, driver.stdout.read().decode()[-3000:]
            assert time.time() < deadline, "no trial finished within 3 minutes"
            time.sleep(0.5)
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        kill_leftovers(ray_tmp)

    assert complete_count(url) < 4, "the study finished before the driver was killed"
    resumed = subprocess.run(
        [*cmd, "resume", "crash", "--storage", url, "--quiet"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=400,
    )
    kill_leftovers(ray_tmp)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr[-3000:]
    # The summary's verdict per central task: a best weight, or why none is clear.
    assert "rte: best central weight" in resumed.stdout or \
        "rte: no weight is clearly better" in resumed.stdout

    for central in ("rte", "mrpc"):
        study = optuna.load_study(study_name=f"crash/{central}", storage=url)
        trials = study.get_trials()
        assert not [t for t in trials if t.state == TrialState.RUNNING]
        done = [t.user_attrs[S.T_CELL] for t in trials if t.state == TrialState.COMPLETE]
        assert sorted(done) == sorted([S.cell_key(1, 1), S.cell_key(9, 1)])
        for t in trials:
            if t.state == TrialState.COMPLETE:
                assert sorted(t.intermediate_values) == [1, 2]
                assert [h["epoch"] for h in t.user_attrs[S.T_HISTORY]] == [1, 2]
        # A killed cell shows as a FAIL trial; its rerun counts the attempts before it.
        failed = [t for t in trials if t.state == TrialState.FAIL]
        for t in failed:
            assert t.user_attrs["error"] in ("driver stopped before it ended",
                                             "its driver stopped renewing its claim")
        for t in trials:
            if t.state == TrialState.COMPLETE:
                earlier = [f for f in failed if f.user_attrs[S.T_CELL] == t.user_attrs[S.T_CELL]]
                assert t.user_attrs[S.T_ATTEMPT] == len(earlier)
    shutil.rmtree(ray_tmp, ignore_errors=True)


def test_ctrl_c_exits_130_and_leaves_no_running_trial(
    tiny_encoder: str, sample_data_dir: Path, tmp_path: Path
) -> None:
    import optuna
    from optuna.trial import TrialState

    url = f"sqlite:///{tmp_path / 'studies.db'}"
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump({
        "study": "cc", "allow_inert": True,
        "train": {"encoder": tiny_encoder, "data_dir": str(sample_data_dir),
                  "tasks": ["rte", "mrpc"], "epochs": 4, "batch_size": 8,
                  "max_train_examples": 200, "max_eval_examples": 32},
        "central_tasks": ["rte"], "weights": [1, 9], "max_concurrent": 1,
        "workdir": str(tmp_path / "runs"),
    }))
    ray_tmp = ray_temp_dir()
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen(
        [sys.executable, "-m", "weightsearch.cli", "launch", str(study_file), "--storage", url,
         "--quiet"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 180
        while not _running(url):
            assert driver.poll() is None, driver.stdout.read().decode()[-3000:]
            assert time.time() < deadline, "no trial started within 3 minutes"
            time.sleep(0.5)
        driver.send_signal(signal.SIGINT)
        out = driver.communicate(timeout=120)[0].decode()
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        kill_leftovers(ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert driver.returncode == 130, out[-3000:]
    assert "Traceback" not in out
    trials = optuna.load_study(study_name="cc/rte", storage=url).get_trials()
    assert trials and not [t for t in trials if t.state == TrialState.RUNNING]


def _running(url: str) -> bool:
    import optuna
    from optuna.trial import TrialState

    try:
        study = optuna.load_study(study_name="cc/rte", storage=url)
    except Exception:  # not created yet
        return False
    return bool(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
