"""Several drivers on one study: two `launch` and a `resume` started together (SQLite and
PostgreSQL) train every cell exactly once; a SIGKILLed driver's cells are taken over."""

from __future__ import annotations

import contextlib
import json
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
    check_siwlm_steps,
    complete_count,
    free_port,
    kill_leftovers,
    ray_temp_dir,
    two_cell_study_file,
)
from weightsearch.studies import schema as S

pytestmark = pytest.mark.integration

CMD = [sys.executable, "-m", "weightsearch.cli"]
# Three Ray instances share this machine with whatever else runs: Ray's memory monitor would
# kill tiny trials at its node-wide threshold, which is not what these tests are about.
NO_OOM_KILLS = {"RAY_memory_monitor_refresh_ms": "0",
                "RAY_AUTH_MODE": "disabled"}  # a private test cluster: no tokens to hand round


def _study_exists(url: str, name: str) -> bool:
    import optuna

    try:
        return any(n.startswith(f"{name}/") for n in optuna.get_all_study_names(url))
    except Exception:  # the schema is being created
        return False


def _driver(args: list[str], tmp_path: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([*CMD, *args, "--quiet"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _check_exactly_once(url: str, name: str) -> None:
    import optuna
    from optuna.trial import TrialState

    for central in ("rte", "mrpc"):
        trials = optuna.load_study(study_name=f"{name}/{central}", storage=url).get_trials()
        states = [t.state for t in trials]
        assert TrialState.RUNNING not in states and TrialState.WAITING not in states
        done = sorted(t.user_attrs[S.T_CELL] for t in trials if t.state == TrialState.COMPLETE)
        assert done == sorted([S.cell_key(1, 1), S.cell_key(9, 1)]), done
        folders = [t.user_attrs["output_dir"] for t in trials if t.state == TrialState.COMPLETE]
        assert len(set(folders)) == len(folders)
        for folder in folders:
            check = check_siwlm_steps(folder)
            assert check.returncode == 0, check.stdout + check.stderr
        failed = [t for t in trials if t.state == TrialState.FAIL]
        assert not failed, [t.user_attrs.get("error") for t in failed]


def _ray_head(ray_tmp: str, env: dict) -> str:
    """One Ray cluster the drivers share, as on a real cluster (and one Ray start, not three,
    on this small machine). Its processes are ended by `kill_leftovers` (never `ray stop`,
    which would stop every Ray on the machine)."""
    port = free_port()
    ray = str(Path(sys.executable).with_name("ray"))
    subprocess.run([ray, "start", "--head", f"--port={port}", "--num-cpus=2",
                    "--include-dashboard=false", f"--temp-dir={ray_tmp}", "--disable-usage-stats"],
                   env=env, check=True, capture_output=True, timeout=180)
    return f"127.0.0.1:{port}"


def _three_drivers(url: str, tmp_path: Path, tiny_encoder: str, data_dir: Path,
                   fuse_cells: int = 1) -> None:
    name = "shared"
    study = two_cell_study_file(tmp_path, name, tiny_encoder, data_dir)
    if fuse_cells > 1:  # each central task's two weights in one trial, where one driver has both
        raw = yaml.safe_load(study.read_text())
        raw["train"]["precision"] = "fp32"
        study.write_text(yaml.safe_dump({**raw, "fuse_cells": fuse_cells}))
    ray_tmp = ray_temp_dir()
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(ROOT), **NO_OOM_KILLS}
    drivers: list[subprocess.Popen] = []
    try:
        address = _ray_head(ray_tmp, env)
        launch = ["launch", str(study), "--storage", url, "--ray-address", address]
        drivers += [_driver(launch, tmp_path, env), _driver(launch, tmp_path, env)]
        deadline = time.time() + 300
        while not _study_exists(url, name):  # `resume` needs the study file stored
            for d in drivers:
                assert d.poll() is None, d.stdout.read()[-3000:]
            assert time.time() < deadline, "no launch created the study"
            time.sleep(0.1)
        drivers.append(_driver(["resume", name, "--storage", url, "--ray-address", address],
                               tmp_path, env))
        outputs = [d.communicate(timeout=500)[0] for d in drivers]
    finally:
        for d in drivers:
            if d.poll() is None:
                os.killpg(d.pid, signal.SIGKILL)
        kill_leftovers(ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    for d, out in zip(drivers, outputs, strict=True):
        assert d.returncode == 0, out[-3000:]
        assert "4/4 cells done" in out, out[-3000:]
    assert complete_count(url) == 4
    _check_exactly_once(url, name)


@pytest.mark.parametrize("fuse_cells", [1, 2])
def test_two_launches_and_a_resume_sqlite(tiny_encoder: str, sample_data_dir: Path,
                                           tmp_path: Path, fuse_cells: int) -> None:
    _three_drivers(f"sqlite:///{tmp_path / 'studies.db'}", tmp_path, tiny_encoder,
                   sample_data_dir, fuse_cells)


@pytest.mark.postgres
def test_two_launches_and_a_resume_postgres(tiny_encoder: str, sample_data_dir: Path,
                                             tmp_path: Path, postgres_url: str) -> None:
    _three_drivers(postgres_url, tmp_path, tiny_encoder, sample_data_dir)


@pytest.mark.parametrize("fuse_cells", [1, 2])
def test_killed_driver_cells_taken_over(tiny_encoder: str, sample_data_dir: Path,
                                        tmp_path: Path, fuse_cells: int) -> None:
    """A driver SIGKILLed mid-cell: a second driver, started while the first still held its
    claim, waits for the lease to expire and continues the cell from its checkpoint. With
    `fuse_cells: 2` the killed trial trained both weights of its central task as one model:
    each of its cells continues from its own checkpoint, and each is trained exactly once."""
    import optuna
    from optuna.trial import TrialState

    url = f"sqlite:///{tmp_path / 'studies.db'}"
    study = two_cell_study_file(tmp_path, "takeover", tiny_encoder, sample_data_dir)
    raw = yaml.safe_load(study.read_text())
    raw["train"]["precision"] = "fp32"  # fusing refuses bf16, which `auto` picks on some CPUs
    study.write_text(yaml.safe_dump({**raw, "fuse_cells": fuse_cells}))
    ray_tmp = ray_temp_dir()
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(ROOT), **NO_OOM_KILLS,
           "WEIGHTSEARCH_CLAIM_TTL": "8"}
    first = _driver(["launch", str(study), "--storage", url], tmp_path, env)
    second = None
    try:
        deadline = time.time() + 180
        while not list((tmp_path / "runs").glob("takeover/*/*/checkpoints/epoch-001")):
            assert first.poll() is None, first.stdout.read()[-3000:]
            assert time.time() < deadline, "no epoch checkpoint within 3 minutes"
            time.sleep(0.2)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        kill_leftovers(ray_tmp)  # its Ray too, so nothing of it writes on
        second = _driver(["launch", str(study), "--storage", url], tmp_path, env)
        out = second.communicate(timeout=500)[0]
    finally:
        for d in (first, second):
            if d is not None and d.poll() is None:
                os.killpg(d.pid, signal.SIGKILL)
        kill_leftovers(ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert second.returncode == 0, out[-3000:]
    continued = 0
    for central in ("rte", "mrpc"):
        trials = optuna.load_study(study_name=f"takeover/{central}", storage=url).get_trials()
        assert TrialState.RUNNING not in [t.state for t in trials]
        done = [t for t in trials if t.state == TrialState.COMPLETE]
        assert sorted(t.user_attrs[S.T_CELL] for t in done) == [S.cell_key(1, 1),
                                                                S.cell_key(9, 1)]
        for t in trials:
            if t.state == TrialState.FAIL:
                assert t.user_attrs["error"] == "driver stopped before it ended"
        for t in done:
            if t.user_attrs[S.T_ATTEMPT] > 0:
                continued += 1
                assert t.user_attrs["output_dir"].endswith(f"-attempt{t.user_attrs[S.T_ATTEMPT]}")
                assert sorted(t.intermediate_values) == [1, 2]
            if fuse_cells > 1:
                assert sorted(t.user_attrs[S.T_FUSED]) == [S.cell_key(1, 1), S.cell_key(9, 1)]
                result = json.loads((Path(t.user_attrs["output_dir"]) / "result.json"
                                     ).read_text())
                assert result["fused_members"] == 2
            check = check_siwlm_steps(t.user_attrs["output_dir"])
            assert check.returncode == 0, check.stdout + check.stderr
    assert continued >= fuse_cells  # the killed trial's cells: both members when fused


def test_stalled_driver_loses_its_cell_quietly(tiny_encoder: str, sample_data_dir: Path,
                                               tmp_path: Path) -> None:
    """A driver frozen (SIGSTOP, its Ray included) past its lease: a second driver takes the
    cell over and finishes it. Thawed, the first finds its claim gone at its next renewal,
    stops its trial at the next epoch, writes nothing more to it, and reports the study done."""
    import optuna
    from optuna.trial import TrialState

    url = f"sqlite:///{tmp_path / 'studies.db'}"
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({
        "study": "stall", "allow_inert": True,
        "train": {"encoder": tiny_encoder, "data_dir": str(sample_data_dir),
                  "tasks": ["rte", "mrpc"], "epochs": 4, "batch_size": 4,
                  "max_train_examples": 300, "max_eval_examples": 32, "num_threads": 1},
        "central_tasks": ["rte"], "weights": [9], "workdir": str(tmp_path / "runs"),
    }))
    tmps = [ray_temp_dir() for _ in range(2)]
    envs = [{**os.environ, "RAY_TMPDIR": t, "PYTHONPATH": str(ROOT), **NO_OOM_KILLS,
             "WEIGHTSEARCH_CLAIM_TTL": "4"} for t in tmps]
    launch = ["launch", str(path), "--storage", url]
    first = _driver(launch, tmp_path, envs[0])
    second = None
    folder = tmp_path / "runs" / "stall" / "rte" / "w9_s1"
    try:
        deadline = time.time() + 180
        while not (folder / "checkpoints" / "epoch-001").is_dir():
            assert first.poll() is None, first.stdout.read()[-3000:]
            assert time.time() < deadline, "no epoch checkpoint within 3 minutes"
            time.sleep(0.1)
        os.killpg(first.pid, signal.SIGSTOP)
        time.sleep(6)  # past the 4 s lease
        second = _driver(launch, tmp_path, envs[1])
        study = None
        while True:  # the second driver has taken the cell over
            assert second.poll() is None, second.stdout.read()[-3000:]
            assert time.time() < deadline + 180, "the second driver never took the cell over"
            with contextlib.suppress(Exception):
                study = optuna.load_study(study_name="stall/rte", storage=url)
                if any(t.user_attrs.get(S.T_ATTEMPT) == 1 for t in study.get_trials()):
                    break
            time.sleep(0.2)
        os.killpg(first.pid, signal.SIGCONT)
        outs = [first.communicate(timeout=400)[0], second.communicate(timeout=400)[0]]
    finally:
        for d in (first, second):
            if d is not None and d.poll() is None:
                os.killpg(d.pid, signal.SIGCONT)
                os.killpg(d.pid, signal.SIGKILL)
        for t in tmps:
            kill_leftovers(t)
            shutil.rmtree(t, ignore_errors=True)
    for d, out in zip((first, second), outs, strict=True):
        assert d.returncode == 0, out[-3000:]
        assert "1/1 cells done" in out and "Traceback" not in out, out[-3000:]
    trials = optuna.load_study(study_name="stall/rte", storage=url).get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    stalled, taken = trials
    # The first driver wrote nothing to its trial after the takeover.
    assert stalled.user_attrs["error"] == "driver stopped before it ended"
    assert S.T_WALL_TIME not in stalled.user_attrs and S.T_METRICS not in stalled.user_attrs
    assert taken.user_attrs["output_dir"].endswith("-attempt1")
    assert sorted(taken.intermediate_values) == [1, 2, 3, 4]
    # ... and its trainer stopped instead of training on to the last epoch.
    epochs = [json.loads(line)["epoch"] for line in
              (folder / "metrics.jsonl").read_text().splitlines()]
    assert max(epochs) < 4


def test_a_ray_client_address_is_refused_before_anything_is_written(
        tiny_encoder: str, sample_data_dir: Path, tmp_path: Path) -> None:
    """Under Ray Client, Tune would run the study's searcher on the cluster, away from its
    database connection: refused, whether named or taken by `auto` from RAY_ADDRESS, on a
    real head with a client server, before the study is created."""
    study = two_cell_study_file(tmp_path, "client", tiny_encoder, sample_data_dir)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    ray_tmp = ray_temp_dir()
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(ROOT), **NO_OOM_KILLS}
    ray = str(Path(sys.executable).with_name("ray"))
    client_port = free_port()
    try:
        subprocess.run([ray, "start", "--head", f"--port={free_port()}", "--num-cpus=1",
                        f"--ray-client-server-port={client_port}", "--include-dashboard=false",
                        f"--temp-dir={ray_tmp}", "--disable-usage-stats"],
                       env=env, check=True, capture_output=True, timeout=180)
        client = f"ray://127.0.0.1:{client_port}"
        for address, extra in ((client, {}), ("auto", {"RAY_ADDRESS": client})):
            done = subprocess.run(
                [*CMD, "launch", str(study), "--storage", url, "--ray-address", address,
                 "--quiet"], cwd=tmp_path, env={**env, **extra}, capture_output=True,
                text=True, timeout=300)
            last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
            assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
            assert "is a Ray Client address" in last and "Traceback" not in done.stderr, last
            assert not _study_exists(url, "client")
    finally:
        kill_leftovers(ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
